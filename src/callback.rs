//! Where the service of an asynchronous tool call posts its result: the worker gives this
//! address out with the call, the gateway serves it (`POST /v1/tool-results/{callId}`). One
//! home, so the two roles agree without importing each other.

use crate::store::CallId;

/// The result address of `call` at the gateway at `base` (`http://…`, as the worker's
/// `--callback-url` gives it).
pub fn tool_result_url(base: &str, call: &CallId) -> String {
    format!("{}/v1/tool-results/{call}", base.trim_end_matches('/'))
}

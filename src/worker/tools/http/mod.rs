//! HTTP tools (`Agent.spec.tools.http`): one [`External`] for all of an agent's HTTP tools.
//!
//! A call: the arguments are parsed and checked against the tool's `inputSchema` (a problem
//! is an error result and nothing is sent); the request is built ([`request`]): URL
//! placeholders filled, the other arguments as query or JSON body, the spec's headers, the
//! `headersFrom` Secret's keys, `Idempotency-Key`; the answer becomes the result
//! ([`response`]). A sync tool's result is the answer. An async tool's call is registered in
//! the store first, its request carries the callback URL and a fresh token, and the model
//! gets `{"status": "pending", "callId": …}` once the service accepted it; the result comes
//! later through the gateway as a `tool_result` inbox event.
//!
//! Every text a call produces (results, errors, logs, the status, what `visible` tools show)
//! has every value of the agent's tool Secrets, and the call's own token, masked.

pub(crate) mod request;
mod response;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use serde_json::{json, Value};
use tracing::{debug, warn};

use super::secrets::Secrets;
use super::{External, ExternalCall, ExternalContext, Outcome};
use crate::crd::{HttpToolSpec, ToolMode, ToolStatus};
use crate::identity::AgentKey;
use crate::identity::SpaceKey;
use crate::model::ToolSpec;
use crate::secrets::Redactor;
use crate::store::{LiveEvent, MemberKind, NewCall, Sender, Store};
use response::Body;

/// The header that carries an async call's callback URL.
pub const CALLBACK_HEADER: &str = "x-agentfleet-callback";
/// The header that carries an async call's token.
pub const CALLBACK_TOKEN_HEADER: &str = "x-agentfleet-callback-token";

/// How long connecting may take, at most (a call's `timeoutSeconds` bounds it further).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// An agent's HTTP tools.
pub struct HttpTools {
    agent: AgentKey,
    tools: Vec<Tool>,
    /// The client (connections are pooled across calls), or why there is none.
    client: Result<reqwest::Client, String>,
    store: Arc<dyn Store>,
    secrets: Secrets,
    /// The Secrets the tools take headers from: every value of them is masked.
    secret_names: Vec<String>,
    callback_url: Option<String>,
}

/// One tool and its own headers, parsed (or why they cannot be).
struct Tool {
    spec: HttpToolSpec,
    headers: Result<HeaderMap, String>,
}

/// Why a request got no answer.
enum Unanswered {
    /// None within the tool's `timeoutSeconds` (the service may have acted).
    Timeout,
    /// The request never reached the service: no connection, or it could not be built (the
    /// text says how).
    NotSent(String),
    /// The exchange broke after the request went out (the service may have acted): with the
    /// answer's status when it came before the break.
    Broken(Option<u16>, String),
}

impl HttpTools {
    /// The HTTP tools of `agent`, as `specs` declare them, in their order.
    pub fn new(agent: &AgentKey, specs: &[HttpToolSpec], context: &ExternalContext) -> Self {
        crate::install_crypto_provider();
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("agentfleet/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("building the HTTP client: {}", crate::report::chain(&e)));
        let mut secret_names: Vec<String> = specs
            .iter()
            .filter_map(|s| s.headers_from.as_ref())
            .map(|h| h.secret_name.clone())
            .collect();
        secret_names.sort_unstable();
        secret_names.dedup();
        Self {
            agent: agent.clone(),
            tools: specs
                .iter()
                .map(|spec| Tool {
                    headers: request::static_headers(spec),
                    spec: spec.clone(),
                })
                .collect(),
            client,
            store: context.store.clone(),
            secrets: context.secrets.clone(),
            secret_names,
            callback_url: context.callback_url.clone(),
        }
    }

    /// Masks every value of the tools' Secrets, and `extra` (a call's token).
    fn redactor(&self, extra: Option<&str>) -> Redactor {
        let names: Vec<&str> = self.secret_names.iter().map(String::as_str).collect();
        Redactor::new(
            self.secrets
                .values(&names)
                .into_iter()
                .chain(extra.map(str::to_string)),
        )
    }

    /// What a call of `tool` needs that may be missing: the client and every header (the
    /// Secret's read now: a mounted Secret changes in place). `Err` says why the tool is not
    /// ready.
    fn ready(&self, tool: &Tool) -> Result<(reqwest::Client, HeaderMap), String> {
        let client = self.client.clone()?;
        let mut headers = tool.headers.clone()?;
        if tool.spec.mode == ToolMode::Async && self.callback_url.is_none() {
            return Err("an async tool needs the gateway's address for results (the worker's --callback-url); none is set".into());
        }
        if let Some(from) = &tool.spec.headers_from {
            let entries = self.secrets.get(&from.secret_name)?;
            headers.extend(request::secret_headers(&from.secret_name, &entries)?);
        }
        Ok((client, headers))
    }

    /// Runs a call of `tool`, masking the Secrets in answers with `redactor`; `token` receives
    /// an async call's token (to mask it too).
    async fn run(
        &self,
        tool: &Tool,
        call: &ExternalCall<'_>,
        redactor: &Redactor,
        token: &mut Option<String>,
    ) -> Outcome {
        let (client, mut headers) = match self.ready(tool) {
            Ok(ready) => ready,
            Err(why) => return Outcome::error(format!("the tool is not ready: {why}")),
        };
        let target = match request::arguments(&tool.spec, call.arguments)
            .and_then(|args| request::target(&tool.spec, args))
        {
            Ok(t) => t,
            Err(e) => return Outcome::error(e),
        };
        match HeaderValue::from_str(call.idempotency_key) {
            Ok(v) => {
                headers.insert(HeaderName::from_static("idempotency-key"), v);
            }
            Err(_) => {
                return Outcome::error("the call's idempotency key is not a valid header value")
            }
        }
        // Ours alone: a tool's own header of these names would be sent twice.
        headers.remove(CALLBACK_HEADER);
        headers.remove(CALLBACK_TOKEN_HEADER);
        if target.body.is_some() {
            headers
                .entry(CONTENT_TYPE)
                .or_insert(HeaderValue::from_static("application/json"));
        }
        let mut request = client.request(target.method, target.url).headers(headers);
        if let Some(body) = target.body {
            request = request.body(body);
        }
        match tool.spec.mode {
            ToolMode::Sync => self.sync(tool, request, redactor).await,
            ToolMode::Async => self.start(tool, request, token, call).await,
        }
    }

    /// A sync call: the answer is the result.
    async fn sync(
        &self,
        tool: &Tool,
        request: reqwest::RequestBuilder,
        redactor: &Redactor,
    ) -> Outcome {
        let max = tool.spec.max_response_bytes as usize;
        match send(&tool.spec, request).await {
            Ok((status, body)) => response::sync_outcome(status, &body, max, redactor),
            Err(Unanswered::Timeout) => Outcome::error(format!(
                "no answer within {}s (the service may have acted on the call)",
                tool.spec.timeout_seconds
            )),
            Err(Unanswered::NotSent(e)) => Outcome::error(format!(
                "the request failed: {e} (nothing reached the service)"
            )),
            Err(Unanswered::Broken(_, e)) => Outcome::error(format!(
                "the request failed after it was sent: {e} (the service may have acted on the call)"
            )),
        }
    }

    /// An async call: registered, then started; pending once the service accepted it.
    async fn start(
        &self,
        tool: &Tool,
        request: reqwest::RequestBuilder,
        token: &mut Option<String>,
        from: &ExternalCall<'_>,
    ) -> Outcome {
        let name = &tool.spec.name;
        let base = self.callback_url.as_deref().unwrap_or_default();
        let ttl_ms = i64::from(tool.spec.result_ttl_seconds) * 1000;
        let mut call = match NewCall::new(&self.agent, name, ttl_ms) {
            Ok(c) => c,
            Err(e) => return Outcome::error(format!("{e} (nothing was sent)")),
        };
        call.record.depth = from.depth;
        call.record.conversation = from.conversation();
        *token = Some(call.token.clone());
        let callback = crate::callback::tool_result_url(base, &call.id);
        let (Ok(callback), Ok(mut secret)) = (
            HeaderValue::from_str(&callback),
            HeaderValue::from_str(&call.token),
        ) else {
            return Outcome::error(format!(
                "the callback URL {callback:?} is not a valid header value (nothing was sent)"
            ));
        };
        secret.set_sensitive(true);
        if let Err(e) = self.store.register_call(&call).await {
            return Outcome::error(format!(
                "the call could not be registered, so its result could not be taken (nothing was sent): {e}"
            ));
        }
        let request = request
            .header(CALLBACK_HEADER, callback)
            .header(CALLBACK_TOKEN_HEADER, secret);
        let max = tool.spec.max_response_bytes as usize;
        let redactor = self.redactor(Some(&call.token));
        let failed = match send(&tool.spec, request).await {
            // Accepted, even when its body then broke off.
            Ok((status, _)) | Err(Unanswered::Broken(Some(status), _))
                if (200..300).contains(&status) =>
            {
                return Outcome {
                    content: json!({
                        "status": "pending",
                        "callId": call.id.as_str(),
                        "note": "the service accepted the call; its result will come to your inbox later as a (tool result) line naming this callId",
                    })
                    .to_string(),
                    ok: true,
                };
            }
            Ok((status, body)) => response::refused_start(status, &body, max, &redactor),
            // The service may have started it: its result is still taken.
            Err(Unanswered::Timeout) => {
                return maybe_started(
                    &call.id,
                    &format!("no answer within {}s", tool.spec.timeout_seconds),
                );
            }
            Err(Unanswered::Broken(_, e)) => {
                return maybe_started(
                    &call.id,
                    &format!(
                        "the request failed after it was sent: {}",
                        redactor.redact(&e)
                    ),
                );
            }
            Err(Unanswered::NotSent(e)) => Outcome::error(format!(
                "the request failed: {e}; the call was not started, and no result will come"
            )),
        };
        if let Err(e) = self.store.forget_call(&call.id).await {
            warn!(agent = %self.agent, tool = %name, error = %redactor.redact(&e.to_string()), "a call that did not start is still registered until it expires");
        }
        failed
    }

    /// Shows a `visible` tool's arguments and result in the active space.
    async fn show(&self, space: &str, name: &str, arguments: &str, content: &str) {
        let arguments = serde_json::from_str(arguments)
            .unwrap_or_else(|_| Value::String(arguments.to_string()));
        let result =
            serde_json::from_str(content).unwrap_or_else(|_| Value::String(content.to_string()));
        let event = LiveEvent::Activity {
            sender: Sender {
                groups: Vec::new(),
                id: self.agent.name.clone(),
                name: self.agent.name.clone(),
                kind: Some(MemberKind::Agent),
            },
            activity: "tool_result".into(),
            tool: Some(name.to_string()),
            detail: Some(json!({"arguments": arguments, "result": result}).to_string()),
        };
        let space = SpaceKey::new(self.agent.namespace.clone(), space.to_string());
        if let Err(e) = self.store.publish_live(&space, &event).await {
            debug!(error = %e, "tool result not shown");
        }
    }
}

/// Sends `request`, reading the answer's body up to the tool's `maxResponseBytes`, all within
/// its `timeoutSeconds`.
async fn send(
    spec: &HttpToolSpec,
    request: reqwest::RequestBuilder,
) -> Result<(u16, Body), Unanswered> {
    let limit = Duration::from_secs(u64::from(spec.timeout_seconds));
    // A failure says the answer's status when it came before the failure.
    let exchange = async {
        let answer = request.send().await.map_err(|e| (None, e))?;
        let status = answer.status().as_u16();
        let body = response::read(answer, spec.max_response_bytes as usize)
            .await
            .map_err(|e| (Some(status), e))?;
        Ok::<_, (Option<u16>, reqwest::Error)>((status, body))
    };
    match tokio::time::timeout(limit, exchange).await {
        Err(_) => Err(Unanswered::Timeout),
        Ok(Err((_, e))) if e.is_timeout() => Err(Unanswered::Timeout),
        // No connection, or no request to send: nothing reached the service.
        Ok(Err((None, e))) if e.is_connect() || e.is_builder() => {
            Err(Unanswered::NotSent(crate::report::chain(&e)))
        }
        Ok(Err((status, e))) => Err(Unanswered::Broken(status, crate::report::chain(&e))),
        Ok(Ok(answer)) => Ok(answer),
    }
}

/// The result of an async call whose service may have started it (`what` went wrong after
/// the request went out): its result is still taken.
fn maybe_started(call: &crate::store::CallId, what: &str) -> Outcome {
    Outcome {
        content: json!({
            "error": format!("{what}: the service may have started the call; if it did, its result will come to your inbox as a (tool result) line naming this callId"),
            "callId": call.as_str(),
        })
        .to_string(),
        ok: false,
    }
}

#[async_trait]
impl External for HttpTools {
    fn masks(&self) -> Redactor {
        self.redactor(None)
    }

    fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .map(|t| ToolSpec {
                name: t.spec.name.clone(),
                description: t.spec.description.clone(),
                parameters: t.spec.input_schema.clone(),
            })
            .collect()
    }

    fn status(&self) -> Vec<ToolStatus> {
        let redactor = self.redactor(None);
        self.tools
            .iter()
            .map(|t| {
                let problem = self.ready(t).err();
                ToolStatus {
                    name: t.spec.name.clone(),
                    source: "http".into(),
                    ready: problem.is_none(),
                    last_error: problem.map(|p| redactor.redact(&p)),
                    note: None,
                }
            })
            .collect()
    }

    fn idempotent(&self, tool: &str) -> bool {
        self.tools
            .iter()
            .find(|t| t.spec.name == tool)
            .is_some_and(|t| t.spec.is_idempotent())
    }

    fn continues(&self, tool: &str) -> bool {
        self.tools
            .iter()
            .any(|t| t.spec.name == tool && t.spec.mode == ToolMode::Async)
    }

    fn asks(&self, tool: &str) -> Option<super::Ask> {
        self.tools
            .iter()
            .find(|t| t.spec.name == tool && t.spec.require_approval)
            .map(|_| super::Ask {
                kind: crate::store::CallKind::Approval,
                result_schema: None,
                timeout_seconds: None,
            })
    }

    async fn call(&self, call: &ExternalCall<'_>) -> Outcome {
        let Some(tool) = self.tools.iter().find(|t| t.spec.name == call.name) else {
            return Outcome::error(format!("no HTTP tool is called {:?}", call.name));
        };
        let mut redactor = self.redactor(None);
        let mut token = None;
        let outcome = self.run(tool, call, &redactor, &mut token).await;
        // Masked at the end too: whatever a library or the service put in the text.
        if token.is_some() {
            redactor = self.redactor(token.as_deref());
        }
        let outcome = Outcome {
            content: redactor.redact(&outcome.content),
            ok: outcome.ok,
        };
        if !outcome.ok {
            debug!(agent = %self.agent, tool = %call.name, result = %outcome.content, "HTTP tool call failed");
        }
        if let (true, Some(space)) = (tool.spec.visible, call.space) {
            self.show(
                space,
                call.name,
                &redactor.redact(call.arguments),
                &outcome.content,
            )
            .await;
        }
        outcome
    }
}

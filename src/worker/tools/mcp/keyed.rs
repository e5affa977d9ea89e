//! The HTTP client under rmcp's Streamable HTTP transport: our reqwest client, plus an
//! `Idempotency-Key` header on a `tools/call` whose `_meta` carries [`META_KEY`] (the same
//! key the journal gives every try of one call), so an HTTP service in front of the server
//! can recognise a repeated call as an HTTP tool's service would. The server itself sees
//! the key in the request's `_meta`.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::stream::BoxStream;
use futures::StreamExt;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage, JsonRpcRequest};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use serde_json::Value;
use sse_stream::Sse;

/// The `_meta` key of a `tools/call` that holds the call's idempotency key.
pub const META_KEY: &str = "io.agentfleet/idempotency-key";

/// What the transport says of an answer over its byte limits (a JSON body or an SSE event;
/// rmcp's error type for the latter is private, so its words tell).
const TOO_LARGE: &str = "exceeded the maximum size of";

/// The header the key is sent in, as for HTTP tools.
const HEADER: HeaderName = HeaderName::from_static("idempotency-key");

/// A reqwest client that lifts a `tools/call`'s idempotency key into a header, and keeps
/// what the last failed request said of its cause (rmcp's own error text names the request
/// and its transport's types, not why it failed: the refused connection, the unknown name).
#[derive(Clone)]
pub struct Keyed {
    client: reqwest::Client,
    last_failure: Arc<std::sync::Mutex<Option<String>>>,
    /// An answer (a JSON body, an SSE event) was over the transport's byte limits.
    oversized: Arc<AtomicBool>,
}

impl Keyed {
    /// Requests through `client`.
    pub fn new(client: reqwest::Client) -> Self {
        Self {
            client,
            last_failure: Arc::default(),
            oversized: Arc::default(),
        }
    }

    /// Why the last request that failed in the client failed (its causes, one line).
    pub fn last_failure(&self) -> Option<String> {
        self.last_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// `result`, its client error noted first.
    fn noted(&self, result: PostResult) -> PostResult {
        match result {
            Err(e) => {
                self.note(&e);
                Err(e)
            }
            // The transport takes a stream that sent an event over its limit for closed:
            // note why.
            Ok(StreamableHttpPostResponse::Sse(stream, session)) => {
                let oversized = self.oversized.clone();
                let stream = stream.inspect(move |event| {
                    if event
                        .as_ref()
                        .is_err_and(|e| crate::report::chain(e).contains(TOO_LARGE))
                    {
                        oversized.store(true, Ordering::SeqCst);
                    }
                });
                Ok(StreamableHttpPostResponse::Sse(Box::pin(stream), session))
            }
            ok => ok,
        }
    }

    /// Notes what a failed request says of its cause: a client error's causes, an answer
    /// over the byte limit.
    fn note(&self, error: &StreamableHttpError<reqwest::Error>) {
        match error {
            StreamableHttpError::Client(client) => {
                let cause = match std::error::Error::source(client) {
                    Some(cause) => crate::report::chain(cause),
                    None => client.to_string(),
                };
                *self.last_failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(cause);
            }
            StreamableHttpError::ResponseBodyTooLarge { .. } => {
                self.oversized.store(true, Ordering::SeqCst)
            }
            _ => {}
        }
    }

    /// Whether an answer was refused for its size since this was last asked.
    pub fn take_oversized(&self) -> bool {
        self.oversized.swap(false, Ordering::SeqCst)
    }
}

type PostResult = Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>>;

/// `headers`, with the `Idempotency-Key` of `message` when it is a keyed `tools/call`.
fn with_key(
    message: &ClientJsonRpcMessage,
    mut headers: HashMap<HeaderName, HeaderValue>,
) -> HashMap<HeaderName, HeaderValue> {
    let JsonRpcMessage::Request(JsonRpcRequest {
        request: ClientRequest::CallToolRequest(call),
        ..
    }) = message
    else {
        return headers;
    };
    let key = call
        .params
        .meta
        .as_ref()
        .and_then(|m| m.get(META_KEY))
        .and_then(Value::as_str)
        .and_then(|k| HeaderValue::from_str(k).ok());
    if let Some(key) = key {
        headers.insert(HEADER, key);
    }
    headers
}

impl StreamableHttpClient for Keyed {
    type Error = reqwest::Error;

    fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = PostResult> + Send + '_ {
        let headers = with_key(&message, custom_headers);
        async move {
            let result = self
                .client
                .post_message(uri, message, session_id, auth_header, headers)
                .await;
            self.noted(result)
        }
    }

    fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> impl Future<Output = PostResult> + Send + '_ {
        let headers = with_key(&message, custom_headers);
        async move {
            let result = self
                .client
                .post_message_with_max_sse_event_size(
                    uri,
                    message,
                    session_id,
                    auth_header,
                    headers,
                    max_sse_event_size,
                )
                .await;
            self.noted(result)
        }
    }

    fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> impl Future<Output = PostResult> + Send + '_ {
        let headers = with_key(&message, custom_headers);
        async move {
            let result = self
                .client
                .post_message_with_response_limits(
                    uri,
                    message,
                    session_id,
                    auth_header,
                    headers,
                    limits,
                )
                .await;
            self.noted(result)
        }
    }

    fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = Result<(), StreamableHttpError<Self::Error>>> + Send + '_ {
        self.client
            .delete_session(uri, session_id, auth_header, custom_headers)
    }

    fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<
        Output = Result<
            BoxStream<'static, Result<Sse, SseError>>,
            StreamableHttpError<Self::Error>,
        >,
    > + Send
           + '_ {
        self.client
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
    }

    fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> impl Future<
        Output = Result<
            BoxStream<'static, Result<Sse, SseError>>,
            StreamableHttpError<Self::Error>,
        >,
    > + Send
           + '_ {
        self.client.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            max_sse_event_size,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{CallToolRequest, CallToolRequestParams, RequestId, RequestMetaObject};

    fn call(meta: Option<&str>) -> ClientJsonRpcMessage {
        let mut params = CallToolRequestParams::new("echo");
        if let Some(key) = meta {
            let mut m = RequestMetaObject::new();
            m.insert(META_KEY.into(), Value::String(key.into()));
            params.meta = Some(m);
        }
        ClientJsonRpcMessage::request(
            ClientRequest::CallToolRequest(CallToolRequest::new(params)),
            RequestId::Number(1),
        )
    }

    #[test]
    fn a_keyed_call_carries_the_header_and_nothing_else_does() {
        let h = with_key(&call(Some("ops/sre:b1:0:0")), HashMap::new());
        assert_eq!(h[&HEADER], "ops/sre:b1:0:0");
        assert!(with_key(&call(None), HashMap::new()).is_empty());
        assert!(
            with_key(&call(Some("bad\nkey")), HashMap::new()).is_empty(),
            "a key no header can hold is left out"
        );
    }
}

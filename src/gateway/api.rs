//! The gateway's wire types (documented in `/openapi.json`) and its JSON errors.

use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::store::{self, MemberKind, StoreError};

/// Who wrote or did something.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct EntityRef {
    /// `agent`, `human` or `service`.
    pub kind: String,
    /// Id: an Agent's name, a human's member id or a service's name.
    pub id: String,
    /// Display name.
    pub name: String,
}

/// How the API names a member kind.
pub fn member_kind(kind: MemberKind) -> &'static str {
    match kind {
        MemberKind::Agent => "agent",
        MemberKind::Human => "human",
    }
}

impl From<&store::Sender> for EntityRef {
    fn from(s: &store::Sender) -> Self {
        Self {
            // A sender without a member kind is a service.
            kind: s.kind.map_or("service", member_kind).into(),
            id: s.id.clone(),
            name: s.name.clone(),
        }
    }
}

/// A message of a space.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    /// Stable id, ordered by posting time (`MILLIS-SEQ`); also the SSE event id.
    pub id: String,
    /// The space's name.
    pub space: String,
    /// Who posted it.
    pub sender: EntityRef,
    /// What was said: plain text, to be shown as text (never as markup).
    pub text: String,
    /// When it was posted, milliseconds since the Unix epoch.
    pub time_ms: i64,
    /// The agent member it addresses, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mention: Option<String>,
}

impl From<&store::SpaceMessage> for Message {
    fn from(m: &store::SpaceMessage) -> Self {
        Self {
            id: m.id.clone(),
            space: m.space.clone(),
            sender: EntityRef::from(&m.sender),
            text: m.text.clone(),
            time_ms: m.time_ms,
            mention: m.mention.clone(),
        }
    }
}

/// A message to post as the caller.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PostMessage {
    /// The text (not empty).
    pub text: String,
    /// An agent member to address: it is woken even where agents answer only when named.
    #[serde(default)]
    pub mention: Option<String>,
    /// Deliver as urgent: injected into a cycle already under way.
    #[serde(default)]
    pub urgent: bool,
}

/// The outcome of a post.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Posted {
    /// The message's id (the first message's, for a repeated `Idempotency-Key`).
    pub id: String,
    /// An earlier post had the same `Idempotency-Key`; nothing new was written.
    pub duplicate: bool,
    /// Agents whose inbox received the message.
    pub delivered: Vec<String>,
}

/// One page of a space's messages.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessagePage {
    /// Newest first, or oldest first when reading `after` an id.
    pub messages: Vec<Message>,
    /// When the page is full: the id to pass as `before` (or `after`) for the next page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// A member of a space.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct Member {
    /// `agent` or `human`.
    pub kind: String,
    /// Agent name or human id.
    pub id: String,
    /// Display name.
    pub name: String,
}

/// A space as its members see it.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpaceInfo {
    /// Namespace of the Space.
    pub namespace: String,
    /// Name of the Space.
    pub name: String,
    /// Name shown to humans and agents.
    pub display_name: String,
    /// Agents, then humans.
    pub members: Vec<Member>,
}

/// A service event for an agent (a webhook).
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TriggerEvent {
    /// What happened, as the agent will read it.
    #[serde(default)]
    pub text: Option<String>,
    /// Structured payload, shown to the agent as JSON after the text.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub data: Option<serde_json::Value>,
    /// Event id: sending the same id again is dropped (so retries are safe). Defaults to the
    /// `Idempotency-Key` header, else a fresh id.
    #[serde(default)]
    pub id: Option<String>,
    /// Inject into a cycle already under way.
    #[serde(default)]
    pub urgent: bool,
}

/// The outcome of a trigger.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Triggered {
    /// The event id.
    pub id: String,
    /// The inbox had this id already; nothing new was queued.
    pub duplicate: bool,
    /// No worker held the agent, so a wake signal was sent.
    pub woke: bool,
}

/// The caller, as the gateway knows it.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct Me {
    /// `human` or `service`.
    pub kind: String,
    /// Id.
    pub id: String,
    /// Display name.
    pub name: String,
}

/// A streamed piece of an agent's message (SSE event `delta`).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeltaEvent {
    /// Groups the pieces of one message.
    pub stream_id: String,
    /// The writing agent.
    pub sender: EntityRef,
    /// The next piece of text.
    pub delta: String,
}

/// What an agent is doing (SSE event `activity`).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ActivityEvent {
    /// The agent.
    pub sender: EntityRef,
    /// `thinking`, `tool`, `tool_result` (a `visible` tool's arguments and result; see
    /// `detail`), `idle`, or `error` (its cycle failed; see `detail`).
    pub activity: String,
    /// The tool being run, for `tool`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// For `error`: what failed and what happens next (a retry in so many seconds, or giving
    /// up on the messages). For `tool_result`: JSON `{"arguments", "result"}`, secrets masked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// An agent asks the space's members about a call (SSE event `tool_request`): approve or deny
/// it, or answer it, at `POST /v1/spaces/{ns}/{space}/tool-calls/{callId}`. The same request is
/// also a message from the agent in the space's log, for clients that were not connected.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolRequestEvent {
    /// The asking agent.
    pub sender: EntityRef,
    /// The call to answer.
    pub call_id: String,
    /// The name of the tool the agent called, as its Agent declares it.
    pub tool: String,
    /// `approval` (answer `{"decision": "approve"|"deny", "reason"?}`) or `interactive`
    /// (answer `{"result": …}`).
    pub kind: String,
    /// The call's arguments, secrets masked.
    #[schema(value_type = Object)]
    pub arguments: serde_json::Value,
    /// What an interactive answer must match (JSON Schema), if the tool says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub result_schema: Option<serde_json::Value>,
    /// When it was asked (ms since the epoch).
    pub since_ms: i64,
    /// When it times out (ms since the epoch); the agent is then told nobody answered.
    pub expires_ms: i64,
}

/// An error.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// What went wrong, as a code and a sentence.
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable, machine-readable: `unauthenticated`, `forbidden`, `not_member`, `not_found`,
    /// `method_not_allowed`, `invalid_request`, `duplicate`, `conflict`, `expired`, `payload_too_large`,
    /// `rate_limited`, `unavailable`, `request_timeout`, `uri_too_long`, `headers_too_large`,
    /// `bad_request`.
    pub code: String,
    /// For humans; quotes client input only cut short (see [`quote`]).
    pub message: String,
}

/// The most characters of client input an error message quotes.
pub const QUOTE_CHARS: usize = 64;

/// The longest error message, in bytes: a backstop for texts that embed input we do not
/// quote ourselves (a JSON parser's or a query parser's error).
const MAX_MESSAGE_BYTES: usize = 400;

/// Client input as an error message quotes it: in double quotes, escaped (quotes, backslashes,
/// control characters, line breaks, bidirectional overrides), and cut after [`QUOTE_CHARS`]
/// characters with `…` — so an answer never echoes a huge or hostile input whole. Every
/// message that names what the client sent goes through here.
pub fn quote(input: &str) -> String {
    let mut out = String::with_capacity(input.len().min(QUOTE_CHARS * 2) + 4);
    out.push('"');
    let mut chars = input.chars();
    for c in chars.by_ref().take(QUOTE_CHARS) {
        out.extend(c.escape_debug());
    }
    if chars.next().is_some() {
        out.push('…');
    }
    out.push('"');
    out
}

/// Characters that reorder or hide the text around them when shown.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Every error message as sent: control and bidirectional characters escaped, cut to
/// [`MAX_MESSAGE_BYTES`] (then `…`). The backstop for the texts of other parsers, which embed
/// what the client sent; our own messages quote input with [`quote`].
fn clean(message: String) -> String {
    let needs_escape = message
        .chars()
        .any(|c| c.is_control() || is_bidi_control(c));
    let mut message = if needs_escape {
        message
            .chars()
            .fold(String::with_capacity(message.len()), |mut out, c| {
                if c.is_control() || is_bidi_control(c) {
                    out.extend(c.escape_unicode());
                } else {
                    out.push(c);
                }
                out
            })
    } else {
        message
    };
    if message.len() > MAX_MESSAGE_BYTES {
        let mut end = MAX_MESSAGE_BYTES;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push('…');
    }
    message
}

/// An error answer: status, stable code, message (never a secret).
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable code.
    pub code: &'static str,
    /// For humans.
    pub message: String,
    /// Seconds to wait, for 429.
    pub retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: clean(message.into()),
            retry_after: None,
        }
    }

    /// 401.
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthenticated", message)
    }

    /// 403.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 403 for a space the caller is not a member of.
    pub fn not_member(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "not_member", message)
    }

    /// 404.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 400.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    /// 409 for a result that was already given (`duplicate`).
    pub fn duplicate(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "duplicate", message)
    }

    /// 409 for an answer to what already has one (`conflict`).
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }

    /// 410 for something whose time is over (`expired`).
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(StatusCode::GONE, "expired", message)
    }

    /// 413.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("the request body is larger than {limit} bytes"),
        )
    }

    /// 429.
    pub fn rate_limited(wait: std::time::Duration) -> Self {
        let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
        Self {
            retry_after: Some(secs),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!("too many requests; retry in {secs}s"),
            )
        }
    }

    /// 503.
    pub fn unavailable(e: &StoreError) -> Self {
        tracing::warn!(error = %e, "data plane error");
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the data plane is unavailable; retry later",
        )
    }

    /// 405.
    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "this route does not take that method",
        )
    }

    /// 408: the request did not reach its response within `limit`.
    pub fn request_timeout(limit: std::time::Duration) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!(
                "the request was not complete within {}s",
                limit.as_secs_f64()
            ),
        )
    }

    /// 414: the request target is longer than `limit` bytes.
    pub fn uri_too_long(limit: usize) -> Self {
        Self::new(
            StatusCode::URI_TOO_LONG,
            "uri_too_long",
            format!("the request target is longer than {limit} bytes"),
        )
    }

    /// 431: the request's headers do not fit the server's buffer.
    pub fn headers_too_large() -> Self {
        Self::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers_too_large",
            "the request's headers are too large",
        )
    }

    /// 400 for a request that is not HTTP/1 (malformed request line or header).
    pub fn bad_request() -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "the request is not valid HTTP/1.1",
        )
    }

    /// The JSON body of this error.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code: self.code.into(),
                message: self.message.clone(),
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"agentfleet\""),
            );
        }
        if let Some(secs) = self.retry_after {
            if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        response
    }
}

/// A JSON body whose every failure (too large, not JSON, wrong fields) is an [`ApiError`].
pub struct JsonBody<T>(pub T);

impl<T> FromRequest<super::Gateway> for JsonBody<T>
where
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, gw: &super::Gateway) -> Result<Self, Self::Rejection> {
        let bytes = axum::body::Bytes::from_request(req, gw)
            .await
            .map_err(|rejection| {
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::too_large(gw.max_body_bytes())
                } else {
                    ApiError::invalid(format!("reading the body: {}", rejection.body_text()))
                }
            })?;
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::invalid(format!("invalid JSON body: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_are_cut_short_and_escaped() {
        assert_eq!(quote("family"), "\"family\"");
        assert_eq!(quote("a\"b\\c\r\n\0"), r#""a\"b\\c\r\n\0""#);
        assert_eq!(quote("\u{202e}x"), r#""\u{202e}x""#);
        let long = quote(&"é".repeat(1000));
        assert_eq!(long, format!("\"{}…\"", "é".repeat(QUOTE_CHARS)));
    }

    #[test]
    fn every_message_is_escaped_and_bounded() {
        let e = ApiError::invalid(format!("parser says `{}`", "\r\n\u{202e}".repeat(500)));
        assert!(e.message.len() <= MAX_MESSAGE_BYTES + '…'.len_utf8());
        assert!(e.message.ends_with('…'));
        assert!(
            !e.message.contains(['\r', '\n', '\u{202e}']),
            "{}",
            e.message
        );
        assert!(
            e.message.starts_with("parser says `\\u{d}\\u{a}\\u{202e}"),
            "{}",
            e.message
        );
        let quoted = ApiError::not_found(format!("no space {}", quote("a\nb")));
        assert_eq!(
            quoted.message, r#"no space "a\nb""#,
            "quoted input is not escaped twice"
        );
    }
}

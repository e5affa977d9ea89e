//! The gateway's JSON errors: an [`ApiError`] is a status, a stable code and a message that
//! quotes client input only escaped and cut short ([`quote`]); [`JsonBody`] is a request body
//! whose refusal is one.

use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use crate::api::{ErrorBody, ErrorDetail};
use crate::store::StoreError;

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

    /// 503: the Kubernetes API server cannot say now who a token is.
    pub fn unavailable_auth() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the Kubernetes API server cannot check the token now; retry later",
        )
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

    /// 413 for a message longer than its space takes (the store's sentence says by how much).
    pub fn message_too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "message_too_large", message)
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

    /// 429 for a caller that holds as many streams open as it may (`too_many_streams`).
    pub fn too_many_streams(message: impl Into<String>) -> Self {
        Self::new(StatusCode::TOO_MANY_REQUESTS, "too_many_streams", message)
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

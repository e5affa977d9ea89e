//! The protocol's errors (code, HTTP and gRPC status, reason) and the version check.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::wire::*;

/// The error enum from its table: variant = JSON-RPC code, HTTP status, gRPC status, reason.
macro_rules! a2a_errors {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident = $code:literal, $http:literal, $grpc:literal, $reason:literal;)+ }) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
        pub enum $name { $($(#[$vm])* #[error("{0}")] $variant(String),)+ }

        impl $name {
            /// (JSON-RPC code, HTTP status, gRPC status, `ErrorInfo.reason`).
            fn mapping(&self) -> (i64, u16, &'static str, &'static str) {
                match self { $(Self::$variant(_) => ($code, $http, $grpc, $reason),)+ }
            }

            /// The human-readable message.
            pub fn message(&self) -> &str {
                match self { $(Self::$variant(m))|+ => m }
            }

            /// The error of a JSON-RPC code, with `message` (`None` for an unknown code).
            pub fn from_code(code: i64, message: impl Into<String>) -> Option<Self> {
                match code { $($code => Some(Self::$variant(message.into())),)+ _ => None }
            }
        }
    };
}

a2a_errors! {
    /// An A2A error, with a human-readable message, and its mapping to each binding (SPEC
    /// §5.4 of v1.0.1, and the JSON-RPC 2.0 standard codes).
    ///
    /// The spec gives authentication, authorization and rate-limit errors no JSON-RPC code
    /// ("a custom error"). This server uses -32040 (unauthenticated), -32041 (permission
    /// denied), -32042 (rate limited) and -32043 (unavailable): JSON-RPC 2.0 leaves -32000..-32099 to
    /// implementations, and A2A, which claims -32001..-32099 for its own errors, uses only
    /// -32001..-32009 so far. Should a later spec assign these codes, follow it.
    A2aError {
        /// No such task (or not visible to the caller).
        TaskNotFound = -32001, 404, "NOT_FOUND", "TASK_NOT_FOUND";
        /// The task cannot be canceled (already terminal).
        TaskNotCancelable = -32002, 400, "FAILED_PRECONDITION", "TASK_NOT_CANCELABLE";
        /// Push notifications are not supported.
        PushNotificationNotSupported = -32003, 400, "FAILED_PRECONDITION", "PUSH_NOTIFICATION_NOT_SUPPORTED";
        /// The operation is not supported (by the agent, or in the task's state).
        UnsupportedOperation = -32004, 400, "FAILED_PRECONDITION", "UNSUPPORTED_OPERATION";
        /// A media type is not supported.
        ContentTypeNotSupported = -32005, 400, "INVALID_ARGUMENT", "CONTENT_TYPE_NOT_SUPPORTED";
        /// The agent's answer was invalid.
        InvalidAgentResponse = -32006, 500, "INTERNAL", "INVALID_AGENT_RESPONSE";
        /// An extended card is declared but not configured.
        ExtendedAgentCardNotConfigured = -32007, 400, "FAILED_PRECONDITION", "EXTENDED_AGENT_CARD_NOT_CONFIGURED";
        /// The client must support an extension it did not declare.
        ExtensionSupportRequired = -32008, 400, "FAILED_PRECONDITION", "EXTENSION_SUPPORT_REQUIRED";
        /// The requested protocol version is not supported (see [`negotiate`]).
        VersionNotSupported = -32009, 400, "FAILED_PRECONDITION", "VERSION_NOT_SUPPORTED";
        /// The body is not JSON.
        ParseError = -32700, 400, "INVALID_ARGUMENT", "PARSE_ERROR";
        /// The JSON is not a valid request.
        InvalidRequest = -32600, 400, "INVALID_ARGUMENT", "INVALID_REQUEST";
        /// No such method.
        MethodNotFound = -32601, 404, "NOT_FOUND", "METHOD_NOT_FOUND";
        /// The parameters are invalid.
        InvalidParams = -32602, 400, "INVALID_ARGUMENT", "INVALID_PARAMS";
        /// An internal error.
        Internal = -32603, 500, "INTERNAL", "INTERNAL_ERROR";
        /// Missing or invalid credentials (JSON-RPC code ours, see above).
        Unauthenticated = -32040, 401, "UNAUTHENTICATED", "UNAUTHENTICATED";
        /// The caller may not do this (JSON-RPC code ours, see above).
        PermissionDenied = -32041, 403, "PERMISSION_DENIED", "PERMISSION_DENIED";
        /// Too many requests (JSON-RPC code ours, see above).
        RateLimited = -32042, 429, "RESOURCE_EXHAUSTED", "RATE_LIMITED";
        /// Who the caller is cannot be checked now: retry (JSON-RPC code ours, see above).
        Unavailable = -32043, 503, "UNAVAILABLE", "UNAVAILABLE";
    }
}

impl A2aError {
    /// The JSON-RPC error code.
    pub fn code(&self) -> i64 {
        self.mapping().0
    }

    /// The HTTP status of the HTTP+JSON binding.
    pub fn http_status(&self) -> u16 {
        self.mapping().1
    }

    /// The gRPC status name, e.g. `NOT_FOUND` (also `status` of a REST error body).
    pub fn grpc_status(&self) -> &'static str {
        self.mapping().2
    }

    /// `ErrorInfo.reason`: the error's name in UPPER_SNAKE_CASE, e.g. `TASK_NOT_FOUND`.
    pub fn reason(&self) -> &'static str {
        self.mapping().3
    }

    /// The `google.rpc.ErrorInfo` detail (ProtoJSON `Any`) of this error, with `metadata`.
    pub fn error_info(&self, metadata: &BTreeMap<String, String>) -> Value {
        json!({
            "@type": ERROR_INFO_TYPE,
            "reason": self.reason(),
            "domain": ERROR_DOMAIN,
            "metadata": metadata,
        })
    }

    /// The JSON-RPC 2.0 error response to request `id`, `ErrorInfo` in `data`.
    pub fn to_jsonrpc(&self, id: Value) -> Value {
        self.to_jsonrpc_with(id, &BTreeMap::new())
    }

    /// [`Self::to_jsonrpc`] with `ErrorInfo.metadata` (e.g. `{"taskId": …}`).
    pub fn to_jsonrpc_with(&self, id: Value, metadata: &BTreeMap<String, String>) -> Value {
        json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {
                "code": self.code(),
                "message": self.message(),
                "data": [self.error_info(metadata)],
            },
        })
    }

    /// The HTTP+JSON error body (a `google.rpc.Status` under `error`), sent with
    /// [`Self::http_status`].
    pub fn to_rest_body(&self) -> Value {
        self.to_rest_body_with(&BTreeMap::new())
    }

    /// [`Self::to_rest_body`] with `ErrorInfo.metadata`.
    pub fn to_rest_body_with(&self, metadata: &BTreeMap<String, String>) -> Value {
        json!({
            "error": {
                "code": self.http_status(),
                "status": self.grpc_status(),
                "message": self.message(),
                "details": [self.error_info(metadata)],
            },
        })
    }
}

/// Checks a request's `A2A-Version` value: any 1.x is accepted (the minor and a patch are
/// ignored); a missing or empty one means 0.3 and, like any other, is refused with
/// [`A2aError::VersionNotSupported`].
pub fn negotiate(header: Option<&str>) -> Result<(), A2aError> {
    let version = header
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .unwrap_or("0.3");
    let mut parts = version.split('.');
    let major = parts.next().unwrap_or_default();
    if major == "1" && parts.all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())) {
        return Ok(());
    }
    let shown: String = version.chars().take(32).collect();
    Err(A2aError::VersionNotSupported(format!(
        "A2A version {shown:?} is not supported; this server speaks {PROTOCOL_VERSION} (send the {VERSION_HEADER}: {PROTOCOL_VERSION} header)"
    )))
}

//! `POST /v1/tool-results/{callId}`: the service of an asynchronous tool call posts its result
//! (seed 000, "Async Tool Completion") with the call's own token. The store accepts it once
//! and delivers it to the agent's inbox as a `tool_result` event (waking an agent scaled to
//! zero); every refusal writes nothing.

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::Json;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::auth::bearer_token;
use super::error::{quote, ApiError, JsonBody};
use super::{Gateway, RequestRefusals};
use crate::api::ErrorBody;
use crate::store::{presented_hash, CallId, CallResult, Completion};

/// The result of an asynchronous tool call: exactly one of `result` and `error`.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolResult {
    /// The call's result (any JSON, `null` included).
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Object>)]
    pub result: Option<Value>,
    /// Why the call failed.
    #[serde(default)]
    pub error: Option<String>,
}

/// A field that is present, even as `null`.
pub(super) fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

impl ToolResult {
    /// What the body says, or why it says nothing usable.
    fn into_call_result(self) -> Result<CallResult, ApiError> {
        match (self.result, self.error) {
            (Some(v), None) => Ok(CallResult::Result(v)),
            (None, Some(e)) => Ok(CallResult::Error(e)),
            _ => Err(ApiError::invalid("give exactly one of result and error")),
        }
    }
}

/// A result taken.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolResultAccepted {
    /// The call.
    pub call_id: String,
    /// No worker held the agent, so a wake signal was sent.
    pub woke: bool,
}

/// Takes the result of an asynchronous tool call.
#[utoipa::path(
    post,
    path = "/v1/tool-results/{callId}",
    tag = "tools",
    params(
        ("callId" = String, Path, description = "The call, as the request that started it named it (header `X-Agentfleet-Callback`)"),
    ),
    request_body = ToolResult,
    responses(
        (status = 202, description = "Delivered to the agent's inbox", body = ToolResultAccepted),
        (status = 400, description = "Invalid body", body = ErrorBody),
        (status = 401, description = "No token, or not the call's token (`unauthenticated`)", body = ErrorBody),
        (status = 404, description = "No such call, or forgotten (`not_found`)", body = ErrorBody),
        (status = 409, description = "The call already has its result (`duplicate`)", body = ErrorBody),
        (status = 410, description = "The call expired before its result came (`expired`)", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 429, description = "Rate limited", body = ErrorBody),
        (status = 503, description = "Data plane unavailable", body = ErrorBody),
        RequestRefusals,
    ),
    security(("bearer" = []))
)]
pub(super) async fn post_tool_result(
    State(gw): State<Gateway>,
    Path(id): Path<String>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<ToolResult>,
) -> Result<(StatusCode, Json<ToolResultAccepted>), ApiError> {
    let token = headers
        .get(header::AUTHORIZATION)
        .ok_or_else(|| {
            ApiError::unauthenticated("missing bearer token (Authorization: Bearer TOKEN)")
        })?
        .to_str()
        .ok()
        .and_then(bearer_token)
        .ok_or_else(|| {
            ApiError::unauthenticated("the Authorization header is not a bearer token")
        })?;
    let unknown = || ApiError::not_found(format!("no tool call {}", quote(&id)));
    let call = CallId::parse(&id).ok_or_else(unknown)?;
    let result = body.into_call_result()?;
    // The token first (one read): only a caller holding a call's token counts against the
    // agent's rate, so nobody else can crowd out its services' results.
    let registered = gw
        .inner
        .store
        .call(&call)
        .await
        .map_err(|e| ApiError::unavailable(&e))?
        .ok_or_else(unknown)?;
    if registered.record.token_hash != presented_hash(Some(token)) {
        return Err(not_the_token());
    }
    gw.check_rate_of(&format!("calls:{}", call.agent()))?;
    let completion = gw
        .inner
        .store
        .complete_call(&call, Some(token), &result)
        .await
        .map_err(|e| ApiError::unavailable(&e))?;
    match completion {
        Completion::Accepted(pushed) => Ok((
            StatusCode::ACCEPTED,
            Json(ToolResultAccepted {
                call_id: id,
                woke: pushed.woke,
            }),
        )),
        Completion::Unknown => Err(unknown()),
        Completion::Unauthorized => Err(not_the_token()),
        Completion::Duplicate => Err(ApiError::duplicate(format!(
            "tool call {} already has its result",
            quote(&id)
        ))),
        Completion::Expired => Err(ApiError::expired(format!(
            "tool call {} expired before its result came",
            quote(&id)
        ))),
    }
}

/// A token that is not the call's.
fn not_the_token() -> ApiError {
    ApiError::unauthenticated("this token is not the call's token")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(json: &str) -> Result<CallResult, String> {
        serde_json::from_str::<ToolResult>(json)
            .map_err(|e| e.to_string())
            .and_then(|b| b.into_call_result().map_err(|e| e.message))
    }

    #[test]
    fn a_body_gives_exactly_one_of_result_and_error() {
        assert_eq!(
            body(r#"{"result": {"ticket": "T-1"}}"#),
            Ok(CallResult::Result(serde_json::json!({"ticket": "T-1"})))
        );
        assert_eq!(
            body(r#"{"result": null}"#),
            Ok(CallResult::Result(Value::Null))
        );
        assert_eq!(
            body(r#"{"error": "quota"}"#),
            Ok(CallResult::Error("quota".into()))
        );
        for bad in [r#"{}"#, r#"{"result": 1, "error": "x"}"#] {
            assert_eq!(
                body(bad),
                Err("give exactly one of result and error".into()),
                "{bad}"
            );
        }
        assert!(body(r#"{"result": 1, "extra": 2}"#).is_err());
    }

    #[test]
    fn the_callback_url_names_the_route() {
        use crate::callback::tool_result_url;
        let id = CallId::new(&crate::identity::AgentKey::new("ops", "bot")).unwrap();
        assert_eq!(
            tool_result_url("http://gw:8080/", &id),
            format!("http://gw:8080/v1/tool-results/{id}")
        );
    }
}

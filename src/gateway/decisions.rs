//! `POST /v1/spaces/{namespace}/{space}/tool-calls/{callId}`: one of its approvers answers a
//! paused tool call asked in the space (issue 14): approves or denies an approval, or gives
//! an interactive tool's result. The rule is [`crate::decisions`]'s, shared with
//! `agentfleet approve|deny` and A2A: by default the humans of the space (membership as on
//! the space's other routes, `Gateway::member_space`), else those the tool names — who may
//! answer without being members.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::auth::Caller;
use super::error::{quote, ApiError, JsonBody};
use super::results::present;
use super::{Gateway, RequestRefusals, SpaceRefusals};
use crate::api::{CallAnswered, ErrorBody};
use crate::decisions::{self, Refusal, Reply};
use crate::identity::SpaceKey;
use crate::store::CallId;

/// A paused tool call in a route.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct CallPath {
    /// Namespace of the Space.
    pub namespace: String,
    /// Name of the Space the call was asked in.
    pub space: String,
    /// The call, as its request in the space names it.
    #[serde(rename = "callId")]
    #[param(rename = "callId")]
    pub call_id: String,
}

/// What an approval is answered with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Run the call.
    Approve,
    /// Do not run it.
    Deny,
}

/// An answer to a paused call: `decision` (and a `reason`) for an approval, `result` for an
/// interactive tool.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CallAnswer {
    /// For an approval: `approve` or `deny`.
    #[serde(default)]
    pub decision: Option<Verdict>,
    /// For an approval: why (shown to the agent and in the space's log).
    #[serde(default)]
    pub reason: Option<String>,
    /// For an interactive tool: its result, matching the tool's schema.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Object>)]
    pub result: Option<Value>,
}

impl CallAnswer {
    /// What the body says, or why it says nothing usable.
    fn into_reply(self) -> Result<Reply, ApiError> {
        match (self.decision, self.result, self.reason) {
            (Some(v), None, reason) => Ok(Reply::Decision {
                approve: v == Verdict::Approve,
                reason,
            }),
            (None, Some(result), None) => Ok(Reply::Result(result)),
            _ => Err(ApiError::invalid(
                "give either decision (approve or deny, with an optional reason) or result",
            )),
        }
    }
}

/// Answers a paused tool call as the caller: one of its approvers (by default a human member
/// of the space it was asked in). 403 `forbidden` when the caller may not answer it (not an
/// approver it names, or the outside caller whose own conversation provoked an approval).
#[utoipa::path(
    post,
    path = "/v1/spaces/{namespace}/{space}/tool-calls/{callId}",
    tag = "spaces",
    params(CallPath),
    request_body = CallAnswer,
    responses(
        (status = 202, description = "Delivered to the agent's inbox and recorded in the space's log", body = CallAnswered),
        (status = 400, description = "Invalid body: not the answer the call takes, or a result that does not match the tool's schema (`invalid_request`)", body = ErrorBody),
        (status = 409, description = "The call was already answered (`conflict`)", body = ErrorBody),
        (status = 410, description = "The call expired before it was answered (`expired`)", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        SpaceRefusals,
        RequestRefusals,
    ),
    security(("bearer" = []))
)]
pub(super) async fn answer_call(
    State(gw): State<Gateway>,
    Caller(caller, _): Caller,
    Path(CallPath {
        namespace,
        space,
        call_id,
    }): Path<CallPath>,
    JsonBody(body): JsonBody<CallAnswer>,
) -> Result<(StatusCode, Json<CallAnswered>), ApiError> {
    let id = CallId::parse(&call_id)
        .ok_or_else(|| ApiError::not_found(format!("no tool call {}", quote(&call_id))))?;
    let key = match gw.member_space(&caller, &namespace, &space).await {
        Ok((key, _)) => key,
        // Not a member: a call that names the caller among its approvers is still theirs
        // to answer (nothing else of the space is).
        Err(not_member) => named_in(&gw, &id, &namespace, &space, &caller)
            .await?
            .ok_or(not_member)?,
    };
    let reply = body.into_reply()?;
    let answered = decisions::answer(
        gw.inner.store.as_ref(),
        &id,
        Some(&key),
        &caller.principal(),
        reply,
    )
    .await
    .map_err(|refusal| refused(refusal, &key))?;
    Ok((
        StatusCode::ACCEPTED,
        Json(CallAnswered {
            call_id: answered.call.to_string(),
            decision: answered.decision.into(),
            woke: answered.woke,
        }),
    ))
}

/// The space of call `id` when it was asked in `namespace/space` and names `caller` among
/// its approvers.
async fn named_in(
    gw: &Gateway,
    id: &CallId,
    namespace: &str,
    space: &str,
    caller: &super::auth::Entity,
) -> Result<Option<SpaceKey>, ApiError> {
    let call = gw
        .inner
        .store
        .call(id)
        .await
        .map_err(|e| ApiError::unavailable(&e))?;
    Ok(call.and_then(|c| {
        let asked = decisions::asked_in(id, &c.record)?;
        (asked.namespace == namespace
            && asked.name == space
            && crate::party::answers::names(&c.record, &caller.principal()))
        .then_some(asked)
    }))
}

/// The answer for a refusal.
fn refused(refusal: Refusal, space: &SpaceKey) -> ApiError {
    match refusal {
        r @ Refusal::Forbidden(_) => ApiError::forbidden(r.to_string()),
        Refusal::Unknown(id) => ApiError::not_found(format!(
            "no tool call {} waits for an answer in space {}",
            quote(&id),
            quote(&space.to_string())
        )),
        Refusal::Mismatch(why) => ApiError::invalid(why),
        r @ Refusal::Invalid { .. } => ApiError::invalid(r.to_string()),
        r @ Refusal::Answered(_) => ApiError::conflict(r.to_string()),
        r @ Refusal::Expired(_) => ApiError::expired(r.to_string()),
        Refusal::Store(e) => ApiError::unavailable(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(json: &str) -> Result<Reply, String> {
        serde_json::from_str::<CallAnswer>(json)
            .map_err(|e| e.to_string())
            .and_then(|b| b.into_reply().map_err(|e| e.message))
    }

    #[test]
    fn a_body_is_a_decision_or_a_result() {
        assert_eq!(
            reply(r#"{"decision": "deny", "reason": "freeze"}"#),
            Ok(Reply::Decision {
                approve: false,
                reason: Some("freeze".into())
            })
        );
        assert_eq!(
            reply(r#"{"decision": "approve"}"#),
            Ok(Reply::Decision {
                approve: true,
                reason: None
            })
        );
        assert_eq!(reply(r#"{"result": null}"#), Ok(Reply::Result(Value::Null)));
        for bad in [
            r#"{}"#,
            r#"{"decision": "approve", "result": 1}"#,
            r#"{"result": 1, "reason": "x"}"#,
            r#"{"reason": "x"}"#,
        ] {
            assert!(reply(bad).unwrap_err().starts_with("give either"), "{bad}");
        }
        assert!(reply(r#"{"decision": "maybe"}"#).is_err());
        assert!(reply(r#"{"decision": "approve", "by": "me"}"#).is_err());
    }
}

//! An agent itself, for whom RBAC allows it (see [`super::access`]): its consciousness
//! (`GET …/consciousness`, `get agents/consciousness`), a restore to a retained checkpoint
//! (`POST …/consciousness/restore`, `update agents/consciousness`) and the calls it waits on
//! (`GET …/calls`, `get agents/calls`). What is read and done is [`crate::inspect`]'s, as for
//! the command line's break-glass path on the data plane.

use axum::extract::{Path, State};
use axum::Json;

use super::access::Operation;
use super::agents::AgentPath;
use super::auth::Caller;
use super::error::{ApiError, JsonBody};
use super::{Gateway, RequestRefusals};
use crate::api::{
    ConsciousnessView, ErrorBody, RestoreRequest, Restored, WaitingCall, WaitingCalls,
};
use crate::identity::AgentKey;
use crate::inspect::{self, InspectError, Restore};

impl From<InspectError> for ApiError {
    fn from(e: InspectError) -> Self {
        match e {
            InspectError::NoAgent(_)
            | InspectError::NoCheckpoint { .. }
            | InspectError::NoRecord { .. } => ApiError::not_found(e.to_string()),
            InspectError::Thinking(_) => ApiError::conflict(e.to_string()),
            InspectError::Store(e) => ApiError::unavailable(&e),
        }
    }
}

/// Whether the caller may do `op` to the agent of `path` (see [`super::access`]).
pub(super) async fn allowed(
    gw: &Gateway,
    caller: &Caller,
    op: Operation,
    path: AgentPath,
) -> Result<AgentKey, ApiError> {
    let key = AgentKey::named(&format!("{}/{}", path.namespace, path.agent))
        .map_err(ApiError::invalid)?;
    let Some(access) = gw.access() else {
        return Err(ApiError::forbidden(
            "this gateway decides nothing about agents themselves: run it with --kubernetes-auth, so that RBAC does",
        ));
    };
    access.check(&caller.0, &caller.1, op, &key).await?;
    Ok(key)
}

/// The refusals of a route that reads an agent's memory (its consciousness, its cycle
/// records), which RBAC's `get agents/consciousness` on the Agent decides.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)] // documentation only: the answers are built by `ApiError`
pub(super) enum MemoryReadRefusals {
    /// No or unknown token.
    #[response(status = 401)]
    Unauthenticated(ErrorBody),
    /// RBAC does not grant `get agents/consciousness` on the Agent (`forbidden`).
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// Data plane or API server unavailable.
    #[response(status = 503)]
    Unavailable(ErrorBody),
}

/// An agent's consciousness: summary, messages, memories, goals, checkpoints, archive.
#[utoipa::path(
    get,
    path = "/v1/agents/{namespace}/{agent}/consciousness",
    tag = "agents",
    params(AgentPath),
    responses(
        (status = 200, description = "The agent's consciousness", body = ConsciousnessView),
        (status = 404, description = "No such agent in the data plane (`not_found`)", body = ErrorBody),
        MemoryReadRefusals,
        RequestRefusals,
    ),
    security(("bearer" = []))
)]
pub(super) async fn consciousness(
    State(gw): State<Gateway>,
    caller: Caller,
    Path(path): Path<AgentPath>,
) -> Result<Json<ConsciousnessView>, ApiError> {
    let key = allowed(&gw, &caller, Operation::ReadConsciousness, path).await?;
    Ok(Json(inspect::view(&*gw.inner.store, &key).await?))
}

/// Makes the agent's consciousness what it was after a retained checkpoint's cycle, while no
/// worker runs it.
#[utoipa::path(
    post,
    path = "/v1/agents/{namespace}/{agent}/consciousness/restore",
    tag = "agents",
    params(AgentPath),
    request_body = RestoreRequest,
    responses(
        (status = 200, description = "Restored: the checkpoint it now is", body = Restored),
        (status = 401, description = "No or unknown token", body = ErrorBody),
        (status = 403, description = "RBAC does not grant `update agents/consciousness` on the Agent (`forbidden`)", body = ErrorBody),
        (status = 404, description = "No such agent, or no retained checkpoint of that cycle (`not_found`)", body = ErrorBody),
        (status = 409, description = "The agent is thinking; try again once it sleeps (`conflict`)", body = ErrorBody),
        (status = 503, description = "Data plane or API server unavailable", body = ErrorBody),
        RequestRefusals,
    ),
    security(("bearer" = []))
)]
pub(super) async fn restore(
    State(gw): State<Gateway>,
    caller: Caller,
    Path(path): Path<AgentPath>,
    JsonBody(body): JsonBody<RestoreRequest>,
) -> Result<Json<Restored>, ApiError> {
    let key = allowed(&gw, &caller, Operation::Restore, path).await?;
    let holder = format!("agentfleet-gateway:{}", caller.0.id);
    let cp = inspect::restore(&*gw.inner.store, &key, &holder, Restore::Cycle(body.cycle)).await?;
    tracing::info!(agent = %key, cycle = cp.cycle, by = %caller.0.id, "consciousness restored");
    Ok(Json(Restored::from(&cp)))
}

/// The calls the agent waits on for a person's answer, oldest first; `mayAnswer` says which
/// the caller may answer.
#[utoipa::path(
    get,
    path = "/v1/agents/{namespace}/{agent}/calls",
    tag = "agents",
    params(AgentPath),
    responses(
        (status = 200, description = "The agent's waiting calls", body = WaitingCalls),
        (status = 401, description = "No or unknown token", body = ErrorBody),
        (status = 403, description = "RBAC does not grant `get agents/calls` on the Agent (`forbidden`)", body = ErrorBody),
        (status = 404, description = "No such agent in the data plane (`not_found`)", body = ErrorBody),
        (status = 503, description = "Data plane or API server unavailable", body = ErrorBody),
        RequestRefusals,
    ),
    security(("bearer" = []))
)]
pub(super) async fn calls(
    State(gw): State<Gateway>,
    caller: Caller,
    Path(path): Path<AgentPath>,
) -> Result<Json<WaitingCalls>, ApiError> {
    let key = allowed(&gw, &caller, Operation::ReadCalls, path).await?;
    let store = &gw.inner.store;
    inspect::require_agent(&**store, &key).await?;
    let me = caller.0.principal();
    let mut calls = Vec::new();
    for c in store
        .human_calls(&key)
        .await
        .map_err(|e| ApiError::unavailable(&e))?
    {
        let Some(space) = crate::decisions::asked_in(&c.id, &c.record) else {
            continue;
        };
        let record = store
            .space(&space)
            .await
            .map_err(|e| ApiError::unavailable(&e))?;
        let may_answer =
            crate::party::may_answer(&c.record, &space.name, record.as_ref(), &me).is_ok();
        calls.push(WaitingCall::new(
            &c,
            &space.namespace,
            &space.name,
            may_answer,
        ));
    }
    calls.sort_by(|a, b| (a.since_ms, &a.call_id).cmp(&(b.since_ms, &b.call_id)));
    Ok(Json(WaitingCalls { calls }))
}

//! An agent's cycle records ([`crate::cycles`]): a page of them (`GET …/cycles`), one of
//! them (`GET …/cycles/{seq}`). The rule is the consciousness's: RBAC `get
//! agents/consciousness` on the Agent (see [`super::access`]), since a record holds the
//! model's private text and the tools' results, more than a space's members see. Whoever may
//! not read them is refused before anything is looked up, so a refusal says nothing of
//! whether the agent or a cycle exists.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::Json;
use serde::Deserialize;
use utoipa::IntoParams;

use super::access::Operation;
use super::agents::AgentPath;
use super::auth::Caller;
use super::error::ApiError;
use super::inspect::{allowed, MemoryReadRefusals};
use super::{Gateway, RequestRefusals};
use crate::api::ErrorBody;
use crate::cycles::read::{self, PAGE_MAX};
use crate::cycles::{CyclePage, CycleView};

/// Where a trace's id goes in `--trace-url`.
pub(crate) const TRACE_ID: &str = "{traceId}";

/// The query of a page of cycles.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct CyclesQuery {
    /// Cycles numbered below this one (the `nextBefore` of the page before).
    before: Option<u64>,
    /// How many at most (1 to 100; 20 when not given).
    limit: Option<usize>,
    /// Only the cycle(s) that posted this message (its id in a space): "why did it say
    /// this?".
    message: Option<String>,
}

/// One record of an agent.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(super) struct CyclePath {
    /// Namespace of the Agent.
    namespace: String,
    /// Name of the Agent.
    agent: String,
    /// The record's number.
    seq: u64,
}

/// The agent's cycles, newest first: when each ran, how it ended, its steps, calls and
/// tokens.
#[utoipa::path(
    get,
    path = "/v1/agents/{namespace}/{agent}/cycles",
    tag = "agents",
    params(AgentPath, CyclesQuery),
    responses(
        (status = 200, description = "A page of the agent's cycles", body = CyclePage),
        (status = 400, description = "Invalid query (`invalid`)", body = ErrorBody),
        (status = 404, description = "No such agent in the data plane (`not_found`)", body = ErrorBody),
        MemoryReadRefusals,
        RequestRefusals,
    ),
    security(("bearer" = []))
)]
pub(super) async fn cycles(
    State(gw): State<Gateway>,
    caller: Caller,
    Path(path): Path<AgentPath>,
    query: Result<Query<CyclesQuery>, QueryRejection>,
) -> Result<Json<CyclePage>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::invalid(e.body_text()))?;
    let key = allowed(&gw, &caller, Operation::ReadConsciousness, path).await?;
    let limit = q.limit.unwrap_or(20);
    if !(1..=PAGE_MAX).contains(&limit) {
        return Err(ApiError::invalid(format!("limit: 1 to {PAGE_MAX}")));
    }
    let page = read::page(
        &*gw.inner.store,
        &key,
        q.before,
        limit,
        q.message.as_deref(),
    )
    .await?;
    Ok(Json(page))
}

/// One cycle of the agent: what it woke for, each step (tokens, times, the model's private
/// text, its calls and their results), how it ended and why.
#[utoipa::path(
    get,
    path = "/v1/agents/{namespace}/{agent}/cycles/{seq}",
    tag = "agents",
    params(CyclePath),
    responses(
        (status = 200, description = "The cycle's record", body = CycleView),
        (status = 404, description = "No such agent, or no record of that number kept (`not_found`)", body = ErrorBody),
        MemoryReadRefusals,
        RequestRefusals,
    ),
    security(("bearer" = []))
)]
pub(super) async fn cycle(
    State(gw): State<Gateway>,
    caller: Caller,
    Path(path): Path<CyclePath>,
) -> Result<Json<CycleView>, ApiError> {
    let agent = AgentPath {
        namespace: path.namespace,
        agent: path.agent,
    };
    let key = allowed(&gw, &caller, Operation::ReadConsciousness, agent).await?;
    let (record, bytes) = read::record(&*gw.inner.store, &key, path.seq).await?;
    let trace_url = match (gw.inner.trace_url.get(), &record.trace_id) {
        (Some(url), Some(id)) if is_trace_id(id) => Some(url.replace(TRACE_ID, id)),
        _ => None,
    };
    Ok(Json(CycleView {
        record,
        bytes,
        trace_url,
    }))
}

/// Whether `id` is a trace id (32 lower-case hex digits) and nothing else.
fn is_trace_id(id: &str) -> bool {
    id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

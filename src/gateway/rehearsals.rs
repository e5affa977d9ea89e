//! An agent's rehearsals ([`crate::rehearsals`]): the reports its data plane keeps (the
//! newest 20), listed (`GET …/rehearsals`) or one whole (`GET …/rehearsals/{name}`): each
//! recorded cycle, what the candidate did in its place, whether they agree. The rule is the
//! cycle records': RBAC `get agents/consciousness` on the Agent, since a report holds what
//! its cycles called, with their arguments. A gateway that runs rehearsals in place
//! (`agentfleet dev`'s) also takes `POST …/rehearsals`; a cluster's runs them as Rehearsal
//! resources.

use axum::extract::{Path, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::access::Operation;
use super::agents::AgentPath;
use super::auth::Caller;
use super::error::ApiError;
use super::inspect::{allowed, MemoryReadRefusals};
use super::{Gateway, RequestRefusals};
use crate::api::ErrorBody;
use crate::rehearsals::{Recorded, Summary};

/// A rehearsal asked of a process that runs them in place (`agentfleet dev`'s gateway:
/// `POST /v1/agents/{namespace}/{agent}/rehearsals`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RehearsalRequest {
    /// The name its report is kept under (a Kubernetes name).
    pub name: String,
    /// What the candidate changes of the agent (as a Rehearsal's `spec.candidate`).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub candidate: crate::crd::Candidate,
    /// How many of the agent's last recorded cycles (1 to 100).
    #[serde(default = "default_cycles")]
    pub cycles: u32,
    /// What it must show to pass.
    #[serde(default)]
    pub criteria: crate::rehearsals::Criteria,
}

fn default_cycles() -> u32 {
    crate::rehearsals::DEFAULT_CYCLES
}

/// What runs rehearsals in place, given to a gateway that may (`agentfleet dev`'s, which
/// holds the agents' model key); a cluster's gateway has none (a Rehearsal's Job runs them).
#[async_trait::async_trait]
pub trait Rehearser: Send + Sync {
    /// Runs `request` on agent `agent`'s recorded cycles, keeps the report in the data plane
    /// and returns it; `Err` says in a sentence why it could not start.
    async fn rehearse(
        &self,
        agent: &crate::identity::AgentKey,
        request: &RehearsalRequest,
    ) -> Result<Recorded, String>;
}

/// A rehearsal as a list shows it.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RehearsalHead {
    /// The Rehearsal's name.
    pub name: String,
    /// When it ended (ms since the epoch).
    pub time_ms: i64,
    /// Its figures and verdict, when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<Summary>,
    /// Why it could not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// An agent's rehearsals, newest first.
#[derive(Clone, Debug, Default, Serialize, Deserialize, ToSchema)]
pub struct RehearsalList {
    /// Their heads.
    pub rehearsals: Vec<RehearsalHead>,
}

/// One rehearsal of an agent.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(super) struct RehearsalPath {
    /// Namespace of the Agent.
    namespace: String,
    /// Name of the Agent.
    agent: String,
    /// The Rehearsal's name.
    name: String,
}

/// The reports `jsons` as read back from the data plane: what is not one is left out.
fn parsed(jsons: Vec<String>) -> Vec<Recorded> {
    jsons
        .iter()
        .filter_map(|j| serde_json::from_str(j).ok())
        .collect()
}

/// The agent's rehearsals, newest first: whether each passed, and why.
#[utoipa::path(
    get,
    path = "/v1/agents/{namespace}/{agent}/rehearsals",
    tag = "agents",
    params(AgentPath),
    responses(
        (status = 200, description = "The agent's rehearsals", body = RehearsalList),
        MemoryReadRefusals,
        RequestRefusals,
    ),
    security(("bearer" = []))
)]
pub(super) async fn rehearsals(
    State(gw): State<Gateway>,
    caller: Caller,
    Path(path): Path<AgentPath>,
) -> Result<Json<RehearsalList>, ApiError> {
    let key = allowed(&gw, &caller, Operation::ReadConsciousness, path).await?;
    let reports = gw
        .inner
        .store
        .rehearsal_reports(&key)
        .await
        .map_err(|e| ApiError::unavailable(&e))?;
    let rehearsals = parsed(reports)
        .into_iter()
        .map(|r| RehearsalHead {
            name: r.name,
            time_ms: r.time_ms,
            summary: r.report.map(|report| report.summary),
            error: r.error,
        })
        .collect();
    Ok(Json(RehearsalList { rehearsals }))
}

/// One rehearsal of the agent: each recorded cycle and what the candidate did in its place.
#[utoipa::path(
    get,
    path = "/v1/agents/{namespace}/{agent}/rehearsals/{name}",
    tag = "agents",
    params(RehearsalPath),
    responses(
        (status = 200, description = "The rehearsal's report", body = Recorded),
        (status = 404, description = "No report of that name kept (`not_found`)", body = ErrorBody),
        MemoryReadRefusals,
        RequestRefusals,
    ),
    security(("bearer" = []))
)]
pub(super) async fn rehearsal(
    State(gw): State<Gateway>,
    caller: Caller,
    Path(path): Path<RehearsalPath>,
) -> Result<Json<Recorded>, ApiError> {
    let agent = AgentPath {
        namespace: path.namespace,
        agent: path.agent,
    };
    let key = allowed(&gw, &caller, Operation::ReadConsciousness, agent).await?;
    let found = gw
        .inner
        .store
        .rehearsal_report(&key, &path.name)
        .await
        .map_err(|e| ApiError::unavailable(&e))?;
    match found.map(|j| parsed(vec![j])).and_then(|mut v| v.pop()) {
        Some(recorded) => Ok(Json(recorded)),
        None => Err(ApiError::not_found(format!(
            "{key} keeps no rehearsal {} (it keeps its newest 20)",
            path.name
        ))),
    }
}

/// Rehearses a candidate on the agent's last recorded cycles, here and now, and keeps the
/// report (`agentfleet dev` only: a cluster's gateway holds no model key; make a Rehearsal
/// there).
#[utoipa::path(
    post,
    path = "/v1/agents/{namespace}/{agent}/rehearsals",
    tag = "agents",
    params(AgentPath),
    request_body = RehearsalRequest,
    responses(
        (status = 200, description = "The rehearsal's report", body = Recorded),
        (status = 400, description = "Invalid request, or the rehearsal could not start (`invalid`)", body = ErrorBody),
        (status = 403, description = "This gateway runs no rehearsals (`forbidden`)", body = ErrorBody),
        MemoryReadRefusals,
        RequestRefusals,
    ),
    security(("bearer" = []))
)]
pub(super) async fn rehearse(
    State(gw): State<Gateway>,
    caller: Caller,
    Path(path): Path<AgentPath>,
    body: Result<Json<RehearsalRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Recorded>, ApiError> {
    let key = allowed(&gw, &caller, Operation::ReadConsciousness, path).await?;
    let Json(request) = body.map_err(|e| ApiError::invalid(e.body_text()))?;
    let Some(rehearser) = gw.inner.rehearser.get() else {
        return Err(ApiError::forbidden(
            "this gateway runs no rehearsals: in a cluster, make a Rehearsal (its Job runs it), or run agentfleet rehearse with the data plane",
        ));
    };
    if crate::identity::AgentKey::named(&format!("{}/{}", key.namespace, request.name)).is_err() {
        return Err(ApiError::invalid(format!(
            "name: {:?} is not a Kubernetes name",
            request.name
        )));
    }
    if !(1..=crate::rehearsals::MAX_CYCLES as u32).contains(&request.cycles) {
        return Err(ApiError::invalid("cycles: 1 to 100"));
    }
    rehearser
        .rehearse(&key, &request)
        .await
        .map(Json)
        .map_err(ApiError::invalid)
}

//! `GET /v1/agents/{namespace}/{agent}`: an agent as the members of its spaces see it, read
//! only — what the console's agent page shows. Live from the data plane (inbox, cycles,
//! tokens, tools, checkpoints); its model, budget and problem as the operator (or `dev`)
//! last wrote them ([`crate::store::AgentFacts`]).

use axum::extract::{Path, State};
use axum::Json;

use super::auth::Caller;
use super::error::{quote, ApiError};
use super::mine::spaces_of;
use super::{Gateway, RequestRefusals};
use crate::api::{AgentCheckpoint, AgentList, AgentTool, AgentView, AskingCall, ErrorBody};
use crate::identity::AgentKey;
use crate::periods::Periods;
use crate::store::{AgentFacts, AgentObservation};

/// An Agent in a route.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct AgentPath {
    /// Namespace of the Agent.
    pub namespace: String,
    /// Name of the Agent.
    pub agent: String,
}

/// An agent, for a member of one of its spaces.
#[utoipa::path(
    get,
    path = "/v1/agents/{namespace}/{agent}",
    tag = "agents",
    params(AgentPath),
    responses(
        (status = 200, description = "The agent", body = AgentView),
        (status = 401, description = "No or unknown token", body = ErrorBody),
        (status = 404, description = "No such agent in the caller's spaces (`not_found`)", body = ErrorBody),
        (status = 429, description = "Rate limited", body = ErrorBody),
        (status = 503, description = "Data plane unavailable", body = ErrorBody),
        RequestRefusals,
    ),
    security(("bearer" = []))
)]
pub(super) async fn agent_view(
    State(gw): State<Gateway>,
    Caller(caller, _): Caller,
    Path(AgentPath { namespace, agent }): Path<AgentPath>,
) -> Result<Json<AgentView>, ApiError> {
    // Seen only through a space the caller shares with it: anyone else learns nothing, not
    // even whether it exists.
    let spaces: Vec<String> = spaces_of(&gw, &caller)
        .await?
        .into_iter()
        .filter(|(k, r)| k.namespace == namespace && r.agents().any(|a| a == agent))
        .map(|(k, _)| k.name)
        .collect();
    if spaces.is_empty() {
        return Err(ApiError::not_found(format!(
            "no agent {} in your spaces",
            quote(&format!("{namespace}/{agent}"))
        )));
    }
    Ok(Json(
        view(&gw, AgentKey::new(namespace, agent), spaces).await?,
    ))
}

/// The agents of the caller's spaces, each as `GET /v1/agents/{namespace}/{agent}` shows it:
/// the console's fleet overview.
#[utoipa::path(
    get,
    path = "/v1/agents",
    tag = "agents",
    responses(
        (status = 200, description = "The agents of the caller's spaces, by namespace and name", body = AgentList),
        (status = 401, description = "No or unknown token", body = ErrorBody),
        (status = 429, description = "Rate limited", body = ErrorBody),
        (status = 503, description = "Data plane unavailable", body = ErrorBody),
        RequestRefusals,
    ),
    security(("bearer" = []))
)]
pub(super) async fn fleet(
    State(gw): State<Gateway>,
    Caller(caller, _): Caller,
) -> Result<Json<AgentList>, ApiError> {
    use futures::{StreamExt as _, TryStreamExt as _};
    // Each agent with the caller's spaces it is in.
    let mut agents: std::collections::BTreeMap<AgentKey, Vec<String>> = Default::default();
    for (space, record) in spaces_of(&gw, &caller).await? {
        for agent in record.agents() {
            agents
                .entry(AgentKey::new(space.namespace.clone(), agent))
                .or_default()
                .push(space.name.clone());
        }
    }
    let agents = futures::stream::iter(agents)
        .map(|(key, spaces)| view(&gw, key, spaces))
        .buffered(AT_ONCE)
        .try_collect()
        .await?;
    Ok(Json(AgentList { agents }))
}

/// How many agents the overview reads at once.
const AT_ONCE: usize = 16;

/// An agent as its page shows it (`spaces`: the caller's spaces it is in).
async fn view(gw: &Gateway, key: AgentKey, spaces: Vec<String>) -> Result<AgentView, ApiError> {
    let store = &gw.inner.store;
    let (seen, facts, checkpoints, last) = tokio::try_join!(
        store.observe(std::slice::from_ref(&key)),
        store.facts(&key),
        store.checkpoints(&key),
        store.cycle_heads(&key, None, 1),
    )
    .map_err(|e| ApiError::unavailable(&e))?;
    let seen = seen.into_iter().next().unwrap_or_default();
    let state = state(facts.as_ref(), &seen);
    let facts = facts.unwrap_or_default();
    let periods = Periods::at(crate::store::now_ms());
    let spent = seen
        .tokens
        .as_ref()
        .map(|t| t.spent(&periods))
        .unwrap_or_default();
    Ok(AgentView {
        state: state.into(),
        namespace: key.namespace,
        name: key.name,
        problem: facts.problem,
        model_provider: facts.model_provider,
        model_name: facts.model_name,
        model_health: seen.model.as_ref().map(|m| {
            if m.available {
                m.reason.clone()
            } else {
                format!("{}: {}", m.reason, m.message)
            }
        }),
        spaces,
        waiting: seen.waiting,
        cycles: seen.cycles,
        last_cycle_ms: seen.last_cycle_ms,
        tokens_today: spent.day,
        tokens_per_day: facts.tokens_per_day,
        tokens_this_month: spent.month,
        tokens_per_month: facts.tokens_per_month,
        tokens_used: lifetime_tokens(&seen),
        tools: seen
            .tools
            .unwrap_or_default()
            .into_iter()
            .map(|t| AgentTool {
                name: t.name,
                source: t.source,
                ready: t.ready,
                problem: t.last_error,
            })
            .collect(),
        host: seen.host.clone(),
        pool: facts.pool,
        last_outcome: last
            .first()
            .and_then(|h| h.outcome)
            .map(|o| o.as_str().to_string()),
        asking: seen.pending.len() as u64,
        asking_calls: seen
            .pending
            .iter()
            .map(|c| AskingCall {
                call_id: c.id.to_string(),
                tool: c.record.tool.clone(),
            })
            .collect(),
        checkpoints: checkpoints
            .into_iter()
            .map(|c| AgentCheckpoint {
                cycle: c.cycle,
                time_ms: c.time_ms,
                tokens_used: c.used,
                context_tokens: c.tokens,
                messages: c.messages,
            })
            .collect(),
    })
}

/// The tokens of every model call over the agent's life, counted as today's and this month's
/// are (every direction, rolled-back cycles and compactions too); when more, what its committed
/// cycles used (kept with its consciousness, which outlives a Redis that lost the counts).
fn lifetime_tokens(seen: &AgentObservation) -> u64 {
    let counted = seen
        .tokens
        .as_ref()
        .map_or(0, |t| t.input + t.cache_read + t.cache_write + t.output);
    counted.max(seen.tokens_used)
}

/// What the agent is doing, in the words of [`AgentView::state`].
fn state(facts: Option<&AgentFacts>, seen: &AgentObservation) -> &'static str {
    let Some(facts) = facts else {
        return "unknown";
    };
    if facts.problem.is_some() {
        "failed"
    } else if facts.suspended {
        "suspended"
    } else if seen.paused {
        "asking"
    } else if seen.thinking {
        "thinking"
    } else if seen.worker {
        "sleeping"
    } else {
        "stopped"
    }
}

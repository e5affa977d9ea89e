//! The Model controller, and how the operator resolves an Agent's model against the Models of
//! its namespace ([`crate::models`]'s rule).
//!
//! A Model's status: `Accepted` (its fallbacks resolve without a loop, its key's Secret and
//! key exist), `Ready` (its provider answers a probe: a listing of its models, no tokens
//! spent, at most every `probeSeconds`), the Agents that think with it (first or as a
//! fallback), and its recent failures. The key is read for the probe alone, sent only to the
//! Model's own endpoint, and never written anywhere.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use tracing::instrument;

use super::apply::apply_status;
use super::context::{Context, Error};
use super::status::{self, Cond};
use crate::crd::{Agent, ModelFailure, ModelResource, ModelSettings, ModelStatus};
use crate::model::ApiKey;
use crate::models::{self, Models, Problem};

/// Condition: its fallbacks and key resolve.
pub const ACCEPTED: &str = "Accepted";
/// Condition: its provider answers.
pub const READY: &str = "Ready";
/// Agents a status names (the count says them all).
const AGENTS_SHOWN: usize = 100;
/// Failures a status keeps.
const ERRORS_KEPT: usize = 5;

/// The Models of namespace `ns`.
pub fn table<'a>(models: &'a [Arc<ModelResource>], ns: &str) -> Models<'a> {
    models::of_namespace(models.iter().map(Arc::as_ref), ns)
}

/// `agent` with its model resolved against the Models of its namespace: what its worker or
/// pool reads. The problem's path is the Agent's.
pub fn resolve(agent: &Agent, models: &[Arc<ModelResource>]) -> Result<Agent, Problem> {
    let ns = agent.namespace().unwrap_or_default();
    let model = models::resolve(&agent.spec.model, &table(models, &ns))?;
    let mut out = agent.clone();
    out.spec.model = model;
    Ok(out)
}

/// Reconciles one Model.
#[instrument(skip_all, fields(model = %model.name_any(), namespace = model.namespace().unwrap_or_default()))]
pub async fn reconcile(model: Arc<ModelResource>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = model
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let name = model.name_any();
    if model.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    ctx.caches_synced().await?;
    let previous = model.status.clone().unwrap_or_default();
    let all = ctx.models.state();
    let mut problems = models::check(&name, &model.spec, &table(&all, &ns));
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let key = match &model.spec.settings.api_key_secret_ref {
        None => Ok(ApiKey::None),
        Some(r) => read_key(&secrets, &r.name, &r.key).await?,
    };
    let waiting = key.is_err();
    let key = match key {
        Ok(key) => Some(key),
        Err(problem) => {
            problems.push(problem);
            None
        }
    };
    let mut status = ModelStatus {
        observed_generation: model.metadata.generation,
        ..previous.clone()
    };
    let (agents, count) = users(&ctx.agents.state(), &all, &ns, &name);
    status.agents = agents;
    status.agent_count = count;

    let accepted = if problems.is_empty() {
        let asks = models::chain_names(&name, &table(&all, &ns));
        Cond::ok(
            ACCEPTED,
            "Resolved",
            format!("asks in order: {}", asks.join(", ")),
        )
    } else {
        let said: Vec<String> = problems.iter().map(ToString::to_string).collect();
        Cond::fail(ACCEPTED, "InvalidSpec", said.join("; "))
    };
    let ready = match key {
        Some(key) if problems.is_empty() => ready(&model, &previous, &mut status, key).await,
        _ => Cond::fail(READY, "NotAccepted", "not probed until it is accepted"),
    };
    status.conditions = status::merge(
        &previous.conditions,
        &[accepted, ready],
        model.metadata.generation,
        Timestamp::now(),
    );
    ctx.announce(&*model, &previous.conditions, &status.conditions, |c| {
        c.status != "True"
    })
    .await;
    if status != previous {
        let api = Api::<ModelResource>::namespaced(ctx.client.clone(), &ns);
        apply_status(&api, &name, &status).await?;
    }
    Ok(Action::requeue(next_look(
        model.spec.probe_seconds,
        waiting,
    )))
}

/// When to look again: within 30 s while its key's Secret is missing (Secrets are not
/// watched), else at the next probe (in 5 minutes when it is probed only on changes).
fn next_look(probe_seconds: u32, waiting_for_secret: bool) -> Duration {
    match probe_seconds {
        _ if waiting_for_secret => Duration::from_secs(30),
        0 => Duration::from_secs(300),
        s => Duration::from_secs(u64::from(s)),
    }
}

/// The key of Secret `name`, key `key`, for the probe; a problem (at `spec.apiKeySecretRef`)
/// when either is missing. Never logged, never written.
async fn read_key(
    secrets: &Api<Secret>,
    name: &str,
    key: &str,
) -> Result<Result<ApiKey, Problem>, Error> {
    let secret = secrets.get_opt(name).await.map_err(Error::Kube)?;
    let Some(secret) = secret else {
        return Ok(Err(Problem {
            path: "spec.apiKeySecretRef".into(),
            message: format!("Secret {name:?} not found"),
        }));
    };
    let value = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|v| String::from_utf8_lossy(&v.0).into_owned())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(key))
                .cloned()
        });
    Ok(match value {
        Some(v) => Ok(ApiKey::Given(v.trim_end_matches(['\n', '\r']).to_string())),
        None => Err(Problem {
            path: "spec.apiKeySecretRef.key".into(),
            message: format!("Secret {name:?} has no key {key:?}"),
        }),
    })
}

/// `Ready`: probed when due (a new generation, or `probeSeconds` since the last), else as it
/// was. A failed probe joins the recent failures.
async fn ready(
    model: &ModelResource,
    previous: &ModelStatus,
    status: &mut ModelStatus,
    key: ApiKey,
) -> Cond {
    let settings: &ModelSettings = &model.spec.settings;
    let kept = status::find(&previous.conditions, READY).filter(|c| c.reason != "NotAccepted");
    let due = match (&previous.probed_at, kept) {
        (Some(at), Some(c)) => {
            let every = model.spec.probe_seconds;
            let age = Timestamp::now().duration_since(at.0).as_secs();
            previous.observed_generation != model.metadata.generation
                || (every > 0 && age >= i64::from(every))
                || c.observed_generation != model.metadata.generation
        }
        _ => true,
    };
    if !due {
        let known = kept.and_then(|c| {
            let reason = crate::model::probe::REASONS
                .iter()
                .find(|r| **r == c.reason)?;
            Some(Cond {
                type_: READY,
                status: Some(c.status == "True"),
                reason,
                message: c.message.clone(),
            })
        });
        if let Some(c) = known {
            return c;
        }
    }
    let probe = crate::model::probe::probe(settings, key).await;
    status.probed_at = Some(Time(Timestamp::now()));
    if !probe.ok {
        status.last_errors.insert(
            0,
            ModelFailure {
                time: Time(Timestamp::now()),
                reason: probe.reason.to_string(),
                message: probe.message.clone(),
            },
        );
        status.last_errors.truncate(ERRORS_KEPT);
    }
    if probe.ok {
        Cond::ok(READY, probe.reason, probe.message)
    } else {
        Cond::fail(READY, probe.reason, probe.message)
    }
}

/// The Agents of `ns` that think with Model `name`, first or as a fallback: the first
/// [`AGENTS_SHOWN`] by name, and how many.
fn users(
    agents: &[Arc<Agent>],
    models: &[Arc<ModelResource>],
    ns: &str,
    name: &str,
) -> (Vec<String>, u32) {
    let table = table(models, ns);
    let mut names: Vec<String> = agents
        .iter()
        .filter(|a| a.namespace().as_deref() == Some(ns) && a.spec.model.model_ref.is_some())
        .filter(|a| models::resolve(&a.spec.model, &table).is_ok_and(|m| models::uses(&m, name)))
        .map(|a| a.name_any())
        .collect();
    names.sort();
    let count = u32::try_from(names.len()).unwrap_or(u32::MAX);
    names.truncate(AGENTS_SHOWN);
    (names, count)
}

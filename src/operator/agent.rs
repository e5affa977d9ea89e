//! The Agent controller: Agent → rendered ConfigMap + worker Deployment (none for an agent
//! that runs in a Pool, see [`super::pooled`]), and the Agent's status (phase, conditions).
//!
//! Stages: validate ([`super::validate`]) → check the Secrets of the model and the tools
//! ([`super::conditions`]) → a held change's rollout ([`super::rollout`]: what runs) → build
//! (pure, [`super::build`]) → apply (server-side, one field
//! manager: the Secrets beside the worker, the ConfigMap, the Deployment) → status (written
//! only when it changed) → events for what changed. A deleted Agent's data-plane state and
//! archived checkpoints are removed by [`cleanup`] (`cleanup.rs`), under a finalizer.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{finalizer, Event as FinalizerEvent};
use kube::{Api, Resource, ResourceExt};
use tracing::{info, instrument, warn};

use super::apply::{apply, refused_as};
use super::build::{self, FIELD_MANAGER};
use super::conditions::{check_model, check_tools, failed, ready_condition, worker_condition};
use super::context::{Context, Error};
use super::dataplane::Tracked;
use super::pooled;
use super::rollout;
use super::status::{self, Cond};
use crate::crd::{Agent, AgentStatus, Space};
use crate::identity::AgentKey;
use crate::membership;

pub use super::conditions::{
    MODEL_CONFIGURED, READY, SPACES_RESOLVED, TOOLS_CONFIGURED, WORKER_AVAILABLE,
};
pub use super::validate::{validate, MAX_NAME_LEN};
// `ModelAvailable` and `ToolsReady`, what the worker reports, are the data-plane loop's to
// write: `status::MODEL_AVAILABLE`, `status::TOOLS_READY`.

/// Reasons that are problems an SRE should see as Warning events.
const WARNING_REASONS: &[&str] = &[
    "InvalidSpec",
    "ApiKeyRequired",
    "SecretNotFound",
    "SecretKeyNotFound",
    "SecretUnreadable",
    "ModelNotResolved",
    "SpaceNotFound",
    "WorkerRejected",
    "PoolNotFound",
    "RehearsalFailed",
];

/// The finalizer that keeps a deleted Agent until its data-plane state is removed.
pub const FINALIZER: &str = "agentfleet.dev/data-plane";

pub use super::cleanup::{cleanup, DATA_PLANE_CLEANUP};

/// The Agent controller's entry point: [`reconcile`] while the Agent lives, [`cleanup`] once
/// it is deleted, with the finalizer added before anything is created.
pub async fn run(agent: Arc<Agent>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = agent
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let api: Api<Agent> = Api::namespaced(ctx.client.clone(), &ns);
    finalizer(&api, FINALIZER, agent, |event| async {
        match event {
            FinalizerEvent::Apply(agent) => reconcile(agent, ctx.clone()).await,
            FinalizerEvent::Cleanup(agent) => cleanup(agent, ctx.clone()).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

/// Reconciles one Agent: validate (the spec, the Secrets it names, its Spaces) → build and
/// apply its worker (or place it in its Pool) → status, events, and the data-plane loop's
/// view of it.
#[instrument(skip_all, fields(agent = %agent.name_any(), namespace = agent.namespace().unwrap_or_default()))]
pub async fn reconcile(agent: Arc<Agent>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = agent
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let name = agent.name_any();
    let key = AgentKey::new(ns.clone(), name.clone());
    let previous = agent.status.clone().unwrap_or_default();

    let mut checks = check(&agent, &ctx, &ns).await?;

    // The running worker is left as it was while the spec is invalid.
    let mut status = AgentStatus {
        observed_generation: agent.metadata.generation,
        ..previous.clone()
    };
    // A held change leaves the running revision's model, instructions and tools in place.
    let rollout = if checks.problems.is_empty() {
        let r = rollout::roll(&agent, &ctx).await?;
        status.rollout = r.status;
        r.condition
    } else {
        None
    };
    let running = rollout::running(&agent, status.rollout.as_ref());
    // What the worker reads: the running revision with its Models resolved (a held
    // revision's Model gone since is refused like an invalid spec).
    let resolved = super::model::resolve(running.as_ref(), &ctx.models.state());
    if let Err(problem) = &resolved {
        if checks.problems.is_empty() {
            checks.problems.push(problem.to_string());
        }
    }
    let resolved_agent = resolved.as_ref().ok();
    let agent = resolved_agent.unwrap_or(running.as_ref());
    let pool = agent.spec.runtime.as_ref().map(|r| r.pool.as_str());
    let worker = match (checks.problems.is_empty(), pool) {
        (false, _) => Cond::unknown(
            WORKER_AVAILABLE,
            "InvalidSpec",
            "the worker is left as it was until the spec is fixed",
        ),
        (true, Some(pool)) => {
            // A pool runs it: no worker of its own (one left from before goes).
            let placed = pooled::place(&ctx.client, &ns, &name, pool).await?;
            status.config_hash = None;
            // As one worker of its own would show: asked for, and available.
            status.replicas = Some(placed.asked.min(1));
            status.available_replicas = Some(placed.ready.min(1));
            placed.condition
        }
        (true, None) => match apply_worker(&ctx, &key, agent, &mut status).await {
            Err(Error::Refused(rejected)) => {
                Cond::fail(WORKER_AVAILABLE, "WorkerRejected", rejected)
            }
            other => other?,
        },
    };

    let is_failed = failed(&checks.problems, &[&checks.model, &checks.tools], &worker);
    let secrets_missing = checks.model.status != Some(true) || checks.tools.status != Some(true);
    write_conditions(agent, &ctx, &previous, &mut status, checks, worker, rollout).await?;
    track(&ctx, &key, agent, &previous, &status, is_failed);

    // Known to the data plane, so producers (the gateway's webhook) can address it.
    // Its A2A card too (the gateway serves it from there).
    // And what the gateway shows of it (the console's agent page, A2A's budget check).
    let problem = is_failed
        .then(|| crate::operator::status::find(&status.conditions, READY))
        .flatten()
        .map(|c| c.message.clone());
    let facts = crate::store::records::agent_facts(agent, problem);
    let registered = async {
        ctx.store.register_agent(&key).await?;
        ctx.store
            .apply_a2a(&key, crate::store::records::a2a_record(agent).as_ref())
            .await?;
        ctx.store.apply_facts(&key, &facts).await
    }
    .await;
    if let Err(e) = &registered {
        warn!(error = %crate::report::chain(e), "could not register the agent in the data plane; retrying in 30s");
    }

    // Secrets are not watched: look again soon while one is missing. (A Pool's readiness
    // changes wake its Agents: `watches::pool_placement_changes`.)
    if secrets_missing || registered.is_err() {
        return Ok(Action::requeue(Duration::from_secs(30)));
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

/// What the checks of an Agent found, before anything is applied.
struct Checks {
    /// What the schema cannot express and is wrong in the spec.
    problems: Vec<String>,
    /// `ModelConfigured`: the model's key Secret.
    model: Cond,
    /// `ToolsConfigured`: the tools' Secrets.
    tools: Cond,
    /// `SpacesResolved`: the Spaces it names.
    spaces: Cond,
}

/// Checks the spec, the Secrets it names (existence and the model's key only: no value is
/// ever read into a message) and its Spaces (never judged from a cache that has not synced).
async fn check(agent: &Agent, ctx: &Context, ns: &str) -> Result<Checks, Error> {
    let mut problems = validate(&agent.name_any(), &agent.spec);
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    ctx.caches_synced().await?;
    // Its model as the worker will read it: the Models it names resolved.
    let model = match super::model::resolve(agent, &ctx.models.state()) {
        Ok(resolved) => check_model(&secrets, &resolved.spec.model).await?,
        Err(problem) => {
            problems.push(problem.to_string());
            Cond::fail(MODEL_CONFIGURED, "ModelNotResolved", problem.to_string())
        }
    };
    let tools = check_tools(&secrets, &agent.spec.tools).await?;
    let spaces = ctx.spaces.state();
    let space_refs: Vec<&Space> = spaces.iter().map(Arc::as_ref).collect();
    let missing = membership::missing_spaces(agent, &membership::existing(&space_refs));
    let spaces = if missing.is_empty() {
        Cond::ok(
            SPACES_RESOLVED,
            "SpacesFound",
            format!("member of {} space(s)", agent.spec.spaces.len()),
        )
    } else {
        Cond::fail(
            SPACES_RESOLVED,
            "SpaceNotFound",
            format!("no Space {} in namespace {ns}", missing.join(", ")),
        )
    };
    Ok(Checks {
        problems,
        model,
        tools,
        spaces,
    })
}

/// Builds and applies the agent's own worker: the Secrets beside it (the managed Redis URL,
/// the archive), then the ConfigMap, then the Deployment; `status` gets its configuration
/// hash and replicas. `WorkerAvailable` as the Deployment says; [`Error::Refused`] when the
/// API server refused one of them.
async fn apply_worker(
    ctx: &Context,
    key: &AgentKey,
    agent: &Agent,
    status: &mut AgentStatus,
) -> Result<Cond, Error> {
    let owner = agent
        .controller_owner_ref(&())
        .ok_or(Error::MissingField("metadata.uid"))?;
    let manifest = build::render_manifest(agent)?;
    let hash = build::agent_config_hash(agent, &ctx.worker)?;
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &key.namespace);
    for secret in build::agent_worker_secrets(agent, &owner, &ctx.worker) {
        // Never a value: only what the API server said about the Secret.
        apply(&secrets, &secret)
            .await
            .map_err(refused_as(format_args!("Secret {}", secret.name_any())))?;
    }
    let configs: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &key.namespace);
    apply(&configs, &build::configmap(agent, &owner, &manifest))
        .await
        .map_err(refused_as("ConfigMap"))?;
    let deployment = {
        let held = ctx.scaler.hold(key, &agent.spec, status.replicas).await;
        let deploy = build::deployment(agent, &owner, &ctx.worker, &hash, held.replicas);
        let api = Api::<Deployment>::namespaced(ctx.client.clone(), &key.namespace);
        apply(&api, &deploy)
            .await
            .map_err(refused_as("Deployment"))?
    };
    // The cached status may lag our own last write; remember what we applied.
    let applied_key = key.to_string();
    let known = ctx
        .applied_hash(&applied_key)
        .or(status.config_hash.clone());
    if known.as_deref() != Some(hash.as_str()) {
        info!(config_hash = %hash, "worker configuration applied");
        let message = format!(
            "configuration {hash} applied to Deployment {}",
            build::deployment_name(&key.name)
        );
        ctx.publish(
            agent,
            EventType::Normal,
            "WorkerConfigured",
            "ApplyWorker",
            message,
        )
        .await;
    }
    ctx.record_applied_hash(applied_key, &hash);
    status.config_hash = Some(hash);
    status.replicas = deployment.spec.as_ref().and_then(|s| s.replicas);
    status.available_replicas = Some(
        deployment
            .status
            .as_ref()
            .and_then(|s| s.available_replicas)
            .unwrap_or(0),
    );
    Ok(worker_condition(&agent.spec, &deployment))
}

/// Merges the conditions into `status`, publishes an event for each that changed, and writes
/// the fields the reconcile owns when they changed (phase, depth, cycles and the checkpoint
/// come from the data plane, see `status`).
async fn write_conditions(
    agent: &Agent,
    ctx: &Context,
    previous: &AgentStatus,
    status: &mut AgentStatus,
    checks: Checks,
    worker: Cond,
    rollout: Option<Cond>,
) -> Result<(), Error> {
    let ready = ready_condition(
        &checks.problems,
        &[&checks.model, &checks.tools, &checks.spaces],
        &worker,
    );
    let mut next = vec![ready, worker, checks.model, checks.tools, checks.spaces];
    next.extend(rollout);
    status.conditions = status::merge(
        &previous.conditions,
        &next,
        agent.metadata.generation,
        Timestamp::now(),
    );
    for c in status.conditions.iter().filter(|c| c.type_ != READY) {
        let warning = c.status != "True" && WARNING_REASONS.contains(&c.reason.as_str());
        let before = status::find(&previous.conditions, &c.type_);
        if let Some(kind) = status::notice(before, c, warning) {
            ctx.publish(agent, kind, &c.reason, "Reconcile", c.message.clone())
                .await;
        }
    }
    let own = status::reconcile_part(status);
    if status::reconcile_part(previous) != own {
        let (ns, name) = (agent.namespace().unwrap_or_default(), agent.name_any());
        write_status(ctx, &ns, &name, &own).await?;
    }
    Ok(())
}

/// Tells the data-plane loop what it needs of the agent to scale it and write its status.
/// A pooled agent's replicas are its pool's: the loop never scales them.
fn track(
    ctx: &Context,
    key: &AgentKey,
    agent: &Agent,
    previous: &AgentStatus,
    status: &AgentStatus,
    failed: bool,
) {
    let spec = match &agent.spec.runtime {
        Some(_) => {
            let mut spec = agent.spec.clone();
            spec.scaling.external = true;
            std::borrow::Cow::Owned(spec)
        }
        None => std::borrow::Cow::Borrowed(&agent.spec),
    };
    ctx.scaler.track(
        key,
        Tracked {
            object: agent.object_ref(&()),
            spec: &spec,
            failed,
            replicas: status.replicas,
            available: status.available_replicas.unwrap_or(0),
            status: previous,
            generation: agent.metadata.generation,
        },
    );
}

/// Writes the status fields the reconcile owns (server-side apply, its field manager).
pub(super) async fn write_status(
    ctx: &Context,
    ns: &str,
    name: &str,
    own: &AgentStatus,
) -> Result<(), Error> {
    let api: Api<Agent> = Api::namespaced(ctx.client.clone(), ns);
    let patch = serde_json::json!({
        "apiVersion": "agentfleet.dev/v1alpha1",
        "kind": "Agent",
        "status": own,
    });
    api.patch_status(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(patch),
    )
    .await
    .map_err(Error::Kube)?;
    Ok(())
}

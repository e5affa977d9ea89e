//! The Agent controller: Agent → rendered ConfigMap + worker Deployment (none for an agent
//! that runs in a Pool, see [`super::pooled`]), and the Agent's status (phase, conditions).
//!
//! Stages: validate ([`super::validate`]) → check the Secrets of the model and the tools
//! ([`super::conditions`]) → build (pure, [`super::build`]) → apply (server-side, one field
//! manager: the Secrets beside the worker, the ConfigMap, the Deployment) → status (written
//! only when it changed) → events for what changed. A deleted Agent's data-plane state and
//! archived checkpoints are removed by [`cleanup`], under a finalizer.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{finalizer, Event as FinalizerEvent};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tracing::{info, instrument, warn};

use super::build::{self, FIELD_MANAGER};
use super::conditions::{check_model, check_tools, failed, ready_condition, worker_condition};
use super::context::{Context, Error};
use super::dataplane::Tracked;
use super::pooled;
use super::status::{self, Cond};
use crate::crd::{Agent, AgentStatus, Space};
use crate::membership;
use crate::store::AgentKey;

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
    "SpaceNotFound",
    "WorkerRejected",
    "PoolNotFound",
];

/// The finalizer that keeps a deleted Agent until its data-plane state is removed.
pub const FINALIZER: &str = "agentfleet.dev/data-plane";

/// Condition while a deleted Agent's data-plane state cannot be removed.
pub const DATA_PLANE_CLEANUP: &str = "DataPlaneCleanup";

/// How long one attempt to remove an agent's data-plane state may take.
const CLEANUP_ATTEMPT: Duration = Duration::from_secs(10);

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

/// A deleted Agent: removes its data-plane state (inbox, consciousness, checkpoints, memories,
/// goals, plans, lease, registration) and its archived checkpoints, or with
/// `consciousness.retainOnDelete` only its registration. A data plane or an archive that
/// cannot be reached holds the deletion for at most the cleanup timeout (a `DataPlaneCleanup`
/// condition says why); after it the Agent goes and a Warning Event names what is left
/// behind.
#[instrument(skip_all, fields(agent = %agent.name_any(), namespace = agent.namespace().unwrap_or_default()))]
pub async fn cleanup(agent: Arc<Agent>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = agent
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let name = agent.name_any();
    let key = AgentKey::new(ns.clone(), name.clone());
    let retain = agent.spec.consciousness.retain_on_delete;
    let archive = ctx
        .archive
        .as_ref()
        .and_then(|a| a.for_agent(&agent.spec.consciousness.archive));
    let data_plane = async {
        let attempt = async {
            if retain {
                ctx.store.unregister_agent(&key).await.map(|_| ())
            } else {
                ctx.store.purge_agent(&key).await
            }
        };
        match tokio::time::timeout(CLEANUP_ATTEMPT, attempt).await {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some(format!(
                "the data plane did not answer within {}s",
                CLEANUP_ATTEMPT.as_secs()
            )),
        }
    };
    let archived = async {
        let archive = archive.as_ref().filter(|_| !retain)?;
        Some(
            match tokio::time::timeout(CLEANUP_ATTEMPT, archive.purge(&key)).await {
                Ok(Ok(n)) => Ok(n),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!(
                    "object storage did not answer within {}s",
                    CLEANUP_ATTEMPT.as_secs()
                )),
            },
        )
    };
    let (data_plane, archived) = tokio::join!(data_plane, archived);
    let archive_url = archive.as_ref().map(|a| a.agent_url(&key));
    let archive_failure = match (&archived, &archive_url) {
        (Some(Err(e)), Some(url)) => Some((url.as_str(), e.as_str())),
        _ => None,
    };
    if data_plane.is_none() && archive_failure.is_none() {
        ctx.scaler.forget(&key);
        let (reason, note) = if retain {
            let kept = archive_url
                .map(|url| format!(", and its archived checkpoints at {url},"))
                .unwrap_or_default();
            (
                "DataPlaneRetained",
                format!("consciousness, inbox and checkpoints of {key}{kept} kept (consciousness.retainOnDelete)"),
            )
        } else {
            let removed = match (&archived, &archive_url) {
                (Some(Ok(n)), Some(url)) => {
                    format!(", and its {n} archived checkpoint(s) at {url},")
                }
                _ => String::new(),
            };
            (
                "DataPlaneRemoved",
                format!(
                    "inbox, consciousness, checkpoints, memories, goals and plans of {key}{removed} removed"
                ),
            )
        };
        info!(%key, reason, "agent deleted");
        ctx.publish(&*agent, EventType::Normal, reason, "Delete", note)
            .await;
        return Ok(Action::await_change());
    }
    // What could not be removed, and what that leaves behind.
    let mut failures = Vec::new();
    let mut left = Vec::new();
    if let Some(failure) = &data_plane {
        failures.push(format!("cannot remove the data-plane state: {failure}"));
        left.push(ctx.store.agent_data(&key));
    }
    if let Some((url, failure)) = archive_failure {
        failures.push(format!(
            "cannot remove the archived checkpoints at {url}: {failure}"
        ));
        left.push(format!("the archived checkpoints at {url}"));
    }
    let failure = failures.join("; ");
    let since = agent
        .metadata
        .deletion_timestamp
        .as_ref()
        .map_or_else(Timestamp::now, |t| t.0);
    let waited = Timestamp::now().duration_since(since);
    let limit = ctx.scaler.tuning.cleanup_timeout;
    if waited.as_secs() >= i64::try_from(limit.as_secs()).unwrap_or(i64::MAX) {
        ctx.scaler.forget(&key);
        warn!(%key, error = %failure, "giving up removing the agent's state");
        ctx.publish(
            &*agent,
            EventType::Warning,
            "DataPlaneCleanupAbandoned",
            "Delete",
            format!(
                "gave up removing the agent's state after {}s ({failure}); {} are left behind",
                limit.as_secs(),
                left.join(" and ")
            ),
        )
        .await;
        return Ok(Action::await_change());
    }
    let message = format!(
        "{failure}; retrying for up to {}s after deletion, then the Agent is deleted and the state left behind",
        limit.as_secs()
    );
    let reason = if data_plane.is_some() {
        "DataPlaneUnreachable"
    } else {
        "ArchiveUnreachable"
    };
    let previous = agent.status.clone().unwrap_or_default();
    let mut own = status::reconcile_part(&previous);
    let cond = Cond::fail(DATA_PLANE_CLEANUP, reason, message.clone());
    own.conditions = status::merge(
        &previous.conditions,
        std::slice::from_ref(&cond),
        agent.metadata.generation,
        Timestamp::now(),
    );
    if own != status::reconcile_part(&previous) {
        ctx.publish(
            &*agent,
            EventType::Warning,
            reason,
            "Delete",
            message.clone(),
        )
        .await;
        write_status(&ctx, &ns, &name, &own).await?;
    }
    Err(Error::CleanupPending(message))
}

/// Reconciles one Agent.
#[instrument(skip_all, fields(agent = %agent.name_any(), namespace = agent.namespace().unwrap_or_default()))]
pub async fn reconcile(agent: Arc<Agent>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = agent
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let name = agent.name_any();
    let previous = agent.status.clone().unwrap_or_default();

    // Validate what the schema cannot express.
    let problems = validate(&name, &agent.spec);

    // The model's key Secret and the tools' Secrets: existence (and the model's key) only,
    // no value is ever read into a message.
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let model = check_model(&secrets, &agent.spec).await?;
    let tools = check_tools(&secrets, &agent.spec.tools).await?;

    // Spaces named by the agent (never judged from a cache that has not synced yet).
    ctx.caches_synced().await?;
    let spaces = ctx.spaces.state();
    let space_refs: Vec<&Space> = spaces.iter().map(Arc::as_ref).collect();
    let missing = membership::missing_spaces(&agent, &membership::existing(&space_refs));
    let spaces_cond = if missing.is_empty() {
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

    // Build and apply the children, unless the spec is invalid (then the running worker is
    // left as it was).
    let mut status = AgentStatus {
        observed_generation: agent.metadata.generation,
        ..previous.clone()
    };
    let key = AgentKey::new(ns.clone(), name.clone());
    let pool = agent.spec.runtime.as_ref().map(|r| r.pool.as_str());
    let worker = if let (true, Some(pool)) = (problems.is_empty(), pool) {
        // A pool runs it: no worker of its own (one left from before goes).
        let placed = pooled::place(&ctx.client, &ns, &name, pool).await?;
        status.config_hash = None;
        // As one worker of its own would show: asked for, and available.
        status.replicas = Some(placed.asked.min(1));
        status.available_replicas = Some(placed.ready.min(1));
        placed.condition
    } else if problems.is_empty() {
        let owner = agent
            .controller_owner_ref(&())
            .ok_or(Error::MissingField("metadata.uid"))?;
        let manifest = build::render_manifest(&agent)?;
        let hash = build::config_hash(&manifest, &ctx.worker, &agent.spec.tools.secrets());
        let cm = build::configmap(&agent, &owner, &manifest);
        // The Secrets beside the worker first (the managed Redis URL, the archive), then the
        // ConfigMap.
        let mut applied = Ok(());
        for secret in build::agent_worker_secrets(&agent, &owner, &ctx.worker) {
            if let Err(rejected) = apply(&secrets, &secret).await? {
                // Never a value: only what the API server said about the Secret.
                applied = Err(format!("Secret {} rejected: {rejected}", secret.name_any()));
                break;
            }
        }
        let applied = match applied {
            Ok(()) => apply(&Api::<ConfigMap>::namespaced(ctx.client.clone(), &ns), &cm)
                .await?
                .map_err(|rejected| format!("ConfigMap rejected: {rejected}")),
            Err(rejected) => Err(rejected),
        };
        match applied {
            Err(rejected) => Cond::fail(WORKER_AVAILABLE, "WorkerRejected", rejected),
            Ok(_) => {
                match apply_worker(&ctx, &key, &agent, &owner, &hash, previous.replicas).await? {
                    Err(rejected) => Cond::fail(
                        WORKER_AVAILABLE,
                        "WorkerRejected",
                        format!("Deployment rejected: {rejected}"),
                    ),
                    Ok(applied) => {
                        // The cached status may lag our own last write; remember what we applied.
                        let applied_key = format!("{ns}/{name}");
                        let known = ctx
                            .applied_hash(&applied_key)
                            .or(previous.config_hash.clone());
                        if known.as_deref() != Some(hash.as_str()) {
                            info!(config_hash = %hash, "worker configuration applied");
                            ctx.publish(
                                &*agent,
                                EventType::Normal,
                                "WorkerConfigured",
                                "ApplyWorker",
                                format!(
                                    "configuration {hash} applied to Deployment {}",
                                    build::deployment_name(&name)
                                ),
                            )
                            .await;
                        }
                        ctx.record_applied_hash(applied_key, &hash);
                        status.config_hash = Some(hash);
                        status.replicas = applied.spec.as_ref().and_then(|s| s.replicas);
                        status.available_replicas = Some(
                            applied
                                .status
                                .as_ref()
                                .and_then(|s| s.available_replicas)
                                .unwrap_or(0),
                        );
                        worker_condition(&agent.spec, &applied)
                    }
                }
            }
        }
    } else {
        Cond::unknown(
            WORKER_AVAILABLE,
            "InvalidSpec",
            "the worker is left as it was until the spec is fixed",
        )
    };

    let ready = ready_condition(&problems, &[&model, &tools, &spaces_cond], &worker);
    let is_failed = failed(&problems, &[&model, &tools], &worker);
    let secrets_missing = model.status != Some(true) || tools.status != Some(true);
    let next = [ready, worker, model, tools, spaces_cond];
    status.conditions = status::merge(
        &previous.conditions,
        &next,
        agent.metadata.generation,
        Timestamp::now(),
    );

    // Events for conditions that changed.
    for c in status.conditions.iter().filter(|c| c.type_ != READY) {
        let warning = c.status != "True" && WARNING_REASONS.contains(&c.reason.as_str());
        let before = status::find(&previous.conditions, &c.type_);
        if let Some(kind) = status::notice(before, c, warning) {
            ctx.publish(&*agent, kind, &c.reason, "Reconcile", c.message.clone())
                .await;
        }
    }

    // Only the fields the reconcile owns; phase, depth, cycles and the checkpoint come from
    // the data plane (see `status`).
    let own = status::reconcile_part(&status);
    if status::reconcile_part(&previous) != own {
        write_status(&ctx, &ns, &name, &own).await?;
    }
    // A pooled agent's replicas are its pool's: the loop never scales them.
    let tracked_spec = match pool {
        Some(_) => {
            let mut spec = agent.spec.clone();
            spec.scaling.external = true;
            std::borrow::Cow::Owned(spec)
        }
        None => std::borrow::Cow::Borrowed(&agent.spec),
    };
    ctx.scaler.track(
        &key,
        Tracked {
            object: agent.object_ref(&()),
            spec: &tracked_spec,
            failed: is_failed,
            replicas: status.replicas,
            available: status.available_replicas.unwrap_or(0),
            status: &previous,
            generation: agent.metadata.generation,
        },
    );

    // Known to the data plane, so producers (the gateway's webhook) can address it.
    let registered = ctx.store.register_agent(&key).await;
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

/// Applies the worker Deployment. The replicas are read and applied under the agent's
/// scaling lock, so an apply never undoes a scale change made meanwhile.
async fn apply_worker(
    ctx: &Context,
    key: &AgentKey,
    agent: &Agent,
    owner: &OwnerReference,
    hash: &str,
    last_known: Option<i32>,
) -> Result<Result<Deployment, String>, Error> {
    let _scaling = ctx.scaler.lock(key).await;
    let replicas = ctx.scaler.replicas_for(key, &agent.spec, last_known);
    let deploy = build::deployment(agent, owner, &ctx.worker, hash, replicas);
    apply(
        &Api::<Deployment>::namespaced(ctx.client.clone(), &key.namespace),
        &deploy,
    )
    .await
}

/// Server-side applies `obj`. `Ok(Err(message))` when the API server refuses it as invalid
/// (a spec problem to report, not to retry); `Err` for everything worth retrying.
pub(super) async fn apply<K>(api: &Api<K>, obj: &K) -> Result<Result<K, String>, Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let name = obj
        .meta()
        .name
        .clone()
        .ok_or(Error::MissingField("metadata.name"))?;
    match api
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(obj),
        )
        .await
    {
        Ok(applied) => Ok(Ok(applied)),
        Err(kube::Error::Api(e)) if e.code == 422 || e.code == 400 => Ok(Err(e.message)),
        Err(e) => Err(Error::Kube(e)),
    }
}

/// Writes the status fields the reconcile owns (server-side apply, its field manager).
async fn write_status(ctx: &Context, ns: &str, name: &str, own: &AgentStatus) -> Result<(), Error> {
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

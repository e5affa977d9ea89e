//! The Agent controller: Agent → rendered ConfigMap + worker Deployment, and the Agent's
//! status (phase, conditions).
//!
//! Stages: validate → check the model's Secret → build (pure, [`super::build`]) → apply
//! (server-side, one field manager) → status (written only when it changed) → events for
//! what changed.

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
use super::context::{Context, Error};
use super::dataplane::Tracked;
use super::status::{self, status_str, Cond};
use crate::crd::{Agent, AgentSpec, AgentStatus, ModelProvider, Space};
use crate::membership;
use crate::store::AgentKey;

/// Condition: the agent can run and is running as asked.
pub const READY: &str = "Ready";
/// Condition: the worker Deployment has its workers available.
pub const WORKER_AVAILABLE: &str = "WorkerAvailable";
/// Condition: the model provider and its API key are usable.
pub const MODEL_CONFIGURED: &str = "ModelConfigured";
/// Condition: every space the agent names exists.
pub const SPACES_RESOLVED: &str = "SpacesResolved";
// `ModelAvailable`, the agent's fifth condition, is the data-plane loop's to write:
// `status::MODEL_AVAILABLE`.

/// The longest Agent name: children are named `<agent>-worker` and labelled with the name,
/// and label values hold at most 63 characters.
pub const MAX_NAME_LEN: usize = 52;

/// Reasons that are problems an SRE should see as Warning events.
const WARNING_REASONS: &[&str] = &[
    "InvalidSpec",
    "ApiKeyRequired",
    "SecretNotFound",
    "SecretKeyNotFound",
    "SecretUnreadable",
    "SpaceNotFound",
    "WorkerRejected",
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
/// goals, plans, lease, registration), or with `consciousness.retainOnDelete` only its
/// registration. An unreachable data plane holds the deletion for at most the cleanup timeout
/// (a `DataPlaneCleanup` condition says why); after it the Agent goes and a Warning Event
/// names the state left behind.
#[instrument(skip_all, fields(agent = %agent.name_any(), namespace = agent.namespace().unwrap_or_default()))]
pub async fn cleanup(agent: Arc<Agent>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = agent
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let name = agent.name_any();
    let key = AgentKey::new(ns.clone(), name.clone());
    let retain = agent.spec.consciousness.retain_on_delete;
    let attempt = async {
        if retain {
            ctx.store.unregister_agent(&key).await.map(|_| ())
        } else {
            ctx.store.purge_agent(&key).await
        }
    };
    let failure = match tokio::time::timeout(CLEANUP_ATTEMPT, attempt).await {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(_) => Some(format!(
            "the data plane did not answer within {}s",
            CLEANUP_ATTEMPT.as_secs()
        )),
    };
    let Some(failure) = failure else {
        ctx.scaler.forget(&key);
        let (reason, note) = if retain {
            (
                "DataPlaneRetained",
                format!("consciousness, inbox and checkpoints of {key} kept (consciousness.retainOnDelete)"),
            )
        } else {
            (
                "DataPlaneRemoved",
                format!(
                    "inbox, consciousness, checkpoints, memories, goals and plans of {key} removed"
                ),
            )
        };
        info!(%key, reason, "agent deleted");
        ctx.publish(&*agent, EventType::Normal, reason, "Delete", note)
            .await;
        return Ok(Action::await_change());
    };
    let since = agent
        .metadata
        .deletion_timestamp
        .as_ref()
        .map_or_else(Timestamp::now, |t| t.0);
    let waited = Timestamp::now().duration_since(since);
    let limit = ctx.scaler.tuning.cleanup_timeout;
    if waited.as_secs() >= i64::try_from(limit.as_secs()).unwrap_or(i64::MAX) {
        ctx.scaler.forget(&key);
        warn!(%key, error = %failure, "giving up removing the agent's data-plane state");
        ctx.publish(
            &*agent,
            EventType::Warning,
            "DataPlaneCleanupAbandoned",
            "Delete",
            format!(
                "gave up removing the data-plane state after {}s ({failure}); {} are left behind",
                limit.as_secs(),
                ctx.store.agent_data(&key)
            ),
        )
        .await;
        return Ok(Action::await_change());
    }
    let message = format!(
        "cannot remove the data-plane state: {failure}; retrying for up to {}s after deletion, then the Agent is deleted and the state left behind",
        limit.as_secs()
    );
    let previous = agent.status.clone().unwrap_or_default();
    let mut own = status::reconcile_part(&previous);
    let cond = Cond::fail(DATA_PLANE_CLEANUP, "DataPlaneUnreachable", message.clone());
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
            "DataPlaneUnreachable",
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

    // The model's key Secret: existence and key only, the value is never read into a message.
    let model = check_model(&Api::namespaced(ctx.client.clone(), &ns), &agent.spec).await?;

    // Spaces named by the agent (never judged from a cache that has not synced yet).
    ctx.caches_synced().await?;
    let spaces = ctx.spaces.state();
    let space_refs: Vec<&Space> = spaces.iter().map(Arc::as_ref).collect();
    let missing = membership::missing_spaces(&agent, &space_refs);
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
    let worker = if problems.is_empty() {
        let owner = agent
            .controller_owner_ref(&())
            .ok_or(Error::MissingField("metadata.uid"))?;
        let manifest = build::render_manifest(&agent)?;
        let hash = build::config_hash(&manifest, &ctx.worker, &agent.spec.tools.secrets());
        let cm = build::configmap(&agent, &owner, &manifest);
        match apply(&Api::<ConfigMap>::namespaced(ctx.client.clone(), &ns), &cm).await? {
            Err(rejected) => Cond::fail(
                WORKER_AVAILABLE,
                "WorkerRejected",
                format!("ConfigMap rejected: {rejected}"),
            ),
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

    let ready = ready_condition(&problems, &model, &spaces_cond, &worker);
    let is_failed = failed(&problems, &model, &worker);
    let next = [ready, worker, model.clone(), spaces_cond];
    status.conditions = status::merge(
        &previous.conditions,
        &next,
        agent.metadata.generation,
        Timestamp::now(),
    );

    // Events for conditions that changed.
    for c in &next {
        let before = status::find(&previous.conditions, c.type_);
        let changed =
            before.is_none_or(|b| b.reason != c.reason || b.status != status_str(c.status));
        if changed && c.type_ != READY {
            let warning = c.status != Some(true) && WARNING_REASONS.contains(&c.reason);
            if warning || before.is_some() {
                let kind = if warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                };
                ctx.publish(&*agent, kind, c.reason, "Reconcile", c.message.clone())
                    .await;
            }
        }
    }

    // Only the fields the reconcile owns; phase, depth, cycles and the checkpoint come from
    // the data plane (see `status`).
    let own = status::reconcile_part(&status);
    if status::reconcile_part(&previous) != own {
        write_status(&ctx, &ns, &name, &own).await?;
    }
    ctx.scaler.track(
        &key,
        Tracked {
            object: agent.object_ref(&()),
            spec: &agent.spec,
            failed: is_failed,
            replicas: status.replicas,
            available: status.available_replicas.unwrap_or(0),
            status: &previous,
        },
    );

    // Known to the data plane, so producers (the gateway's webhook) can address it.
    let registered = ctx.store.register_agent(&key).await;
    if let Err(e) = &registered {
        warn!(error = %crate::report::chain(e), "could not register the agent in the data plane; retrying in 30s");
    }

    // Secrets are not watched: look again soon while the key is missing.
    if model.status != Some(true) || registered.is_err() {
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
async fn apply<K>(api: &Api<K>, obj: &K) -> Result<Result<K, String>, Error>
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

/// Problems with a spec that the schema cannot refuse.
pub fn validate(name: &str, spec: &AgentSpec) -> Vec<String> {
    let mut problems = Vec::new();
    if spec.model.provider == ModelProvider::Anthropic {
        problems.push(format!(
            "model.provider: {}",
            crate::model::ANTHROPIC_UNAVAILABLE
        ));
    }
    if name.len() > MAX_NAME_LEN {
        problems.push(format!(
            "name is {} characters; at most {MAX_NAME_LEN} fit in the worker's labels",
            name.len()
        ));
    }
    for (i, phase) in spec.cycle.phases.iter().enumerate() {
        if phase.to_step.is_some_and(|to| to < phase.from_step) {
            problems.push(format!(
                "cycle.phases[{i}] ends (step {}) before it starts (step {})",
                phase.to_step.unwrap_or_default(),
                phase.from_step
            ));
        }
        for tool in phase.active_tools.iter().flatten() {
            if !spec.tools.builtin.iter().any(|t| t.name() == tool) {
                problems.push(format!("cycle.phases[{i}].activeTools names {tool:?}, which is not a tool of this agent"));
            }
        }
    }
    for (i, plan) in spec.plans.iter().enumerate() {
        if let Err(e) = crate::plans::schedule(plan) {
            problems.push(format!("plans[{i}]: {e}"));
        }
    }
    for env in &spec.worker.env {
        if env.name.starts_with("AGENTFLEET_") {
            problems.push(format!(
                "worker.env {} uses the reserved prefix AGENTFLEET_",
                env.name
            ));
        }
    }
    problems
}

/// `ModelConfigured`: whether the provider has what it needs.
async fn check_model(secrets: &Api<Secret>, spec: &AgentSpec) -> Result<Cond, Error> {
    let model = &spec.model;
    let Some(key_ref) = &model.api_key_secret_ref else {
        return Ok(if model.needs_api_key() {
            Cond::fail(
                MODEL_CONFIGURED,
                "ApiKeyRequired",
                format!(
                    "provider {} at its public endpoint needs model.apiKeySecretRef",
                    model.provider.as_str()
                ),
            )
        } else if let (ModelProvider::Openai, Some(url)) = (model.provider, &model.base_url) {
            Cond::ok(
                MODEL_CONFIGURED,
                "NoKeyNeeded",
                format!("{url} is called without an API key"),
            )
        } else {
            Cond::ok(
                MODEL_CONFIGURED,
                "NoKeyNeeded",
                "the scripted model needs no key",
            )
        });
    };
    match secrets.get_opt(&key_ref.name).await {
        Ok(None) => Ok(Cond::fail(
            MODEL_CONFIGURED,
            "SecretNotFound",
            format!("Secret {} not found", key_ref.name),
        )),
        Ok(Some(secret)) => {
            let has_key = secret
                .data
                .as_ref()
                .is_some_and(|d| d.contains_key(&key_ref.key))
                || secret
                    .string_data
                    .as_ref()
                    .is_some_and(|d| d.contains_key(&key_ref.key));
            Ok(if has_key {
                Cond::ok(
                    MODEL_CONFIGURED,
                    "SecretFound",
                    format!("API key from Secret {}, key {}", key_ref.name, key_ref.key),
                )
            } else {
                Cond::fail(
                    MODEL_CONFIGURED,
                    "SecretKeyNotFound",
                    format!("Secret {} has no key {}", key_ref.name, key_ref.key),
                )
            })
        }
        Err(kube::Error::Api(e)) if e.code == 403 => Ok(Cond::unknown(
            MODEL_CONFIGURED,
            "SecretUnreadable",
            format!(
                "the operator may not read Secret {}: {}",
                key_ref.name, e.reason
            ),
        )),
        Err(e) => Err(Error::Kube(e)),
    }
}

/// `WorkerAvailable` from the applied Deployment.
fn worker_condition(spec: &AgentSpec, d: &Deployment) -> Cond {
    let desired = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let status = d.status.clone().unwrap_or_default();
    let available = status.available_replicas.unwrap_or(0);
    let name = d.metadata.name.clone().unwrap_or_default();
    if desired == 0 {
        return if spec.paused {
            Cond::fail(
                WORKER_AVAILABLE,
                "Paused",
                "the agent is paused: no worker runs, events queue in its inbox",
            )
        } else {
            Cond::fail(
                WORKER_AVAILABLE,
                "ScaledToZero",
                "no worker runs; an event wakes the agent",
            )
        };
    }
    if available >= 1 {
        return Cond::ok(
            WORKER_AVAILABLE,
            "MinimumReplicasAvailable",
            format!("Deployment {name}: {available} worker(s) available"),
        );
    }
    let detail = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.status != "True" && (c.type_ == "Progressing" || c.type_ == "ReplicaFailure"))
        .and_then(|c| c.message)
        .map(|m| format!(": {m}"))
        .unwrap_or_default();
    Cond::fail(
        WORKER_AVAILABLE,
        "WorkerUnavailable",
        format!("Deployment {name}: 0 of {desired} worker(s) available{detail}"),
    )
}

/// `Ready`: the first reason the agent cannot run, or why it is fine.
fn ready_condition(problems: &[String], model: &Cond, spaces: &Cond, worker: &Cond) -> Cond {
    if !problems.is_empty() {
        return Cond::fail(READY, "InvalidSpec", problems.join("; "));
    }
    for c in [model, spaces] {
        if c.status != Some(true) {
            return Cond {
                type_: READY,
                status: Some(false),
                reason: c.reason,
                message: c.message.clone(),
            };
        }
    }
    match (worker.status, worker.reason) {
        (Some(true), _) => Cond::ok(READY, "AgentReady", "the worker is available"),
        (_, reason @ ("Paused" | "ScaledToZero")) => {
            Cond::ok(READY, reason, worker.message.clone())
        }
        (_, reason) => Cond::fail(READY, reason, worker.message.clone()),
    }
}

/// The spec or its model configuration cannot run (phase `Failed`).
fn failed(problems: &[String], model: &Cond, worker: &Cond) -> bool {
    !problems.is_empty() || model.status == Some(false) || worker.reason == "WorkerRejected"
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

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> AgentSpec {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn phases_must_name_the_agents_tools_and_run_forward() {
        let s = spec("{model: {provider: scripted, name: x}, tools: {builtin: [read_messages, send_message]}, cycle: {phases: [{fromStep: 0, toStep: 1, activeTools: [read_messages, fly]}, {fromStep: 3, toStep: 2}]}}");
        let p = validate("a", &s);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].contains("\"fly\""));
        assert!(p[1].contains("ends (step 2) before it starts (step 3)"));
    }

    #[test]
    fn long_names_and_reserved_env_are_problems() {
        let s = spec("{model: {provider: scripted, name: x}, worker: {env: [{name: AGENTFLEET_REDIS_URL, value: x}, {name: OK, value: y}]}}");
        let p = validate(&"a".repeat(53), &s);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].contains("53 characters"));
        assert!(p[1].contains("AGENTFLEET_REDIS_URL"));
        assert!(validate("fine", &spec("{model: {provider: scripted, name: x}}")).is_empty());
    }

    #[test]
    fn anthropic_is_not_available_in_this_build() {
        let p = validate("a", &spec("{model: {provider: anthropic, name: claude}}"));
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].starts_with("model.provider: the anthropic provider is not available"),
            "{p:?}"
        );
    }

    #[test]
    fn ready_names_the_first_problem() {
        let ok_model = Cond::ok(MODEL_CONFIGURED, "SecretFound", "");
        let ok_spaces = Cond::ok(SPACES_RESOLVED, "SpacesFound", "");
        let available = Cond::ok(WORKER_AVAILABLE, "MinimumReplicasAvailable", "");
        let r = ready_condition(&[], &ok_model, &ok_spaces, &available);
        assert_eq!((r.status, r.reason), (Some(true), "AgentReady"));
        let missing = Cond::fail(MODEL_CONFIGURED, "SecretNotFound", "Secret k not found");
        let r = ready_condition(&[], &missing, &ok_spaces, &available);
        assert_eq!(
            (r.status, r.reason, r.message.as_str()),
            (Some(false), "SecretNotFound", "Secret k not found")
        );
        let r = ready_condition(&["bad".into()], &missing, &ok_spaces, &available);
        assert_eq!(r.reason, "InvalidSpec");
        let paused = Cond::fail(WORKER_AVAILABLE, "Paused", "paused");
        assert_eq!(
            ready_condition(&[], &ok_model, &ok_spaces, &paused).status,
            Some(true)
        );
        let down = Cond::fail(WORKER_AVAILABLE, "WorkerUnavailable", "0 of 1");
        assert_eq!(
            ready_condition(&[], &ok_model, &ok_spaces, &down).reason,
            "WorkerUnavailable"
        );
    }

    #[test]
    fn failed_follows_conditions() {
        let ok_model = Cond::ok(MODEL_CONFIGURED, "SecretFound", "");
        let bad_model = Cond::fail(MODEL_CONFIGURED, "SecretNotFound", "");
        let unknown_model = Cond::unknown(MODEL_CONFIGURED, "SecretUnreadable", "");
        let down = Cond::fail(WORKER_AVAILABLE, "WorkerUnavailable", "");
        let rejected = Cond::fail(WORKER_AVAILABLE, "WorkerRejected", "");
        assert!(!failed(&[], &ok_model, &down));
        assert!(!failed(&[], &unknown_model, &down));
        assert!(failed(&[], &bad_model, &down));
        assert!(failed(&[], &ok_model, &rejected));
        assert!(failed(&["x".into()], &ok_model, &down));
    }

    #[test]
    fn worker_condition_reads_the_deployment() {
        let s = spec("{model: {provider: scripted, name: x}}");
        let d: Deployment = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "x-worker"},
            "spec": {"replicas": 1, "selector": {}, "template": {}},
            "status": {"availableReplicas": 0, "conditions": [
                {"type": "Progressing", "status": "False", "message": "ReplicaSet x has timed out progressing."}
            ]}
        }))
        .unwrap();
        let c = worker_condition(&s, &d);
        assert_eq!(c.reason, "WorkerUnavailable");
        assert!(
            c.message.contains("0 of 1") && c.message.contains("timed out"),
            "{}",
            c.message
        );
        let up: Deployment = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "x-worker"},
            "spec": {"replicas": 1, "selector": {}, "template": {}},
            "status": {"availableReplicas": 1}
        }))
        .unwrap();
        assert_eq!(worker_condition(&s, &up).status, Some(true));
    }
}

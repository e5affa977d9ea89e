//! The Agent controller against a mocked API server: children, conditions, Events and status
//! of a live Agent; the finalizer and the data-plane cleanup of a deleted one.

use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};
use kube::runtime::controller::Action;
use serde_json::{json, Value};

use super::{
    agent_yaml, answering, applied_then, condition, context_on, expect, harness, lobby, not_found,
    tracked_phase, Expect, Harness,
};
use crate::crd::{Agent, AgentPhase};
use crate::operator::agent;
use crate::store::prelude::*;
#[tokio::test]
async fn new_agent_gets_configmap_deployment_event_and_status() {
    let mut h = harness(vec![], vec![lobby(true)]);
    let (result, bodies) = h
        .run_agent(
            agent_yaml(""),
            vec![
                expect(Method::PATCH, "/api/v1/namespaces/default/configmaps/echo-agent?&force=true&fieldManager=agentfleet-operator"),
                expect(Method::PATCH, "/apis/apps/v1/namespaces/default/deployments/echo-worker?&force=true&fieldManager=agentfleet-operator"),
                expect(Method::POST, "/apis/events.k8s.io/v1/namespaces/default/events"),
                expect(Method::PATCH, "/apis/agentfleet.dev/v1alpha1/namespaces/default/agents/echo/status?&force=true&fieldManager=agentfleet-operator"),
            ],
        )
        .await;
    assert_eq!(result.unwrap(), Action::requeue(Duration::from_secs(300)));

    let cm = &bodies[0];
    assert_eq!(cm["kind"], "ConfigMap");
    assert!(cm["data"]["agent.yaml"]
        .as_str()
        .unwrap()
        .contains("name: echo"));
    let deploy = &bodies[1];
    assert_eq!(
        deploy["spec"]["replicas"], 0,
        "scale to zero by default: the first event wakes it"
    );
    assert_eq!(deploy["metadata"]["ownerReferences"][0]["kind"], "Agent");
    assert_eq!(deploy["metadata"]["ownerReferences"][0]["controller"], true);
    let event = &bodies[2];
    assert_eq!(event["reason"], "WorkerConfigured");
    assert_eq!(event["type"], "Normal");

    let status = &bodies[3]["status"];
    assert!(status.get("phase").is_none(), "{status}");
    assert_eq!(tracked_phase(&h), Some(AgentPhase::ScaledToZero));
    assert_eq!(status["observedGeneration"], 2);
    assert_eq!(condition(status, "Ready")["status"], "True");
    assert_eq!(condition(status, "Ready")["reason"], "ScaledToZero");
    assert_eq!(
        condition(status, "ModelConfigured")["reason"],
        "NoKeyNeeded"
    );
    assert_eq!(condition(status, "SpacesResolved")["status"], "True");
    assert_eq!(
        condition(status, "WorkerAvailable")["reason"],
        "ScaledToZero"
    );
    assert_eq!(status["configHash"].as_str().unwrap().len(), 16);
    assert!(
        h.store
            .agent_registered(&crate::identity::AgentKey::new("default", "echo"))
            .await
            .unwrap(),
        "registered in the data plane for producers such as the gateway's webhook"
    );
}

#[tokio::test]
async fn unchanged_agent_writes_no_status_and_no_event() {
    // First pass: learn the status the operator writes.
    let mut h = harness(vec![], vec![lobby(true)]);
    let (_, bodies) = h.run_agent(agent_yaml(""), applied_then(1)).await;
    let mut agent = agent_yaml("");
    agent.status = Some(serde_json::from_value(bodies[3]["status"].clone()).unwrap());

    // Second pass on the same state: children re-applied (idempotent), nothing else.
    let mut h = harness(vec![], vec![lobby(true)]);
    let (result, _) = h
        .run_agent(
            agent,
            vec![
                expect(Method::PATCH, "/configmaps/echo-agent"),
                expect(Method::PATCH, "/deployments/echo-worker"),
            ],
        )
        .await;
    result.unwrap();
}

#[tokio::test]
async fn missing_key_secret_is_a_false_condition_and_a_warning() {
    let mut h = harness(vec![], vec![lobby(true)]);
    let agent = agent_yaml("");
    let mut agent: Agent = serde_yaml::from_str(&serde_yaml::to_string(&agent).unwrap()).unwrap();
    agent.spec.model = serde_yaml::from_str(
        "{provider: openai, name: gpt-4o-mini, apiKeySecretRef: {name: openai}}",
    )
    .unwrap();
    let (result, bodies) = h
        .run_agent(
            agent,
            vec![
                answering(
                    expect(Method::GET, "/api/v1/namespaces/default/secrets/openai"),
                    StatusCode::NOT_FOUND,
                    not_found("secrets", "openai"),
                ),
                expect(Method::PATCH, "/configmaps/echo-agent"),
                expect(Method::PATCH, "/deployments/echo-worker"),
                expect(Method::POST, "/events"),
                expect(Method::POST, "/events"),
                expect(Method::PATCH, "/agents/echo/status"),
            ],
        )
        .await;
    assert_eq!(
        result.unwrap(),
        Action::requeue(Duration::from_secs(30)),
        "secrets are not watched: look again soon"
    );
    let volumes = &bodies[2]["spec"]["template"]["spec"]["volumes"];
    assert!(
        volumes.to_string().contains("\"secretName\":\"openai\""),
        "the key's Secret is mounted: {volumes}"
    );
    let warning = &bodies[4];
    assert_eq!(
        (warning["type"].as_str(), warning["reason"].as_str()),
        (Some("Warning"), Some("SecretNotFound"))
    );
    assert_eq!(warning["note"], "Secret openai not found");
    let status = &bodies[5]["status"];
    assert_eq!(tracked_phase(&h), Some(AgentPhase::Failed));
    assert_eq!(condition(status, "ModelConfigured")["status"], "False");
    assert_eq!(
        condition(status, "ModelConfigured")["reason"],
        "SecretNotFound"
    );
    assert_eq!(condition(status, "Ready")["reason"], "SecretNotFound");
}

#[tokio::test]
async fn secret_without_the_key_is_reported_without_its_values() {
    let mut h = harness(vec![], vec![lobby(true)]);
    let mut agent = agent_yaml("");
    agent.spec.model = serde_yaml::from_str(
        "{provider: openai, name: gpt-4o-mini, apiKeySecretRef: {name: llm, key: api-key}}",
    )
    .unwrap();
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "llm", "namespace": "default"},
                        "data": {"openai": "c2stc2VjcmV0LXZhbHVl"}});
    let (_, bodies) = h
        .run_agent(
            agent,
            vec![
                answering(expect(Method::GET, "/secrets/llm"), StatusCode::OK, secret),
                expect(Method::PATCH, "/configmaps/echo-agent"),
                expect(Method::PATCH, "/deployments/echo-worker"),
                expect(Method::POST, "/events"),
                expect(Method::POST, "/events"),
                expect(Method::PATCH, "/agents/echo/status"),
            ],
        )
        .await;
    let all = serde_json::to_string(&bodies).unwrap();
    assert!(
        !all.contains("c2stc2VjcmV0LXZhbHVl") && !all.contains("sk-secret-value"),
        "a secret value leaked"
    );
    assert_eq!(
        condition(&bodies[5]["status"], "ModelConfigured")["reason"],
        "SecretKeyNotFound"
    );
    assert_eq!(bodies[4]["note"], "Secret llm has no key api-key");
}

#[tokio::test]
async fn a_public_endpoint_without_a_key_is_refused_before_any_call() {
    let mut h = harness(vec![], vec![lobby(true)]);
    let mut agent = agent_yaml("");
    agent.spec.model = serde_yaml::from_str("{provider: openai, name: gpt-4o-mini}").unwrap();
    let (_, bodies) = h.run_agent(agent, applied_then(2)).await;
    assert_eq!(bodies[3]["reason"], "ApiKeyRequired");
    assert_eq!(
        condition(&bodies[4]["status"], "Ready")["reason"],
        "ApiKeyRequired"
    );
}

#[tokio::test]
async fn a_spec_the_schema_cannot_refuse_is_an_invalid_spec() {
    let mut h = harness(vec![], vec![lobby(true)]);
    let mut agent = agent_yaml("");
    agent.spec.model = serde_yaml::from_str(
        "{provider: anthropic, name: claude, apiKeySecretRef: {name: llm, key: api-key}}",
    )
    .unwrap();
    agent.spec.consciousness.restore = Some(agentfleet_restore());
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "llm", "namespace": "default"},
                        "data": {"api-key": "c2stc2VjcmV0LXZhbHVl"}});
    let (result, bodies) = h
        .run_agent(
            agent,
            vec![
                answering(expect(Method::GET, "/secrets/llm"), StatusCode::OK, secret),
                expect(Method::POST, "/events"),
                expect(Method::PATCH, "/agents/echo/status"),
            ],
        )
        .await;
    result.unwrap();
    assert_eq!(bodies[1]["reason"], "InvalidSpec");
    let ready = condition(&bodies[2]["status"], "Ready");
    assert_eq!(ready["reason"], "InvalidSpec");
    assert!(ready["message"]
        .as_str()
        .unwrap()
        .contains("consciousness.restore: give exactly one of cycle and storageRef"));
}

/// A restore that names two checkpoints (the schema takes it; the rules do not).
fn agentfleet_restore() -> crate::crd::RestoreSpec {
    crate::crd::RestoreSpec {
        cycle: Some(3),
        storage_ref: Some("s3://b/p/default/echo/3".into()),
    }
}

#[tokio::test]
async fn invalid_spec_leaves_the_worker_alone_and_says_why() {
    let mut h = harness(vec![], vec![lobby(true)]);
    let agent = agent_yaml("  worker: {env: [{name: AGENTFLEET_MODEL_API_KEY, value: stolen}]}");
    let (result, bodies) = h
        .run_agent(
            agent,
            vec![
                expect(Method::POST, "/events"),
                expect(Method::PATCH, "/agents/echo/status"),
            ],
        )
        .await;
    result.unwrap();
    assert_eq!(bodies[0]["type"], "Warning");
    assert_eq!(bodies[0]["reason"], "InvalidSpec");
    let status = &bodies[1]["status"];
    assert!(
        status.get("phase").is_none(),
        "the phase is the data-plane loop's to write"
    );
    assert_eq!(tracked_phase(&h), Some(AgentPhase::Failed));
    let ready = condition(status, "Ready");
    assert_eq!(ready["reason"], "InvalidSpec");
    assert!(ready["message"]
        .as_str()
        .unwrap()
        .contains("reserved prefix AGENTFLEET_"));
}

#[tokio::test]
async fn deployment_rejected_by_the_api_server_is_a_condition_not_a_retry_loop() {
    let mut h = harness(vec![], vec![lobby(true)]);
    let rejected = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Invalid", "code": 422,
        "message": "Deployment.apps \"echo-worker\" is invalid: spec.template.spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit"});
    let (result, bodies) = h
        .run_agent(
            agent_yaml(""),
            vec![
                expect(Method::PATCH, "/configmaps/echo-agent"),
                answering(
                    expect(Method::PATCH, "/deployments/echo-worker"),
                    StatusCode::UNPROCESSABLE_ENTITY,
                    rejected,
                ),
                expect(Method::POST, "/events"),
                expect(Method::PATCH, "/agents/echo/status"),
            ],
        )
        .await;
    assert_eq!(result.unwrap(), Action::requeue(Duration::from_secs(300)));
    assert_eq!(bodies[2]["reason"], "WorkerRejected");
    let status = &bodies[3]["status"];
    assert_eq!(tracked_phase(&h), Some(AgentPhase::Failed));
    assert!(condition(status, "WorkerAvailable")["message"]
        .as_str()
        .unwrap()
        .contains("must be less than or equal to cpu limit"));
}

#[tokio::test]
async fn missing_space_is_reported() {
    let mut h = harness(vec![], vec![]);
    let (_, bodies) = h.run_agent(agent_yaml(""), applied_then(2)).await;
    assert_eq!(bodies[3]["reason"], "SpaceNotFound");
    assert_eq!(bodies[3]["note"], "no Space lobby in namespace default");
    assert_eq!(
        condition(&bodies[4]["status"], "Ready")["reason"],
        "SpaceNotFound"
    );
}

#[tokio::test]
async fn api_server_outage_is_an_error_for_backoff() {
    let mut h = harness(vec![], vec![lobby(true)]);
    let outage = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "InternalError", "code": 500, "message": "etcdserver: request timed out"});
    let (result, _) = h
        .run_agent(
            agent_yaml(""),
            vec![answering(
                expect(Method::PATCH, "/configmaps/echo-agent"),
                StatusCode::INTERNAL_SERVER_ERROR,
                outage,
            )],
        )
        .await;
    let err = result.unwrap_err();
    assert_eq!(err.category(), "kube_api");
    assert_eq!(h.ctx.backoff("x".into()), Duration::from_secs(1));
    assert_eq!(h.ctx.backoff("x".into()), Duration::from_secs(2));
    assert_eq!(h.ctx.backoff("x".into()), Duration::from_secs(4));
}

/// Whether a JSON patch removes the (only) finalizer.
pub(super) fn removes_finalizer(patch: &Value) -> bool {
    patch.as_array().is_some_and(|ops| {
        ops.iter()
            .any(|op| op["op"] == "remove" && op["path"] == "/metadata/finalizers/0")
    })
}

/// The echo agent, deleted `ago` seconds ago, still held by the finalizer.
pub(super) fn deleted_agent(extra_spec: &str, ago: i64) -> Agent {
    let mut a = agent_yaml(extra_spec);
    a.metadata.finalizers = Some(vec![agent::FINALIZER.into()]);
    let since =
        k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(ago);
    a.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(since));
    a
}

async fn fill_data_plane(store: &dyn Store, key: &crate::identity::AgentKey) {
    store.register_agent(key).await.unwrap();
    let lease = store
        .acquire_lease(key, "w", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    let memories: crate::store::Memories = [("k".to_string(), "v".to_string())].into();
    store.set_memories(key, &lease, &memories).await.unwrap();
    store.release_lease(key, &lease).await.unwrap();
}

#[tokio::test]
async fn the_finalizer_is_added_before_anything_is_created() {
    let mut h = harness(vec![], vec![lobby(true)]);
    let (result, bodies) = h
        .run_finalized(agent_yaml(""), vec![expect(Method::PATCH, "/agents/echo?")])
        .await;
    assert_eq!(result.unwrap(), Action::await_change());
    assert!(
        bodies[0].to_string().contains(agent::FINALIZER),
        "{}",
        bodies[0]
    );
}

#[tokio::test]
async fn deleting_an_agent_removes_its_data_plane_state() {
    let mut h = harness(vec![], vec![lobby(true)]);
    let key = crate::identity::AgentKey::new("default", "echo");
    fill_data_plane(h.store.as_ref(), &key).await;
    let (result, bodies) = h
        .run_finalized(deleted_agent("", 1), deletion_script(true))
        .await;
    result.unwrap();
    assert_eq!(bodies[0]["reason"], "DataPlaneRemoved");
    assert!(removes_finalizer(&bodies[1]), "{}", bodies[1]);
    assert!(!h.store.agent_registered(&key).await.unwrap());
    assert!(h.store.memories(&key).await.unwrap().is_empty());
}

#[tokio::test]
async fn retain_on_delete_keeps_the_state_and_only_unregisters() {
    let mut h = harness(vec![], vec![lobby(true)]);
    let key = crate::identity::AgentKey::new("default", "echo");
    fill_data_plane(h.store.as_ref(), &key).await;
    let (result, bodies) = h
        .run_finalized(
            deleted_agent("  consciousness: {retainOnDelete: true}", 1),
            deletion_script(true),
        )
        .await;
    result.unwrap();
    assert_eq!(bodies[0]["reason"], "DataPlaneRetained");
    assert!(!h.store.agent_registered(&key).await.unwrap());
    assert_eq!(h.store.memories(&key).await.unwrap().len(), 1);
}

/// A harness whose data plane is a Redis that is not there (a port nothing listens on).
fn unreachable_harness() -> Harness {
    let port = crate::testing::free_port().unwrap();
    let store = crate::store::RedisStore::new(&format!("redis://127.0.0.1:{port}/")).unwrap();
    context_on(
        vec![],
        vec![lobby(true)],
        true,
        Some(Arc::new(store)),
        None,
        Vec::new(),
    )
}

/// What deleting the echo agent asks of the API server: an Event, then the finalizer's
/// removal when it is `finished`, else the status with the cleanup condition.
pub(super) fn deletion_script(finished: bool) -> Vec<Expect> {
    let then = if finished {
        "/agents/echo?"
    } else {
        "/agents/echo/status"
    };
    vec![expect(Method::POST, "/events"), expect(Method::PATCH, then)]
}

#[tokio::test]
async fn an_unreachable_data_plane_holds_deletion_with_a_condition() {
    let mut h = unreachable_harness();
    let (result, bodies) = h
        .run_finalized(deleted_agent("", 1), deletion_script(false))
        .await;
    let err = result.unwrap_err();
    assert_eq!(err.category(), "cleanup_pending", "{err}");
    assert_eq!(bodies[0]["type"], "Warning");
    assert_eq!(bodies[0]["reason"], "DataPlaneUnreachable");
    let cond = condition(&bodies[1]["status"], agent::DATA_PLANE_CLEANUP);
    assert_eq!(cond["status"], "False");
    assert_eq!(cond["reason"], "DataPlaneUnreachable");
    assert!(
        cond["message"].as_str().unwrap().contains("up to 60s"),
        "{cond}"
    );
    assert!(
        !bodies[1].to_string().contains("redis://"),
        "no URL in status"
    );
}

#[tokio::test]
async fn deletion_goes_ahead_after_the_cleanup_timeout() {
    let mut h = unreachable_harness();
    let (result, bodies) = h
        .run_finalized(deleted_agent("", 120), deletion_script(true))
        .await;
    result.unwrap();
    assert_eq!(bodies[0]["type"], "Warning");
    assert_eq!(bodies[0]["reason"], "DataPlaneCleanupAbandoned");
    assert!(bodies[0]["note"]
        .as_str()
        .unwrap()
        .contains("agentfleet:{agent:default/echo}:*"));
    assert!(removes_finalizer(&bodies[1]), "{}", bodies[1]);
}

/// A pooled Agent (`spec.runtime.pool`) gets no worker of its own: the reconcile reads its
/// Pool, removes the Deployment and ConfigMap it had when it ran alone (a move loses nothing:
/// its state is in the data plane), and says in `WorkerAvailable` which pool runs it.
#[tokio::test]
async fn a_pooled_agent_gets_no_worker_and_says_which_pool_runs_it() {
    let pool = json!({
        "apiVersion": "agentfleet.dev/v1alpha1", "kind": "Pool",
        "metadata": {"name": "shared", "namespace": "default"},
        "spec": {"replicas": {"min": 1, "max": 3}},
        "status": {"replicas": 2, "readyReplicas": 2, "agents": 1},
    });
    let mut h = harness(vec![], vec![lobby(true)]);
    let (result, bodies) = h
        .run_agent(
            agent_yaml("  runtime: {pool: shared}"),
            vec![
                answering(
                    expect(Method::GET, "/apis/agentfleet.dev/v1alpha1/namespaces/default/pools/shared"),
                    StatusCode::OK,
                    pool,
                ),
                // It ran alone before: its worker goes.
                answering(
                    expect(Method::DELETE, "/apis/apps/v1/namespaces/default/deployments/echo-worker"),
                    StatusCode::OK,
                    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 200}),
                ),
                answering(
                    expect(Method::DELETE, "/api/v1/namespaces/default/configmaps/echo-agent"),
                    StatusCode::NOT_FOUND,
                    not_found("configmaps", "echo-agent"),
                ),
                expect(Method::PATCH, "/apis/agentfleet.dev/v1alpha1/namespaces/default/agents/echo/status"),
            ],
        )
        .await;
    assert_eq!(result.unwrap(), Action::requeue(Duration::from_secs(300)));
    let status = &bodies[3]["status"];
    let worker = condition(status, "WorkerAvailable");
    assert_eq!(
        (&worker["status"], &worker["reason"], &worker["message"]),
        (
            &json!("True"),
            &json!("Pooled"),
            &json!("runs in Pool shared (2 replica(s) ready)")
        )
    );
    assert_eq!(condition(status, "Ready")["status"], "True");
    assert!(status.get("configHash").is_none(), "{status}");
    assert_eq!(tracked_phase(&h), Some(AgentPhase::Sleeping));

    // No such Pool: not ready, and said so.
    let mut h = harness(vec![], vec![lobby(true)]);
    let (result, bodies) = h
        .run_agent(
            agent_yaml("  runtime: {pool: nowhere}"),
            vec![
                answering(
                    expect(Method::GET, "/pools/nowhere"),
                    StatusCode::NOT_FOUND,
                    not_found("pools", "nowhere"),
                ),
                answering(
                    expect(Method::DELETE, "/deployments/echo-worker"),
                    StatusCode::NOT_FOUND,
                    not_found("deployments", "echo-worker"),
                ),
                answering(
                    expect(Method::DELETE, "/configmaps/echo-agent"),
                    StatusCode::NOT_FOUND,
                    not_found("configmaps", "echo-agent"),
                ),
                expect(Method::POST, "/events"),
                expect(Method::PATCH, "/agents/echo/status"),
            ],
        )
        .await;
    result.unwrap();
    assert_eq!(
        (&bodies[3]["type"], &bodies[3]["reason"]),
        (&json!("Warning"), &json!("PoolNotFound"))
    );
    let status = &bodies[4]["status"];
    assert_eq!(
        condition(status, "WorkerAvailable")["reason"],
        "PoolNotFound"
    );
    assert_eq!(condition(status, "Ready")["status"], "False");
}

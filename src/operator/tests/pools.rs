//! The Pool controller's reconcile.

use std::collections::HashMap;

use super::*;
use crate::crd::Pool;
use crate::operator::dataplane::pools::{PoolKey, PoolLoad};
use crate::operator::pool;

fn shared(spec: &str) -> Pool {
    serde_yaml::from_str(&format!(
        "apiVersion: agentfleet.dev/v1alpha1\nkind: Pool\nmetadata: {{name: shared, namespace: default, uid: 77777777-2222-3333-4444-555555555555, generation: 1}}\nspec: {spec}\n"
    ))
    .unwrap()
}

fn pooled(name: &str, pool: &str, model: &str) -> Agent {
    let mut a = agent_yaml(&format!("  runtime: {{pool: {pool}}}"));
    a.metadata.name = Some(name.into());
    a.metadata.uid = Some(format!("uid-{name}"));
    a.spec.model = serde_yaml::from_str(model).unwrap();
    a
}

impl Harness {
    /// Runs the Pool's reconcile once per pool in `pools`, in order, against one script.
    async fn run_pools(
        &mut self,
        pools: Vec<Pool>,
        script: Vec<Expect>,
    ) -> (Vec<Result<Action, Error>>, Vec<Value>) {
        let handle = self.handle.take().unwrap();
        let base = serde_json::to_value(&pools[0]).unwrap();
        let verifier = tokio::spawn(serve(handle, script, base));
        let mut results = Vec::new();
        for p in pools {
            results.push(pool::reconcile(Arc::new(p), self.ctx.clone()).await);
        }
        (results, verifier.await.unwrap())
    }
}

fn deployment_answer(replicas: i32, ready: i32) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "shared-pool", "namespace": "default"},
        "spec": {"replicas": replicas, "selector": {}, "template": {}},
        "status": {"replicas": replicas, "readyReplicas": ready},
    })
}

#[tokio::test]
async fn a_pool_renders_its_agents_and_says_how_it_runs() {
    let agents = vec![
        pooled("echo", "shared", "{provider: scripted, name: echo}"),
        pooled(
            "writer",
            "shared",
            "{provider: openai, name: gpt-4o-mini, apiKeySecretRef: {name: llm, key: api-key}}",
        ),
        pooled("elsewhere", "other", "{provider: scripted, name: echo}"),
        {
            let mut solo = agent_yaml("");
            solo.metadata.name = Some("solo".into());
            solo
        },
    ];
    let mut h = context(agents, vec![lobby(true)], true);
    let p = shared("{replicas: {min: 0, max: 3}}");
    let mut again = p.clone();
    let (results, bodies) = h
        .run_pools(
            vec![p],
            vec![
                expect(Method::PATCH, "/api/v1/namespaces/default/configmaps/shared-pool-agents-0"),
                answering(
                    expect(Method::GET, "/api/v1/namespaces/default/configmaps?&labelSelector=agentfleet.dev%2Fpool%3Dshared"),
                    StatusCode::OK,
                    json!({"apiVersion": "v1", "kind": "PartialObjectMetadataList", "metadata": {},
                           "items": [
                               {"apiVersion": "v1", "kind": "PartialObjectMetadata", "metadata": {"name": "shared-pool-agents-0"}},
                               {"apiVersion": "v1", "kind": "PartialObjectMetadata", "metadata": {"name": "shared-pool-agents-1"}},
                           ]}),
                ),
                // A shard it no longer fills goes.
                answering(
                    expect(Method::DELETE, "/configmaps/shared-pool-agents-1"),
                    StatusCode::OK,
                    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 200}),
                ),
                expect(Method::PATCH, "/apis/policy/v1/namespaces/default/poddisruptionbudgets/shared-pool"),
                answering(
                    expect(Method::DELETE, "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies/shared-pool"),
                    StatusCode::NOT_FOUND,
                    not_found("networkpolicies", "shared-pool"),
                ),
                answering(
                    expect(Method::PATCH, "/apis/apps/v1/namespaces/default/deployments/shared-pool"),
                    StatusCode::OK,
                    deployment_answer(0, 0),
                ),
                expect(Method::PATCH, "/apis/agentfleet.dev/v1alpha1/namespaces/default/pools/shared/status"),
            ],
        )
        .await;
    assert_eq!(
        results[0].as_ref().unwrap(),
        &Action::requeue(Duration::from_secs(300))
    );
    let data = bodies[0]["data"].as_object().unwrap();
    let mut names: Vec<&String> = data.keys().collect();
    names.sort();
    assert_eq!(names, ["echo.yaml", "writer.yaml"], "its agents only");
    let manifest: Agent = serde_yaml::from_str(data["writer.yaml"].as_str().unwrap()).unwrap();
    assert_eq!(manifest.metadata.namespace.as_deref(), Some("default"));
    let deploy = &bodies[5];
    assert_eq!(deploy["spec"]["replicas"], 0, "min 0 and nothing to do");
    let pod = &deploy["spec"]["template"]["spec"];
    let secrets: Vec<&str> = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["secret"]["secretName"].as_str())
        .collect();
    assert_eq!(secrets, ["llm"], "the Secret its agents reference");
    let status = &bodies[6]["status"];
    assert_eq!(status["agents"], 2);
    assert_eq!(status["replicas"], 0);
    let ready = condition(status, "Ready");
    assert_eq!(
        (&ready["status"], &ready["reason"]),
        (&json!("True"), &json!("ScaledToZero"))
    );

    // The loop saw 20 agents thinking with 16 slots a replica: the next reconcile applies
    // its count, and nothing else changed, so only the Deployment and the status are written.
    let key = PoolKey::new("default", "shared");
    let loads = HashMap::from([(
        key.clone(),
        PoolLoad {
            agents: 2,
            thinking: 20,
            waiting: 0,
        },
    )]);
    assert_eq!(
        h.ctx
            .scaler
            .pools
            .observe(&loads, tokio::time::Instant::now())
            .len(),
        1
    );
    again.status = serde_json::from_value(status.clone()).unwrap();
    h.handle = Some(fresh_handle(&mut h));
    let (results, bodies) = h
        .run_pools(
            vec![again],
            vec![
                answering(
                    expect(Method::PATCH, "/deployments/shared-pool"),
                    StatusCode::OK,
                    deployment_answer(2, 1),
                ),
                expect(Method::PATCH, "/pools/shared/status"),
            ],
        )
        .await;
    results[0].as_ref().unwrap();
    assert_eq!(bodies[0]["spec"]["replicas"], 2);
    let status = &bodies[1]["status"];
    assert_eq!(
        (
            &status["thinking"],
            &status["replicas"],
            &status["readyReplicas"]
        ),
        (&json!(20), &json!(2), &json!(1))
    );
    assert_eq!(condition(status, "Ready")["reason"], "ReplicasStarting");
}

/// A new mock API for the harness' next script (the context keeps its client).
fn fresh_handle(h: &mut Harness) -> Handle {
    let (svc, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let ctx = Arc::get_mut(&mut h.ctx).expect("no other holder of the context");
    ctx.client = Client::new(svc, "default");
    handle
}

#[tokio::test]
async fn an_invalid_pool_applies_nothing_and_says_why() {
    let mut h = context(vec![], vec![], true);
    let (results, bodies) = h
        .run_pools(
            vec![shared("{replicas: {min: 3, max: 1}}")],
            vec![
                expect(Method::POST, "/events"),
                expect(Method::PATCH, "/pools/shared/status"),
            ],
        )
        .await;
    results[0].as_ref().unwrap();
    assert_eq!(
        (&bodies[0]["type"], &bodies[0]["reason"]),
        (&json!("Warning"), &json!("InvalidSpec"))
    );
    let ready = condition(&bodies[1]["status"], "Ready");
    assert_eq!(ready["status"], "False");
    assert_eq!(
        ready["message"],
        "replicas.min (3) is more than replicas.max (1)"
    );
}

#[tokio::test]
async fn a_pool_with_egress_gets_its_own_policy_and_a_refusal_is_a_condition() {
    let mut h = context(
        vec![pooled("echo", "shared", "{provider: scripted, name: echo}")],
        vec![],
        true,
    );
    let (results, bodies) = h
        .run_pools(
            vec![shared(
                "{egress: [{to: [{ipBlock: {cidr: 10.9.0.0/16}}], ports: [{port: 443}]}]}",
            )],
            vec![
                expect(Method::PATCH, "/configmaps/shared-pool-agents-0"),
                answering(
                    expect(Method::GET, "/configmaps?"),
                    StatusCode::OK,
                    json!({"apiVersion": "v1", "kind": "PartialObjectMetadataList", "metadata": {}, "items": []}),
                ),
                expect(Method::PATCH, "/poddisruptionbudgets/shared-pool"),
                expect(Method::PATCH, "/networkpolicies/shared-pool"),
                answering(
                    expect(Method::PATCH, "/deployments/shared-pool"),
                    StatusCode::UNPROCESSABLE_ENTITY,
                    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                           "message": "spec.template.spec.containers[0].image: Required value", "reason": "Invalid", "code": 422}),
                ),
                expect(Method::POST, "/events"),
                expect(Method::PATCH, "/pools/shared/status"),
            ],
        )
        .await;
    results[0].as_ref().unwrap();
    assert_eq!(bodies[3]["spec"]["egress"][0]["ports"][0]["port"], 443);
    assert_eq!(bodies[5]["reason"], "PoolRejected");
    let ready = condition(&bodies[6]["status"], "Ready");
    assert_eq!(
        ready["message"],
        "Deployment rejected: spec.template.spec.containers[0].image: Required value"
    );
}

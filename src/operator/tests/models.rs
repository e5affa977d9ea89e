//! Agents that name Models, and the Model controller, against a scripted API server.

use super::*;
use crate::crd::ModelResource;

fn model(name: &str, spec: &str) -> ModelResource {
    serde_yaml::from_str(&format!(
        "apiVersion: agentfleet.dev/v1alpha1\nkind: Model\nmetadata: {{name: {name}, namespace: default, uid: {name}-uid, generation: 1}}\nspec: {spec}\n"
    ))
    .unwrap()
}

fn secret(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "default"},
           "data": {"apiKey": "c2stc2VjcmV0LXZhbHVl"}})
}

fn pair() -> Vec<ModelResource> {
    vec![
        model(
            "fast",
            "{provider: openai, name: gpt-small, apiKeySecretRef: {name: fast-key}, temperature: 0.3, fallback: [steady]}",
        ),
        model(
            "steady",
            "{provider: anthropic, name: claude, apiKeySecretRef: {name: steady-key}}",
        ),
    ]
}

#[tokio::test]
async fn an_agent_naming_a_missing_model_keeps_its_worker_and_says_where() {
    let mut h = harness(vec![], vec![lobby(true)]);
    let mut agent = agent_yaml("");
    agent.spec.model = serde_yaml::from_str("{ref: fast}").unwrap();
    let (result, bodies) = h
        .run_agent(
            agent,
            vec![
                expect(Method::POST, "/events"),
                expect(Method::POST, "/events"),
                expect(Method::PATCH, "/agents/echo/status"),
            ],
        )
        .await;
    result.unwrap();
    let status = &bodies[2]["status"];
    let configured = condition(status, "ModelConfigured");
    assert_eq!(configured["reason"], "ModelNotResolved");
    assert_eq!(
        configured["message"],
        "spec.model.ref: no Model \"fast\" in this namespace"
    );
    assert_eq!(condition(status, "Ready")["reason"], "InvalidSpec");
    let warned: Vec<&Value> = bodies[..2].iter().map(|b| &b["reason"]).collect();
    assert!(warned.contains(&&json!("ModelNotResolved")), "{warned:?}");
}

#[tokio::test]
async fn an_agent_naming_a_model_gets_its_list_with_each_key_mounted() {
    let mut h = context_on(vec![], vec![lobby(true)], true, None, None, pair());
    let mut agent = agent_yaml("");
    agent.spec.model = serde_yaml::from_str("{ref: fast, maxOutputTokens: 512}").unwrap();
    let mut script = vec![
        answering(
            expect(Method::GET, "/secrets/fast-key"),
            StatusCode::OK,
            secret("fast-key"),
        ),
        answering(
            expect(Method::GET, "/secrets/steady-key"),
            StatusCode::OK,
            secret("steady-key"),
        ),
    ];
    script.extend(applied_then(1));
    let (result, bodies) = h.run_agent(agent, script).await;
    result.unwrap();
    let manifest: Agent =
        serde_yaml::from_str(bodies[2]["data"]["agent.yaml"].as_str().unwrap()).unwrap();
    let m = &manifest.spec.model;
    assert_eq!(m.model_ref.as_deref(), Some("fast"));
    assert_eq!((m.name.as_str(), m.temperature), ("gpt-small", Some(0.3)));
    assert_eq!(m.max_output_tokens, Some(512), "the agent's override");
    assert_eq!(m.fallback[0].model, "steady");
    assert_eq!(m.fallback[0].settings.max_output_tokens, Some(512));
    let pod = &bodies[3]["spec"]["template"]["spec"];
    let volumes = pod["volumes"].to_string();
    assert!(
        volumes.contains("\"secretName\":\"fast-key\"")
            && volumes.contains("\"secretName\":\"steady-key\""),
        "each model's key is mounted: {volumes}"
    );
    assert!(
        !pod["containers"][0]["env"]
            .to_string()
            .contains("AGENTFLEET_MODEL_API_KEY"),
        "no key in the environment"
    );
    let configured = condition(&bodies[5]["status"], "ModelConfigured");
    assert_eq!(configured["reason"], "ModelsConfigured", "{configured}");
    assert!(configured["message"]
        .as_str()
        .unwrap()
        .starts_with("2 models in order; fast: "));
}

#[tokio::test]
async fn a_model_with_a_loop_is_not_accepted_and_one_that_answers_lists_its_agents() {
    let mut looped = pair();
    looped[1].spec.fallback = vec!["fast".into()];
    looped.push(model("demo", "{provider: scripted, name: demo}"));
    let mut user = agent_yaml("");
    user.spec.model = serde_yaml::from_str("{ref: demo}").unwrap();
    let mut h = context_on(
        vec![user],
        vec![lobby(true)],
        true,
        None,
        None,
        looped.clone(),
    );
    let (result, bodies) = h
        .run_model(
            looped[0].clone(),
            vec![
                answering(
                    expect(Method::GET, "/secrets/fast-key"),
                    StatusCode::OK,
                    secret("fast-key"),
                ),
                expect(Method::POST, "/events"),
                expect(Method::POST, "/events"),
                expect(Method::PATCH, "/models/fast/status"),
            ],
        )
        .await;
    result.unwrap();
    let status = &bodies[3]["status"];
    let accepted = condition(status, "Accepted");
    assert_eq!(accepted["status"], "False");
    assert_eq!(
        accepted["message"],
        "spec.fallback[0]: a loop: fast → steady → fast"
    );
    assert_eq!(condition(status, "Ready")["reason"], "NotAccepted");

    let mut h = context_on(
        vec![agent_with("demo")],
        vec![lobby(true)],
        true,
        None,
        None,
        looped.clone(),
    );
    let (result, bodies) = h
        .run_model(
            looped[2].clone(),
            vec![expect(Method::PATCH, "/models/demo/status")],
        )
        .await;
    assert_eq!(result.unwrap(), Action::requeue(Duration::from_secs(300)));
    let status = &bodies[0]["status"];
    assert_eq!(
        condition(status, "Accepted")["message"],
        "asks in order: demo"
    );
    assert_eq!(condition(status, "Ready")["reason"], "Builtin");
    assert_eq!(status["agentCount"], 1);
    assert_eq!(status["agents"], json!(["echo"]));
    assert!(status["probedAt"].is_string());
}

#[tokio::test]
async fn a_model_that_cannot_be_reached_is_not_ready_and_its_failure_is_kept() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    crate::install_crypto_provider();
    let gone = model(
        "gone",
        &format!("{{provider: openai, name: x, baseUrl: 'http://127.0.0.1:{port}/v1', probeSeconds: 60}}"),
    );
    let mut h = context_on(
        vec![],
        vec![lobby(true)],
        true,
        None,
        None,
        vec![gone.clone()],
    );
    let (result, bodies) = h
        .run_model(
            gone,
            vec![
                expect(Method::POST, "/events"),
                expect(Method::PATCH, "/models/gone/status"),
            ],
        )
        .await;
    assert_eq!(result.unwrap(), Action::requeue(Duration::from_secs(60)));
    assert_eq!(bodies[0]["type"], "Warning");
    let status = &bodies[1]["status"];
    assert_eq!(condition(status, "Ready")["reason"], "Unreachable");
    assert_eq!(status["lastErrors"][0]["reason"], "Unreachable");
    assert_eq!(status["agentCount"], 0);
}

/// The echo agent, naming Model `name`.
fn agent_with(name: &str) -> Agent {
    let mut a = agent_yaml("");
    a.spec.model = serde_yaml::from_str(&format!("{{ref: {name}}}")).unwrap();
    a
}

//! Models on a real API server (issue 46): what the schema refuses, a Model's status (probed,
//! its agents, its failures), a loop refused with its path, an Agent naming a Model getting
//! the whole list rendered with each key's Secret mounted, an Agent naming a missing Model
//! refused where it says so, and a Model's change reaching the rendered manifest without
//! rolling the worker.

use super::*;
use agentfleet::crd::ModelResource;
use agentfleet::testing::{MockModel, MockTurn};

fn model_condition(m: &ModelResource, type_: &str) -> Option<(String, String, String)> {
    let c = m
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// The message of `agent`'s condition `type_`.
fn said(agent: &Agent, type_: &str) -> Option<String> {
    let c = agent
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)?;
    Some(c.message.clone())
}

pub(super) async fn models_on_a_real_api_server(client: &Client, ns: &str) {
    eprintln!("step: the API server refuses a Model the schema does not take");
    let models: Api<ModelResource> = Api::namespaced(client.clone(), ns);
    let bad: ModelResource = serde_yaml::from_str(&format!(
        "apiVersion: agentfleet.dev/v1alpha1\nkind: Model\nmetadata: {{name: nameless, namespace: {ns}}}\nspec: {{provider: openai, temperature: 5, fallback: [Bad_Name]}}\n"
    ))
    .unwrap();
    let refused = models
        .create(&PostParams::default(), &bad)
        .await
        .unwrap_err();
    let refused = refused.to_string();
    for part in [
        "spec.name: Required value",
        "spec.temperature",
        "spec.fallback[0]",
    ] {
        assert!(refused.contains(part), "{part} in {refused}");
    }

    eprintln!("step: Models are probed, a loop is refused, an agent gets its whole list");
    let provider = MockModel::responding(|_| MockTurn::text("unused"))
        .await
        .unwrap();
    let gone = agentfleet::testing::free_port().unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    apply_yaml(
        &secrets,
        &format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: fast-key, namespace: {ns}}}\nstringData: {{apiKey: sk-e2e-model-key}}\n"),
    )
    .await;
    for (name, spec) in [
        (
            "fast",
            format!("{{provider: openai, name: fast-1, baseUrl: '{}', apiKeySecretRef: {{name: fast-key}}, temperature: 0.2, fallback: [steady]}}", provider.base_url),
        ),
        (
            "steady",
            format!("{{provider: openai, name: steady-1, baseUrl: 'http://127.0.0.1:{gone}/v1'}}"),
        ),
        ("loop-a", format!("{{provider: openai, name: a, baseUrl: '{}', fallback: [loop-b]}}", provider.base_url)),
        ("loop-b", format!("{{provider: openai, name: b, baseUrl: '{}', fallback: [loop-a]}}", provider.base_url)),
    ] {
        apply_yaml(
            &models,
            &format!("apiVersion: agentfleet.dev/v1alpha1\nkind: Model\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {spec}\n"),
        )
        .await;
    }
    let agents: Api<Agent> = Api::namespaced(client.clone(), ns);
    for (name, model) in [
        ("modeled", "{ref: fast, maxOutputTokens: 512}"),
        ("lost", "{ref: nowhere}"),
    ] {
        apply_yaml(
            &agents,
            &format!("apiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {{model: {model}, spaces: [family]}}\n"),
        )
        .await;
    }
    let ready = |name: &'static str, status: &'static str, reason: &'static str| {
        let models = models.clone();
        async move {
            let m = models.get(name).await.ok()?;
            let (s, r, _) = model_condition(&m, "Ready")?;
            (s == status && r == reason).then_some(m)
        }
    };
    let fast = eventually(
        "fast: Ready, one agent",
        Duration::from_secs(20),
        || async {
            ready("fast", "True", "Answers")
                .await
                .filter(|m| m.status.as_ref().is_some_and(|s| s.agent_count == 1))
        },
    )
    .await;
    let status = fast.status.unwrap();
    assert_eq!(status.agents, ["modeled"]);
    assert!(status.probed_at.is_some());
    let steady = eventually("steady: not Ready", Duration::from_secs(20), || {
        ready("steady", "False", "Unreachable")
    })
    .await;
    let status = steady.status.unwrap();
    assert_eq!(status.agent_count, 1, "an agent through fast's list");
    assert_eq!(status.last_errors[0].reason, "Unreachable");
    let looped = eventually("loop-a: not accepted", Duration::from_secs(20), || {
        let models = models.clone();
        async move {
            let c = model_condition(&models.get("loop-a").await.ok()?, "Accepted")?;
            (c.0 == "False").then_some(c)
        }
    })
    .await;
    assert_eq!(
        looped.2,
        "spec.fallback[0]: a loop: loop-a → loop-b → loop-a"
    );

    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let rendered = eventually(
        "modeled: its list rendered",
        Duration::from_secs(20),
        || {
            let configmaps = configmaps.clone();
            async move {
                let cm = configmaps.get("modeled-agent").await.ok()?;
                let text = cm.data?.remove("agent.yaml")?;
                text.contains("fallback:").then_some(text)
            }
        },
    )
    .await;
    let manifest: Agent = serde_yaml::from_str(&rendered).unwrap();
    let m = &manifest.spec.model;
    assert_eq!(
        (m.name.as_str(), m.max_output_tokens),
        ("fast-1", Some(512))
    );
    assert_eq!(m.fallback[0].model, "steady");
    assert!(
        !rendered.contains("sk-e2e-model-key"),
        "no key in the ConfigMap"
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let pod = deployments
        .get("modeled-worker")
        .await
        .unwrap()
        .spec
        .unwrap()
        .template;
    let hash = pod.metadata.unwrap().annotations.unwrap()["agentfleet.dev/config-hash"].clone();
    let pod = pod.spec.unwrap();
    assert!(pod.volumes.unwrap().iter().any(|v| v
        .secret
        .as_ref()
        .and_then(|s| s.secret_name.as_deref())
        == Some("fast-key")));
    assert!(pod.containers[0]
        .env
        .iter()
        .flatten()
        .all(|e| e.name != "AGENTFLEET_MODEL_API_KEY"));
    let modeled = agents.get("modeled").await.unwrap();
    assert_eq!(
        condition(&modeled, "ModelConfigured"),
        Some(("True".into(), "ModelsConfigured".into()))
    );
    let lost = eventually("lost: refused", Duration::from_secs(20), || {
        let agents = agents.clone();
        async move {
            let a = agents.get("lost").await.ok()?;
            (condition(&a, "ModelConfigured")? == ("False".into(), "ModelNotResolved".into()))
                .then_some(a)
        }
    })
    .await;
    assert_eq!(
        said(&lost, "Ready").as_deref(),
        Some("spec.model.ref: no Model \"nowhere\" in this namespace")
    );

    eprintln!("step: a Model's new endpoint reaches the manifest without rolling the worker");
    let moved = MockModel::responding(|_| MockTurn::text("unused"))
        .await
        .unwrap();
    models
        .patch(
            "fast",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"baseUrl": moved.base_url}})),
        )
        .await
        .unwrap();
    eventually(
        "modeled: the new endpoint rendered",
        Duration::from_secs(20),
        || {
            let configmaps = configmaps.clone();
            let url = moved.base_url.clone();
            async move {
                let cm = configmaps.get("modeled-agent").await.ok()?;
                cm.data?.get("agent.yaml")?.contains(&url).then_some(())
            }
        },
    )
    .await;
    let after = deployments
        .get("modeled-worker")
        .await
        .unwrap()
        .spec
        .unwrap()
        .template
        .metadata
        .unwrap()
        .annotations
        .unwrap()["agentfleet.dev/config-hash"]
        .clone();
    assert_eq!(
        after, hash,
        "the worker follows its manifest in place: no roll"
    );
    for name in ["modeled", "lost"] {
        agents.delete(name, &DeleteParams::default()).await.unwrap();
    }
}

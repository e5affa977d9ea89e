use super::*;
use crate::crd::ModelResourceSpec;

fn model(yaml: &str) -> ModelResourceSpec {
    serde_yaml::from_str(yaml).unwrap()
}

fn agent_model(yaml: &str) -> ModelSpec {
    serde_yaml::from_str(yaml).unwrap()
}

fn table<'a>(specs: &'a [(&'a str, ModelResourceSpec)]) -> Models<'a> {
    specs.iter().map(|(n, s)| (*n, s)).collect()
}

#[test]
fn an_inline_model_is_itself_with_no_fallback() {
    let inline =
        agent_model("{provider: openai, name: gpt, baseUrl: 'http://x/v1', temperature: 0.5}");
    let resolved = resolve(&inline, &Models::new()).unwrap();
    assert_eq!(resolved, inline);
    assert_eq!(
        links(&resolved).map(|(n, _)| n).collect::<Vec<_>>(),
        ["gpt"]
    );
    let e = resolve(&agent_model("{name: gpt}"), &Models::new()).unwrap_err();
    assert_eq!(e.path, "spec.model.provider");
    let e = resolve(&agent_model("{provider: openai}"), &Models::new()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "spec.model.name: Required value (or name a Model with spec.model.ref)"
    );
}

#[test]
fn a_ref_takes_the_models_settings_with_the_agents_overrides_on_every_link() {
    let specs = [
        (
            "fast",
            model("{provider: openai, name: gpt-4o-mini, baseUrl: 'http://a/v1', apiKeySecretRef: {name: a}, temperature: 0.2, maxOutputTokens: 900, fallback: [steady], retryAfterSeconds: 60}"),
        ),
        (
            "steady",
            model("{provider: anthropic, name: claude, apiKeySecretRef: {name: b, key: k}, timeoutSeconds: 30}"),
        ),
    ];
    let models = table(&specs);
    let resolved = resolve(&agent_model("{ref: fast, maxOutputTokens: 100}"), &models).unwrap();
    assert_eq!(resolved.model_ref.as_deref(), Some("fast"));
    assert_eq!(resolved.provider(), ModelProvider::Openai);
    assert_eq!(resolved.base_url.as_deref(), Some("http://a/v1"));
    assert_eq!(resolved.temperature, Some(0.2), "the Model's default");
    assert_eq!(resolved.max_output_tokens(), 100, "the agent's override");
    assert_eq!(resolved.retry_after_seconds, Some(60));
    let steady = &resolved.fallback[0];
    assert_eq!(steady.model, "steady");
    assert_eq!(steady.settings.provider(), ModelProvider::Anthropic);
    assert_eq!(
        steady.settings.max_output_tokens(),
        100,
        "overrides apply to every link"
    );
    assert_eq!(steady.settings.timeout().as_secs(), 30);
    assert_eq!(
        steady
            .settings
            .api_key_secret_ref
            .as_ref()
            .map(|r| (r.name.as_str(), r.key.as_str())),
        Some(("b", "k")),
        "each link keeps its own key"
    );
    assert_eq!(key_secrets(&resolved), ["a", "b"]);
    assert!(uses(&resolved, "steady") && uses(&resolved, "fast") && !uses(&resolved, "other"));
    // The rendered form reads back as it was.
    let yaml = serde_yaml::to_string(&resolved).unwrap();
    assert_eq!(serde_yaml::from_str::<ModelSpec>(&yaml).unwrap(), resolved);
}

#[test]
fn where_requests_and_keys_go_is_the_models_alone() {
    let specs = [(
        "fast",
        model("{provider: openai, name: gpt, baseUrl: 'http://a/v1'}"),
    )];
    let models = table(&specs);
    for (extra, field) in [
        ("provider: openai", "provider"),
        ("name: other", "name"),
        ("baseUrl: 'http://evil/v1'", "baseUrl"),
        ("apiKeySecretRef: {name: mine}", "apiKeySecretRef"),
    ] {
        let e = resolve(&agent_model(&format!("{{ref: fast, {extra}}}")), &models).unwrap_err();
        assert_eq!(e.path, format!("spec.model.{field}"), "{e}");
    }
    let e = resolve(&agent_model("{ref: gone}"), &models).unwrap_err();
    assert_eq!(
        e.to_string(),
        "spec.model.ref: no Model \"gone\" in this namespace"
    );
}

#[test]
fn loops_unknown_fallbacks_and_mixed_scripted_lists_are_refused_with_their_paths() {
    let specs = [
        (
            "a",
            model("{provider: openai, name: a, baseUrl: 'http://a', fallback: [c, b]}"),
        ),
        (
            "b",
            model("{provider: openai, name: b, baseUrl: 'http://b', fallback: [a]}"),
        ),
        (
            "c",
            model("{provider: openai, name: c, baseUrl: 'http://c'}"),
        ),
        (
            "d",
            model("{provider: openai, name: d, baseUrl: 'http://d', fallback: [nope]}"),
        ),
        (
            "e",
            model("{provider: openai, name: e, baseUrl: 'http://e', fallback: [s]}"),
        ),
        ("s", model("{provider: scripted, name: s}")),
        (
            "f",
            model("{provider: openai, name: f, baseUrl: 'http://f', fallback: [d]}"),
        ),
        (
            "g",
            model("{provider: openai, name: g, baseUrl: 'http://g', fallback: [c, c]}"),
        ),
        ("h", model("{provider: anthropic, name: h}")),
    ];
    let models = table(&specs);
    let problems = |name: &str| {
        let spec = models[name];
        check(name, spec, &models)
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(problems("a"), ["spec.fallback[1]: a loop: a → b → a"]);
    assert_eq!(problems("b"), ["spec.fallback[0]: a loop: b → a → b"]);
    assert!(problems("c").is_empty());
    assert_eq!(
        problems("d"),
        ["spec.fallback[0]: no Model \"nope\" in this namespace"]
    );
    assert_eq!(problems("e").len(), 1);
    assert!(
        problems("e")[0].starts_with("spec.fallback[0]: \"s\" mixes the scripted model"),
        "{:?}",
        problems("e")
    );
    assert_eq!(problems("f"), ["spec.fallback[0]: its fallback Model \"d\" is refused: spec.fallback[0]: no Model \"nope\" in this namespace"]);
    assert_eq!(problems("g"), ["spec.fallback[1]: \"c\" is named twice"]);
    assert_eq!(
        problems("h"),
        ["spec.apiKeySecretRef: provider anthropic at its public endpoint needs an API key"]
    );
    let e = resolve(&agent_model("{ref: b}"), &models).unwrap_err();
    assert_eq!(e.path, "spec.model.ref");
    assert!(e.message.contains("a loop: b → a → b"), "{e}");
}

#[test]
fn a_diamond_asks_each_model_once_and_a_long_list_is_bounded() {
    let specs = [
        (
            "a",
            model("{provider: openai, name: a, baseUrl: 'http://a', fallback: [b, c]}"),
        ),
        (
            "b",
            model("{provider: openai, name: b, baseUrl: 'http://b', fallback: [c]}"),
        ),
        (
            "c",
            model("{provider: openai, name: c, baseUrl: 'http://c'}"),
        ),
    ];
    let models = table(&specs);
    let resolved = resolve(&agent_model("{ref: a}"), &models).unwrap();
    assert_eq!(
        links(&resolved).map(|(n, _)| n).collect::<Vec<_>>(),
        ["a", "b", "c"]
    );

    let names: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
    let long: Vec<(&str, ModelResourceSpec)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let next = names
                .get(i + 1)
                .map(|n| format!(", fallback: [{n}]"))
                .unwrap_or_default();
            (
                n.as_str(),
                model(&format!(
                    "{{provider: openai, name: {n}, baseUrl: 'http://x'{next}}}"
                )),
            )
        })
        .collect();
    let models = table(&long);
    let problems = check("m0", models["m0"], &models);
    assert_eq!(problems.len(), 1);
    assert_eq!(
        problems[0].to_string(),
        "spec.fallback: more than 8 fallbacks in all, with their own lists",
        "{:?}",
        problems
    );
    // Eight fallbacks in all are taken (the schema's bound on one list).
    let models = table(&long[1..]);
    assert!(check("m1", models["m1"], &models).is_empty());
}

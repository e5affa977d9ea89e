//! The committed CRDs (`crds/` and the Helm chart's copy) are exactly what the code generates.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failing loudly is the point

use std::path::Path;

fn check(relative: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let generated = agentfleet::crd::render_all().unwrap();
    assert!(
        committed == generated,
        "{relative} differs from the CRD types: regenerate with\n  cargo run -- crd > crds/agentfleet.yaml && cp crds/agentfleet.yaml charts/agentfleet/crds/agentfleet.yaml"
    );
}

#[test]
fn crds_dir_matches_the_types() {
    check("crds/agentfleet.yaml");
}

#[test]
fn chart_crds_match_the_types() {
    check("charts/agentfleet/crds/agentfleet.yaml");
}

#[test]
fn samples_parse_as_the_types() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/samples");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let value = serde_yaml::Value::deserialize(doc).unwrap();
            match value["kind"].as_str() {
                Some("Agent") => {
                    serde_yaml::from_value::<agentfleet::crd::Agent>(value.clone())
                        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                }
                Some("Space") => {
                    serde_yaml::from_value::<agentfleet::crd::Space>(value.clone())
                        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                }
                // The tools' `headersFrom` Secrets, as `kubectl apply` and `dev` take them.
                Some("Secret") => {
                    serde_yaml::from_value::<k8s_openapi::api::core::v1::Secret>(value.clone())
                        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                }
                other => panic!("{}: unexpected kind {other:?}", path.display()),
            }
            seen += 1;
        }
    }
    assert!(
        seen >= 4,
        "samples hold at least two spaces and two agents, found {seen} objects"
    );
}

use serde::Deserialize;

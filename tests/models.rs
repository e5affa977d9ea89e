//! Models shared by agents, as the worker and the pool run them (real binaries, a real
//! `redis-server`, real HTTP servers playing two providers): each model of a list with its
//! own key, read from its mounted Secret at each request (a rotated key is used without a
//! restart, one provider's key never reaches another), a failing provider fallen over from
//! in each way that may be another's to answer, and a changed endpoint followed in place.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failing loudly is the point

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentfleet::identity::{AgentKey, SpaceKey};
use agentfleet::store::{prelude::*, ReadQuery, RedisStore};
use agentfleet::testing::{human_message, space_record, Kill, MockModel, MockTurn, RedisServer};
use serde_json::json;

const NS: &str = "models";

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("agentfleet-models-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `value` as key `key` of Secret `name` mounted under `dir`, as the kubelet swaps a
/// mounted Secret (a new file renamed over the old).
fn mount(dir: &Path, name: &str, key: &str, value: &str) {
    let at = dir.join(name);
    std::fs::create_dir_all(&at).unwrap();
    let tmp = at.join(format!(".{key}.new"));
    std::fs::write(&tmp, value).unwrap();
    std::fs::rename(tmp, at.join(key)).unwrap();
}

/// The agent's manifest as the operator renders it: Model `fast` (at `primary`, key in
/// Secret `fast-key`) resolved, falling back to `steady` (at `backup`, key in `steady-key`).
fn manifest(primary: &str, backup: &str) -> String {
    format!(
        r#"apiVersion: agentfleet.dev/v1alpha1
kind: Agent
metadata: {{name: sre, namespace: {NS}, uid: u-1, generation: 1}}
spec:
  spaces: [desk]
  model:
    ref: fast
    provider: openai
    name: fast-1
    baseUrl: "{primary}"
    apiKeySecretRef: {{name: fast-key, key: apiKey}}
    retryAfterSeconds: 3600
    fallback:
      - model: steady
        settings: {{provider: openai, name: steady-1, baseUrl: "{backup}", apiKeySecretRef: {{name: steady-key, key: apiKey}}}}
"#
    )
}

/// A provider that answers each message with `send_message`, then "done"; failing with
/// `status` (0: not failing) while `failing` says so.
async fn provider(failing: Arc<AtomicU16>) -> MockModel {
    MockModel::responding(move |req| {
        let status = failing.load(Ordering::Relaxed);
        if status != 0 {
            return MockTurn::Status(status, "down".into());
        }
        let last = agentfleet::testing::conversation(req)
            .last()
            .and_then(|m| m["role"].as_str().map(str::to_string))
            .unwrap_or_default();
        if last == "tool" {
            MockTurn::text("done")
        } else {
            MockTurn::tools(&[("send_message", json!({"text": "answered"}))])
        }
    })
    .await
    .unwrap()
}

/// Starts `agentfleet ARGS` on Redis `url` with its Secrets mounted at `secrets`; returns it
/// once it hears wake signals, and its metrics port.
fn start(args: &[&str], path: &Path, url: &str, secrets: &Path) -> (Kill, u16) {
    let port = agentfleet::testing::free_port().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentfleet"));
    command
        .args(args)
        .arg(path)
        .args([
            "--redis",
            url,
            "--lease-seconds",
            "2",
            "--reload-seconds",
            "1",
        ])
        .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
        .arg("--secrets-dir")
        .arg(secrets)
        .env_remove("AGENTFLEET_MODEL_API_KEY");
    let process = agentfleet::testing::spawn_listening(&mut command, Duration::from_secs(30));
    (process.unwrap(), port)
}

async fn replies(store: &RedisStore) -> usize {
    store
        .read_messages(
            &SpaceKey::new(NS, "desk"),
            &ReadQuery {
                limit: 50,
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .iter()
        .filter(|m| m.sender.id == "sre")
        .count()
}

/// Asks in the space and waits for the agent's answer (the `n`th).
async fn ask_and_wait(store: &RedisStore, n: usize) {
    store
        .post_message(&SpaceKey::new(NS, "desk"), &human_message("Ann", "status?"))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while replies(store).await < n {
        assert!(Instant::now() < deadline, "answer {n} never came");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn metrics(port: u16) -> String {
    reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The keys `mock` got, without repeats in a row.
fn keys(mock: &MockModel) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for k in mock.keys().into_iter().map(Option::unwrap_or_default) {
        if out.last() != Some(&k) {
            out.push(k);
        }
    }
    out
}

async fn lives_through_rotation_fallback_and_a_new_endpoint(process: &[&str], dir_form: bool) {
    agentfleet::install_crypto_provider();
    let redis = RedisServer::start().unwrap();
    let store = RedisStore::new(&redis.url()).unwrap();
    store
        .apply_space(
            &SpaceKey::new(NS, "desk"),
            &space_record("Desk", &["sre"], &["Ann"]),
        )
        .await
        .unwrap();
    let primary_down = Arc::new(AtomicU16::new(0));
    let primary = provider(primary_down.clone()).await;
    let backup = provider(Arc::new(AtomicU16::new(0))).await;
    let secrets = temp(&format!("{}-secrets", process[0]));
    mount(&secrets, "fast-key", "apiKey", "sk-fast-one");
    mount(&secrets, "steady-key", "apiKey", "sk-steady");
    let manifests = temp(&format!("{}-manifests", process[0]));
    let file = manifests.join("agent.yaml");
    std::fs::write(&file, manifest(&primary.base_url, &backup.base_url)).unwrap();
    let path = if dir_form {
        manifests.clone()
    } else {
        file.clone()
    };
    let (_process, port) = start(process, &path, &redis.url(), &secrets);

    // The primary answers, with its own key.
    ask_and_wait(&store, 1).await;
    assert_eq!(keys(&primary), ["sk-fast-one"]);

    // Its key rotates in the mounted Secret: the next request has the new one, no restart.
    mount(&secrets, "fast-key", "apiKey", "sk-fast-two");
    ask_and_wait(&store, 2).await;
    assert_eq!(keys(&primary), ["sk-fast-one", "sk-fast-two"]);

    // The primary fails in each way another provider may answer: the cycle's next request
    // goes to the fallback, with the fallback's own key; it stays there (its cache).
    for (n, status) in [(3, 500), (4, 429)] {
        primary_down.store(status, Ordering::Relaxed);
        ask_and_wait(&store, n).await;
    }
    assert!(backup.request_count() >= 2, "the fallback answered");
    assert_eq!(keys(&backup), ["sk-steady"], "never the primary's key");
    assert!(
        !keys(&primary).iter().any(|k| k == "sk-steady"),
        "never the fallback's key at the primary"
    );
    let m = metrics(port).await;
    assert!(
        m.lines()
            .any(|l| l.starts_with("agentfleet_model_fallbacks_total{")
                && l.contains("model=\"steady\"")
                && l.contains("reason=\"server_error\"")
                && l.ends_with(" 1")),
        "{m}"
    );
    assert!(
        m.lines()
            .any(|l| l.starts_with("agentfleet_model_tokens_total{")
                && l.contains("model=\"steady\"")),
        "tokens are counted by the model that spent them"
    );
    // The cycle's record says which model answered each step, and why it changed.
    let sre = AgentKey::new(NS, "sre");
    let mut records = Vec::new();
    for head in store.cycle_heads(&sre, None, 20).await.unwrap() {
        if let Some(json) = store.cycle_record(&sre, head.seq).await.unwrap() {
            records.push(serde_json::from_str::<agentfleet::cycles::CycleRecord>(&json).unwrap());
        }
    }
    let noted = |r: &agentfleet::cycles::CycleRecord| {
        r.steps.first().is_some_and(|s| {
            s.model.as_deref() == Some("steady")
                && s.notes
                    .iter()
                    .any(|n| n == "fast failed (server_error): steady answered instead")
        })
    };
    assert_eq!(
        records.iter().filter(|r| noted(r)).count(),
        1,
        "one cycle fell over, and says so: {records:?}"
    );
    assert!(
        records[0]
            .steps
            .iter()
            .all(|s| s.model.as_deref() == Some("steady")),
        "the next stays on the fallback (its prompt cache)"
    );

    // A new endpoint for the primary (the operator renders the Model's change): the next
    // cycle asks it, in the same process.
    let moved = provider(Arc::new(AtomicU16::new(0))).await;
    std::fs::write(&file, manifest(&moved.base_url, &backup.base_url)).unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    ask_and_wait(&store, 5).await;
    assert_eq!(
        keys(&moved),
        ["sk-fast-two"],
        "the primary's key, at its new endpoint"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dedicated_worker_follows_its_models_without_a_restart() {
    lives_through_rotation_fallback_and_a_new_endpoint(&["worker", "--agent"], false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pool_follows_its_agents_models_without_a_restart() {
    lives_through_rotation_fallback_and_a_new_endpoint(
        &["pool", "--namespace", NS, "--name", "p", "--agents"],
        true,
    )
    .await;
}

//! A2A against the official SDK: the Python `a2a-sdk` (PyPI) as the client of agents that
//! `agentfleet dev` serves (card, send, stream, get, list, subscribe, cancel, a question
//! answered on its task, a spent budget, both bindings, refusals). The interpreter is `AGENTFLEET_A2A_PYTHON` (`.ci/run` makes a venv with the
//! SDK), else `python3`; without the SDK the test fails and says how to install it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

#[path = "support/dev.rs"]
mod support;
use support::Dev;

/// The Python that has the SDK.
fn python() -> String {
    let python = std::env::var("AGENTFLEET_A2A_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&python)
        .args(["-c", "import a2a.client, a2a.types"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{python} cannot import the A2A SDK: python3 -m venv /tmp/a2a && /tmp/a2a/bin/pip install 'a2a-sdk==1.3.0' and set AGENTFLEET_A2A_PYTHON=/tmp/a2a/bin/python"
    );
    python
}

const MANIFESTS: &str = "\
apiVersion: agentfleet.dev/v1alpha1
kind: Space
metadata: {name: desk}
spec:
  members: [{id: husam, name: Husam}, {id: dana, name: Dana}]
---
apiVersion: agentfleet.dev/v1alpha1
kind: Agent
metadata: {name: helper}
spec:
  model: {provider: scripted, name: helper}
  spaces: [desk]
  tools:
    interactive:
      - name: confirm_deployment
        description: Ask the humans to confirm a deployment.
        inputSchema: {type: object, properties: {service: {type: string}, version: {type: string}}}
        resultSchema: {type: object, properties: {confirmed: {type: boolean}}, required: [confirmed]}
  a2a:
    description: Answers what it is told.
    skills: [{id: echo, description: Says back what it heard, tags: [demo]}]
    callers: [\"human:husam\"]
---
apiVersion: agentfleet.dev/v1alpha1
kind: Agent
metadata: {name: frugal}
spec:
  model: {provider: scripted, name: frugal}
  spaces: [desk]
  budget: {tokensPerDay: 1}
  a2a:
    callers: [\"*\"]
---
apiVersion: agentfleet.dev/v1alpha1
kind: Agent
metadata: {name: sleeper}
spec:
  model: {provider: scripted, name: sleeper}
  spaces: [desk]
  paused: true
  a2a:
    callers: [\"human:husam\"]
";

#[test]
fn the_official_sdk_talks_to_agents_in_dev() {
    let python = python();
    let dir = std::env::temp_dir().join(format!("agentfleet-a2a-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("desk.yaml"), MANIFESTS).unwrap();
    let dev = Dev::start_in(dir.to_str().unwrap(), &[]);
    let husam = dev.token("default/desk", "Husam");
    let dana = dev.token("default/desk", "Dana");
    let out = Command::new(python)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/a2a/sdk_client.py"
        ))
        .args([&dev.url, &husam, &dana])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the SDK client failed:\n{stdout}\n{stderr}"
    );
    println!("{stdout}");
    for step in [
        "card ok",
        "send, get, list ok",
        "stream ok",
        "rest ok",
        "subscribe, cancel ok",
        "refusals ok",
    ] {
        assert!(stdout.contains(step), "{step} missing:\n{stdout}");
    }
}

/// A JSON-RPC call of `method` to the agent at `url` as the holder of `token`.
async fn rpc(url: &str, token: &str, method: &str, params: serde_json::Value) -> serde_json::Value {
    let response = reqwest::Client::new()
        .post(url)
        .bearer_auth(token)
        .header("A2A-Version", "1.0")
        .json(&serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_survives_killing_dev_mid_cycle() {
    use agentfleet::testing::{MockModel, MockTurn, RedisServer};
    use std::time::{Duration, Instant};
    agentfleet::install_crypto_provider();
    let redis = RedisServer::start().unwrap();
    // The first request never gets its answer (the process is killed meanwhile); the cycle
    // done again answers.
    let model = MockModel::start(vec![
        MockTurn::Slow(
            Duration::from_secs(600),
            Box::new(MockTurn::text("too late")),
        ),
        MockTurn::tools(&[("send_message", serde_json::json!({"text": "recovered"}))]),
        MockTurn::text("done"),
    ])
    .await
    .unwrap();
    let dir = support::ManifestDir::new(
        "a2a-kill",
        "desk",
        &[(
            "steady",
            format!(
                "{}\n  a2a: {{callers: [\"human:husam\"]}}",
                support::openai(&model.base_url)
            ),
        )],
    );
    let flags = ["--redis", &redis.url()];
    let url = |dev: &Dev| format!("{}/a2a/default/steady", dev.url);

    let first = Dev::start_in(dir.path(), &flags);
    let sent = rpc(
        &url(&first),
        &first.token("default/desk", "Husam"),
        "SendMessage",
        serde_json::json!({"message": {"messageId": "m-kill", "role": "ROLE_USER",
            "parts": [{"text": "are you there?"}]}, "configuration": {"returnImmediately": true}}),
    )
    .await;
    let id = sent["result"]["task"]["id"].as_str().unwrap().to_string();
    let start = Instant::now();
    while model.request_count() == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no cycle started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let working = rpc(
        &url(&first),
        &first.token("default/desk", "Husam"),
        "GetTask",
        serde_json::json!({"id": id}),
    )
    .await;
    assert_eq!(
        working["result"]["status"]["state"], "TASK_STATE_WORKING",
        "{working}"
    );
    drop(first); // SIGKILL: the gateway and the worker mid-cycle go at once

    // Another process, another token for Husam: the same task, finished by the cycle done
    // again once the dead worker's lease expires.
    let second = Dev::start_in(dir.path(), &flags);
    let token = second.token("default/desk", "Husam");
    let start = Instant::now();
    let task = loop {
        let got = rpc(
            &url(&second),
            &token,
            "GetTask",
            serde_json::json!({"id": id}),
        )
        .await;
        if got["result"]["status"]["state"] == "TASK_STATE_COMPLETED" {
            break got["result"].clone();
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "not completed: {got}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let said: Vec<&str> = task["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["parts"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(said, ["recovered"], "{task}");
    // Sending the same message again is the same task, delivered once.
    let again = rpc(
        &url(&second),
        &token,
        "SendMessage",
        serde_json::json!({"message": {"messageId": "m-kill", "role": "ROLE_USER",
            "parts": [{"text": "are you there?"}]}, "configuration": {"returnImmediately": true}}),
    )
    .await;
    assert_eq!(
        again["result"]["task"]["id"],
        serde_json::json!(id),
        "{again}"
    );
    assert_eq!(
        model.request_count(),
        3,
        "the cycle was done once more, not twice"
    );
}

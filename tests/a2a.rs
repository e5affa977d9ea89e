//! A2A against the official SDK: the Python `a2a-sdk` (PyPI) as the client of agents that
//! `agentfleet dev` serves (card, send, stream, get, list, subscribe, cancel, a question
//! answered on its task, a spent budget, both bindings, refusals). The interpreter is `AGENTFLEET_A2A_PYTHON` (`.ci/run` makes a venv with the
//! SDK), else `python3`; without the SDK the test fails and says how to install it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

#[path = "support/dev.rs"]
mod support;
use support::Dev;
#[path = "support/a2a.rs"]
mod sdk;
use sdk::{python, RemoteAgent};

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
metadata: {name: guard}
spec:
  model: {provider: openai, name: mock, baseUrl: 'MODEL_URL'}
  spaces: [desk]
  tools:
    http:
      - {name: restart, description: Restarts the service., url: 'http://127.0.0.1:9/restart', method: POST, requireApproval: true}
    approvers: [{tools: [Restart], subjects: [\"human:dana\"]}]
  a2a:
    callers: [\"human:husam\"]
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

/// A model that calls `restart` (which needs approval) when asked to, and says what came of
/// it.
fn guard(req: &serde_json::Value) -> agentfleet::testing::MockTurn {
    use agentfleet::testing::MockTurn;
    let last = agentfleet::testing::last_turn(req);
    let say =
        |text: String| MockTurn::tools(&[("send_message", serde_json::json!({ "text": text }))]);
    match (last.role.as_str(), last.called.as_str()) {
        ("tool", "send_message") => MockTurn::text("done"),
        ("tool", "restart") => say(format!("restart: {}", last.content)),
        _ if last.content.contains("please restart") => {
            MockTurn::tools(&[("restart", serde_json::json!({}))])
        }
        _ => say("ok".into()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_sdk_talks_to_agents_in_dev() {
    let python = python();
    let model = agentfleet::testing::MockModel::responding(guard)
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(format!("agentfleet-a2a-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("desk.yaml"),
        MANIFESTS.replace("MODEL_URL", &model.base_url),
    )
    .unwrap();
    let dev = Dev::start_in(dir.to_str().unwrap(), &[]);
    let husam = dev.token("default/desk", "Husam");
    let dana = dev.token("default/desk", "Dana");
    let url = dev.url.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/a2a/sdk_client.py"
            ))
            .args([&url, &husam, &dana])
            .output()
    })
    .await
    .unwrap()
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
            "parts": [{"text": "are you there?"}], "metadata": {"agentfleet.dev/depth": 3}},
            "configuration": {"returnImmediately": true}}),
    )
    .await;
    let id = sent["result"]["task"]["id"].as_str().unwrap().to_string();
    // The depth a calling agentfleet agent sends goes on in the conversation.
    {
        use agentfleet::store::prelude::*;
        let store = agentfleet::store::RedisStore::new(&redis.url()).unwrap();
        let (digest, message) = id.split_once('-').unwrap();
        let space = agentfleet::identity::SpaceKey::new("default", format!("a2a_{digest}"));
        let read = agentfleet::store::ReadQuery {
            limit: 10,
            before: None,
            after: None,
            ..Default::default()
        };
        let messages = store.read_messages(&space, &read).await.unwrap();
        let posted = messages.iter().find(|m| m.id == message).unwrap();
        assert_eq!(posted.depth, 3, "{posted:?}");
    }
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

/// A model that calls the remote agent's skills as Husam asks ("please quick", "please
/// colour", "please slow"), answers its question, and tells the space what came back.
fn remote_caller(req: &serde_json::Value) -> agentfleet::testing::MockTurn {
    use agentfleet::testing::MockTurn;
    let messages = agentfleet::testing::conversation(req);
    let last = messages.last().cloned().unwrap_or_default();
    let content = last["content"].as_str().unwrap_or("").to_string();
    if last["role"] == "tool" {
        let called = messages
            .iter()
            .rev()
            .find_map(|m| m["tool_calls"][0]["function"]["name"].as_str())
            .unwrap_or("");
        if called == "send_message" {
            return MockTurn::text("done");
        }
        let result: serde_json::Value = serde_json::from_str(&content).unwrap_or_default();
        if result["state"] == "input_required" {
            return MockTurn::tools(&[(
                "remote__colour",
                serde_json::json!({"message": "blue", "taskId": result["taskId"]}),
            )]);
        }
        return MockTurn::tools(&[(
            "send_message",
            serde_json::json!({"text": format!("remote said: {content}")}),
        )]);
    }
    let ask = |skill: &str, message: &str| {
        MockTurn::tools(&[(skill, serde_json::json!({"message": message}))])
    };
    if content.contains("(tool result)") {
        return MockTurn::tools(&[(
            "send_message",
            // A tool's result comes from no space: the answer names one.
            serde_json::json!({"text": format!("later: {content}"), "space": "desk"}),
        )]);
    }
    if content.contains("please quick") {
        return ask("remote__quick", "hello");
    }
    if content.contains("please colour") {
        return ask("remote__colour", "paint the fence");
    }
    if content.contains("please slow") {
        return ask("remote__slow", "job");
    }
    MockTurn::tools(&[("skip", serde_json::json!({}))])
}

/// The texts of the agent's messages in `default/desk`, oldest first.
async fn said(dev: &Dev) -> Vec<String> {
    let page: serde_json::Value = reqwest::Client::new()
        .get(format!(
            "{}/v1/spaces/default/desk/messages?limit=100",
            dev.url
        ))
        .bearer_auth(dev.token("default/desk", "Husam"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut out: Vec<String> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["sender"]["kind"] == "agent")
        .map(|m| m["text"].as_str().unwrap().to_string())
        .collect();
    out.reverse();
    out
}

/// Posts `text` in `default/desk` as Husam, and waits until the agent said something
/// containing `expect` (returned).
async fn ask_and_wait(dev: &Dev, text: &str, expect: &str, secs: u64) -> String {
    let posted = reqwest::Client::new()
        .post(format!("{}/v1/spaces/default/desk/messages", dev.url))
        .bearer_auth(dev.token("default/desk", "Husam"))
        .json(&serde_json::json!({ "text": text }))
        .send()
        .await
        .unwrap();
    assert_eq!(posted.status(), 201);
    wait_said(dev, expect, secs).await
}

async fn wait_said(dev: &Dev, expect: &str, secs: u64) -> String {
    let start = std::time::Instant::now();
    loop {
        if let Some(s) = said(dev).await.into_iter().find(|s| s.contains(expect)) {
            return s;
        }
        assert!(
            start.elapsed().as_secs() < secs,
            "the agent never said {expect:?}: {:?}",
            said(dev).await
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_calls_an_sdk_agent_as_tools_even_across_a_kill() {
    use agentfleet::testing::{MockModel, RedisServer};
    agentfleet::install_crypto_provider();
    let remote = RemoteAgent::start("remote-secret-token", 6);
    let redis = RedisServer::start().unwrap();
    let model = MockModel::responding(remote_caller).await.unwrap();
    let dir = support::ManifestDir::new(
        "a2a-call",
        "desk",
        &[(
            "caller",
            format!(
                "{}\n  tools:\n    a2a:\n      - {{name: remote, url: '{}', timeoutSeconds: 2, headersFrom: {{secretName: remote-auth}}}}\n      - {{name: gone, url: 'http://127.0.0.1:{}/nobody'}}",
                support::openai(&model.base_url),
                remote.url,
                agentfleet::testing::free_port().unwrap()
            ),
        )],
    );
    std::fs::write(
        dir.0.join("secret.yaml"),
        "apiVersion: v1\nkind: Secret\nmetadata: {name: remote-auth}\nstringData: {Authorization: Bearer remote-secret-token}\n",
    )
    .unwrap();
    let flags = ["--redis", &redis.url()];
    let first = Dev::start_in(dir.path(), &flags);

    // A quick skill: called, answered within the call.
    let quick = ask_and_wait(&first, "please quick", "remote said", 30).await;
    assert!(
        quick.contains("echo: hello") && quick.contains("completed"),
        "{quick}"
    );
    // A question back: answered by calling again with the task's id.
    let colour = ask_and_wait(&first, "please colour", "painted", 30).await;
    assert!(colour.contains("painted blue"), "{colour}");
    // A long task: pending at first, then killed with the agent's worker before the remote
    // is done; the worker started again follows it and the result wakes the agent.
    let pending = ask_and_wait(&first, "please slow", "pending", 30).await;
    assert!(pending.contains("callId"), "{pending}");
    drop(first);
    let second = Dev::start_in(dir.path(), &flags);
    let later = wait_said(&second, "later:", 60).await;
    assert!(later.contains("slow result for job"), "{later}");
    let jobs: Vec<_> = remote
        .received()
        .into_iter()
        .filter(|(_, _, text)| text == "job")
        .collect();
    assert_eq!(jobs.len(), 1, "the long task was sent once: {jobs:?}");
    // The chain's depth went with it: Husam's message started it, so the calling cycle is 1.
    assert_eq!(jobs[0].1, 1, "{jobs:?}");
    // The secret never reached the model.
    let all = serde_json::to_string(&model.requests()).unwrap();
    assert!(!all.contains("remote-secret-token"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_get_coded_refusals_and_callers_see_only_their_own() {
    agentfleet::install_crypto_provider();
    let dir = std::env::temp_dir().join(format!("agentfleet-a2a-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("desk.yaml"),
        "apiVersion: agentfleet.dev/v1alpha1\nkind: Space\nmetadata: {name: desk}\nspec:\n  members: [{id: husam, name: Husam}]\n---\napiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {name: helper}\nspec:\n  model: {provider: scripted, name: helper}\n  spaces: [desk]\n  a2a: {callers: [\"human:husam\"]}\n",
    )
    .unwrap();
    let dev = Dev::start_in(dir.to_str().unwrap(), &[]);
    let _ = std::fs::remove_dir_all(&dir);
    let url = format!("{}/a2a/default/helper", dev.url);
    let husam = dev.token("default/desk", "Husam");
    let http = reqwest::Client::new();
    let raw = |body: Vec<u8>, token: String| {
        let (http, url) = (http.clone(), url.clone());
        async move {
            let r = http
                .post(&url)
                .bearer_auth(token)
                .header("A2A-Version", "1.0")
                .header("Content-Type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            (
                r.status().as_u16(),
                r.json::<serde_json::Value>().await.unwrap(),
            )
        }
    };
    let code = |v: &serde_json::Value| v["error"]["code"].as_i64().unwrap_or(0);
    let message = |parts: serde_json::Value, extra: serde_json::Value| {
        let mut m = serde_json::json!({"messageId": "h1", "role": "ROLE_USER", "parts": parts});
        m.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        serde_json::to_vec(&serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": m}})).unwrap()
    };

    let (_, v) = raw(b"{not json".to_vec(), husam.clone()).await;
    assert_eq!(code(&v), -32700, "{v}");
    // Just over dev's 64 KiB: a body far over it is refused before it is read, and the
    // connection may close while the client still writes (no answer to read).
    let (_, v) = raw(vec![b'x'; 65 * 1024], husam.clone()).await;
    assert_eq!(code(&v), -32600, "a body over the limit: {v}");
    let (_, v) = raw(
        br#"{"jsonrpc":"2.0","id":1,"method":"DropTables"}"#.to_vec(),
        husam.clone(),
    )
    .await;
    assert_eq!(code(&v), -32601, "{v}");
    let (_, v) = raw(
        message(
            serde_json::json!([{"raw": "aGVsbG8="}]),
            serde_json::json!({}),
        ),
        husam.clone(),
    )
    .await;
    assert_eq!(code(&v), -32005, "a file part: {v}");
    let (_, v) = raw(
        message(
            serde_json::json!([{"text": "hi"}]),
            serde_json::json!({"contextId": "c".repeat(300)}),
        ),
        husam.clone(),
    )
    .await;
    assert_eq!(code(&v), -32602, "a contextId too long: {v}");
    let (_, v) = raw(
        message(
            serde_json::json!([{"text": "hi", "data": {}}]),
            serde_json::json!({}),
        ),
        husam.clone(),
    )
    .await;
    assert!(
        code(&v) == -32602 || code(&v) == -32600,
        "a part of two kinds: {v}"
    );

    // Husam's task is Husam's: the dev service, which may call the agent too, neither reads
    // it nor lists it, even with the same contextId.
    let (_, v) = raw(
        message(
            serde_json::json!([{"text": "mine"}]),
            serde_json::json!({"contextId": "shared"}),
        ),
        husam.clone(),
    )
    .await;
    let id = v["result"]["task"]["id"].as_str().unwrap().to_string();
    let get = serde_json::to_vec(
        &serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": id}}),
    )
    .unwrap();
    let (_, v) = raw(get.clone(), husam.clone()).await;
    assert_eq!(v["result"]["id"], serde_json::json!(id), "{v}");
    let (_, v) = raw(get, dev.service.clone()).await;
    assert_eq!(code(&v), -32001, "{v}");
    let list = serde_json::to_vec(&serde_json::json!({"jsonrpc": "2.0", "id": 3, "method": "ListTasks", "params": {"contextId": "shared"}})).unwrap();
    let (_, v) = raw(list, dev.service.clone()).await;
    assert_eq!(v["result"]["tasks"], serde_json::json!([]), "{v}");
}

/// The keys of `redis` whose names hold `part`, with their time to live (ms; -1: none).
async fn keys_with(redis: &str, part: &str) -> Vec<(String, i64)> {
    let client = redis::Client::open(redis).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("*{part}*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut out = Vec::new();
    for k in keys {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&k)
            .query_async(&mut conn)
            .await
            .unwrap();
        out.push((k, ttl));
    }
    out
}

/// Issue 41, item 4: a conversation lasts `spec.a2a.conversationSeconds` from its first
/// message, then goes with everything in it; its tasks read TASK_NOT_FOUND, it is listed no
/// more, and a stream on a task of it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversations_expire_and_their_streams_end() {
    use agentfleet::testing::RedisServer;
    use std::time::{Duration, Instant};
    agentfleet::install_crypto_provider();
    let redis = RedisServer::start().unwrap();
    let dir = support::ManifestDir::new(
        "a2a-expire",
        "desk",
        &[
            (
                "brief",
                "  model: {provider: scripted, name: brief}\n  a2a: {callers: [\"human:husam\"], conversationSeconds: 4}".into(),
            ),
            (
                "idle",
                "  model: {provider: scripted, name: idle}\n  paused: true\n  a2a: {callers: [\"human:husam\"], conversationSeconds: 4}".into(),
            ),
        ],
    );
    let dev = Dev::start_in(dir.path(), &["--redis", &redis.url()]);
    let husam = dev.token("default/desk", "Husam");
    let brief = format!("{}/a2a/default/brief", dev.url);
    let idle = format!("{}/a2a/default/idle", dev.url);
    let started = Instant::now();
    let sent = rpc(
        &brief,
        &husam,
        "SendMessage",
        serde_json::json!({"message": {"messageId": "m-brief", "role": "ROLE_USER",
            "parts": [{"text": "hello"}]}}),
    )
    .await;
    let task = sent["result"]["task"].clone();
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{sent}");
    let id = task["id"].as_str().unwrap().to_string();
    let digest = id.split_once('-').unwrap().0.to_string();
    // Its record, log and Husam's post expire with it; nothing of it is kept for ever.
    let theirs = |k: &str| {
        [":info", ":agents", ":log"].iter().any(|s| k.ends_with(s)) || k.contains("a2a:m-brief")
    };
    let keys = keys_with(&redis.url(), &digest).await;
    assert_eq!(
        keys.iter().filter(|(k, _)| theirs(k)).count(),
        4,
        "{keys:?}"
    );
    for (k, ttl) in &keys {
        assert!(*ttl > 0, "{k} never expires");
        if theirs(k) {
            assert!(*ttl <= 4_000, "{k} outlives its conversation: PTTL {ttl}");
        }
    }
    let listed = rpc(&brief, &husam, "ListTasks", serde_json::json!({})).await;
    assert_eq!(listed["result"]["totalSize"], 1, "{listed}");

    // A task that waits (its agent is paused), subscribed to: the stream ends when its
    // conversation does.
    let waiting = rpc(
        &idle,
        &husam,
        "SendMessage",
        serde_json::json!({"message": {"messageId": "m-idle", "role": "ROLE_USER",
            "parts": [{"text": "anyone?"}]}, "configuration": {"returnImmediately": true}}),
    )
    .await;
    let waiting = waiting["result"]["task"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut stream = reqwest::Client::new()
        .post(&idle)
        .bearer_auth(&husam)
        .header("A2A-Version", "1.0")
        .json(
            &serde_json::json!({"jsonrpc": "2.0", "id": 9, "method": "SubscribeToTask",
            "params": {"id": waiting}}),
        )
        .send()
        .await
        .unwrap();
    let mut said = String::new();
    let ended = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(chunk) = stream.chunk().await.unwrap() {
            said.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    assert!(ended.is_ok(), "the stream never ended: {said}");
    assert!(said.contains("TASK_STATE_SUBMITTED"), "{said}");
    assert!(said.contains("-32001"), "{said}");
    assert!(started.elapsed() >= Duration::from_secs(3), "{said}");

    // Gone: the task, the listing, the keys.
    let got = rpc(&brief, &husam, "GetTask", serde_json::json!({"id": id})).await;
    assert_eq!(got["error"]["code"], -32001, "{got}");
    let listed = rpc(&brief, &husam, "ListTasks", serde_json::json!({})).await;
    assert_eq!(listed["result"]["totalSize"], 0, "{listed}");
    let left = keys_with(&redis.url(), &digest).await;
    assert!(!left.iter().any(|(k, _)| theirs(k)), "{left:?}");
    // The same contextId starts a new conversation.
    let again = rpc(
        &brief,
        &husam,
        "SendMessage",
        serde_json::json!({"message": {"messageId": "m-again", "role": "ROLE_USER",
            "contextId": task["contextId"], "parts": [{"text": "hello again"}]}}),
    )
    .await;
    assert_eq!(
        again["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{again}"
    );
}

//! A2A on the standalone gateway binary (`agentfleet gateway`) over a real `redis-server`,
//! with no worker: what the gateway alone decides — the card's caching, a caller's open
//! streams, the version and the `ListTasks` filter. `AGENTFLEET_TEST_BIN` runs these against
//! another build.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

#[path = "support/dev.rs"]
mod support;

use agentfleet::identity::AgentKey;
use agentfleet::store::prelude::*;
use agentfleet::store::{A2aRecord, A2aSkill, RedisStore};
use agentfleet::testing::RedisServer;

const HUSAM: &str = "tok-husam-a2a";
const DANA: &str = "tok-dana-a2a";

struct Gateway {
    child: Child,
    url: String,
    _redis: RedisServer,
    _dir: std::path::PathBuf,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self._dir);
    }
}

fn sha256(s: &str) -> String {
    use sha2::{Digest, Sha256};
    agentfleet::hex(&Sha256::digest(s.as_bytes()))
}

/// The gateway binary with `flags`, serving agent `ops/helper` over A2A to Husam and Dana.
async fn gateway(tag: &str, flags: &[&str]) -> Gateway {
    agentfleet::install_crypto_provider();
    let redis = RedisServer::start().unwrap();
    let store = RedisStore::new(&redis.url()).unwrap();
    let agent = AgentKey::new("ops", "helper");
    store.register_agent(&agent).await.unwrap();
    let record = A2aRecord {
        v: Default::default(),
        description: "Answers what it is told.".into(),
        skills: vec![A2aSkill {
            id: "echo".into(),
            name: "echo".into(),
            description: "Says back what it heard".into(),
            tags: vec![],
            examples: vec![],
        }],
        callers: vec!["human:husam".into(), "human:dana".into()],
        version: "1".into(),
        max_chain_depth: 8,
        conversation_seconds: agentfleet::store::CONVERSATION_SECONDS,
    };
    store.apply_a2a(&agent, Some(&record)).await.unwrap();
    let dir = std::env::temp_dir().join(format!("agentfleet-a2a-gw-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("tokens.yaml"),
        format!(
            "tokens:\n  - {{sha256: {}, kind: human, id: husam, name: Husam}}\n  - {{sha256: {}, kind: human, id: dana, name: Dana}}\n",
            sha256(HUSAM),
            sha256(DANA)
        ),
    )
    .unwrap();
    let (child, [port]) = agentfleet::testing::spawn_on_free_ports(
        "agentfleet gateway",
        |[port]| {
            Command::new(support::bin())
                .arg("gateway")
                .arg("--tokens")
                .arg(dir.join("tokens.yaml"))
                .args(["--redis", &redis.url()])
                .args(["--addr", &format!("127.0.0.1:{port}")])
                .args(flags)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| e.to_string())
        },
        agentfleet::testing::listening,
    )
    .unwrap();
    Gateway {
        child,
        url: format!("http://127.0.0.1:{port}/a2a/ops/helper"),
        _redis: redis,
        _dir: dir,
    }
}

/// A JSON-RPC call as the holder of `token`: the HTTP status and the body.
async fn rpc(gw: &Gateway, token: &str, method: &str, params: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(&gw.url)
        .bearer_auth(token)
        .header("A2A-Version", "1.0")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

/// A task of Husam's that stays `SUBMITTED` (no worker answers here).
async fn waiting_task(gw: &Gateway, token: &str, message_id: &str) -> String {
    let (status, sent) = rpc(
        gw,
        token,
        "SendMessage",
        json!({"message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": "hello"}]},
            "configuration": {"returnImmediately": true}}),
    )
    .await;
    assert_eq!(status, 200, "{sent}");
    sent["result"]["task"]["id"].as_str().unwrap().to_string()
}

/// Opens `SubscribeToTask` on `task`: the open response once its first event came, or the
/// refusal (status, body).
async fn subscribe(
    gw: &Gateway,
    token: &str,
    task: &str,
) -> Result<reqwest::Response, (u16, Value)> {
    let mut r = reqwest::Client::new()
        .post(&gw.url)
        .bearer_auth(token)
        .header("A2A-Version", "1.0")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task}}))
        .send()
        .await
        .unwrap();
    let sse = r
        .headers()
        .get("content-type")
        .is_some_and(|c| c.to_str().unwrap().starts_with("text/event-stream"));
    if !sse {
        let status = r.status().as_u16();
        return Err((status, r.json().await.unwrap()));
    }
    let first = tokio::time::timeout(Duration::from_secs(10), r.chunk())
        .await
        .expect("the stream's first event")
        .unwrap()
        .unwrap();
    let first = String::from_utf8_lossy(&first).to_string();
    if first.contains("\"error\"") {
        return Err((200, json!(first)));
    }
    assert!(first.contains("TASK_STATE_SUBMITTED"), "{first}");
    Ok(r)
}

/// Issue 41, item 10: without `--public-url` the card names the request's `Host` and
/// `X-Forwarded-Proto`, so no shared cache may keep it for others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_built_from_the_request_is_never_cached_for_others() {
    let gw = gateway("card", &[]).await;
    let card = |host: &'static str, proto: &'static str| {
        let url = format!("{}/.well-known/agent-card.json", gw.url);
        async move {
            let r = reqwest::Client::new()
                .get(url)
                .header("Host", host)
                .header("X-Forwarded-Proto", proto)
                .send()
                .await
                .unwrap();
            let headers = r.headers().clone();
            let header = |n: &str| {
                headers
                    .get(n)
                    .map(|v| v.to_str().unwrap().to_ascii_lowercase())
                    .unwrap_or_default()
            };
            let (cache, vary) = (header("cache-control"), header("vary"));
            let body: Value = r.json().await.unwrap();
            (cache, vary, body)
        }
    };
    let (cache, vary, body) = card("evil.example", "http").await;
    // The request's headers make the card: it is the requester's alone.
    assert_eq!(
        body["supportedInterfaces"][0]["url"],
        "http://evil.example/a2a/ops/helper"
    );
    assert!(
        cache.contains("private") && !cache.contains("public"),
        "a card made from the request's headers is cacheable by shared caches: Cache-Control {cache:?}"
    );
    assert!(
        vary.contains("host") && vary.contains("x-forwarded-proto"),
        "Vary {vary:?}"
    );

    // With --public-url, the card is everyone's and any cache may keep it.
    let fixed = gateway(
        "card-fixed",
        &["--public-url", "https://agents.example.com"],
    )
    .await;
    let r = reqwest::Client::new()
        .get(format!("{}/.well-known/agent-card.json", fixed.url))
        .header("Host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["cache-control"], "public, max-age=60");
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body["supportedInterfaces"][0]["url"],
        "https://agents.example.com/a2a/ops/helper"
    );
}

/// Issue 41, item 9: one caller cannot hold every connection with streams that never end;
/// over its bound (32 by default) it is refused with a 429 and others still stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_caller_holds_at_most_its_share_of_open_streams() {
    let gw = gateway("streams", &[]).await;
    let task = waiting_task(&gw, HUSAM, "m-streams").await;
    let mut open = Vec::new();
    for i in 0..32 {
        match subscribe(&gw, HUSAM, &task).await {
            Ok(r) => open.push(r),
            Err(e) => panic!("stream {i} refused: {e:?}"),
        }
    }
    let (status, body) = subscribe(&gw, HUSAM, &task)
        .await
        .map(|_| ())
        .expect_err("a 33rd stream of one caller was opened");
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], -32042, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("32 streams open"), "{message}");
    // Others are not locked out.
    let theirs = waiting_task(&gw, DANA, "m-dana").await;
    let _dana = subscribe(&gw, DANA, &theirs).await.unwrap();
    // A stream closed gives its place back.
    drop(open.pop());
    let start = std::time::Instant::now();
    loop {
        match subscribe(&gw, HUSAM, &task).await {
            Ok(r) => {
                open.push(r);
                break;
            }
            Err(e) => assert!(
                start.elapsed() < Duration::from_secs(10),
                "the closed stream's place never came back: {e:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The bound is settable.
    let small = gateway("streams-small", &["--max-streams-per-caller", "1"]).await;
    let task = waiting_task(&small, HUSAM, "m-small").await;
    let _one = subscribe(&small, HUSAM, &task).await.unwrap();
    let (status, _) = subscribe(&small, HUSAM, &task)
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(status, 429);
}

/// Issue 41, item 11: an empty `A2A-Version` header leaves the query parameter to decide;
/// an unknown `ListTasks` status is refused (invalid params), in both bindings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_version_and_the_status_filter_are_read_as_given() {
    let gw = gateway("version", &[]).await;
    let http = reqwest::Client::new();
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}});
    let v: Value = http
        .post(format!("{}?A2A-Version=1.0", gw.url))
        .bearer_auth(HUSAM)
        .header("A2A-Version", "")
        .json(&list)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        v["result"]["tasks"].is_array(),
        "an empty header overrode the query's version: {v}"
    );
    // No version at all is still refused.
    let v: Value = http
        .post(&gw.url)
        .bearer_auth(HUSAM)
        .header("A2A-Version", "")
        .json(&list)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["error"]["code"], -32009, "{v}");

    waiting_task(&gw, HUSAM, "m-status").await;
    let (_, v) = rpc(
        &gw,
        HUSAM,
        "ListTasks",
        json!({"status": "TASK_STATE_SUBMITTED"}),
    )
    .await;
    assert_eq!(v["result"]["tasks"].as_array().unwrap().len(), 1, "{v}");
    let (_, v) = rpc(
        &gw,
        HUSAM,
        "ListTasks",
        json!({"status": "TASK_STATE_DONE"}),
    )
    .await;
    assert_eq!(
        v["error"]["code"], -32602,
        "an unknown status was accepted: {v}"
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("TASK_STATE_DONE"),
        "{v}"
    );
    let r = http
        .get(format!("{}/tasks?status=DONE", gw.url))
        .bearer_auth(HUSAM)
        .header("A2A-Version", "1.0")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
}

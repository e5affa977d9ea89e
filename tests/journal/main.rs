//! The journal with a real `kill -9`: a worker process calling an HTTP tool on a real HTTP
//! server (which counts the requests it gets) is killed between a finished call and the
//! cycle's commit, and during a call; the restarted worker never repeats an effect it cannot
//! know is harmless to repeat. Calls that wait for a human: [`approvals`].

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failing loudly is the point

mod approvals;

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentfleet::identity::AgentKey;
use agentfleet::identity::SpaceKey;
use agentfleet::store::{prelude::*, RedisStore};
use agentfleet::testing::{space_record, MockModel, MockTurn, RedisServer};
use axum::http::HeaderMap;
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_agentfleet");

struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Worker {
    /// `agentfleet worker` for the agent of `manifest` on the Redis at `redis_url`.
    fn spawn(manifest: &std::path::Path, redis_url: &str) -> Worker {
        Worker(
            agentfleet::testing::worker_command(BIN, manifest, redis_url)
                .unwrap()
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap(),
        )
    }

    /// Stops it as the kubelet stops a pod scaled away: SIGTERM, then waits for it to exit.
    fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.0.id().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
        let start = Instant::now();
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return status;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the worker did not stop on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill_9(&mut self) {
        let pid = self.0.id().to_string();
        assert!(Command::new("kill")
            .args(["-9", &pid])
            .status()
            .unwrap()
            .success());
        let _ = self.0.wait();
    }
}

/// What the tool server saw: each request's method, path and query, body and
/// `Idempotency-Key`.
#[derive(Clone, Debug)]
struct Seen {
    uri: String,
    body: String,
    key: Option<String>,
}

/// A real HTTP tool server: answers `/tickets` (POST, non-idempotent) and `/status` (GET)
/// with JSON; while `hold` is set it keeps every request waiting a minute first.
struct ToolServer {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    hold: Arc<Mutex<bool>>,
}

impl ToolServer {
    async fn start() -> Self {
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let hold: Arc<Mutex<bool>> = Arc::default();
        let handler = {
            let seen = seen.clone();
            let hold = hold.clone();
            move |uri: axum::http::Uri, headers: HeaderMap, body: String| {
                let seen = seen.clone();
                let hold = hold.clone();
                async move {
                    seen.lock().unwrap().push(Seen {
                        uri: uri.to_string(),
                        body,
                        key: headers
                            .get("idempotency-key")
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_string),
                    });
                    let wait = *hold.lock().unwrap();
                    if wait {
                        tokio::time::sleep(Duration::from_secs(60)).await;
                    }
                    axum::Json(json!({"ticket": "T-1", "state": "open"}))
                }
            }
        };
        let app = axum::Router::new()
            .route("/tickets", axum::routing::post(handler.clone()))
            .route("/status", axum::routing::get(handler));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        ToolServer { url, seen, hold }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn hold(&self, on: bool) {
        *self.hold.lock().unwrap() = on;
    }
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One agent on a real Redis with a model server and a tool server, run as `agentfleet
/// worker` processes.
struct Rig {
    _redis: RedisServer,
    url: String,
    store: RedisStore,
    model: MockModel,
    tools: ToolServer,
    manifest: std::path::PathBuf,
    dir: std::path::PathBuf,
}

impl Rig {
    async fn start(name: &str, turns: Vec<MockTurn>) -> Rig {
        Rig::start_with(name, turns, 3600).await
    }

    /// A rig whose agent waits `approval_seconds` for a human's decision.
    async fn start_with(name: &str, turns: Vec<MockTurn>, approval_seconds: u32) -> Rig {
        let redis = RedisServer::start().unwrap();
        let url = redis.url();
        let store = RedisStore::new(&url).unwrap();
        store
            .apply_space(
                &SpaceKey::new("ops", "oncall"),
                &space_record("On call", &["sre"], &["dana"]),
            )
            .await
            .unwrap();
        let model = MockModel::start(turns).await.unwrap();
        let tools = ToolServer::start().await;
        let dir =
            std::env::temp_dir().join(format!("agentfleet-journal-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let manifest = dir.join("sre.yaml");
        std::fs::write(
            &manifest,
            format!(
                r#"apiVersion: agentfleet.dev/v1alpha1
kind: Agent
metadata: {{name: sre, namespace: ops}}
spec:
  model: {{provider: openai, name: mock, baseUrl: "{model}"}}
  spaces: [oncall]
  # A call and an answer: the answer is the last step, so it ends without the nudge.
  cycle: {{maxSteps: 2}}
  tools:
    approvalTimeoutSeconds: {approval_seconds}
    http:
      - name: open_ticket
        description: Opens a ticket.
        method: POST
        url: "{tools}/tickets"
        inputSchema:
          type: object
          properties: {{title: {{type: string}}}}
          required: [title]
      - name: service_status
        description: Reads a service's status.
        url: "{tools}/status"
        inputSchema:
          type: object
          properties: {{service: {{type: string}}}}
      - name: restart_service
        description: Restarts a service (a human approves first).
        method: POST
        url: "{tools}/tickets"
        requireApproval: true
        inputSchema:
          type: object
          properties: {{service: {{type: string}}}}
"#,
                model = model.base_url,
                tools = tools.url
            ),
        )
        .unwrap();
        Rig {
            _redis: redis,
            url,
            store,
            model,
            tools,
            manifest,
            dir,
        }
    }

    fn worker(&self) -> Worker {
        Worker::spawn(&self.manifest, &self.url)
    }

    fn post(&self, text: &str) {
        let out = Command::new(BIN)
            .args(["space", "post", "ops/oncall", "--from", "dana", text])
            .env("AGENTFLEET_REDIS_URL", &self.url)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The space's log as `agentfleet space read` prints it.
    fn space_log(&self) -> String {
        let out = Command::new(BIN)
            .args(["space", "read", "ops/oncall"])
            .env("AGENTFLEET_REDIS_URL", &self.url)
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    async fn until_committed(&self) {
        let agent = AgentKey::new("ops", "sre");
        let start = Instant::now();
        while self.store.consciousness(&agent).await.unwrap().cycle < 1 {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the restarted worker did not finish the cycle"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(self.store.inflight(&agent).await.unwrap(), 0);
    }

    /// The `tool` messages of the model's request number `n` (from 0).
    fn tool_results(&self, n: usize) -> Vec<String> {
        let request = &self.model.requests()[n];
        request["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["content"].as_str().unwrap_or_default().to_string())
            .collect()
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn open_ticket() -> MockTurn {
    MockTurn::tools(&[("open_ticket", json!({"title": "disk full on db-1"}))])
}

#[tokio::test(flavor = "multi_thread")]
async fn a_finished_call_is_not_made_again_after_kill_9() {
    let rig = Rig::start(
        "finished",
        vec![
            open_ticket(),
            MockTurn::Slow(Duration::from_secs(60), Box::new(MockTurn::text("never"))),
        ],
    )
    .await;
    let mut first = rig.worker();
    rig.post("db-1 is out of disk, open a ticket");
    // The call is done and the model is thinking about the next step: kill -9 before the
    // cycle commits.
    wait_for("the call and the next step under way", || {
        rig.model.request_count() == 2
    });
    assert_eq!(rig.tools.seen().len(), 1);
    first.kill_9();

    rig.model.push(MockTurn::text("Opened T-1."));
    let _second = rig.worker();
    rig.until_committed().await;
    assert_eq!(
        rig.tools.seen().len(),
        1,
        "the finished call was made again: {:?}",
        rig.tools.seen()
    );
    assert_eq!(
        rig.model.request_count(),
        3,
        "one model call after the restart"
    );
    let replayed = rig.tool_results(2);
    assert!(
        replayed.iter().any(|r| r.contains("T-1")),
        "the recorded result is replayed to the model: {replayed:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_non_idempotent_call_cut_off_by_kill_9_is_not_repeated_and_the_model_is_told() {
    let rig = Rig::start("unknown", vec![open_ticket()]).await;
    rig.tools.hold(true);
    let mut first = rig.worker();
    rig.post("db-1 is out of disk, open a ticket");
    wait_for("the call to reach the tool server", || {
        rig.tools.seen().len() == 1
    });
    first.kill_9();
    rig.tools.hold(false);

    rig.model.push(MockTurn::text(
        "I could not tell whether the ticket was opened.",
    ));
    let _second = rig.worker();
    rig.until_committed().await;
    assert_eq!(
        rig.tools.seen().len(),
        1,
        "a POST whose outcome is unknown was repeated: {:?}",
        rig.tools.seen()
    );
    assert_eq!(
        rig.model.request_count(),
        2,
        "one model call after the restart"
    );
    let told = rig.tool_results(1);
    assert_eq!(told.len(), 1, "{told:?}");
    let told: Value = serde_json::from_str(&told[0]).unwrap();
    let error = told["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("unknown") && error.contains("not repeated"),
        "the model is told the outcome is unknown and the call was not repeated: {told}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idempotent_call_cut_off_by_kill_9_is_retried_with_the_same_key() {
    let rig = Rig::start(
        "retried",
        vec![MockTurn::tools(&[(
            "service_status",
            json!({"service": "db-1"}),
        )])],
    )
    .await;
    rig.tools.hold(true);
    let mut first = rig.worker();
    rig.post("how is db-1?");
    wait_for("the call to reach the tool server", || {
        rig.tools.seen().len() == 1
    });
    first.kill_9();
    rig.tools.hold(false);

    rig.model.push(MockTurn::text("db-1 is open."));
    let _second = rig.worker();
    rig.until_committed().await;
    let seen = rig.tools.seen();
    assert_eq!(seen.len(), 2, "retried once: {seen:?}");
    assert!(seen[0].uri.contains("service=db-1"), "{seen:?}");
    assert!(seen[0].body.is_empty(), "{seen:?}");
    assert!(seen[0].key.is_some(), "{seen:?}");
    assert_eq!(seen[0].key, seen[1].key, "the same Idempotency-Key");
    let replayed = rig.tool_results(1);
    assert!(replayed.iter().any(|r| r.contains("open")), "{replayed:?}");
}

// ---- Approvals: the cycle pauses for a human, durably ---------------------------------------

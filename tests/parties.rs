//! One agent, many parties (issue 40; docs/parties.md): agent `gated` serves the members of
//! its spaces (`team`: Husam and Dana; `family`: Husam) and, over A2A, any caller
//! (`callers: ["*"]`). Each defect the issue saw, tried as an attacker would, is a test here
//! on real components: `agentfleet dev` on a real `redis-server`, the official A2A SDK as
//! the outside caller (`tests/a2a/sdk_caller.py`) and as a remote agent
//! (`tests/a2a/sdk_server.py`), a scripted model server, a refund service that counts what
//! reaches it. The batch of item 1 is made certain: the agent is kept busy (a slow model
//! answer) while both messages arrive, so one drain takes them both.
//!
//! `AGENTFLEET_TEST_BIN` runs them against another build: against the build before the
//! party rules each of the seven fails (item 8 is `a_person_cannot_pose_as_a_service`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use agentfleet::testing::{last_turn, MockModel, MockTurn, RedisServer};

#[path = "support/dev.rs"]
mod support;
use support::Dev;
#[path = "support/a2a.rs"]
mod sdk;
use sdk::{Caller, RemoteAgent};

/// What `gated` does, as its model: asked to refund, it calls `refund` (which needs an
/// approval); told a door code, it repeats it where it is (no `space`); asked for the family
/// secret, it says it to `family`, its text written before the space it names; "quick" and
/// "remote refund" call the remote agent's skills; a callback from the remote (or "start the
/// loop") calls the remote's `callback` again; a tool's result is said; anything else is
/// greeted.
fn gated(request: &Value) -> MockTurn {
    let last = last_turn(request);
    let say = |text: String| MockTurn::tools(&[("send_message", json!({ "text": text }))]);
    match (last.role.as_str(), last.called.as_str()) {
        ("tool", "send_message") => MockTurn::text("done"),
        ("tool", tool) => say(format!("{tool}: {}", last.content)),
        _ => {
            let c = last.content.as_str();
            if c.contains("please refund") {
                MockTurn::tools(&[("refund", json!({"order": 7}))])
            } else if c.contains("remote refund") {
                MockTurn::tools(&[("remote__Refund", json!({"message": "order 7"}))])
            } else if c.contains("door code") {
                say("noted: the door code is 4711".into())
            } else if c.contains("family secret") {
                MockTurn::Reply {
                    text: None,
                    tool_calls: vec![(
                        "send_message".into(),
                        r#"{"text": "the family secret is in the blue box", "space": "family"}"#
                            .into(),
                    )],
                    usage: (100, 20),
                }
            } else if c.contains("from remote") || c.contains("start the loop") {
                MockTurn::tools(&[("remote__callback", json!({"message": "ping"}))])
            } else if c.contains("quick") {
                MockTurn::tools(&[("remote__quick", json!({"message": "hello"}))])
            } else {
                say("hello".into())
            }
        }
    }
}

/// A refund service: counts the requests that reach it.
struct Refunds {
    url: String,
    count: Arc<AtomicUsize>,
    _server: tokio::task::JoinHandle<()>,
}

impl Refunds {
    async fn start() -> Self {
        let count = Arc::new(AtomicUsize::new(0));
        let seen = count.clone();
        let app = axum::Router::new().route(
            "/refund",
            axum::routing::post(move || {
                let seen = seen.clone();
                async move {
                    seen.fetch_add(1, Ordering::SeqCst);
                    axum::Json(json!({"refunded": true}))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/refund", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            url,
            count,
            _server: server,
        }
    }

    fn reached(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }
}

/// `gated` in `dev --redis`, with what a test needs around it.
struct Fixture {
    dev: Dev,
    model: MockModel,
    refunds: Refunds,
    http: reqwest::Client,
    redis: RedisServer,
    _dir: support::ManifestDir,
}

impl Fixture {
    /// `gated` with `extra` lines of its spec (indented two spaces) and, when given, the
    /// remote agent as its A2A tool `remote` (`requireApproval: [refund]`).
    async fn start(tag: &str, extra: &str, remote: Option<&RemoteAgent>) -> Self {
        agentfleet::install_crypto_provider();
        let redis = RedisServer::start().unwrap();
        let model = MockModel::responding(gated).await.unwrap();
        let refunds = Refunds::start().await;
        let remote = remote.map_or_else(String::new, |r| {
            format!(
                "\n    a2a:\n      - {{name: remote, url: '{}', timeoutSeconds: 5, requireApproval: [refund], headersFrom: {{secretName: remote-auth}}}}",
                r.url
            )
        });
        let yaml = format!(
            "apiVersion: agentfleet.dev/v1alpha1
kind: Space
metadata: {{name: team}}
spec:
  members: [{{id: husam, name: Husam}}, {{id: dana, name: Dana}}]
---
apiVersion: agentfleet.dev/v1alpha1
kind: Space
metadata: {{name: family}}
spec:
  members: [{{id: husam, name: Husam}}]
---
apiVersion: agentfleet.dev/v1alpha1
kind: Space
metadata: {{name: lobby}}
spec:
  members: [{{id: olga, name: Olga}}]
---
apiVersion: v1
kind: Secret
metadata: {{name: remote-auth}}
stringData: {{Authorization: Bearer remote-secret-token}}
---
apiVersion: agentfleet.dev/v1alpha1
kind: Agent
metadata: {{name: gated}}
spec:
{}
  spaces: [team, family]
  tools:
    http:
      - {{name: refund, description: Refunds an order., url: '{}', method: POST, requireApproval: true}}{remote}
{extra}
  a2a: {{callers: [\"*\"]}}
",
            support::openai(&model.base_url),
            refunds.url,
        );
        let dir = support::ManifestDir(
            std::env::temp_dir().join(format!("agentfleet-parties-{tag}-{}", std::process::id())),
        );
        std::fs::create_dir_all(&dir.0).unwrap();
        std::fs::write(dir.0.join("gated.yaml"), yaml).unwrap();
        let dev = Dev::start_in(dir.path(), &["--redis", &redis.url()]);
        Self {
            dev,
            model,
            refunds,
            http: reqwest::Client::new(),
            redis,
            _dir: dir,
        }
    }

    fn husam(&self) -> String {
        self.dev.token("default/team", "Husam")
    }

    fn dana(&self) -> String {
        self.dev.token("default/team", "Dana")
    }

    /// An outside caller: `dev`'s service token (`service:dev`), or Olga (a person of no space
    /// of the agent).
    fn outsider(&self, olga: bool) -> Caller {
        let token = if olga {
            self.dev.token("default/lobby", "Olga")
        } else {
            self.dev.service.clone()
        };
        Caller::new(&format!("{}/a2a/default/gated", self.dev.url), &token)
    }

    async fn post(&self, who: &str, space: &str, text: &str) {
        let r = self
            .dev
            .post(&self.http, who, space, &json!({ "text": text }))
            .await;
        assert_eq!(r.status(), 201, "{}", r.text().await.unwrap_or_default());
    }

    /// The texts of `space`'s last page of messages, oldest first.
    async fn said(&self, space: &str) -> Vec<String> {
        let page = self.dev.messages(&self.http, &self.husam(), space).await;
        let mut texts: Vec<String> = page["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["text"].as_str().unwrap_or_default().to_string())
            .collect();
        texts.reverse();
        texts
    }

    /// Waits until something said in `space` contains `want`; that text.
    async fn wait_said(&self, space: &str, want: &str) -> String {
        let start = Instant::now();
        loop {
            if let Some(t) = self
                .said(space)
                .await
                .into_iter()
                .find(|t| t.contains(want))
            {
                return t;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{want:?} never said in {space}: {:?}",
                self.said(space).await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Keeps the agent busy (its next model answer comes after `busy`) until both `then`
    /// messages wait in its inbox: one drain takes them together. Returns once the busy
    /// cycle started.
    async fn busy(&self, busy: Duration) {
        self.model.push(MockTurn::Slow(
            busy,
            Box::new(MockTurn::tools(&[("skip", json!({}))])),
        ));
        let before = self.model.request_count();
        self.post(&self.husam(), "family", "warming up").await;
        let start = Instant::now();
        while self.model.request_count() == before {
            assert!(start.elapsed() < Duration::from_secs(20), "no busy cycle");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The requests the model received whose inbox (a user message) contains `marker`.
    fn requests_with(&self, marker: &str) -> Vec<String> {
        self.model
            .requests()
            .iter()
            .map(Value::to_string)
            .filter(|r| r.contains(marker))
            .collect()
    }

    /// Approves `tool`'s call waiting in `space` as the holder of `token`: the status.
    async fn answer(&self, token: &str, tool: &str, decision: &str) -> (u16, Value) {
        let calls = self.dev.get(&self.http, token, "/v1/calls").await;
        let call = calls["calls"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["tool"] == tool)
            .unwrap_or_else(|| panic!("no call of {tool} for this caller: {calls}"))
            .clone();
        let r = self
            .http
            .post(format!(
                "{}/v1/spaces/{}/{}/tool-calls/{}",
                self.dev.url,
                call["namespace"].as_str().unwrap(),
                call["space"].as_str().unwrap(),
                call["callId"].as_str().unwrap()
            ))
            .bearer_auth(token)
            .json(&json!({ "decision": decision }))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or_default())
    }
}

/// The task `id` once it is over or waits for its caller, within 30 s.
fn settled(caller: &mut Caller, id: &str) -> Value {
    let start = Instant::now();
    loop {
        let got = caller.get(id);
        let state = got["task"]["status"]["state"].as_str().unwrap_or_default();
        if [
            "TASK_STATE_COMPLETED",
            "TASK_STATE_INPUT_REQUIRED",
            "TASK_STATE_FAILED",
            "TASK_STATE_REJECTED",
        ]
        .contains(&state)
        {
            return got["task"].clone();
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "not settled: {got}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn task_id(sent: &Value) -> String {
    sent["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {sent}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outsider_never_sees_or_approves_an_insiders_gated_call() {
    let f = Fixture::start("approve", "", None).await;
    let mut outsider = f.outsider(false);
    // The outsider says hi, then Husam asks for a refund: both wait for one drain.
    f.busy(Duration::from_secs(3)).await;
    let hi = task_id(&outsider.send("hi", json!({"immediately": true})));
    f.post(&f.husam(), "team", "please refund order 7").await;
    let task = settled(&mut outsider, &hi);
    let seen = task.to_string();
    assert_eq!(
        task["status"]["state"], "TASK_STATE_COMPLETED",
        "the outsider's task asked it for the member's call: {task}"
    );
    assert!(!seen.contains("refund"), "{seen}");
    // The approval is asked in team, where the member's message was; nothing reached the
    // service yet; the outsider's "approve" on its task changes nothing.
    f.wait_said("team", "gated wants to call refund").await;
    let again = outsider.send("approve", json!({"taskId": hi}));
    assert!(again.get("error").is_some(), "{again}");
    assert_eq!(f.refunds.reached(), 0);
    // A member approves: the refund is made, once, and said in team.
    assert_eq!(f.answer(&f.dana(), "refund", "approve").await.0, 202);
    f.wait_said("team", "refunded\":true").await;
    assert_eq!(f.refunds.reached(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_insiders_answer_never_lands_in_an_outsiders_conversation() {
    let f = Fixture::start("answer", "", None).await;
    let mut outsider = f.outsider(false);
    f.busy(Duration::from_secs(3)).await;
    let hi = task_id(&outsider.send("hi", json!({"immediately": true})));
    f.post(&f.husam(), "team", "the door code is 4711").await;
    let task = settled(&mut outsider, &hi);
    f.wait_said("team", "noted: the door code is 4711").await;
    assert!(!task.to_string().contains("4711"), "{task}");
    // Nor did the outsider's cycle see it: no request with the outsider's "hi" holds it.
    for request in f.requests_with("dev: \\\"hi\\\"") {
        assert!(!request.contains("4711"), "{request}");
    }
    // And the member's cycle never saw the outsider's words.
    for request in f.requests_with("4711") {
        assert!(!request.contains("dev: \\\"hi\\\""), "{request}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_text_streams_only_to_the_space_it_is_for() {
    let f = Fixture::start("stream", "", None).await;
    let team = f.dev.stream(&f.http, &f.husam(), "team").await;
    let mut team = agentfleet::testing::SseReader::new(team);
    f.busy(Duration::from_secs(3)).await;
    // Team's message first: team is the active space when the answer for family streams.
    f.post(&f.husam(), "team", "good morning").await;
    f.post(&f.husam(), "family", "what is the family secret?")
        .await;
    f.wait_said("family", "the family secret is in the blue box")
        .await;
    // Everything team's stream got live, in one piece.
    let mut live = String::new();
    while let Ok(d) = team.next("delta", Duration::from_secs(1)).await {
        live.push_str(d["delta"].as_str().unwrap_or_default());
    }
    assert!(
        !live.contains("secret") && !live.contains("blue"),
        "family's text went live to team: {live:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_depth_hurts_nobody_else() {
    let remote = RemoteAgent::start("remote-secret-token", 1);
    let f = Fixture::start("depth", "  cycle: {maxChainDepth: 4}", Some(&remote)).await;
    let mut outsider = f.outsider(false);
    // A chain past the agent's bound is refused at the door: nothing is posted.
    let jumped = outsider.send("hi", json!({"metadata": {"agentfleet.dev/depth": 1000}}));
    let error = jumped["error"].as_str().unwrap_or_default();
    assert!(error.contains("maxChainDepth"), "{jumped}");
    // A claim within it, batched with a member's request: the member's call is not its.
    f.busy(Duration::from_secs(3)).await;
    outsider.send(
        "hi",
        json!({"immediately": true, "metadata": {"agentfleet.dev/depth": 3}}),
    );
    f.post(&f.husam(), "team", "quick, ask the remote").await;
    let said = f.wait_said("team", "remote__quick").await;
    assert!(said.contains("echo: hello"), "{said}");
    assert!(
        f.said("team")
            .await
            .iter()
            .all(|t| !t.contains("did not start")),
        "{:?}",
        f.said("team").await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_that_calls_back_without_the_depth_still_ends_the_chain() {
    let file = std::env::temp_dir().join(format!("agentfleet-callback-{}", std::process::id()));
    let remote = RemoteAgent::start_env(
        "remote-secret-token",
        1,
        &[
            ("CALLBACK_FILE", file.to_str().unwrap()),
            ("CALLBACK_CAP", "12"),
        ],
    );
    let f = Fixture::start("loop", "  cycle: {maxChainDepth: 4}", Some(&remote)).await;
    std::fs::write(
        &file,
        format!("{}/a2a/default/gated {}", f.dev.url, f.dev.service),
    )
    .unwrap();
    f.post(&f.husam(), "team", "start the loop").await;
    // Calls of `callback` until the count stands still for 3 s (or the remote's own cap).
    let calls = || {
        remote
            .received()
            .iter()
            .filter(|(_, _, text)| text == "ping")
            .count()
    };
    let start = Instant::now();
    let (mut last, mut since) = (0, Instant::now());
    while since.elapsed() < Duration::from_secs(3) && start.elapsed() < Duration::from_secs(40) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = calls();
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    let _ = std::fs::remove_file(&file);
    assert!(
        (1..=4).contains(&last),
        "the loop went on past cycle.maxChainDepth 4: {} calls of the remote ({:?})",
        last,
        remote.received()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_do_not_share_a_mind_or_approve_their_own_calls() {
    let f = Fixture::start("minds", "", None).await;
    let mut a = f.outsider(false);
    let mut b = f.outsider(true);
    let told = task_id(&a.send("my secret is S3CR3T", json!({"immediately": true})));
    assert_eq!(
        settled(&mut a, &told)["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    let hello = task_id(&b.send("hello there", json!({"immediately": true})));
    assert_eq!(
        settled(&mut b, &hello)["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    let olgas = f.requests_with("hello there");
    assert!(!olgas.is_empty());
    for request in olgas {
        assert!(
            !request.contains("S3CR3T"),
            "another caller's words: {request}"
        );
    }
    // A caller's own message provokes a gated call: it may not approve it (nobody here may:
    // the agent names no approvers), so it is refused at once and never made.
    let refund = task_id(&a.send("please refund order 7", json!({"immediately": true})));
    let task = settled(&mut a, &refund);
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    assert!(
        task.to_string().contains("nobody here may give it"),
        "{task}"
    );
    let again = a.send("approve", json!({"taskId": refund}));
    assert!(again.get("error").is_some(), "{again}");
    assert_eq!(f.refunds.reached(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_patterns_ignore_case() {
    let remote = RemoteAgent::start("remote-secret-token", 1);
    let f = Fixture::start("case", "", Some(&remote)).await;
    f.post(&f.husam(), "team", "remote refund, please").await;
    // `requireApproval: [refund]` covers the remote's skill `Refund`.
    f.wait_said("team", "gated wants to call remote__Refund")
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let refunded = || {
        remote
            .received()
            .iter()
            .filter(|(_, _, t)| t == "order 7")
            .count()
    };
    assert_eq!(refunded(), 0, "called before it was approved");
    assert_eq!(
        f.answer(&f.dana(), "remote__Refund", "approve").await.0,
        202
    );
    f.wait_said("team", "refunded order 7").await;
    assert_eq!(refunded(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_cannot_pose_as_a_service() {
    use std::process::{Command, Stdio};
    let redis = RedisServer::start().unwrap();
    let file = std::env::temp_dir().join(format!("agentfleet-posing-{}", std::process::id()));
    std::fs::write(
        &file,
        format!(
            "tokens:\n- sha256: {}\n  kind: human\n  id: 'service:probe'\n",
            agentfleet::gateway::auth::hash_token("af_posing")
        ),
    )
    .unwrap();
    let mut child = Command::new(support::bin())
        .args(["gateway", "--addr", "127.0.0.1:0", "--redis", &redis.url()])
        .arg("--tokens")
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = support::exit_within(&mut child, Duration::from_secs(10));
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    let _ = std::fs::remove_file(&file);
    assert!(
        status.is_some_and(|s| !s.success()),
        "the gateway served a person posing as service:probe"
    );
    assert!(stderr.contains("no colon"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_named_approvers_answer_on_every_route() {
    let f = Fixture::start(
        "routes",
        "    approvers: [{tools: [refund], subjects: ['human:dana']}]",
        None,
    )
    .await;
    // Asked in team: Husam is a member, not its approver.
    f.post(&f.husam(), "team", "please refund order 7").await;
    f.wait_said("team", "human:dana may answer").await;
    let mine = f.dev.get(&f.http, &f.husam(), "/v1/calls").await;
    assert_eq!(mine["calls"][0]["mayAnswer"], false, "{mine}");
    assert_eq!(
        mine["calls"][0]["approvers"],
        json!(["human:dana"]),
        "{mine}"
    );
    let (status, body) = f.answer(&f.husam(), "refund", "approve").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("forbidden")),
        "{body}"
    );
    // The command line, as Husam: the same refusal (exit 6).
    let id = mine["calls"][0]["callId"].as_str().unwrap().to_string();
    let redis = f.redis.url();
    let cli = |who: &str| {
        std::process::Command::new(support::bin())
            .args([
                "approve",
                "default/gated",
                &id,
                "--as",
                who,
                "--redis",
                &redis,
            ])
            .output()
            .unwrap()
    };
    let refused = cli("husam");
    assert_eq!(refused.status.code(), Some(6), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("only human:dana may answer"));
    assert_eq!(f.refunds.reached(), 0);
    // Not by a group the call does not name; Dana, by the command line: made.
    let grouped = std::process::Command::new(support::bin())
        .args([
            "approve",
            "default/gated",
            &id,
            "--as",
            "husam",
            "--group",
            "finance",
        ])
        .args(["--redis", &redis])
        .output()
        .unwrap();
    assert_eq!(grouped.status.code(), Some(6), "{grouped:?}");
    assert!(cli("dana").status.success());
    f.wait_said("team", "refunded\":true").await;

    // Asked in an outside caller's conversation: the caller never, Dana (not in it) yes.
    let mut outsider = f.outsider(false);
    let task = task_id(&outsider.send("please refund order 8", json!({"immediately": true})));
    let start = Instant::now();
    let waiting = loop {
        let t = outsider.get(&task);
        if t.to_string().contains("human:dana") {
            break t;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{t}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        waiting["task"]["status"]["state"], "TASK_STATE_WORKING",
        "{waiting}"
    );
    let own = outsider.send("approve", json!({"taskId": task}));
    assert!(
        own["error"].as_str().unwrap_or_default().contains("403"),
        "{own}"
    );
    assert_eq!(f.answer(&f.dana(), "refund", "approve").await.0, 202);
    let done = settled(&mut outsider, &task);
    assert!(done.to_string().contains("refunded"), "{done}");
    assert_eq!(f.refunds.reached(), 2);
}

//! The living agent end to end: a real `redis-server`, an in-test OpenAI-compatible server
//! playing the model, and the worker's process loop — the seeds' scenarios.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failing loudly is the point

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentfleet::crd::Agent;
use agentfleet::identity::AgentKey;
use agentfleet::identity::SpaceKey;
use agentfleet::model::openai::OpenAi;
use agentfleet::store::MemberKind;
use agentfleet::store::{prelude::*, NewMessage, ReadQuery, RedisStore, Sender, SpaceMessage};
use agentfleet::telemetry::WorkerMetrics;
use agentfleet::testing::{space_record, MockModel, MockTurn, RedisServer, WaitInbox};
use agentfleet::worker::cycle::Agentlet;
use agentfleet::worker::{run_agent, Health};
use serde_json::{json, Value};
use tokio::sync::watch;

const NS: &str = "fam";

/// The data plane a scenario runs on.
enum DataPlane {
    One {
        _server: RedisServer,
    },
    Cluster {
        _nodes: agentfleet::testing::RedisCluster,
    },
}

struct Rig {
    _redis: DataPlane,
    /// The URL the store was given.
    url: String,
    store: Arc<RedisStore>,
}

/// A scenario's data plane: one Redis.
async fn rig() -> Rig {
    let redis = RedisServer::start().unwrap();
    let url = redis.url();
    Rig {
        store: Arc::new(RedisStore::new(&url).unwrap()),
        url,
        _redis: DataPlane::One { _server: redis },
    }
}

/// A scenario's data plane: a real Redis Cluster (three primaries, three replicas), the store
/// given one node's URL.
async fn cluster_rig() -> Rig {
    let cluster = agentfleet::testing::RedisCluster::start().unwrap();
    let url = cluster.url();
    Rig {
        store: Arc::new(RedisStore::new(&url).unwrap()),
        url,
        _redis: DataPlane::Cluster { _nodes: cluster },
    }
}

fn manifest(name: &str, spaces: &[&str], base_url: &str, extra: &str) -> Agent {
    serde_yaml::from_str(&format!(
        r#"
apiVersion: agentfleet.dev/v1alpha1
kind: Agent
metadata: {{name: {name}, namespace: {NS}}}
spec:
  model: {{provider: openai, name: mock, baseUrl: "{base_url}"}}
  instructions: You help the family.
  spaces: [{}]
{extra}
"#,
        spaces.join(", ")
    ))
    .unwrap()
}

async fn space(store: &dyn Store, name: &str, agents: &[&str], humans: &[&str]) {
    let mut display = name.to_string();
    display[..1].make_ascii_uppercase();
    store
        .apply_space(
            &SpaceKey::new(NS, name),
            &space_record(&display, agents, humans),
        )
        .await
        .unwrap();
}

async fn say(store: &dyn Store, space: &str, human: &str, text: &str) {
    store
        .post_message(
            &SpaceKey::new(NS, space),
            &NewMessage {
                sender: Sender {
                    groups: Vec::new(),
                    id: human.to_lowercase(),
                    name: human.into(),
                    kind: Some(MemberKind::Human),
                },
                text: text.into(),
                mention: None,
                idempotency_key: None,
                urgent: false,
                depth: 0,
            },
        )
        .await
        .unwrap();
}

fn agentlet(store: Arc<RedisStore>, agent: Agent) -> Arc<Agentlet> {
    let model = OpenAi::new(&agent.spec.model, Default::default())
        .unwrap()
        .with_backoff(Duration::from_millis(10));
    Arc::new(Agentlet::new(
        agent.clone(),
        AgentKey::new(NS, agent.metadata.name.clone().unwrap()),
        store,
        Arc::new(model),
        WorkerMetrics::new().unwrap(),
    ))
}

struct Running {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    health: Arc<Health>,
}

fn start(a: Arc<Agentlet>, holder: &str, ttl: Duration) -> Running {
    let (stop, rx) = watch::channel(false);
    let health = Arc::new(Health::default());
    let task = tokio::spawn(run_agent(a, holder.into(), ttl, health.clone(), rx));
    Running { stop, task, health }
}

impl Running {
    async fn stop(self) {
        let _ = self.stop.send(true);
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .unwrap()
            .unwrap();
    }
}

async fn until<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn until_cycle(store: &RedisStore, agent: &Agentlet, cycle: u64) {
    until(&format!("cycle {cycle} to commit"), async || {
        (store.consciousness(&agent.key).await.unwrap().cycle == cycle).then_some(())
    })
    .await;
}

async fn messages(store: &dyn Store, space: &str) -> Vec<SpaceMessage> {
    let mut m = store
        .read_messages(
            &SpaceKey::new(NS, space),
            &ReadQuery {
                limit: 1000,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    m.reverse();
    m
}

fn send(space: &str, text: &str) -> MockTurn {
    MockTurn::tools(&[("send_message", json!({"space": space, "text": text}))])
}

fn last_user_text(request: &Value) -> String {
    agentfleet::testing::conversation(request)
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .unwrap_or_default()
}

/// The role of the conversation's last message (the fresh context after it is not one).
fn last_role(request: &Value) -> String {
    agentfleet::testing::conversation(request)
        .last()
        .and_then(|m| m["role"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn three_quick_messages_are_handled_in_one_cycle() {
    three_quick_messages_are_handled_in_one_cycle_on(rig().await).await;
}

#[tokio::test]
async fn three_quick_messages_are_handled_in_one_cycle_on_a_redis_cluster() {
    three_quick_messages_are_handled_in_one_cycle_on(cluster_rig().await).await;
}

async fn three_quick_messages_are_handled_in_one_cycle_on(r: Rig) {
    let mock = MockModel::start(vec![
        send(
            "family",
            "Sure: I'll tell Muhammad about 3pm and the documents; Q4 is on track.",
        ),
        MockTurn::text("Done."),
    ])
    .await
    .unwrap();
    space(
        r.store.as_ref(),
        "family",
        &["assistant"],
        &["Husam", "Ahmad"],
    )
    .await;
    for (who, text) in [
        ("Husam", "Tell Muhammad the meeting is at 3pm"),
        ("Husam", "Also tell him to bring the documents"),
        ("Ahmad", "What's the status of the Q4 report?"),
    ] {
        say(r.store.as_ref(), "family", who, text).await;
    }
    let a = agentlet(
        r.store.clone(),
        manifest("assistant", &["family"], &mock.base_url, ""),
    );
    let w = start(a.clone(), "w1", Duration::from_secs(5));
    until_cycle(&r.store, &a, 1).await;
    w.stop().await;

    let requests = mock.requests();
    assert_eq!(requests.len(), 2, "one cycle: a tool step and a final step");
    let inbox = last_user_text(&requests[0]);
    assert_eq!(
        inbox,
        "[Family] Husam: \"Tell Muhammad the meeting is at 3pm\"\n[Family] Husam: \"Also tell him to bring the documents\"\n[Family] Ahmad: \"What's the status of the Q4 report?\""
    );
    let system = requests[0]["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("You are assistant") && system.contains("You help the family."),
        "{system}"
    );
    let context = agentfleet::testing::context_of(&requests[0]).unwrap();
    assert!(
        context.contains("- [Family] space \"family\" — agents: assistant; humans: Husam, Ahmad"),
        "{context}"
    );
    let said = messages(r.store.as_ref(), "family").await;
    assert_eq!(said.len(), 4);
    assert_eq!(said[3].sender.id, "assistant");
    assert!(said[3].text.starts_with("Sure: I'll tell Muhammad"));
    assert_eq!(r.store.inflight(&a.key).await.unwrap(), 0);
    let c = r.store.consciousness(&a.key).await.unwrap();
    assert_eq!(
        c.messages.len(),
        4,
        "inbox, tool call, tool result, final text"
    );
    assert!(
        !c.messages.iter().any(|m| m.contains("You help the family")),
        "the system prompt is never stored"
    );
}

#[tokio::test]
async fn the_hotel_conversation_continues_from_consciousness() {
    the_hotel_conversation_continues_from_consciousness_on(rig().await).await;
}

#[tokio::test]
async fn the_hotel_conversation_continues_from_consciousness_on_a_redis_cluster() {
    the_hotel_conversation_continues_from_consciousness_on(cluster_rig().await).await;
}

async fn the_hotel_conversation_continues_from_consciousness_on(r: Rig) {
    space(r.store.as_ref(), "family", &["assistant"], &["Husam"]).await;
    let mock = MockModel::responding(|req| {
        if last_role(req) == "tool" {
            return MockTurn::text("Sent.");
        }
        let inbox = last_user_text(req);
        let all = req.to_string();
        if inbox.contains("Find me hotels in Tokyo") {
            send("family", "What's your budget per night?")
        } else if inbox.contains("$150") && all.contains("budget per night") {
            send(
                "family",
                "Found 3 options: 1. Shinjuku Inn, 2. Asakusa Stay, 3. Ginza Lodge",
            )
        } else if inbox.contains("Book the second one") && all.contains("2. Asakusa Stay") {
            send("family", "Booked Asakusa Stay for you.")
        } else {
            send("family", "Sorry, I lost track of our conversation.")
        }
    })
    .await
    .unwrap();
    let a = agentlet(
        r.store.clone(),
        manifest("assistant", &["family"], &mock.base_url, ""),
    );
    let w = start(a.clone(), "w1", Duration::from_secs(5));
    for (i, text) in ["Find me hotels in Tokyo", "$150", "Book the second one"]
        .iter()
        .enumerate()
    {
        say(r.store.as_ref(), "family", "Husam", text).await;
        until_cycle(&r.store, &a, i as u64 + 1).await;
    }
    w.stop().await;
    let replies: Vec<String> = messages(r.store.as_ref(), "family")
        .await
        .into_iter()
        .filter(|m| m.sender.id == "assistant")
        .map(|m| m.text)
        .collect();
    assert_eq!(
        replies,
        [
            "What's your budget per night?",
            "Found 3 options: 1. Shinjuku Inn, 2. Asakusa Stay, 3. Ginza Lodge",
            "Booked Asakusa Stay for you."
        ]
    );
    let checkpoints = r.store.checkpoints(&a.key).await.unwrap();
    assert_eq!(
        checkpoints.iter().map(|c| c.cycle).collect::<Vec<_>>(),
        [3, 2, 1]
    );
}

#[tokio::test]
async fn skip_leaves_no_trace() {
    let r = rig().await;
    space(
        r.store.as_ref(),
        "engineering",
        &["frontend", "devops"],
        &["Ahmad"],
    )
    .await;
    let mock = MockModel::start(vec![MockTurn::tools(&[(
        "skip",
        json!({"reason": "CSS question for frontend"}),
    )])])
    .await
    .unwrap();
    let a = agentlet(
        r.store.clone(),
        manifest("devops", &["engineering"], &mock.base_url, ""),
    );
    say(
        r.store.as_ref(),
        "engineering",
        "Ahmad",
        "Hey frontend, can you check the CSS on the login page?",
    )
    .await;
    let w = start(a.clone(), "w1", Duration::from_secs(5));
    until("the skip to be acknowledged", async || {
        (mock.requests().len() == 1
            && r.store.inflight(&a.key).await.unwrap() == 0
            && r.store.inbox_depth(&a.key).await.unwrap() == 0)
            .then_some(())
    })
    .await;
    w.stop().await;
    let c = r.store.consciousness(&a.key).await.unwrap();
    assert_eq!(
        (c.cycle, c.messages.len(), c.digest.as_str()),
        (0, 0, ""),
        "consciousness unchanged"
    );
    assert!(
        r.store.checkpoints(&a.key).await.unwrap().is_empty(),
        "no checkpoint"
    );
    assert_eq!(
        messages(r.store.as_ref(), "engineering").await.len(),
        1,
        "nothing sent"
    );
    let skipped = a
        .metrics
        .cycles
        .with_label_values(&[NS, "devops", "skipped"])
        .get();
    assert_eq!(skipped, 1);
    assert_eq!(
        a.metrics
            .cycles
            .with_label_values(&[NS, "devops", "completed"])
            .get(),
        0
    );
}

#[tokio::test]
async fn two_workers_of_one_agent_never_both_think() {
    let r = rig().await;
    space(r.store.as_ref(), "family", &["assistant"], &["Husam"]).await;
    let mock = MockModel::responding(|req| {
        if last_role(req) == "tool" {
            MockTurn::text("ok")
        } else {
            send("family", "hello")
        }
    })
    .await
    .unwrap();
    let a = agentlet(
        r.store.clone(),
        manifest("assistant", &["family"], &mock.base_url, ""),
    );
    // Both hear the agent's wake signals; the lease decides who thinks.
    let w1 = start(a.clone(), "w1", Duration::from_secs(2));
    let w2 = start(a.clone(), "w2", Duration::from_secs(2));
    until("both to listen", async || {
        (w1.health.serving() && w2.health.serving()).then_some(())
    })
    .await;
    say(r.store.as_ref(), "family", "Husam", "hi").await;
    until_cycle(&r.store, &a, 1).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(mock.requests().len(), 2, "one cycle of two steps");
    // One stops; the other thinks next.
    w1.stop().await;
    say(r.store.as_ref(), "family", "Husam", "still there?").await;
    until_cycle(&r.store, &a, 2).await;
    w2.stop().await;
    assert_eq!(
        messages(r.store.as_ref(), "family")
            .await
            .iter()
            .filter(|m| m.sender.id == "assistant")
            .count(),
        2
    );
}

#[tokio::test]
async fn a_worker_killed_mid_cycle_loses_nothing_and_answers_once() {
    a_worker_killed_mid_cycle_loses_nothing_and_answers_once_on(rig().await).await;
}

#[tokio::test]
async fn a_worker_killed_mid_cycle_loses_nothing_and_answers_once_on_a_redis_cluster() {
    a_worker_killed_mid_cycle_loses_nothing_and_answers_once_on(cluster_rig().await).await;
}

async fn a_worker_killed_mid_cycle_loses_nothing_and_answers_once_on(r: Rig) {
    space(r.store.as_ref(), "family", &["assistant"], &["Husam"]).await;
    let mock = MockModel::start(vec![
        send("family", "The answer is 42."),
        // The model is still thinking about the next step when the worker dies.
        MockTurn::Slow(
            Duration::from_secs(30),
            Box::new(MockTurn::text("never seen")),
        ),
    ])
    .await
    .unwrap();
    let a = agentlet(
        r.store.clone(),
        manifest("assistant", &["family"], &mock.base_url, ""),
    );
    say(r.store.as_ref(), "family", "Husam", "What is the answer?").await;
    let w1 = start(a.clone(), "w1", Duration::from_secs(1));
    until(
        "the reply to be posted and the next step under way",
        async || (mock.request_count() == 2).then_some(()),
    )
    .await;
    assert_eq!(messages(r.store.as_ref(), "family").await.len(), 2);
    // kill -9: no commit, no acknowledgement, no lease release.
    w1.task.abort();
    let _ = w1.task.await;
    assert_eq!(r.store.consciousness(&a.key).await.unwrap().cycle, 0);
    assert_eq!(
        r.store.inflight(&a.key).await.unwrap(),
        1,
        "the event is still in flight"
    );

    // The restarted worker resumes the cycle from its journal once its lease is free: the
    // answer already posted is replayed into the conversation, and the model is asked only
    // for the next step.
    mock.push(MockTurn::text("Answered."));
    let w2 = start(a.clone(), "w2", Duration::from_secs(1));
    until_cycle(&r.store, &a, 1).await;
    w2.stop().await;
    let said = messages(r.store.as_ref(), "family").await;
    let answers: Vec<&str> = said
        .iter()
        .filter(|m| m.sender.id == "assistant")
        .map(|m| m.text.as_str())
        .collect();
    assert_eq!(answers, ["The answer is 42."], "answered exactly once");
    assert_eq!(r.store.inflight(&a.key).await.unwrap(), 0);
    assert_eq!(mock.request_count(), 3, "one model call after the restart");
    let resumed = &mock.requests()[2];
    assert!(
        last_user_text(resumed).contains("What is the answer?"),
        "the redelivered event was processed"
    );
    let conversation = agentfleet::testing::conversation(resumed);
    let roles: Vec<&str> = conversation
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        &roles[roles.len() - 3..],
        ["user", "assistant", "tool"],
        "step 0 replayed from the journal: {roles:?}"
    );
}

#[tokio::test]
async fn memories_survive_compaction_and_restart() {
    let r = rig().await;
    space(r.store.as_ref(), "family", &["assistant"], &["Husam"]).await;
    let responder = |req: &Value| {
        if req.get("tools").is_none() {
            return MockTurn::text(
                "SUMMARY: Husam shared the wifi password and chatted about the weekend.",
            );
        }
        if last_role(req) == "tool" {
            return MockTurn::text("ok");
        }
        let inbox = last_user_text(req);
        if inbox.contains("remember") {
            MockTurn::tools(&[("set_memories", json!({"memories": {"wifi": "hunter2"}}))])
        } else {
            send(
                "family",
                &format!(
                    "A long answer about the weekend: {}",
                    "lorem ipsum ".repeat(120)
                ),
            )
        }
    };
    let mock = MockModel::responding(responder).await.unwrap();
    let extra =
        "  consciousness: {windowTokens: 1000, keepRecentMessages: 2, compaction: summarize}";
    let a = agentlet(
        r.store.clone(),
        manifest("assistant", &["family"], &mock.base_url, extra),
    );
    let w = start(a.clone(), "w1", Duration::from_secs(5));
    say(
        r.store.as_ref(),
        "family",
        "Husam",
        "Please remember the wifi password is hunter2",
    )
    .await;
    until_cycle(&r.store, &a, 1).await;
    for i in 0..6u64 {
        say(
            r.store.as_ref(),
            "family",
            "Husam",
            &format!("Tell me about the weekend, part {i}"),
        )
        .await;
        until_cycle(&r.store, &a, i + 2).await;
    }
    w.stop().await;
    let c = r.store.consciousness(&a.key).await.unwrap();
    assert!(
        a.metrics
            .compactions
            .with_label_values(&[NS, "assistant"])
            .get()
            > 0,
        "compaction ran"
    );
    assert_eq!(
        c.summary.as_deref(),
        Some("SUMMARY: Husam shared the wifi password and chatted about the weekend.")
    );
    assert!(c.tokens <= 1000, "the window holds: {} tokens", c.tokens);
    assert!(
        !c.messages.iter().any(|m| m.contains("hunter2")),
        "the original exchange was compacted away"
    );

    // Restart: a fresh worker process on the same data plane.
    let mock2 = MockModel::responding(|req| {
        if last_role(req) == "tool" {
            MockTurn::text("ok")
        } else {
            send("family", "It's hunter2.")
        }
    })
    .await
    .unwrap();
    let b = agentlet(
        r.store.clone(),
        manifest("assistant", &["family"], &mock2.base_url, extra),
    );
    let w = start(b.clone(), "w2", Duration::from_secs(5));
    say(
        r.store.as_ref(),
        "family",
        "Husam",
        "What's the wifi password again?",
    )
    .await;
    until_cycle(&r.store, &b, 8).await;
    w.stop().await;
    let first = &mock2.requests()[0];
    let context = agentfleet::testing::context_of(first).unwrap();
    assert!(context.contains("Memories:\n- wifi: hunter2"), "{context}");
    assert!(first["messages"][1]["content"]
        .as_str()
        .unwrap()
        .starts_with("[SUMMARY of the earlier conversation]"));
}

#[tokio::test]
async fn a_thousand_cycles_keep_the_prompt_bounded() {
    let r = rig().await;
    space(r.store.as_ref(), "family", &["assistant"], &["Husam"]).await;
    let mock = MockModel::responding(|req| {
        if req.get("tools").is_none() {
            return MockTurn::text("SUMMARY: many small talks with Husam.");
        }
        if last_role(req) == "tool" {
            return MockTurn::text("ok");
        }
        send("family", "Noted, thanks for the update!")
    })
    .await
    .unwrap();
    let extra =
        "  consciousness: {windowTokens: 2000, keepRecentMessages: 4, checkpointsRetained: 5}";
    let a = agentlet(
        r.store.clone(),
        manifest("assistant", &["family"], &mock.base_url, extra),
    );
    let lease = r
        .store
        .acquire_lease(&a.key, "bench", Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    let mut sizes = Vec::new();
    for i in 0..1000 {
        say(
            r.store.as_ref(),
            "family",
            "Husam",
            &format!("Update number {i}: all good here."),
        )
        .await;
        assert!(r
            .store
            .renew_lease(&a.key, &lease, Duration::from_secs(60))
            .await
            .unwrap());
        let seen = mock.request_count();
        let events = r
            .store
            .wait_inbox(&a.key, &lease, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(events.len(), 1);
        match a.cycle(&lease, &events).await.unwrap() {
            agentfleet::worker::cycle::Outcome::Completed(_) => {}
            other => panic!("cycle {i}: {other:?}"),
        }
        let reqs = mock.requests_since(seen);
        let step0 = reqs
            .iter()
            .find(|q| {
                q.get("tools").is_some()
                    && last_user_text(q).contains(&format!("Update number {i}:"))
            })
            .unwrap();
        sizes.push(step0["messages"].to_string().len());
        if i % 50 == 49 {
            let stored = r.store.consciousness(&a.key).await.unwrap();
            assert_eq!(
                a.cached_consciousness().await,
                Some(stored),
                "the worker's cache matches the store at cycle {}",
                i + 1
            );
        }
    }
    let early = *sizes[100..200].iter().max().unwrap();
    let late = *sizes[900..1000].iter().max().unwrap();
    assert!(
        late <= early + early / 10,
        "the prompt stays bounded: {early} bytes around cycle 150, {late} around cycle 950"
    );
    let c = r.store.consciousness(&a.key).await.unwrap();
    assert_eq!(c.cycle, 1000);
    assert!(c.tokens <= 2000);
    assert_eq!(r.store.checkpoints(&a.key).await.unwrap().len(), 5);
}

fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn tool_phase_gates_shape_each_step() {
    let r = rig().await;
    space(r.store.as_ref(), "family", &["assistant"], &["Husam"]).await;
    let mock = MockModel::start(vec![
        // Observe phase: only reading is possible, and a tool call is required.
        MockTurn::tools(&[
            (
                "send_message",
                json!({"space": "family", "text": "too early"}),
            ),
            ("read_messages", json!({"space": "family"})),
        ]),
        send("family", "Having read the room: hello!"),
        MockTurn::text("Done."),
    ])
    .await
    .unwrap();
    let extra = "  cycle: {phases: [{fromStep: 0, toStep: 0, activeTools: [read_messages, enter_space], toolChoice: required}]}";
    let a = agentlet(
        r.store.clone(),
        manifest("assistant", &["family"], &mock.base_url, extra),
    );
    say(r.store.as_ref(), "family", "Husam", "hi").await;
    let w = start(a.clone(), "w1", Duration::from_secs(5));
    until_cycle(&r.store, &a, 1).await;
    w.stop().await;
    let reqs = mock.requests();
    assert_eq!(tool_names(&reqs[0]), ["enter_space", "read_messages"]);
    assert_eq!(reqs[0]["tool_choice"], "required");
    // Every tool but delete_memories (set_memories forgets a key given an empty fact).
    assert_eq!(
        tool_names(&reqs[1]).len(),
        7,
        "after the phase, every tool offered"
    );
    assert_eq!(reqs[1]["tool_choice"], "auto");
    let results: Vec<&str> = reqs[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert!(
        results[0].contains("not available at this step"),
        "{}",
        results[0]
    );
    assert!(results[1].contains("\"messages\""), "{}", results[1]);
    let said: Vec<String> = messages(r.store.as_ref(), "family")
        .await
        .into_iter()
        .map(|m| m.text)
        .collect();
    assert_eq!(
        said,
        ["hi", "Having read the room: hello!"],
        "the gated call sent nothing"
    );
}

#[tokio::test]
async fn malformed_arguments_and_unknown_tools_are_results_the_model_sees() {
    let r = rig().await;
    space(r.store.as_ref(), "family", &["assistant"], &["Husam"]).await;
    space(r.store.as_ref(), "secret", &["other"], &["Boss"]).await;
    let mock = MockModel::start(vec![
        MockTurn::Reply {
            text: None,
            tool_calls: vec![
                ("send_message".into(), "{\"text\": \"unterminated".into()),
                ("fly_to_the_moon".into(), "{}".into()),
                (
                    "send_message".into(),
                    json!({"space": "secret", "text": "psst"}).to_string(),
                ),
                (
                    "read_messages".into(),
                    json!({"space": "family", "limit": "many"}).to_string(),
                ),
            ],
            usage: (10, 10),
        },
        MockTurn::text("I will do better."),
        // Both sends were refused, so Husam heard nothing: the one nudge, ignored.
        MockTurn::text("Still nothing to say."),
    ])
    .await
    .unwrap();
    let a = agentlet(
        r.store.clone(),
        manifest("assistant", &["family"], &mock.base_url, ""),
    );
    say(r.store.as_ref(), "family", "Husam", "hi").await;
    let w = start(a.clone(), "w1", Duration::from_secs(5));
    until_cycle(&r.store, &a, 1).await;
    let results: Vec<String> = mock.requests()[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(results.len(), 4);
    assert_eq!(mock.request_count(), 3, "the calls, the text, the nudge");
    assert!(
        results[0].contains("invalid arguments for send_message: not JSON"),
        "{}",
        results[0]
    );
    assert!(
        results[1].contains("unknown tool \\\"fly_to_the_moon\\\"")
            && results[1].contains("available: send_message"),
        "{}",
        results[1]
    );
    assert!(
        results[2].contains("not a member of a space called \\\"secret\\\""),
        "{}",
        results[2]
    );
    assert!(
        results[3].contains("\"messages\""),
        "a bad limit falls back to the default: {}",
        results[3]
    );
    assert_eq!(
        a.metrics
            .tool_calls
            .with_label_values(&[NS, "assistant", "unknown", "error"])
            .get(),
        1
    );
    assert_eq!(
        a.metrics
            .tool_calls
            .with_label_values(&[NS, "assistant", "send_message", "error"])
            .get(),
        2
    );
    assert!(r
        .store
        .read_messages(
            &SpaceKey::new(NS, "secret"),
            &ReadQuery {
                limit: 10,
                ..Default::default()
            }
        )
        .await
        .unwrap()
        .is_empty());
    // The worker lives on.
    mock.push(send("family", "Still here."));
    mock.push(MockTurn::text("ok"));
    say(r.store.as_ref(), "family", "Husam", "are you ok?").await;
    until_cycle(&r.store, &a, 2).await;
    w.stop().await;
}

#[tokio::test]
async fn a_refusing_model_fails_cycles_without_losing_events_or_the_worker() {
    let r = rig().await;
    space(r.store.as_ref(), "family", &["assistant"], &["Husam"]).await;
    let mock = MockModel::start(vec![
        MockTurn::Status(400, "context length exceeded".into()),
        MockTurn::Status(400, "context length exceeded".into()),
        MockTurn::Status(400, "context length exceeded".into()),
    ])
    .await
    .unwrap();
    let a = agentlet(
        r.store.clone(),
        manifest("assistant", &["family"], &mock.base_url, ""),
    );
    say(
        r.store.as_ref(),
        "family",
        "Husam",
        "a question the model cannot take",
    )
    .await;
    let w = start(a.clone(), "w1", Duration::from_secs(5));
    until_cycle(&r.store, &a, 1).await;
    assert_eq!(
        a.metrics
            .cycles
            .with_label_values(&[NS, "assistant", "failed"])
            .get(),
        3
    );
    let c = r.store.consciousness(&a.key).await.unwrap();
    assert!(
        c.messages[0].contains("a question the model cannot take"),
        "the event is remembered, not lost"
    );
    assert!(
        c.messages[1].contains("This cycle failed and was not processed")
            && c.messages[1].contains("context length exceeded")
    );
    assert_eq!(r.store.inflight(&a.key).await.unwrap(), 0);
    // The model recovers; the worker answers the next message.
    mock.push(send("family", "Back to normal."));
    mock.push(MockTurn::text("ok"));
    say(r.store.as_ref(), "family", "Husam", "hello again").await;
    until_cycle(&r.store, &a, 2).await;
    w.stop().await;
    assert_eq!(
        messages(r.store.as_ref(), "family")
            .await
            .last()
            .unwrap()
            .text,
        "Back to normal."
    );
}

/// A summary that fails never costs the agent its context: the window is kept whole (and the
/// failure counted) until a summary succeeds, then compaction happens as usual.
#[tokio::test]
async fn a_failed_summary_keeps_the_whole_window() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let r = rig().await;
    space(r.store.as_ref(), "family", &["assistant"], &["Husam"]).await;
    let summaries_work = Arc::new(AtomicBool::new(false));
    let works = summaries_work.clone();
    let mock = MockModel::responding(move |req: &Value| {
        if req.get("tools").is_none() {
            return if works.load(Ordering::SeqCst) {
                MockTurn::text("SUMMARY: a long chat about the weekend.")
            } else {
                MockTurn::Status(401, "summaries are refused today".into())
            };
        }
        if last_role(req) == "tool" {
            return MockTurn::text("ok");
        }
        send(
            "family",
            &format!("A long answer: {}", "lorem ipsum ".repeat(120)),
        )
    })
    .await
    .unwrap();
    let extra =
        "  consciousness: {windowTokens: 1000, keepRecentMessages: 2, compaction: summarize}";
    let a = agentlet(
        r.store.clone(),
        manifest("assistant", &["family"], &mock.base_url, extra),
    );
    let w = start(a.clone(), "w1", Duration::from_secs(5));
    for i in 0..4u64 {
        say(
            r.store.as_ref(),
            "family",
            "Husam",
            &format!("Tell me more, part {i}"),
        )
        .await;
        until_cycle(&r.store, &a, i + 1).await;
    }
    let c = r.store.consciousness(&a.key).await.unwrap();
    // Four cycles of user, assistant (call), tool result, assistant: nothing dropped.
    assert_eq!(c.messages.len(), 16, "the window was cut without a summary");
    assert_eq!(c.start, 0);
    assert_eq!(c.summary, None);
    assert!(c.tokens > 1000, "over its size, kept whole: {}", c.tokens);
    let failures = a
        .metrics
        .compaction_failures
        .with_label_values(&[NS, "assistant"])
        .get();
    assert!(failures >= 2, "{failures}");
    assert_eq!(
        a.metrics
            .compactions
            .with_label_values(&[NS, "assistant"])
            .get(),
        0
    );

    summaries_work.store(true, Ordering::SeqCst);
    say(r.store.as_ref(), "family", "Husam", "And now?").await;
    until_cycle(&r.store, &a, 5).await;
    w.stop().await;
    let c = r.store.consciousness(&a.key).await.unwrap();
    assert_eq!(
        c.summary.as_deref(),
        Some("SUMMARY: a long chat about the weekend.")
    );
    assert!(
        c.messages.len() >= 2 && c.messages.len() < 20,
        "{}",
        c.messages.len()
    );
    assert!(c.tokens <= 1000, "{}", c.tokens);
}

/// The messages of `space` (newest first, up to 50) that `sender` posted.
async fn messages_from(store: &dyn Store, space: &str, sender: &str) -> Vec<SpaceMessage> {
    store
        .read_messages(
            &SpaceKey::new(NS, space),
            &ReadQuery {
                limit: 50,
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .into_iter()
        .filter(|m| m.sender.id == sender)
        .collect()
}

/// A model that panics on its first call, then answers like the scripted one.
struct PanicsOnce {
    panicked: std::sync::atomic::AtomicBool,
    inner: agentfleet::model::scripted::Scripted,
}

#[async_trait::async_trait]
impl agentfleet::model::Model for PanicsOnce {
    async fn complete(
        &self,
        request: &agentfleet::model::Request,
        on_delta: &mut (dyn FnMut(agentfleet::model::Delta) + Send),
    ) -> Result<agentfleet::model::Turn, agentfleet::model::ModelError> {
        if !self
            .panicked
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            panic!("a bug in a model provider");
        }
        self.inner.complete(request, on_delta).await
    }
}

/// An agent task that dies — here by a panic mid-cycle — is restarted and counted, and the
/// events it held are answered (once) by the new session.
#[tokio::test]
async fn a_panicking_agent_task_is_restarted_and_counted() {
    let r = rig().await;
    space(r.store.as_ref(), "family", &["assistant"], &["Husam"]).await;
    let agent = manifest("assistant", &["family"], "http://unused", "");
    let a = Arc::new(Agentlet::new(
        agent,
        AgentKey::new(NS, "assistant"),
        r.store.clone(),
        Arc::new(PanicsOnce {
            panicked: false.into(),
            inner: agentfleet::model::scripted::Scripted::new("assistant"),
        }),
        WorkerMetrics::new().unwrap(),
    ));
    let (stop, rx) = watch::channel(false);
    let health = Arc::new(Health::for_agent(&a.metrics, &a.key));
    let task = tokio::spawn(agentfleet::worker::run_agent(
        a.clone(),
        "w1".into(),
        Duration::from_secs(1),
        health.clone(),
        rx,
    ));
    say(r.store.as_ref(), "family", "Husam", "hello after a crash").await;
    until_cycle(&r.store, &a, 1).await;
    let restarts = a
        .metrics
        .agent_restarts
        .with_label_values(&[NS, "assistant", "panic"])
        .get();
    assert_eq!(restarts, 1);
    let replies = messages_from(r.store.as_ref(), "family", "assistant").await;
    assert_eq!(replies.len(), 1, "{replies:?}");
    until("ready", async || health.ready().ok()).await;
    let _ = stop.send(true);
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap();
}

/// The production worker's loop on a Redis that is killed and restarted: it waits the outage
/// out, says so, and answers what comes afterwards.
#[tokio::test]
async fn the_worker_rides_out_a_redis_restart() {
    let mut redis = RedisServer::start_persistent().unwrap();
    let store = Arc::new(RedisStore::new(&redis.url()).unwrap());
    space(store.as_ref(), "family", &["assistant"], &["Husam"]).await;
    let mock = MockModel::responding(|req| {
        if last_role(req) == "tool" {
            MockTurn::text("ok")
        } else {
            send("family", &format!("answering: {}", last_user_text(req)))
        }
    })
    .await
    .unwrap();
    let a = agentlet(
        store.clone(),
        manifest("assistant", &["family"], &mock.base_url, ""),
    );
    let (stop, rx) = watch::channel(false);
    let health = Arc::new(Health::for_agent(&a.metrics, &a.key));
    let task = tokio::spawn(agentfleet::worker::run_agent(
        a.clone(),
        "w1".into(),
        Duration::from_secs(3),
        health.clone(),
        rx,
    ));
    say(store.as_ref(), "family", "Husam", "one").await;
    until_cycle(&store, &a, 1).await;
    redis.kill();
    until("not ready while Redis is down", async || {
        health.ready().err()
    })
    .await;
    assert!(
        health.ready().unwrap_err().contains("data plane"),
        "{:?}",
        health.ready()
    );
    redis.restart().unwrap();
    until("ready again", async || health.ready().ok()).await;
    say(store.as_ref(), "family", "Husam", "two").await;
    until_cycle(&store, &a, 2).await;
    let texts = messages_from(store.as_ref(), "family", "assistant").await;
    assert_eq!(texts.len(), 2, "{texts:?}");
    let _ = stop.send(true);
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap();
}

/// `spec.budget`: every model call is counted as it returns; the cycle that reaches the day's
/// budget ends cleanly at that step (committed, its reply posted), and no later cycle starts:
/// the next message waits in the inbox, with no model call. A worker with a raised budget (the
/// operator rolls the pod on a spec change) answers it. Spend from an earlier UTC day does
/// not count.
#[tokio::test]
async fn a_spent_budget_stops_the_model_calls_and_events_wait() {
    let r = rig().await;
    space(r.store.as_ref(), "family", &["assistant"], &["Husam"]).await;
    // Every call reports 100 prompt tokens (60 of them read from the cache) and 10 or 20
    // output tokens.
    let mock = MockModel::responding(|req| {
        if last_role(req) == "tool" {
            MockTurn::text("Sent.")
        } else {
            send("family", "On it.")
        }
    })
    .await
    .unwrap();
    mock.report_cached_tokens(60);
    let a = agentlet(
        r.store.clone(),
        manifest(
            "assistant",
            &["family"],
            &mock.base_url,
            "  budget: {tokensPerDay: 300}",
        ),
    );
    let w = start(a.clone(), "w1", Duration::from_secs(5));
    say(r.store.as_ref(), "family", "Husam", "first").await;
    until_cycle(&r.store, &a, 1).await;
    assert_eq!(mock.request_count(), 2, "a tool step and a final step");
    // 230 spent: the next cycle's first step reaches 350 and ends it there.
    say(r.store.as_ref(), "family", "Husam", "second").await;
    until_cycle(&r.store, &a, 2).await;
    assert_eq!(mock.request_count(), 3, "the cycle ended at the limit");
    let c = r.store.consciousness(&a.key).await.unwrap();
    assert!(
        c.messages.last().unwrap().contains("\"role\":\"tool\""),
        "it ended after its tool call, cleanly committed: {:?}",
        c.messages.last()
    );
    let said = messages(r.store.as_ref(), "family").await;
    assert_eq!(said.last().unwrap().text, "On it.");
    // Spent: the third message waits, the model hears nothing, and the space is told why.
    let mut live = r
        .store
        .subscribe_live(&SpaceKey::new(NS, "family"))
        .await
        .unwrap();
    say(r.store.as_ref(), "family", "Husam", "third").await;
    let told = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Some(agentfleet::store::LiveEvent::Activity {
                activity, detail, ..
            }) = futures::StreamExt::next(&mut live).await
            {
                if activity == "error" {
                    return detail.unwrap_or_default();
                }
            }
        }
    })
    .await
    .unwrap();
    assert!(
        told.contains("350 of the daily budget of 300 tokens spent") && told.contains("T00:00:00Z"),
        "{told}"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        mock.request_count(),
        3,
        "no model call once the budget is spent"
    );
    let seen = r.store.observe(std::slice::from_ref(&a.key)).await.unwrap();
    assert_eq!(seen[0].waiting, 1, "the event waits in the inbox");
    assert_eq!(seen[0].in_flight, 0);
    let tokens = seen[0].tokens.clone().unwrap();
    assert_eq!(
        (tokens.input, tokens.cache_read, tokens.output),
        (3 * 40, 3 * 60, 20 + 10 + 20)
    );
    let today = agentfleet::crd::Periods::at(agentfleet::store::now_ms());
    assert_eq!(tokens.spent(&today).day, 350);
    w.stop().await;

    // A raised budget: a new worker answers the waiting message.
    let raised = agentlet(
        r.store.clone(),
        manifest(
            "assistant",
            &["family"],
            &mock.base_url,
            "  budget: {tokensPerDay: 10000, tokensPerMonth: 20000}",
        ),
    );
    let w = start(raised.clone(), "w2", Duration::from_secs(5));
    until_cycle(&r.store, &raised, 3).await;
    w.stop().await;
    assert!(last_user_text(&mock.requests()[3]).contains("third"));

    // A day's spend of an earlier day does not count: a worker with a small budget answers.
    let seen = r.store.observe(std::slice::from_ref(&a.key)).await.unwrap();
    assert_eq!(seen[0].tokens.as_ref().unwrap().day_tokens, 580);
    let mut conn = redis::Client::open(r.url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg("agentfleet:{agent:fam/assistant}:tokens")
        .arg("day")
        .arg("2020-01-01")
        .query_async(&mut conn)
        .await
        .unwrap();
    let small = agentlet(
        r.store.clone(),
        manifest(
            "assistant",
            &["family"],
            &mock.base_url,
            "  budget: {tokensPerDay: 300}",
        ),
    );
    let w = start(small.clone(), "w3", Duration::from_secs(5));
    say(r.store.as_ref(), "family", "Husam", "fourth").await;
    until_cycle(&r.store, &small, 4).await;
    w.stop().await;
}

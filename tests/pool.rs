//! `agentfleet pool` as it runs in a pod: real `agentfleet pool` processes on a real Redis, an
//! in-test model server that takes its time, and a replica killed with SIGKILL mid-cycle.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failing loudly is the point

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use agentfleet::crd::MemberKind;
use agentfleet::membership::SpaceKey;
use agentfleet::store::{prelude::*, NewMessage, ReadQuery, RedisStore, Sender};
use agentfleet::testing::{space_record, MockModel, MockTurn, RedisServer};
use serde_json::{json, Value};

const NS: &str = "fam";

/// Kills and reaps a child process when dropped.
struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Writes `n` Agents (`a000`…), each alone with Ann in its own Space, thinking with the model
/// at `base_url`.
fn fleet(n: usize, base_url: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("agentfleet-pool-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut text = String::new();
    for i in 0..n {
        text.push_str(&format!(
            "---\napiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {{name: a{i:03}, namespace: {NS}}}\nspec:\n  model: {{provider: openai, name: mock, baseUrl: \"{base_url}\"}}\n  spaces: [s{i:03}]\n"
        ));
    }
    std::fs::write(dir.join("fleet.yaml"), text).unwrap();
    dir
}

/// Starts `agentfleet pool` as replica `identity`; returns it once it hears wake signals.
fn replica(dir: &std::path::Path, url: &str, identity: &str) -> Kill {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentfleet"))
        .args(["pool", "--namespace", NS, "--name", "p", "--agents"])
        .arg(dir)
        .args([
            "--redis",
            url,
            "--metrics-addr",
            "127.0.0.1:0",
            "--identity",
            identity,
            "--lease-seconds",
            "2",
            "--sweep-seconds",
            "1",
            "--cycles-at-once",
            "200",
        ])
        .env("RUST_LOG", "info")
        .env("AGENTFLEET_LOG_FORMAT", "text")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if line.contains("listening for wake signals") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("the pool never listened for wake signals");
    Kill(child)
}

fn conversation_last_role(request: &Value) -> String {
    agentfleet::testing::conversation(request)
        .last()
        .and_then(|m| m["role"].as_str())
        .unwrap_or_default()
        .to_string()
}

async fn replies(store: &RedisStore, space: &str) -> usize {
    store
        .read_messages(
            &SpaceKey::new(NS, space),
            &ReadQuery {
                limit: 50,
                before: None,
                after: None,
            },
        )
        .await
        .unwrap()
        .iter()
        .filter(|m| m.sender.id != "ann")
        .count()
}

/// Two replicas serve 200 agents; one is killed with SIGKILL while cycles are under way in
/// both. Every agent answers exactly once: the survivor takes the dead replica's agents once
/// their leases run out, resuming each cycle from its journal.
#[tokio::test(flavor = "multi_thread")]
async fn a_replica_killed_mid_cycle_hands_its_agents_over_and_nothing_is_answered_twice() {
    const AGENTS: usize = 200;
    let redis = RedisServer::start().unwrap();
    let url = redis.url();
    let store = RedisStore::new(&url).unwrap();
    // The model takes its time over each message, so that the kill finds cycles under way.
    let mock = MockModel::responding(|req| {
        if conversation_last_role(req) == "tool" {
            MockTurn::text("done")
        } else {
            MockTurn::Slow(
                Duration::from_millis(1500),
                Box::new(MockTurn::tools(&[(
                    "send_message",
                    json!({"text": "answered"}),
                )])),
            )
        }
    })
    .await
    .unwrap();
    let dir = fleet(AGENTS, &mock.base_url);
    for i in 0..AGENTS {
        let agent = format!("a{i:03}");
        store
            .apply_space(
                &SpaceKey::new(NS, format!("s{i:03}")),
                &space_record(&format!("S{i:03}"), &[&agent], &["Ann"]),
            )
            .await
            .unwrap();
    }
    let mut first = replica(&dir, &url, "p-0");
    let _second = replica(&dir, &url, "p-1");

    for i in 0..AGENTS {
        store
            .post_message(
                &SpaceKey::new(NS, format!("s{i:03}")),
                &NewMessage {
                    sender: Sender {
                        id: "ann".into(),
                        name: "Ann".into(),
                        kind: Some(MemberKind::Human),
                    },
                    text: format!("question {i}"),
                    mention: None,
                    idempotency_key: None,
                    urgent: false,
                    depth: 0,
                },
            )
            .await
            .unwrap();
    }
    // Both replicas are thinking: count the leases each holds, then kill the first.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut held = [0usize; 2];
    for i in 0..AGENTS {
        let lease: Option<String> = redis::cmd("GET")
            .arg(format!("agentfleet:{{agent:{NS}/a{i:03}}}:lease"))
            .query_async(&mut conn)
            .await
            .unwrap();
        match lease.as_deref().and_then(|l| l.split('|').next()) {
            Some("p-0") => held[0] += 1,
            Some("p-1") => held[1] += 1,
            _ => {}
        }
    }
    assert!(
        held[0] > 0 && held[1] > 0,
        "both replicas think at the kill: {held:?}"
    );
    let killed = Instant::now();
    first.0.kill().unwrap();
    let _ = first.0.wait();

    // Every agent answers, once.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let mut answered = 0;
        for i in 0..AGENTS {
            let n = replies(&store, &format!("s{i:03}")).await;
            assert!(n <= 1, "s{i:03} answered {n} times");
            answered += n;
        }
        if answered == AGENTS {
            break;
        }
        assert!(Instant::now() < deadline, "{answered} of {AGENTS} answered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "leases at the kill {held:?}; every agent answered {:?} after the kill (leases of 2 s, model 1.5 s)",
        killed.elapsed()
    );
    for i in 0..AGENTS {
        let agent = agentfleet::store::AgentKey::new(NS, format!("a{i:03}"));
        assert_eq!(store.inflight(&agent).await.unwrap(), 0, "{agent}");
    }
    // A little later, still once each (no late duplicate from a resumed journal).
    tokio::time::sleep(Duration::from_secs(2)).await;
    for i in 0..AGENTS {
        assert_eq!(replies(&store, &format!("s{i:03}")).await, 1);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

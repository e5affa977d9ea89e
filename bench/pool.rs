//! The pooled runtime: `cargo bench --bench pool`.
//!
//! Starts the release `agentfleet dev --redis URL DIR` (pool, gateway and the fleet's scaling
//! loop in one process) on a real `redis-server` with N scripted agents, each alone with a
//! human in its own space, and measures:
//! - **start**: spawn to the banner;
//! - **at rest**: the process's RSS and the Redis connections it holds (`CLIENT LIST`, less
//!   the benchmark's own), 3 s after the banner;
//! - **one wake**: a human's post to one sleeping agent → its reply in the space's live
//!   events (the scripted model answers at once, so this is the runtime's part), 200 times
//!   one after another to random agents while the others sleep: p50 and p99;
//! - **a burst**: one post to each of 1,000 different sleeping agents at once → all answered.
//!
//! `AGENTFLEET_BENCH_BIN` runs an older build instead, to compare in one sitting;
//! `AGENTFLEET_BENCH_AGENTS=1000,10000` chooses the sizes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a benchmark: fail loudly

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentfleet::crd::MemberKind;
use agentfleet::membership::SpaceKey;
use agentfleet::store::{prelude::*, LiveEvent, NewMessage, ReadQuery, RedisStore, Sender};
use agentfleet::testing::RedisServer;
use futures::StreamExt;

/// Writes `agents` scripted Agents, each alone with Ann in its own Space.
fn manifests(agents: usize) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "agentfleet-bench-pool-{agents}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut text = String::new();
    for i in 0..agents {
        text.push_str(&format!(
            "---\napiVersion: agentfleet.dev/v1alpha1\nkind: Space\nmetadata: {{name: s{i:05}}}\nspec: {{members: [{{id: ann, name: Ann}}]}}\n---\napiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {{name: a{i:05}}}\nspec:\n  model: {{provider: scripted, name: x}}\n  spaces: [s{i:05}]\n"
        ));
    }
    std::fs::write(dir.join("fleet.yaml"), text).unwrap();
    dir
}

fn post(space: &str, text: &str) -> (SpaceKey, NewMessage) {
    (
        SpaceKey::new("default", space),
        NewMessage {
            sender: Sender {
                id: "ann".into(),
                name: "Ann".into(),
                kind: Some(MemberKind::Human),
            },
            text: text.into(),
            mention: None,
            idempotency_key: None,
            urgent: false,
            depth: 0,
        },
    )
}

/// Redis connections now, less the benchmark's own.
fn connections(url: &str) -> usize {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_connection().unwrap();
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut conn).unwrap();
    list.lines().filter(|l| !l.contains("name=bench")).count() - 1
}

async fn run(bin: &str, agents: usize) {
    let redis = RedisServer::start().unwrap();
    let url = redis.url();
    let dir = manifests(agents);
    let started = Instant::now();
    let mut child = common::Kill(
        Command::new(bin)
            .arg("dev")
            .arg(&dir)
            .args(["--addr", "127.0.0.1:0", "--redis", &url])
            .env("RUST_LOG", "error")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let out = child.0.stdout.take().unwrap();
    let mut lines = BufReader::new(out).lines();
    lines.next().expect("dev printed nothing").unwrap();
    let start = started.elapsed();
    std::thread::spawn(move || for _ in lines {});
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss = common::rss_kib(child.0.id());
    let conns = connections(&url);

    let store = Arc::new(RedisStore::new(&url).unwrap());
    // One wake at a time, the others asleep.
    let mut waits = Vec::new();
    for n in 0..200usize {
        let space = format!("s{:05}", (n * 7919) % agents);
        let (key, message) = post(&space, &format!("hello {n}"));
        let mut live = store.subscribe_live(&key).await.unwrap();
        let t = Instant::now();
        store.post_message(&key, &message).await.unwrap();
        loop {
            let event = tokio::time::timeout(Duration::from_secs(10), live.next())
                .await
                .expect("no reply within 10 s")
                .unwrap();
            if matches!(&event, LiveEvent::Message { message } if message.sender.id != "ann") {
                break;
            }
        }
        waits.push(t.elapsed());
    }
    waits.sort();

    // A burst: one post to each of 1,000 sleeping agents at once.
    let burst = agents.min(1_000);
    let t = Instant::now();
    let posts = (0..burst).map(|i| {
        let store = store.clone();
        async move {
            let (key, message) = post(&format!("s{i:05}"), "everyone at once");
            store.post_message(&key, &message).await.unwrap();
        }
    });
    futures::future::join_all(posts).await;
    let mut left: Vec<usize> = (0..burst).collect();
    while !left.is_empty() {
        assert!(t.elapsed() < Duration::from_secs(120), "burst not answered");
        let mut still = Vec::new();
        for i in left {
            let page = store
                .read_messages(
                    &SpaceKey::new("default", format!("s{i:05}")),
                    &ReadQuery {
                        limit: 1,
                        before: None,
                        after: None,
                    },
                )
                .await
                .unwrap();
            if !page
                .first()
                .is_some_and(|m| m.sender.id != "ann" && m.text.contains("everyone at once"))
            {
                still.push(i);
            }
        }
        left = still;
        if !left.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let all = t.elapsed();
    let rss_after = common::rss_kib(child.0.id());
    println!(
        "  {agents:>6} agents: start {:>6.2} s | at rest {:>4} MB RSS, {:>4} Redis connections | one wake p50 {:>6.1} ms p99 {:>6.1} ms | {burst} at once: all answered in {:>6.2} s ({} MB RSS after)",
        start.as_secs_f64(),
        rss / 1024,
        conns,
        common::pct(&waits, 0.5).as_secs_f64() * 1000.0,
        common::pct(&waits, 0.99).as_secs_f64() * 1000.0,
        all.as_secs_f64(),
        rss_after / 1024,
    );
    drop(child);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::main]
async fn main() {
    let bin = common::agentfleet_bin();
    println!("agentfleet dev --redis ({bin}), N agents each alone with a human:");
    let sizes: Vec<usize> = std::env::var("AGENTFLEET_BENCH_AGENTS")
        .map(|v| v.split(',').map(|n| n.trim().parse().unwrap()).collect())
        .unwrap_or_else(|_| vec![1_000, 10_000]);
    for agents in sizes {
        run(&bin, agents).await;
    }
}

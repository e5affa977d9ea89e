//! The pooled runtime: `cargo bench --bench pool`.
//!
//! Starts the release `agentfleet pool` (the pool alone), then `agentfleet dev --redis URL DIR`
//! (pool, gateway and the fleet's gauges in one process), each on a fresh real `redis-server`
//! with N scripted agents, each alone with a human in its own space, and measures:
//! - **start**: spawn to the banner (dev) or to listening for wake signals (pool);
//! - **at rest**: the process's RSS and the Redis connections it holds (`CLIENT LIST`, less
//!   the benchmark's own), 3 s after the banner;
//! - **one wake**: a human's post to one sleeping agent → its reply in the space's live
//!   events (the scripted model answers at once, so this is the runtime's part), 200 times
//!   one after another to random agents while the others sleep: p50 and p99;
//! - **a burst**: one post to each of 1,000 different sleeping agents at once → all answered.
//!
//! `AGENTFLEET_BENCH_BIN` runs an older build instead, to compare in one sitting (older builds
//! have no `pool`: `AGENTFLEET_BENCH_MODES=dev`); `AGENTFLEET_BENCH_AGENTS=1000,10000` chooses
//! the sizes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a benchmark: fail loudly

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentfleet::identity::SpaceKey;
use agentfleet::store::{prelude::*, LiveEvent, NewMessage, ReadQuery, RedisStore};
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
        agentfleet::testing::human_message("Ann", text),
    )
}

/// Redis connections now (the one asking included).
fn connections(url: &str) -> usize {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_connection().unwrap();
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut conn).unwrap();
    list.lines().count()
}

/// What runs the agents.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// `agentfleet dev --redis`: pool, gateway and the fleet's gauges in one process.
    Dev,
    /// `agentfleet pool`: the pool alone (the benchmark applies the spaces).
    Pool,
}

async fn run(bin: &str, agents: usize, mode: Mode) {
    let redis = RedisServer::start().unwrap();
    let url = redis.url();
    let dir = manifests(agents);
    let store = Arc::new(RedisStore::new(&url).unwrap());
    if mode == Mode::Pool {
        for i in 0..agents {
            store
                .apply_space(
                    &SpaceKey::new("default", format!("s{i:05}")),
                    &agentfleet::testing::space_record(
                        &format!("s{i:05}"),
                        &[&format!("a{i:05}")],
                        &["Ann"],
                    ),
                )
                .await
                .unwrap();
        }
    }
    let before = connections(&url);
    let started = Instant::now();
    let mut command = Command::new(bin);
    match mode {
        Mode::Dev => command.arg("dev").arg(&dir).args(["--addr", "127.0.0.1:0"]),
        Mode::Pool => command
            .args([
                "pool",
                "--namespace",
                "default",
                "--name",
                "bench",
                "--agents",
            ])
            .arg(&dir)
            .args(["--metrics-addr", "127.0.0.1:0", "--cycles-at-once", "64"]),
    };
    let mut child = common::Kill(
        command
            .args(["--redis", &url])
            .env("RUST_LOG", "info")
            .env("AGENTFLEET_LOG_FORMAT", "text")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // Started: dev prints its banner; a pool logs that it listens for wake signals.
    let (tx, rx) = std::sync::mpsc::channel();
    let out = child.0.stdout.take().unwrap();
    let err = child.0.stderr.take().unwrap();
    {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for (i, _) in BufReader::new(out).lines().enumerate() {
                if i == 0 && mode == Mode::Dev {
                    let _ = tx.send(());
                }
            }
        });
    }
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if mode == Mode::Pool && line.contains("listening for wake signals") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(120))
        .expect("never started");
    let start = started.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss = common::rss_kib(child.0.id());
    let conns = connections(&url) - before;

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
                        ..Default::default()
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
    let what = match mode {
        Mode::Dev => "dev --redis",
        Mode::Pool => "pool",
    };
    println!(
        "  {what:<11} {agents:>6} agents: start {:>6.2} s | at rest {:>4} MB RSS, {:>4} Redis connections | one wake p50 {:>6.1} ms p99 {:>6.1} ms | {burst} at once: all answered in {:>6.2} s ({} MB RSS after)",
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
    println!("agentfleet ({bin}), N scripted agents each alone with a human, one Redis:");
    let sizes: Vec<usize> = std::env::var("AGENTFLEET_BENCH_AGENTS")
        .map(|v| v.split(',').map(|n| n.trim().parse().unwrap()).collect())
        .unwrap_or_else(|_| vec![1_000, 10_000]);
    let modes: Vec<Mode> = match std::env::var("AGENTFLEET_BENCH_MODES").as_deref() {
        Ok("dev") => vec![Mode::Dev],
        Ok("pool") => vec![Mode::Pool],
        _ => vec![Mode::Pool, Mode::Dev],
    };
    for agents in sizes {
        for &mode in &modes {
            run(&bin, agents, mode).await;
        }
    }
}

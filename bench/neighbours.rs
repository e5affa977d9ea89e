//! Slow neighbours: `cargo bench --bench neighbours`.
//!
//! Starts the release `agentfleet pool` with its default slots (16 cycles at once) on a fresh
//! real `redis-server`, hosting 16 agents whose model (an OpenAI-compatible server in this
//! process) streams one byte a second and never finishes its answer, and 4 agents with a
//! scripted model, each alone with a human in its own space. Once every slow agent waits on
//! its model, it measures the quick ones: a human's post → the agent's reply in the space's
//! live events, 100 times one after another (round robin over the four): answered within 10 s,
//! p50 and p99. (Older builds held a slot for a whole cycle: 16 slow models held all 16.)
//!
//! `AGENTFLEET_BENCH_BIN` runs an older build instead, to compare in one sitting.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a benchmark: fail loudly

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use agentfleet::identity::SpaceKey;
use agentfleet::store::{prelude::*, LiveEvent, RedisStore};
use agentfleet::testing::{MockModel, MockTurn, RedisServer};
use futures::StreamExt;

const SLOW: usize = 16;
const QUICK: usize = 4;
const ASKS: usize = 100;

fn manifests(slow_url: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "agentfleet-bench-neighbours-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut text = String::new();
    for i in 0..SLOW + QUICK {
        let model = if i < SLOW {
            format!("{{provider: openai, name: slow, baseUrl: \"{slow_url}\"}}")
        } else {
            "{provider: scripted, name: x}".to_string()
        };
        text.push_str(&format!(
            "---\napiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {{name: a{i:02}}}\nspec:\n  model: {model}\n  spaces: [s{i:02}]\n"
        ));
    }
    std::fs::write(dir.join("fleet.yaml"), text).unwrap();
    dir
}

fn space(i: usize) -> SpaceKey {
    SpaceKey::new("default", format!("s{i:02}"))
}

#[tokio::main]
async fn main() {
    let bin = common::agentfleet_bin();
    let redis = RedisServer::start().unwrap();
    let url = redis.url();
    let store = RedisStore::new(&url).unwrap();
    let slow = MockModel::responding(|_| MockTurn::Trickle(Duration::from_secs(1)))
        .await
        .unwrap();
    let dir = manifests(&slow.base_url);
    for i in 0..SLOW + QUICK {
        store
            .apply_space(
                &space(i),
                &agentfleet::testing::space_record(
                    &format!("s{i:02}"),
                    &[&format!("a{i:02}")],
                    &["Ann"],
                ),
            )
            .await
            .unwrap();
    }
    let mut command = Command::new(&bin);
    command
        .args([
            "pool",
            "--namespace",
            "default",
            "--name",
            "bench",
            "--agents",
        ])
        .arg(&dir)
        .args(["--metrics-addr", "127.0.0.1:0", "--redis", &url]);
    let child = agentfleet::testing::spawn_listening(&mut command, Duration::from_secs(60))
        .expect("never started");

    // Every slow agent wakes and waits on its model.
    for i in 0..SLOW {
        store
            .post_message(
                &space(i),
                &agentfleet::testing::human_message("Ann", "take your time"),
            )
            .await
            .unwrap();
    }
    let t = Instant::now();
    while slow.request_count() < SLOW {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the slow agents never all woke"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let mut waits = Vec::new();
    let mut unanswered = 0;
    for n in 0..ASKS {
        let key = space(SLOW + n % QUICK);
        let mut live = store.subscribe_live(&key).await.unwrap();
        let t = Instant::now();
        store
            .post_message(
                &key,
                &agentfleet::testing::human_message("Ann", &format!("quick {n}")),
            )
            .await
            .unwrap();
        let answered = tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(event) = live.next().await {
                if matches!(&event, LiveEvent::Message { message } if message.sender.id != "ann") {
                    return;
                }
            }
        })
        .await;
        match answered {
            Ok(()) => waits.push(t.elapsed()),
            Err(_) => {
                unanswered += 1;
                // An older build answers none: three misses say enough.
                if unanswered == 3 && waits.is_empty() {
                    break;
                }
            }
        }
    }
    waits.sort();
    let asked = waits.len() + unanswered;
    print!(
        "agentfleet ({bin}): pool of 16 slots, {SLOW} agents on a model streaming 1 byte/s + {QUICK} quick ones: {} of {asked} quick asks answered within 10 s",
        waits.len()
    );
    if waits.is_empty() {
        println!();
    } else {
        println!(
            "; p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            common::pct(&waits, 0.5).as_secs_f64() * 1000.0,
            common::pct(&waits, 0.99).as_secs_f64() * 1000.0,
            waits.last().unwrap().as_secs_f64() * 1000.0,
        );
    }
    drop(child);
    let _ = std::fs::remove_dir_all(&dir);
}

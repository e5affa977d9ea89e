//! Archive benchmark: `cargo bench --bench archive`.
//!
//! 1,000 agents commit at once and each archives its checkpoint as the worker's archiver
//! does: the consciousness (a 200-message window, ~3,000 tokens) and notes read from a real
//! `redis-server`, encoded as the versioned document, written to the archive, and reported in
//! the data plane. Against a real S3-compatible server (s3s-fs, SigV4, in this process on the
//! same two cores) and a local directory. Measures archives per second, the bytes written,
//! and how long after "commit" each agent's checkpoint is archived (p50/p99/max): what a Redis
//! lost at that moment would cost.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a benchmark: fail loudly

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentfleet::archive::{Archive, Document};
use agentfleet::identity::AgentKey;
use agentfleet::model::{Message, ToolCall};
use agentfleet::store::{now_ms, prelude::*, ArchiveReport, CycleCommit, Memories, RedisStore};
use agentfleet::testing::{RedisServer, S3Server};
use common::pct;
use serde_json::json;

const AGENTS: usize = 1000;
/// Archive writes in flight at once in this process (one worker per agent in a cluster
/// would have one each; here one process plays them all).
const IN_FLIGHT: usize = 64;

#[tokio::main]
async fn main() {
    let redis = RedisServer::start().unwrap();
    let store = Arc::new(RedisStore::new(&redis.url()).unwrap());
    let agents: Vec<AgentKey> = (0..AGENTS)
        .map(|i| AgentKey::new("bench", format!("agent-{i}")))
        .collect();
    prefill(&store, &agents).await;

    let s3 = S3Server::start("bench").unwrap();
    let on_s3 = Archive::open_with(&s3.url("fleet"), &s3.env()).unwrap();
    let dir = std::env::temp_dir().join(format!("agentfleet-bench-archive-{}", std::process::id()));
    let on_disk = Archive::open_with(&format!("file://{}", dir.display()), &[]).unwrap();
    println!("agentfleet archive benchmark ({AGENTS} agents commit at once; each checkpoint: 200 messages, 3 memories; {IN_FLIGHT} writes in flight)");
    for (name, archive, holds) in [
        ("S3-compatible (s3s-fs)", on_s3, s3.bucket_dir()),
        ("local directory", on_disk, dir.clone()),
    ] {
        round(name, &store, &agents, archive, &holds).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every agent archives its checkpoint at once; prints what it took (`holds`: where the
/// objects end up on disk, to count their bytes).
async fn round(
    name: &str,
    store: &Arc<RedisStore>,
    agents: &[AgentKey],
    archive: Archive,
    holds: &std::path::Path,
) {
    let permits = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let started = Instant::now();
    let tasks: Vec<_> = agents
        .iter()
        .cloned()
        .map(|agent| {
            let store = store.clone();
            let archive = archive.clone();
            let permits = permits.clone();
            tokio::spawn(async move {
                let _permit = permits.acquire_owned().await.unwrap();
                let snapshot = agentfleet::store::snapshot(store.as_ref(), &agent)
                    .await
                    .unwrap();
                let doc = Document {
                    agent: agent.clone(),
                    generation: 1,
                    snapshot,
                };
                let cycle = doc.snapshot.consciousness.cycle;
                let url = archive.put(&doc).await.unwrap();
                store
                    .set_archive_report(
                        &agent,
                        &ArchiveReport {
                            cycle: Some(cycle),
                            url: Some(url),
                            ok: true,
                            reason: "Archived".into(),
                            message: String::new(),
                            since_ms: now_ms(),
                        },
                    )
                    .await
                    .unwrap();
                started.elapsed()
            })
        })
        .collect();
    let mut lags = Vec::with_capacity(tasks.len());
    for t in tasks {
        lags.push(t.await.unwrap());
    }
    let bytes = bytes_under(holds);
    let total = started.elapsed();
    lags.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "  {name}: {:.0} archives/s ({AGENTS} in {:.2} s, {:.1} MiB written, {:.1} KiB a checkpoint); archived after commit: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        AGENTS as f64 / total.as_secs_f64(),
        total.as_secs_f64(),
        bytes as f64 / 1024.0 / 1024.0,
        bytes as f64 / AGENTS as f64 / 1024.0,
        ms(pct(&lags, 0.50)),
        ms(pct(&lags, 0.99)),
        ms(*lags.last().unwrap()),
    );
}

/// The bytes of the files under `dir`.
fn bytes_under(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => bytes_under(&e.path()),
            _ => e.metadata().map(|m| m.len()).unwrap_or(0),
        })
        .sum()
}

/// A 200-message consciousness (50 cycles of a question, a tool call, its result and an
/// answer) and three memories for every agent.
async fn prefill(store: &RedisStore, agents: &[AgentKey]) {
    for agent in agents {
        let lease = store
            .acquire_lease(agent, "prefill", Duration::from_secs(60))
            .await
            .unwrap()
            .unwrap();
        let mut messages = Vec::new();
        for i in 0..50 {
            messages.extend(
                [
                    Message::user(format!("[Ops] Dana: \"incident {i}: disk usage on db-{i} is at 91%, what now?\"")),
                    Message::Assistant {
                        content: None,
                        tool_calls: vec![ToolCall {
                            id: format!("c{i}"),
                            name: "send_message".into(),
                            arguments: json!({"text": format!("Looking at db-{i}: rotating logs and checking the WAL archive.")}).to_string(),
                        }],
                    },
                    Message::Tool {
                        tool_call_id: format!("c{i}"),
                        content: json!({"success": true, "messageId": format!("1795000000000-{i}")}).to_string(),
                    },
                    Message::Assistant {
                        content: Some(format!("Done with incident {i}.")),
                        tool_calls: vec![],
                    },
                ]
                .iter()
                .map(|m| serde_json::to_string(m).unwrap()),
            );
        }
        store
            .commit_cycle(
                agent,
                &lease,
                &CycleCommit {
                    new_messages: messages,
                    compaction: None,
                    tokens: 3000,
                    cycle_tokens: 3500,
                    checkpoints_retained: 10,
                    failure: None,
                    record: None,
                },
            )
            .await
            .unwrap();
        let memories: Memories = [
            ("oncall", "Dana this week, Husam next"),
            ("db", "db-1..db-50 are Postgres 16 with WAL archiving"),
            ("policy", "never restart the api during business hours"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        store.set_memories(agent, &lease, &memories).await.unwrap();
        store.release_lease(agent, &lease).await.unwrap();
    }
}

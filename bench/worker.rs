//! Worker benchmark: `cargo bench --bench worker`.
//!
//! A real `redis-server`, the release `agentfleet worker` binary, and an instant local
//! OpenAI-compatible model (the in-process mock server: answers at once with one
//! `send_message`, then a final text). The agent's consciousness is pre-filled with 200
//! messages and its window keeps it around that size (sliding, ~3000 tokens). Measures, one
//! message at a time: human message posted → the agent's reply appears in the space
//! (p50/p90/p99/max), cycles per second back to back, and the worker's resident memory when
//! idle — twice in one sitting: without an archive, then with every checkpoint archived to a
//! real S3-compatible server (s3s-fs, in this process) as it is committed. Messages follow each
//! other at once, so the archiving of one cycle overlaps the next (what it costs shows).
//! `AGENTFLEET_BENCH_MODEL=list` gives the agent a Model with a fallback list, as the operator
//! renders it, its key read from a mounted Secret at each request.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a benchmark: fail loudly

mod common;

use common::{pct, rss_kib, Kill};
use std::time::{Duration, Instant};

use agentfleet::identity::AgentKey;
use agentfleet::identity::SpaceKey;
use agentfleet::store::{prelude::*, RedisStore};
use agentfleet::testing::{space_record, MockModel, MockTurn, RedisServer, S3Server};
use serde_json::json;

const ITERATIONS: usize = 2000;
const WARMUP: usize = 100;

#[tokio::main]
async fn main() {
    // Off and on in turn, twice: what the machine does meanwhile falls on both.
    let s3 = S3Server::start("bench").unwrap();
    let mut off = Vec::new();
    let mut on = Vec::new();
    for _ in 0..3 {
        off.push(run(None).await);
        on.push(run(Some((&s3, 1))).await);
    }
    let every = [run(Some((&s3, 0))).await];
    let median = |runs: &[Run], f: fn(&Run) -> f64| {
        let mut v: Vec<f64> = runs.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let change =
        |runs: &[Run], f: fn(&Run) -> f64| (median(runs, f) / median(&off, f) - 1.0) * 100.0;
    for (what, runs) in [
        ("archiving on (intervalSeconds 1, the default; median of three runs, alternated with three off)", &on[..]),
        ("every checkpoint archived (intervalSeconds 0; one run)", &every[..]),
    ] {
        println!(
            "  {what} vs off: p50 {:+.1}%, p99 {:+.1}%, cycles/s {:+.1}%",
            change(runs, |r| r.p50),
            change(runs, |r| r.p99),
            change(runs, |r| r.rate)
        );
    }
}

/// With `AGENTFLEET_BENCH_MODEL=list`: the agent's model as the operator renders a Model with
/// a fallback list (its key read from a mounted Secret at each request; the fallback, never
/// asked, elsewhere). Returns the Secrets' directory.
fn as_model_list(manifest: &std::path::Path, base_url: &str) -> std::path::PathBuf {
    let text = std::fs::read_to_string(manifest).unwrap();
    let inline = format!("  model: {{provider: openai, name: instant, baseUrl: \"{base_url}\"}}\n");
    assert!(text.contains(&inline), "{text}");
    let listed = format!(
        "  model:\n    ref: instant\n    provider: openai\n    name: instant\n    baseUrl: \"{base_url}\"\n    apiKeySecretRef: {{name: llm, key: apiKey}}\n    retryAfterSeconds: 300\n    fallback:\n      - {{model: steady, settings: {{provider: openai, name: steady, baseUrl: \"http://127.0.0.1:9/v1\", apiKeySecretRef: {{name: steady, key: apiKey}}}}}}\n"
    );
    std::fs::write(manifest, text.replace(&inline, &listed)).unwrap();
    let secrets = manifest.parent().unwrap().join("secrets");
    for name in ["llm", "steady"] {
        std::fs::create_dir_all(secrets.join(name)).unwrap();
        std::fs::write(secrets.join(name).join("apiKey"), format!("sk-{name}")).unwrap();
    }
    secrets
}

/// What one run measured.
struct Run {
    p50: f64,
    p99: f64,
    rate: f64,
}

/// One run; with `archive`, every checkpoint goes to that server at most once per
/// `intervalSeconds`.
async fn run(archive: Option<(&S3Server, u32)>) -> Run {
    let redis = RedisServer::start().unwrap();
    let store = RedisStore::new(&redis.url()).unwrap();
    let family = SpaceKey::new("bench", "family");
    store
        .apply_space(&family, &space_record("Family", &["assistant"], &["Husam"]))
        .await
        .unwrap();

    // A 200-message consciousness.
    let agent = AgentKey::new("bench", "assistant");
    common::prefill(&store, &agent).await;
    assert_eq!(
        store.consciousness(&agent).await.unwrap().messages.len(),
        200
    );

    // Like a real model: answer the inbox once, then end the cycle (the fresh context after
    // the conversation, with any preview of waiting events, is not a new question).
    let model = MockModel::responding(|req| {
        if common::answered(req) {
            MockTurn::text("Done.")
        } else {
            MockTurn::tools(&[("send_message", json!({"text": "Got it, Husam."}))])
        }
    })
    .await
    .unwrap();
    let manifest = common::assistant_manifest(
        "instant",
        &model.base_url,
        &format!(
            "  consciousness: {{windowTokens: 3000, keepRecentMessages: 12, compaction: slidingWindow, checkpointsRetained: 10, archive: {{intervalSeconds: {}}}}}\n",
            archive.map_or(1, |(_, interval)| interval)
        ),
    );
    let mut command = common::worker(&manifest, &redis.url());
    if std::env::var("AGENTFLEET_BENCH_MODEL").as_deref() == Ok("list") {
        let secrets = as_model_list(&manifest, &model.base_url);
        command.arg("--secrets-dir").arg(secrets);
    }
    if let Some((s3, _)) = archive {
        command
            .envs(s3.env())
            .env("AGENTFLEET_ARCHIVE_URL", s3.url("worker-bench"));
    }
    let worker = Kill(command.spawn().unwrap());
    let pid = worker.0.id();
    // Idle: lease taken, sleeping on the inbox.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle_rss = rss_kib(pid);

    let mut live = store.subscribe_live(&family).await.unwrap();
    let mut latencies = Vec::with_capacity(ITERATIONS);
    let started = Instant::now();
    let mut measured_from = started;
    for i in 0..WARMUP + ITERATIONS {
        if i == WARMUP {
            measured_from = Instant::now();
        }
        let t0 = Instant::now();
        common::husam_says(&store, &family, format!("ping {i}")).await;
        common::assistant_says(&mut live, Duration::from_secs(10)).await;
        if i >= WARMUP {
            latencies.push(t0.elapsed());
        }
    }
    let elapsed = measured_from.elapsed();
    // Let the last cycle commit before reading the state.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let busy_rss = rss_kib(pid);
    let end = store.consciousness(&agent).await.unwrap();
    let cycles = end.cycle - 50;
    latencies.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let archived = match archive {
        Some(_) => {
            let seen = store.observe(std::slice::from_ref(&agent)).await.unwrap();
            let a = seen[0].archive.clone().unwrap();
            format!(
                "archiving to S3 at most every {}s (last archived: cycle {} of {}, {})",
                archive.map_or(0, |(_, i)| i),
                a.cycle.unwrap_or(0),
                end.cycle,
                a.reason
            )
        }
        None => "no archive".to_string(),
    };
    println!("agentfleet worker benchmark ({ITERATIONS} messages after {WARMUP} warm-up, 200-message consciousness at start, instant local model over HTTP, {archived})");
    println!("  message posted → agent's reply in the space: p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        ms(pct(&latencies, 0.50)), ms(pct(&latencies, 0.90)), ms(pct(&latencies, 0.99)), ms(*latencies.last().unwrap()));
    println!(
        "  back to back: {:.0} cycles/s ({} cycles committed for {} messages)",
        ITERATIONS as f64 / elapsed.as_secs_f64(),
        cycles,
        WARMUP + ITERATIONS
    );
    println!(
        "  consciousness at the end: {} messages, ~{} tokens (window 3000, sliding)",
        end.messages.len(),
        end.tokens
    );
    println!(
        "  worker RSS: {:.1} MiB idle, {:.1} MiB after the run",
        idle_rss as f64 / 1024.0,
        busy_rss as f64 / 1024.0
    );
    let _ = std::fs::remove_dir_all(manifest.parent().unwrap());
    Run {
        p50: ms(pct(&latencies, 0.50)),
        p99: ms(pct(&latencies, 0.99)),
        rate: ITERATIONS as f64 / elapsed.as_secs_f64(),
    }
}

//! Long answers: `cargo bench --bench answers`.
//!
//! A model may write a message of any length, a few characters at a time, and the worker
//! streams the `send_message` text live as it arrives. This measures what a long answer costs
//! the worker: a real `redis-server`, the release `agentfleet worker` binary, and a local
//! OpenAI-compatible model (the in-process mock server) that answers every message with one
//! `send_message` of N bytes streamed in 4-character argument deltas (as a real model's tokens
//! come). For each size: message posted → the agent's whole message in the space, and the
//! worker's CPU time per answer (from `/proc`). `AGENTFLEET_BENCH_BIN` runs it against another
//! build.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a benchmark: fail loudly

mod common;

use std::time::{Duration, Instant};

use common::{pct, Kill};
use serde_json::json;

use agentfleet::store::prelude::*;
use agentfleet::testing::{MockModel, MockTurn};

const SIZES: [usize; 3] = [4 << 10, 64 << 10, 256 << 10];
const ITERATIONS: usize = 5;

/// The model's answer: one `send_message` of `size` bytes in 4-character deltas.
fn long_answer(size: usize) -> MockTurn {
    let text = "word ".repeat(size / 5 + 1)[..size].to_string();
    let arguments = json!({ "text": text }).to_string();
    let mut deltas = vec![
        json!({"tool_calls": [{"index": 0, "id": "call_long", "type": "function",
        "function": {"name": "send_message", "arguments": ""}}]}),
    ];
    let chars: Vec<char> = arguments.chars().collect();
    deltas.extend(chars.chunks(4).map(|c| {
        json!({"tool_calls": [{"index": 0, "function": {"arguments": c.iter().collect::<String>()}}]})
    }));
    MockTurn::Deltas(deltas)
}

/// User and system CPU time of a process so far.
fn cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // After the command's closing parenthesis: fields 3… (utime and stime are 14 and 15).
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // Linux reports in USER_HZ, 100 a second on every platform this runs on.
    Duration::from_millis(ticks * 10)
}

#[tokio::main]
async fn main() {
    println!("agentfleet long-answer benchmark (one send_message of N bytes in 4-character deltas, {ITERATIONS} answers each, release worker, real Redis)");
    println!("  | size | posted → whole message, p50 | max | worker CPU per answer |");
    for size in SIZES {
        run(size).await;
    }
}

async fn run(size: usize) {
    let (redis, store, family) = common::family().await;
    let model = MockModel::responding(move |req| {
        if common::answered(req) {
            MockTurn::text("Done.")
        } else if req["tools"].as_array().is_none_or(Vec::is_empty) {
            // Compaction asks for a summary (without tools).
            MockTurn::text("Husam asked; the assistant answered at length.")
        } else {
            long_answer(size)
        }
    })
    .await
    .unwrap();
    // A window that keeps the last answers only, so that each one costs the same.
    let manifest = common::assistant_manifest(
        "long",
        &model.base_url,
        "  consciousness: {windowTokens: 200000, keepRecentMessages: 4, compaction: slidingWindow}\n",
    );
    let worker = Kill(common::worker(&manifest, &redis.url()).spawn().unwrap());
    let pid = worker.0.id();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut live = store.subscribe_live(&family).await.unwrap();
    let mut latencies = Vec::new();
    let mut cpus = Vec::new();
    for i in 0..ITERATIONS {
        let (t0, c0) = (Instant::now(), cpu(pid));
        common::husam_says(&store, &family, format!("tell me everything {i}")).await;
        let message = common::assistant_says(&mut live, Duration::from_secs(600)).await;
        assert_eq!(message.text.len(), size);
        latencies.push(t0.elapsed());
        // The cycle's end ("Done.") and its commit are part of the answer's cost.
        tokio::time::sleep(Duration::from_millis(300)).await;
        cpus.push(cpu(pid) - c0);
    }
    latencies.sort();
    cpus.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "  | {} KiB | {:.0} ms | {:.0} ms | {:.0} ms |",
        size >> 10,
        ms(pct(&latencies, 0.5)),
        ms(*latencies.last().unwrap()),
        ms(pct(&cpus, 0.5))
    );
    drop(worker);
    let _ = std::fs::remove_dir_all(manifest.parent().unwrap());
}

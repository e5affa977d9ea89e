//! A2A benchmark: `cargo bench --bench a2a`.
//!
//! The release `agentfleet dev` (embedded store) with one scripted agent — the instant model —
//! in a space with one human, served over A2A. The same exchange, one at a time, two ways:
//!
//! 1. Our own API: post the human's message, then wait on the space's SSE stream for the
//!    agent's answer (the stream opened once, before).
//! 2. A2A: a blocking JSON-RPC `SendMessage` (same `contextId` each time), answered with the
//!    task `COMPLETED` — after the cycle committed, so it waits for more than the answer.
//!
//! Reports p50/p90/p99 of each, measured by the client. `AGENTFLEET_BENCH_A2A_ROUNDS` sets the
//! exchanges per way (default 300, after 20 of warm-up). Exchanges start 60 ms apart: `dev`'s
//! gateway allows a token 20 requests a second. `AGENTFLEET_BENCH_A2A_MEMORY=shared` serves the
//! agent with `spec.a2a.memory: shared` (a conversation's cycles then read and commit the
//! agent's consciousness, as every cycle did before memory per conversation).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a benchmark: fail loudly

mod common;

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentfleet::chat::SseParser;
use common::{agentfleet_bin, pct, Kill};
use futures::StreamExt;
use serde_json::{json, Value};

const MANIFESTS: &str = "\
apiVersion: agentfleet.dev/v1alpha1
kind: Space
metadata: {name: desk}
spec:
  members: [{id: husam, name: Husam}]
---
apiVersion: agentfleet.dev/v1alpha1
kind: Agent
metadata: {name: helper}
spec:
  model: {provider: scripted, name: helper}
  spaces: [desk]
  a2a: {callers: [\"human:husam\"]}
";

/// Waits until `next`, then sets it 60 ms later.
async fn pace(next: &mut tokio::time::Instant) {
    tokio::time::sleep_until(*next).await;
    *next = tokio::time::Instant::now() + Duration::from_millis(60);
}

#[tokio::main]
async fn main() {
    agentfleet::install_crypto_provider();
    let rounds: usize = std::env::var("AGENTFLEET_BENCH_A2A_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let dir = std::env::temp_dir().join(format!("agentfleet-bench-a2a-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let manifests = match std::env::var("AGENTFLEET_BENCH_A2A_MEMORY") {
        Ok(memory) => MANIFESTS.replace(
            "a2a: {callers: [\"human:husam\"]}",
            &format!("a2a: {{callers: [\"human:husam\"], memory: {memory}}}"),
        ),
        Err(_) => MANIFESTS.to_string(),
    };
    std::fs::write(dir.join("desk.yaml"), manifests).unwrap();
    let mut child = Command::new(agentfleet_bin())
        .args(["dev", dir.to_str().unwrap(), "--addr", "127.0.0.1:0"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let _dev = Kill(child);
    let (mut url, mut token) = (None, None);
    for line in stdout.lines() {
        let line = line.unwrap();
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("gateway") {
            url = rest.split_whitespace().next().map(str::to_string);
        }
        if t.starts_with("agentfleet chat default/desk") {
            token = t.rsplit_once("--token ").map(|(_, tok)| tok.to_string());
        }
        if t.starts_with("Ctrl-C stops") {
            break;
        }
    }
    let (url, token) = (url.unwrap(), token.unwrap());
    let http = reqwest::Client::new();

    // 1. Post + SSE.
    let stream = http
        .get(format!("{url}/v1/spaces/default/desk/stream"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    let mut body = stream.bytes_stream();
    let mut parser = SseParser::default();
    let mut own = Vec::new();
    let mut next = tokio::time::Instant::now();
    for i in 0..rounds + 20 {
        pace(&mut next).await;
        let start = Instant::now();
        let posted = http
            .post(format!("{url}/v1/spaces/default/desk/messages"))
            .bearer_auth(&token)
            .json(&json!({"text": format!("hello {i}")}))
            .send()
            .await
            .unwrap();
        assert_eq!(posted.status(), 201);
        'answer: loop {
            let chunk = body.next().await.unwrap().unwrap();
            for event in parser.feed(&chunk) {
                if event.event == "message" {
                    let v: Value = serde_json::from_str(&event.data).unwrap();
                    if v["sender"]["kind"] == "agent" {
                        break 'answer;
                    }
                }
            }
        }
        if i >= 20 {
            own.push(start.elapsed());
        }
    }
    drop(body);

    // 2. A2A SendMessage, blocking.
    let endpoint = format!("{url}/a2a/default/helper");
    let mut a2a = Vec::new();
    for i in 0..rounds + 20 {
        pace(&mut next).await;
        let start = Instant::now();
        let answer: Value = http
            .post(&endpoint)
            .bearer_auth(&token)
            .header("A2A-Version", "1.0")
            .json(
                &json!({"jsonrpc": "2.0", "id": i, "method": "SendMessage", "params": {
                "message": {"messageId": format!("bench-{i}"), "contextId": "bench",
                    "role": "ROLE_USER", "parts": [{"text": format!("hello {i}")}]}}}),
            )
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            answer["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
            "{answer}"
        );
        if i >= 20 {
            a2a.push(start.elapsed());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    own.sort();
    a2a.sort();
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1000.0);
    println!("message → the instant model's answer, {rounds} exchanges each, one at a time:");
    for (name, v) in [("post + SSE", &own), ("A2A SendMessage (blocking)", &a2a)] {
        println!(
            "  {name:<28} p50 {}  p90 {}  p99 {}",
            ms(pct(v, 0.50)),
            ms(pct(v, 0.90)),
            ms(pct(v, 0.99))
        );
    }
    println!(
        "  A2A − own, p50: {}",
        ms(pct(&a2a, 0.50).saturating_sub(pct(&own, 0.50)))
    );
}

//! Gateway benchmark: `cargo bench --bench gateway`.
//!
//! A real `redis-server` and the release `agentfleet gateway` binary (its own process, token
//! file, rate limit off). One space with 10 member agents and one human.
//!
//! 1. Throughput: 32 keep-alive clients post 20,000 messages as fast as the gateway takes
//!    them; every post is written to the space's log and fanned out to the 10 agents' inboxes
//!    (one Redis script per post). Reports messages/s and inbox deliveries/s.
//! 2. Fan-out latency: 1,000 SSE clients connected to the space; 200 messages posted one
//!    every 20 ms; for every (message, client) pair, the time from the post request being sent
//!    to the SSE event being parsed by that client. Reports p50/p90/p99/max, and the gateway's
//!    resident memory with the 1,000 clients connected.
//!
//! The driver (HTTP clients, 1,000 SSE parsers), the gateway and Redis share this machine's
//! cores, so the figures include the driver's own scheduling delays.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a benchmark: fail loudly

mod common;

use common::{pct, rss_kib};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentfleet::chat::SseParser;
use agentfleet::identity::AgentKey;
use agentfleet::identity::SpaceKey;
use agentfleet::store::{prelude::*, RedisStore};
use agentfleet::testing::{space_record, RedisServer};
use futures::StreamExt;
use serde_json::json;

const POSTS: usize = 20_000;
const POSTERS: usize = 32;
const SSE_CLIENTS: usize = 1_000;
const LATENCY_MESSAGES: usize = 200;
const TOKEN: &str = "bench-token";

#[tokio::main]
async fn main() {
    agentfleet::install_crypto_provider();
    let redis = RedisServer::start().unwrap();
    let store = RedisStore::new(&redis.url()).unwrap();
    let space = SpaceKey::new("bench", "load");
    let agents: Vec<String> = (0..10).map(|i| format!("agent-{i}")).collect();
    let agent_refs: Vec<&str> = agents.iter().map(String::as_str).collect();
    store
        .apply_space(&space, &space_record("Load", &agent_refs, &["Husam"]))
        .await
        .unwrap();

    let gateway = common::Gateway::start(&redis.url(), TOKEN, &[]).await;
    let base = gateway.base.clone();
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(POSTERS * 2)
        .build()
        .unwrap();
    let post_url = format!("{base}/v1/spaces/bench/load/messages");
    println!(
        "gateway pid {}: idle RSS {} KiB",
        gateway.pid(),
        rss_kib(gateway.pid())
    );

    // 1. Throughput with fan-out to 10 agents.
    let elapsed = gateway
        .post_load(TOKEN, POSTS, POSTERS, |_| "bench/load".to_string())
        .await;
    let depth = store
        .inbox_depth(&AgentKey::new("bench", "agent-7"))
        .await
        .unwrap();
    assert_eq!(depth, POSTS as u64, "every post reached every agent");
    println!(
        "throughput: {POSTS} posts by {POSTERS} clients in {:.2}s = {:.0} messages/s, {:.0} inbox deliveries/s (10 agents each)",
        elapsed.as_secs_f64(),
        POSTS as f64 / elapsed.as_secs_f64(),
        10.0 * POSTS as f64 / elapsed.as_secs_f64()
    );

    // 2. 1,000 SSE clients: post → delivery latency.
    let base_instant = Instant::now();
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(
        SSE_CLIENTS * LATENCY_MESSAGES,
    )));
    let connected = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    let stream_url = format!("{base}/v1/spaces/bench/load/stream");
    let sse_http = reqwest::Client::new();
    for _ in 0..SSE_CLIENTS {
        let http = sse_http.clone();
        let url = stream_url.clone();
        let latencies = latencies.clone();
        let connected = connected.clone();
        clients.push(tokio::spawn(async move {
            let resp = http.get(&url).bearer_auth(TOKEN).send().await.unwrap();
            assert_eq!(resp.status(), 200);
            connected.fetch_add(1, Ordering::Relaxed);
            let mut body = resp.bytes_stream();
            let mut parser = SseParser::default();
            let mut got = Vec::with_capacity(LATENCY_MESSAGES);
            while got.len() < LATENCY_MESSAGES {
                let Some(Ok(chunk)) = body.next().await else {
                    break;
                };
                for ev in parser.feed(&chunk) {
                    if ev.event != "message" {
                        continue;
                    }
                    let now = base_instant.elapsed();
                    let v: serde_json::Value = serde_json::from_str(&ev.data).unwrap();
                    let sent: u64 = v["text"]
                        .as_str()
                        .unwrap()
                        .trim_start_matches("sent-at-us ")
                        .parse()
                        .unwrap();
                    got.push(now.saturating_sub(Duration::from_micros(sent)));
                }
            }
            let n = got.len();
            latencies.lock().unwrap().extend(got);
            n
        }));
    }
    let start = Instant::now();
    while connected.load(Ordering::Relaxed) < SSE_CLIENTS {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "SSE clients did not connect"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "{SSE_CLIENTS} SSE clients connected in {:.2}s; gateway RSS {} KiB",
        start.elapsed().as_secs_f64(),
        rss_kib(gateway.pid())
    );
    for _ in 0..LATENCY_MESSAGES {
        let sent = base_instant.elapsed().as_micros();
        let resp = http
            .post(&post_url)
            .bearer_auth(TOKEN)
            .json(&json!({"text": format!("sent-at-us {sent}")}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
        let _ = resp.bytes().await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut received = 0;
    for c in clients {
        received += tokio::time::timeout(Duration::from_secs(30), c)
            .await
            .expect("every client receives every message")
            .unwrap();
    }
    assert_eq!(received, SSE_CLIENTS * LATENCY_MESSAGES, "no message lost");
    let mut lat = latencies.lock().unwrap().clone();
    lat.sort();
    println!(
        "post -> SSE delivery, {SSE_CLIENTS} clients x {LATENCY_MESSAGES} messages ({} deliveries): p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        lat.len(),
        pct(&lat, 0.50).as_secs_f64() * 1e3,
        pct(&lat, 0.90).as_secs_f64() * 1e3,
        pct(&lat, 0.99).as_secs_f64() * 1e3,
        lat[lat.len() - 1].as_secs_f64() * 1e3,
    );
    let metrics = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in metrics.lines() {
        if line.starts_with("agentfleet_gateway_fanout_latency_seconds_sum")
            || line.starts_with("agentfleet_gateway_fanout_latency_seconds_count")
        {
            println!("gateway-side {line}");
        }
    }
    drop(gateway);
}

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
//! 3. Sign-in: a gateway that also takes Kubernetes tokens (reviewed by a local stand-in for
//!    the API server's `TokenReview`; the review is cached after the first post), one client
//!    posting 2,000 times with the token file's token and 2,000 times with a ServiceAccount's
//!    Kubernetes token, alternately. Reports p50/p99 of each and the difference at p50.
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
const SIGN_INS: usize = 2_000;
const SA_TOKEN: &str = "bench-service-account-token";

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

    sign_in(&redis.url(), &store).await;
}

/// 3. The cost of a Kubernetes token over the token file's, once its review is cached.
async fn sign_in(redis_url: &str, store: &RedisStore) {
    let reviews = Arc::new(AtomicUsize::new(0));
    let counted = reviews.clone();
    let api = axum::Router::new().route(
        "/apis/authentication.k8s.io/v1/tokenreviews",
        axum::routing::post(move |axum::Json(review): axum::Json<serde_json::Value>| {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::Relaxed);
                let ok = review["spec"]["token"] == SA_TOKEN;
                axum::Json(json!({
                    "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                    "status": {"authenticated": ok, "user": {"username": "system:serviceaccount:bench:poster", "groups": ["system:serviceaccounts"]}}
                }))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api_addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, api).await });
    let kubeconfig = std::env::temp_dir().join(format!(
        "agentfleet-bench-kubeconfig-{}",
        std::process::id()
    ));
    std::fs::write(
        &kubeconfig,
        format!("apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{{name: c, cluster: {{server: 'http://{api_addr}'}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\nusers: [{{name: u, user: {{token: gateway}}}}]\n"),
    )
    .unwrap();
    let space = SpaceKey::new("bench", "signin");
    store
        .apply_space(
            &space,
            &space_record(
                "Sign-in",
                &["agent-0"],
                &["Husam", "system.serviceaccount.bench.poster"],
            ),
        )
        .await
        .unwrap();
    let gateway = common::Gateway::start(
        redis_url,
        TOKEN,
        &[
            ("KUBECONFIG", kubeconfig.to_str().unwrap()),
            ("AGENTFLEET_GATEWAY_KUBERNETES_AUTH", "true"),
        ],
    )
    .await;
    let http = reqwest::Client::new();
    let url = format!("{}/v1/spaces/bench/signin/messages", gateway.base);
    let post = |token: &'static str| {
        let (http, url) = (http.clone(), url.clone());
        async move {
            let start = Instant::now();
            let resp = http
                .post(&url)
                .bearer_auth(token)
                .json(&json!({"text": "signed in"}))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 201);
            let _ = resp.bytes().await.unwrap();
            start.elapsed()
        }
    };
    // Warm: the connection, and the one review.
    post(TOKEN).await;
    post(SA_TOKEN).await;
    let (mut file, mut kubernetes) = (Vec::new(), Vec::new());
    for _ in 0..SIGN_INS {
        file.push(post(TOKEN).await);
        kubernetes.push(post(SA_TOKEN).await);
    }
    file.sort();
    kubernetes.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "sign-in, {SIGN_INS} posts each, one client: token file p50 {:.3} ms p99 {:.3} ms; Kubernetes token (review cached) p50 {:.3} ms p99 {:.3} ms; +{:.3} ms at p50; {} review(s) asked",
        ms(pct(&file, 0.50)),
        ms(pct(&file, 0.99)),
        ms(pct(&kubernetes, 0.50)),
        ms(pct(&kubernetes, 0.99)),
        ms(pct(&kubernetes, 0.50)) - ms(pct(&file, 0.50)),
        reviews.load(Ordering::Relaxed)
    );
    drop(gateway);
    let _ = std::fs::remove_file(&kubeconfig);
}

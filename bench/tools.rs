//! HTTP tool benchmark: `cargo bench --bench tools`.
//!
//! What the worker adds to a sync HTTP tool call: a local tool server answering at once, called
//! through `HttpTools::call` (arguments checked against the `inputSchema`, a URL placeholder
//! filled, the rest as query, static headers and a Secret's, `Idempotency-Key`, the answer
//! read, masked and shaped into the result) and, interleaved, the same request made with a
//! plain pooled `reqwest` client (the body read as bytes). Prints p50/p90/p99 of both, the
//! overhead as the difference of each quantile, and the quantiles of the per-pair difference.
//! Target: overhead p99 ≤ 1 ms.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a benchmark: fail loudly

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::pct;

use agentfleet::crd::HttpToolSpec;
use agentfleet::identity::AgentKey;
use agentfleet::store::MemoryStore;
use agentfleet::worker::tools::http::HttpTools;
use agentfleet::worker::tools::secrets::Secrets;
use agentfleet::worker::tools::{External, ExternalCall, ExternalContext};
use serde_json::json;

const ITERATIONS: usize = 5000;
const WARMUP: usize = 300;
const SECRET: &str = "Bearer bench-secret-token";

#[tokio::main]
async fn main() {
    agentfleet::install_crypto_provider();
    // The tool server: a small JSON answer at once.
    let app = axum::Router::new().fallback(|| async {
        axum::Json(json!({"id": 42, "state": "open", "title": "disk full on node-7"}))
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let specs: Vec<HttpToolSpec> = serde_yaml::from_str(&format!(
        r#"
- name: get_ticket
  description: Reads a ticket.
  url: "{base}/teams/{{team}}/tickets/{{id}}"
  method: GET
  inputSchema:
    type: object
    properties: {{team: {{type: string}}, id: {{type: integer}}, fields: {{type: string}}}}
    required: [team, id]
  headers: {{X-Team: sre}}
  headersFrom: {{secretName: tracker}}
"#
    ))
    .unwrap();
    let secrets = Secrets::from_map(BTreeMap::from([(
        "tracker".to_string(),
        BTreeMap::from([("Authorization".to_string(), SECRET.to_string())]),
    )]));
    let agent = AgentKey::new("bench", "bot");
    let tools = HttpTools::new(
        &agent,
        &specs,
        &ExternalContext {
            store: Arc::new(MemoryStore::new()),
            secrets,
            callback_url: None,
        },
    );
    let arguments = json!({"team": "ops/sre", "id": 42, "fields": "state,title"}).to_string();
    let raw_url = format!("{base}/teams/ops%2Fsre/tickets/42?fields=state%2Ctitle");
    let raw = reqwest::Client::new();

    let mut through = Vec::with_capacity(ITERATIONS);
    let mut plain = Vec::with_capacity(ITERATIONS);
    for i in 0..WARMUP + ITERATIONS {
        let key = format!("bench/bot:batch:{i}:0");
        let t = Instant::now();
        let outcome = tools
            .call(&ExternalCall {
                agent: &agent,
                name: "get_ticket",
                arguments: &arguments,
                idempotency_key: &key,
                space: None,
                depth: 1,
            })
            .await;
        let tool_took = t.elapsed();
        assert!(outcome.ok, "{}", outcome.content);

        let t = Instant::now();
        let answer = raw
            .get(&raw_url)
            .header("x-team", "sre")
            .header("authorization", SECRET)
            .header("idempotency-key", &key)
            .send()
            .await
            .unwrap();
        assert!(answer.status().is_success());
        let body = answer.bytes().await.unwrap();
        let raw_took = t.elapsed();
        assert!(!body.is_empty());
        if i >= WARMUP {
            through.push(tool_took);
            plain.push(raw_took);
        }
    }
    let signed: Vec<f64> = through
        .iter()
        .zip(&plain)
        .map(|(a, b)| a.as_secs_f64() - b.as_secs_f64())
        .collect();
    through.sort_unstable();
    plain.sort_unstable();
    let mut pairs = signed;
    pairs.sort_unstable_by(f64::total_cmp);
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let pair_q = |p: f64| {
        pairs[((pairs.len() as f64 * p).ceil() as usize)
            .saturating_sub(1)
            .min(pairs.len() - 1)]
            * 1000.0
    };
    println!("sync HTTP tool call, {ITERATIONS} calls (after {WARMUP} warm-up), tool server answering at once:");
    for (name, q) in [("p50", 0.50), ("p90", 0.90), ("p99", 0.99)] {
        let (a, b) = (pct(&through, q), pct(&plain, q));
        println!(
            "  {name}: through HttpTools {:.3} ms, plain reqwest {:.3} ms, overhead {:.3} ms (per-pair difference {:.3} ms)",
            ms(a),
            ms(b),
            ms(a) - ms(b),
            pair_q(q)
        );
    }
    let p99 = ms(pct(&through, 0.99)) - ms(pct(&plain, 0.99));
    println!(
        "  overhead p99 {:.3} ms: {}",
        p99,
        if p99 <= 1.0 {
            "within the 1 ms target"
        } else {
            "OVER the 1 ms target"
        }
    );
}

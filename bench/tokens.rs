//! Token benchmark: `cargo bench --bench tokens`.
//!
//! What a living agent's prompts cost once a provider caches repeated prefixes. A real
//! `redis-server`, the release `agentfleet worker` binary and a local OpenAI-compatible model
//! server that records every request. The agent starts with a 200-message consciousness (its
//! window, sliding at 3,000 estimated tokens, keeps it about that size: compaction drops a
//! quarter now and then) and handles 100 messages one after another; every tenth cycle it
//! stores a memory, as agents do. Each request is priced as a provider with automatic prefix
//! caching bills it (OpenAI's rule: the longest prefix, tools first, shared with one of the
//! previous requests, counted in 128-token steps from 1,024 tokens; 4 bytes a token), with
//! cache reads at 10% of the input price (Anthropic's ratio). Printed: prompt tokens per cycle,
//! the share served from the cache, and the billed-equivalent input tokens per cycle.
//!
//! To compare with an older build, run it with `AGENTFLEET_BENCH_BIN` naming that build's binary.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a benchmark: fail loudly

mod common;

use std::time::{Duration, Instant};

use agentfleet::identity::AgentKey;
use agentfleet::store::prelude::*;
use agentfleet::testing::{cached_form, conversation, shared_prefix, MockModel, MockTurn};
use common::Kill;
use serde_json::json;

const CYCLES: usize = 100;
const TOKEN_BYTES: usize = 4;
const CACHE_MINIMUM: usize = 1024;
const CACHE_STEP: usize = 128;
const CACHE_READ_PRICE: f64 = 0.1;

#[tokio::main]
async fn main() {
    let (redis, store, family) = common::family().await;
    let agent = AgentKey::new("bench", "assistant");
    common::prefill(&store, &agent).await;

    let model = MockModel::responding(|req| {
        let conversation = conversation(req);
        let last = conversation.last().unwrap();
        if req.get("tools").is_none() {
            return MockTurn::text("Earlier: weekend plans were discussed.");
        }
        if last["role"] != "user" {
            return MockTurn::text("Done.");
        }
        let text = last["content"].as_str().unwrap_or_default();
        let n: usize = text
            .split("message ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(1);
        let mut calls = vec![(
            "send_message",
            json!({"text": format!("Noted, Husam: message {n} is in hand.")}),
        )];
        if n.is_multiple_of(10) {
            calls.push((
                "set_memories",
                json!({"memories": {format!("fact-{n}"): format!("message {n} asked for a follow-up")}}),
            ));
        }
        MockTurn::tools(&calls)
    })
    .await
    .unwrap();
    let manifest = common::assistant_manifest(
        "instant",
        &model.base_url,
        "  instructions: You help the family plan their weeks. Be brief and concrete.\n  consciousness: {windowTokens: 3000, keepRecentMessages: 12, compaction: slidingWindow}\n",
    );
    let _worker = Kill(common::worker(&manifest, &redis.url()).spawn().unwrap());

    for i in 1..=CYCLES {
        let before = store.consciousness(&agent).await.unwrap().cycle;
        common::husam_says(
            &store,
            &family,
            format!("This is message {i} about the weekend plans"),
        )
        .await;
        let start = Instant::now();
        while store.consciousness(&agent).await.unwrap().cycle == before {
            assert!(start.elapsed() < Duration::from_secs(20), "cycle {i}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    let requests = model.requests();
    let prompts: Vec<String> = requests.iter().map(cached_form).collect();
    let (mut all, mut cached) = (0usize, 0usize);
    for (i, p) in prompts.iter().enumerate() {
        let shared = prompts[i.saturating_sub(4)..i]
            .iter()
            .map(|q| shared_prefix(p, q))
            .max()
            .unwrap_or(0)
            / TOKEN_BYTES;
        all += p.len() / TOKEN_BYTES;
        if shared >= CACHE_MINIMUM {
            cached += shared / CACHE_STEP * CACHE_STEP;
        }
    }
    let billed = (all - cached) as f64 + cached as f64 * CACHE_READ_PRICE;
    let compactions = requests.iter().filter(|r| r.get("tools").is_none()).count();
    println!(
        "agentfleet token benchmark ({CYCLES} cycles, 200-message consciousness at start, window 3,000 tokens sliding, {} requests{})",
        requests.len(),
        if compactions > 0 { format!(", {compactions} summaries") } else { String::new() }
    );
    println!(
        "  prompt tokens per cycle: {:.0}; served from the provider's cache: {:.1}%",
        all as f64 / CYCLES as f64,
        cached as f64 * 100.0 / all as f64
    );
    println!(
        "  billed-equivalent input tokens per cycle (cache reads at 10%): {:.0}",
        billed / CYCLES as f64
    );
}

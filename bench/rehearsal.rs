//! Rehearsal benchmark: `cargo bench --bench rehearsal`.
//!
//! Two agents on a real `redis-server` live 100 cycles each (they keep facts, say what they
//! remember, skip lines for another agent), keeping every checkpoint and record: one on an
//! instant local model, the built-in scripted one (no network: what the rehearsal itself
//! costs); one on an OpenAI-compatible server on loopback playing every step at once (the
//! HTTP client and SSE parsing on top). Then a candidate of each (new instructions, the same
//! model, so it decides the same) rehearses all 100. Measures the rehearsal's time (all 100,
//! and per cycle p50/p99) and this process's resident memory before and after it, and its
//! peak so far (the model server of the second arm runs in this process too, and keeps every
//! request it received).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a benchmark: fail loudly

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentfleet::crd::Agent;
use agentfleet::identity::{AgentKey, SpaceKey};
use agentfleet::store::{prelude::*, RedisStore};
use agentfleet::testing::{
    human_message, last_turn, space_record, MockModel, MockTurn, RedisServer,
};
use agentfleet::worker::cycle::Agentlet;
use agentfleet::worker::rehearsal::{Criteria, Rehearsal};
use common::pct;
use serde_json::json;

const CYCLES: usize = 100;

fn agent(name: &str, model: &str) -> Agent {
    serde_yaml::from_str(&format!(
        "apiVersion: agentfleet.dev/v1alpha1
kind: Agent
metadata: {{name: {name}, namespace: bench}}
spec:
  model: {model}
  instructions: You help the family.
  spaces: [family]
  consciousness: {{checkpointsRetained: 200, windowTokens: 200000}}
  cycle: {{records: {{keep: 200}}}}"
    ))
    .unwrap()
}

/// Peak resident memory of this process so far, in KiB.
fn peak_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// What the scripted model would do, played by a server: remember, recall, or skip.
fn played(request: &serde_json::Value) -> MockTurn {
    let last = last_turn(request);
    if last.role == "tool" {
        return if last.called == "send_message" {
            MockTurn::text("Done.")
        } else {
            MockTurn::tools(&[("send_message", json!({"text": "Noted."}))])
        };
    }
    if last.content.contains("bob,") {
        MockTurn::tools(&[("skip", json!({"reason": "for bob"}))])
    } else if let Some(i) = last.content.find("remember that ") {
        let fact = last.content[i + 14..].split('"').next().unwrap_or_default();
        MockTurn::tools(&[(
            "set_memories",
            json!({"key": fact.replace(' ', "-"), "fact": fact}),
        )])
    } else {
        MockTurn::tools(&[("send_message", json!({"text": "I remember it all."}))])
    }
}

/// Agent `name` on `model` lives [`CYCLES`] cycles in `family`.
async fn live(store: &Arc<RedisStore>, name: &str, model: &str) -> Duration {
    let key = AgentKey::new("bench", name);
    let family = SpaceKey::new("bench", "family");
    store.register_agent(&key).await.unwrap();
    let spec = agent(name, model);
    let model = agentfleet::model::client(&spec.spec.model, name, Default::default()).unwrap();
    let agentlet = Agentlet::new(
        spec,
        key.clone(),
        store.clone(),
        Arc::from(model),
        agentfleet::telemetry::WorkerMetrics::new().unwrap(),
    );
    let lived = Instant::now();
    for i in 0..CYCLES {
        let text = match i % 3 {
            0 => format!("{name}, remember that fact {i} is true"),
            1 => format!("{name}, what do you remember?"),
            _ => "bob, can you fetch the milk?".to_string(),
        };
        store
            .post_message(&family, &human_message("Husam", &text))
            .await
            .unwrap();
        let lease = store
            .acquire_lease(&key, "bench", Duration::from_secs(60))
            .await
            .unwrap()
            .unwrap();
        let events = store.take_inbox(&key, &lease).await.unwrap();
        agentlet.cycle(&lease, &events).await.unwrap();
        store.release_lease(&key, &lease).await.unwrap();
    }
    lived.elapsed()
}

#[tokio::main]
async fn main() {
    let redis = RedisServer::start().unwrap();
    let store = Arc::new(RedisStore::new(&redis.url()).unwrap());
    let family = SpaceKey::new("bench", "family");
    store
        .apply_space(
            &family,
            &space_record("Family", &["alice", "carol", "bob"], &["Husam"]),
        )
        .await
        .unwrap();
    let played_model = MockModel::responding(played).await.unwrap();
    let arms = [
        (
            "scripted (in process)",
            "alice",
            "{provider: scripted, name: scripted}".to_string(),
        ),
        (
            "OpenAI-compatible server on loopback",
            "carol",
            format!(
                "{{provider: openai, name: mock, baseUrl: '{}'}}",
                played_model.base_url
            ),
        ),
    ];
    println!("agentfleet rehearsal benchmark: {CYCLES} recorded cycles of an agent on a real Redis, rehearsed whole");
    for (arm, name, model) in arms {
        let lived = live(&store, name, &model).await;
        let mut candidate = agent(name, &model);
        candidate.spec.instructions = "You help the family, briefly.".into();
        let model =
            agentfleet::model::client(&candidate.spec.model, name, Default::default()).unwrap();
        let rehearsal = Rehearsal {
            key: AgentKey::new("bench", name),
            candidate,
            model: Arc::from(model),
            cycles: CYCLES,
            criteria: Criteria::default(),
        };
        let before = common::rss_kib(std::process::id());
        let started = Instant::now();
        let mut last = Instant::now();
        let mut each = Vec::new();
        let report = rehearsal
            .run(store.as_ref(), |_| {
                each.push(last.elapsed());
                last = Instant::now();
            })
            .await
            .unwrap();
        let took = started.elapsed();
        let after = common::rss_kib(std::process::id());
        each.sort();
        let s = &report.summary;
        println!(
            "{arm}: lived {CYCLES} cycles in {:.2} s; {} rehearsed ({} compared, replies agree {:.0}%, tool calls {:.0}%, {} tokens) in {:.2} s; a cycle p50 {:.1} ms, p99 {:.1} ms; resident memory {} MiB before, {} MiB after, peak so far {} MiB",
            lived.as_secs_f64(),
            s.rehearsed,
            s.compared,
            s.reply_agreement * 100.0,
            s.tool_agreement * 100.0,
            s.candidate_tokens,
            took.as_secs_f64(),
            pct(&each, 0.5).as_secs_f64() * 1000.0,
            pct(&each, 0.99).as_secs_f64() * 1000.0,
            before / 1024,
            after / 1024,
            peak_kib() / 1024,
        );
        assert!(s.passed, "{}", s.verdict);
    }
}

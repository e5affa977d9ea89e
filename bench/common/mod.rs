//! Helpers shared by the benchmarks.
#![allow(dead_code)] // each benchmark uses what it needs

use std::process::Child;

use agentfleet::store::{prelude::*, AgentKey, RedisStore};
use serde_json::json;
use std::time::Duration;

/// Kills and reaps a child process when dropped.
pub struct Kill(pub Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Resident memory of a process, in KiB (0 when unknown).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .map(str::to_string)
        })
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// The `p` quantile of sorted durations.
pub fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p).ceil() as usize)
        .saturating_sub(1)
        .min(sorted.len() - 1)]
}

/// The `agentfleet` binary the benchmark runs: `AGENTFLEET_BENCH_BIN` when set (to compare an
/// older build against this one in one sitting), else the one Cargo built with it.
pub fn agentfleet_bin() -> String {
    std::env::var("AGENTFLEET_BENCH_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_agentfleet").to_string())
}

/// A 200-message consciousness for `agent`: 50 earlier cycles of four messages each (a
/// message, a `send_message` call, its result, "Done.").
pub async fn prefill(store: &RedisStore, agent: &AgentKey) {
    let lease = store
        .acquire_lease(agent, "prefill", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    for i in 0..50 {
        let msgs = [
            agentfleet::model::Message::user(format!(
                "[Family] Husam: \"earlier message {i} about the weekend plans\""
            )),
            agentfleet::model::Message::Assistant {
                content: None,
                tool_calls: vec![agentfleet::model::ToolCall {
                    id: format!("c{i}"),
                    name: "send_message".into(),
                    arguments: json!({"text": format!("reply {i}")}).to_string(),
                }],
            },
            agentfleet::model::Message::Tool {
                tool_call_id: format!("c{i}"),
                content: json!({"success": true}).to_string(),
            },
            agentfleet::model::Message::Assistant {
                content: Some("Done.".into()),
                tool_calls: vec![],
            },
        ];
        store
            .commit_cycle(
                agent,
                &lease,
                &agentfleet::store::CycleCommit {
                    new_messages: msgs
                        .iter()
                        .map(|m| serde_json::to_string(m).unwrap())
                        .collect(),
                    compaction: None,
                    tokens: 0,
                    cycle_tokens: 0,
                    checkpoints_retained: 10,
                },
            )
            .await
            .unwrap();
    }
    store.release_lease(agent, &lease).await.unwrap();
}

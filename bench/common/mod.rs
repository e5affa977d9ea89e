//! Helpers shared by the benchmarks.
#![allow(dead_code)] // each benchmark uses what it needs

use std::process::Child;
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

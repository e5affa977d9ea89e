//! `agentfleet dev` start-up benchmark: `cargo bench --bench startup`.
//!
//! Generates directories of N Spaces (N = 100, 1,000, 10,000; one human in each) and N/10
//! scripted Agents each in 100 of them, starts the release `agentfleet dev DIR` on each (its
//! own process, embedded store) and times it from spawn to the banner it prints once every
//! space is applied and every agent runs; each size three times, the median reported.
//! `AGENTFLEET_BENCH_BIN` runs an older build instead, to compare in one sitting;
//! `AGENTFLEET_BENCH_SPACES=100,1000` chooses the sizes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a benchmark: fail loudly

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Writes `spaces` Spaces and `spaces / 10` Agents (each in 100 of the spaces) into a fresh
/// directory.
fn manifests(spaces: usize) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "agentfleet-bench-startup-{spaces}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let names: Vec<String> = (0..spaces).map(|i| format!("s{i:05}")).collect();
    let mut text = String::new();
    for s in &names {
        text.push_str(&format!(
            "---\napiVersion: agentfleet.dev/v1alpha1\nkind: Space\nmetadata: {{name: {s}}}\nspec: {{members: [{{id: ann, name: Ann}}]}}\n"
        ));
    }
    std::fs::write(dir.join("spaces.yaml"), text).unwrap();
    let mut text = String::new();
    for a in 0..spaces / 10 {
        let member: Vec<&str> = (0..100)
            .map(|k| names[(a * 10 + k) % spaces].as_str())
            .collect();
        text.push_str(&format!(
            "---\napiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {{name: a{a:04}}}\nspec:\n  model: {{provider: scripted, name: x}}\n  spaces: [{}]\n",
            member.join(", ")
        ));
    }
    std::fs::write(dir.join("agents.yaml"), text).unwrap();
    dir
}

/// Seconds from spawning `agentfleet dev DIR` to its banner.
fn start_up(bin: &str, dir: &std::path::Path) -> f64 {
    let started = Instant::now();
    let mut child = common::Kill(
        Command::new(bin)
            .arg("dev")
            .arg(dir)
            .args(["--addr", "127.0.0.1:0"])
            .env_remove("AGENTFLEET_REDIS_URL")
            .env("RUST_LOG", "error")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let out = child.0.stdout.take().unwrap();
    let mut lines = BufReader::new(out).lines();
    let first = lines.next().expect("dev printed nothing").unwrap();
    let took = started.elapsed().as_secs_f64();
    assert!(!first.is_empty());
    took
}

fn main() {
    let bin = common::agentfleet_bin();
    println!("agentfleet dev start-up ({bin}), spawn to banner, median of 3:");
    // `AGENTFLEET_BENCH_SPACES=100,1000` measures only those sizes (an old build takes minutes
    // for 10,000).
    let sizes: Vec<usize> = std::env::var("AGENTFLEET_BENCH_SPACES")
        .map(|v| v.split(',').map(|n| n.trim().parse().unwrap()).collect())
        .unwrap_or_else(|_| vec![100, 1_000, 10_000]);
    for spaces in sizes {
        let dir = manifests(spaces);
        let mut runs: Vec<f64> = (0..3).map(|_| start_up(&bin, &dir)).collect();
        runs.sort_by(f64::total_cmp);
        let median = runs[1];
        println!(
            "  {spaces:>6} spaces, {:>5} agents in 100 each: {:>8.3} s ({:.3} ms per space)",
            spaces / 10,
            median,
            median * 1000.0 / spaces as f64
        );
        let _ = std::fs::remove_dir_all(&dir);
        std::thread::sleep(Duration::from_millis(200));
    }
}

//! The seed scenarios driven by a real model: `cargo bench --bench conformance`.
//!
//! Not a test of CI (a real model on two CPU cores takes minutes a scenario) and not a timed
//! assertion: a report. For each request layout (`proxy.rs`) and each scenario
//! (`scenarios.rs`), a fresh real `redis-server` and `agentfleet dev --redis` with the
//! scenario's manifests, the agents' model behind a recording proxy in front of the real
//! OpenAI-compatible server. Each scenario states what must be true in the space and the
//! consciousness, never the exact words. Printed: a table scenario → pass/fail with the
//! model requests and tokens, then per layout the pass rate, time to first token, cycle
//! time, tokens per cycle, the cycles that needed a nudge or a correction, and the
//! cache-eligible prefix share (what a prompt cache could serve: each request's bytes that
//! begin as the agent's previous request did) beside what the server's cache served of the
//! requests that were not an agent's first.
//!
//! The model, one of:
//! - `AGENTFLEET_REAL_MODEL_URL` (e.g. `http://127.0.0.1:8080/v1`) and
//!   `AGENTFLEET_REAL_MODEL` (the model name to ask for; default `local`): a server you run;
//! - `AGENTFLEET_REAL_MODEL_FILE` (a GGUF file): the suite starts llama.cpp's `llama-server`
//!   (`AGENTFLEET_LLAMA_SERVER`, default `llama-server` on the PATH) on a free port, with
//!   `AGENTFLEET_LLAMA_ARGS` added (e.g. `--chat-template-file …`).
//!
//! `AGENTFLEET_REAL_MODEL_LAYOUTS=last,before` and `AGENTFLEET_REAL_MODEL_SCENARIOS=greeting,…`
//! choose; `AGENTFLEET_REAL_MODEL_REPORT=FILE` also writes the table as Markdown;
//! `AGENTFLEET_REAL_MODEL_DUMP=DIR` keeps every request and answer the proxy forwarded;
//! `AGENTFLEET_REAL_MODEL_ANSWER_SECONDS` (300) is how long one answer may take.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a benchmark: fail loudly

mod proxy;
mod scenarios;

#[path = "../../tests/support/dev.rs"]
mod dev;
#[path = "../../tests/mcp/server.rs"]
#[allow(dead_code)] // the suite uses one of its tool sets
mod mcp;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use proxy::{Call, Layout};

/// A model server the suite started, stopped when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The model's base URL and name, and the server if the suite started it.
async fn model() -> Option<(String, String, Option<Server>)> {
    let name = std::env::var("AGENTFLEET_REAL_MODEL").unwrap_or_else(|_| "local".into());
    if let Ok(url) = std::env::var("AGENTFLEET_REAL_MODEL_URL") {
        return Some((url, name, None));
    }
    let file = std::env::var("AGENTFLEET_REAL_MODEL_FILE").ok()?;
    let bin = std::env::var("AGENTFLEET_LLAMA_SERVER").unwrap_or_else(|_| "llama-server".into());
    let port = agentfleet::testing::free_port().unwrap();
    let extra = std::env::var("AGENTFLEET_LLAMA_ARGS").unwrap_or_default();
    let log = std::env::temp_dir().join(format!("agentfleet-llama-{port}.log"));
    let child = Command::new(&bin)
        .args([
            "-m",
            &file,
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
        ])
        .args([
            "--jinja",
            "-c",
            "16384",
            "-np",
            "1",
            "--no-webui",
            "-a",
            &name,
        ])
        .args(extra.split_whitespace())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {bin}: {e}"));
    let server = Server(child);
    let http = reqwest::Client::new();
    let started = Instant::now();
    loop {
        let health = http
            .get(format!("http://127.0.0.1:{port}/health"))
            .send()
            .await;
        if health.is_ok_and(|r| r.status().is_success()) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "llama-server did not become healthy; see {}",
            log.display()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!(
        "llama-server up in {:.1} s (log: {})",
        started.elapsed().as_secs_f64(),
        log.display()
    );
    Some((format!("http://127.0.0.1:{port}/v1"), name, Some(server)))
}

fn chosen<T: Copy>(var: &str, all: &[(&str, T)]) -> Vec<(String, T)> {
    let wanted = std::env::var(var).ok();
    all.iter()
        .filter(|(n, _)| {
            wanted
                .as_deref()
                .is_none_or(|w| w.split(',').any(|x| x.trim() == *n))
        })
        .map(|(n, t)| (n.to_string(), *t))
        .collect()
}

/// The share of all prompt bytes a prompt cache could serve: each request's bytes that begin
/// as the previous request of the same agent did.
fn cache_share(calls: &[Call]) -> f64 {
    use agentfleet::testing::{cached_form, shared_prefix};
    let (mut shared, mut total) = (0usize, 0usize);
    let mut last: std::collections::HashMap<String, String> = Default::default();
    for call in calls {
        let system = proxy::agent_of(&call.request);
        let form = cached_form(&call.request);
        if let Some(previous) = last.get(&system) {
            shared += shared_prefix(previous, &form);
        }
        total += form.len();
        last.insert(system, form);
    }
    if total == 0 {
        0.0
    } else {
        shared as f64 / total as f64
    }
}

fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

#[tokio::main]
async fn main() {
    agentfleet::install_crypto_provider();
    let Some((url, name, _server)) = model().await else {
        println!(
            "conformance: no real model. Set AGENTFLEET_REAL_MODEL_URL (and AGENTFLEET_REAL_MODEL), \
             or AGENTFLEET_REAL_MODEL_FILE (a GGUF; llama-server on the PATH or in \
             AGENTFLEET_LLAMA_SERVER). See docs/real-models.md."
        );
        return;
    };
    let layouts = chosen(
        "AGENTFLEET_REAL_MODEL_LAYOUTS",
        &[
            ("last", Layout::Last),
            ("before", Layout::Before),
            ("kept", Layout::Kept),
            ("minimal", Layout::Minimal),
        ],
    );
    let scenarios = chosen("AGENTFLEET_REAL_MODEL_SCENARIOS", scenarios::ALL);
    let mut table = format!(
        "Model `{name}`\n\n| scenario | layout | result | requests | prompt tokens | completion tokens | nudges | corrections | seconds |\n|---|---|---|---:|---:|---:|---:|---:|---:|\n"
    );
    let mut summary = String::from(
        "\n| layout | passed | TTFT p50 (s): first request / later | later request p50 (s) | answer p50 (s) | tokens / cycle | cycles nudged or corrected | cache-eligible prefix | served from the server's cache |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (layout_name, layout) in &layouts {
        let mut passed = 0;
        let mut calls_all = Vec::new();
        let (mut cycles, mut helped, mut tokens) = (0u64, 0u64, 0u64);
        let mut cycle_seconds = Vec::new();
        for (scenario_name, scenario) in &scenarios {
            let started = Instant::now();
            // A scenario that panics (a bug of the suite, or a store that went away) fails
            // alone; the rest of the table still runs.
            let run = scenarios::run(*scenario, url.clone(), name.clone(), *layout);
            let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(run))
                .await
                .unwrap_or_else(|_| scenarios::Outcome::panicked());
            let seconds = started.elapsed().as_secs_f64();
            let prompt: u64 = outcome.calls.iter().map(|c| c.prompt_tokens).sum();
            let completion: u64 = outcome.calls.iter().map(|c| c.completion_tokens).sum();
            let result = match &outcome.failure {
                None => {
                    passed += 1;
                    "pass".to_string()
                }
                Some(why) => format!("FAIL: {}", why.replace('|', "/")),
            };
            eprintln!("{scenario_name} ({layout_name}): {result} in {seconds:.0} s");
            table.push_str(&format!(
                "| {scenario_name} | {layout_name} | {result} | {} | {prompt} | {completion} | {} | {} | {seconds:.0} |\n",
                outcome.calls.len(),
                outcome.nudges,
                outcome.corrections
            ));
            cycles += outcome.cycles;
            helped += outcome.helped_cycles;
            tokens += prompt + completion;
            cycle_seconds.extend(outcome.cycle_seconds.iter().copied());
            calls_all.extend(outcome.calls);
            // What is known so far, in case the run is cut short.
            if let Ok(path) = std::env::var("AGENTFLEET_REAL_MODEL_REPORT") {
                std::fs::write(&path, &table).unwrap();
            }
        }
        // A first request finds whatever the previous scenario left in the server's cache:
        // its times are told apart from the later requests'.
        let p50 = |warm: bool, f: fn(&Call) -> Duration| {
            let v = calls_all.iter().filter(|c| c.warm == warm);
            percentile(v.map(|c| f(c).as_secs_f64()).collect(), 0.5)
        };
        let (ttft, ttft_first) = (p50(true, |c| c.first_byte), p50(false, |c| c.first_byte));
        let request = p50(true, |c| c.took);
        let warm = calls_all.iter().filter(|c| c.warm);
        let (prompt, cached) = warm.fold((0u64, 0u64), |(p, c), call| {
            (p + call.prompt_tokens, c + call.cached_tokens)
        });
        summary.push_str(&format!(
            "| {} | {passed}/{} | {ttft_first:.1} / {ttft:.1} | {request:.1} | {:.1} | {} | {}/{} | {:.1}% | {:.1}% |\n",
            layout.name(),
            scenarios.len(),
            percentile(cycle_seconds, 0.5),
            tokens.checked_div(cycles).unwrap_or(0),
            helped,
            cycles,
            100.0 * cache_share(&calls_all),
            100.0 * cached as f64 / prompt.max(1) as f64,
        ));
    }
    table.push_str(&summary);
    println!("\n{table}");
    if let Ok(path) = std::env::var("AGENTFLEET_REAL_MODEL_REPORT") {
        std::fs::write(&path, &table).unwrap();
        eprintln!("report written to {path}");
    }
}

//! Helpers shared by the benchmarks.
#![allow(dead_code)] // each benchmark uses what it needs

use agentfleet::identity::AgentKey;
use agentfleet::store::{prelude::*, RedisStore};
use serde_json::json;
use std::time::Duration;

pub use agentfleet::testing::Kill;

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
                    failure: None,
                    record: None,
                },
            )
            .await
            .unwrap();
    }
    store.release_lease(agent, &lease).await.unwrap();
}

/// The release `agentfleet gateway` on a free loopback port, on the Redis at `redis_url` with
/// `env` besides, rate limit off, one token (`token`, Husam's); ready when returned.
pub struct Gateway {
    process: Kill,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    dir: std::path::PathBuf,
}

impl Gateway {
    pub async fn start(redis_url: &str, token: &str, env: &[(&str, &str)]) -> Self {
        let port = agentfleet::testing::free_port().unwrap();
        let dir =
            std::env::temp_dir().join(format!("agentfleet-bench-gw-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tokens = dir.join("tokens.yaml");
        std::fs::write(
            &tokens,
            format!(
                "tokens:\n- sha256: {}\n  kind: human\n  id: husam\n  name: Husam\n",
                agentfleet::gateway::auth::hash_token(token)
            ),
        )
        .unwrap();
        let process = Kill(
            std::process::Command::new(agentfleet_bin())
                .args(["gateway", "--rate-limit", "0"])
                .arg("--addr")
                .arg(format!("127.0.0.1:{port}"))
                .arg("--tokens")
                .arg(&tokens)
                .env("AGENTFLEET_REDIS_URL", redis_url)
                // One token drives the load, its 1,000 streams included.
                .env("AGENTFLEET_GATEWAY_MAX_STREAMS_PER_CALLER", "100000")
                .env("RUST_LOG", "warn")
                .envs(env.iter().copied())
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        );
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let start = std::time::Instant::now();
        while http
            .get(format!("{base}/readyz"))
            .send()
            .await
            .map(|r| !r.status().is_success())
            .unwrap_or(true)
        {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "gateway did not start"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Self { process, base, dir }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.process.0.id()
    }

    /// Posts `posts` messages (`load message I`) with `token` from `posters` keep-alive clients
    /// at once, message `i` to the space `space(i)` (`NAMESPACE/NAME`), each answered 201;
    /// how long they took.
    pub async fn post_load(
        &self,
        token: &str,
        posts: usize,
        posters: usize,
        space: impl Fn(usize) -> String + Send + Sync + 'static,
    ) -> Duration {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(posters * 2)
            .build()
            .unwrap();
        let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let space = std::sync::Arc::new(space);
        let start = std::time::Instant::now();
        let posters: Vec<_> = (0..posters)
            .map(|_| {
                let (http, next, space) = (http.clone(), next.clone(), space.clone());
                let (base, token) = (self.base.clone(), token.to_string());
                tokio::spawn(async move {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if i >= posts {
                            break;
                        }
                        let resp = http
                            .post(format!("{base}/v1/spaces/{}/messages", space(i)))
                            .bearer_auth(&token)
                            .json(&json!({"text": format!("load message {i}")}))
                            .send()
                            .await
                            .unwrap();
                        assert_eq!(resp.status(), 201);
                        let _ = resp.bytes().await.unwrap();
                    }
                })
            })
            .collect();
        for p in posters {
            p.await.unwrap();
        }
        start.elapsed()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The release `agentfleet worker` (or `AGENTFLEET_BENCH_BIN`) for the Agent manifest at
/// `manifest`, on the Redis at `redis_url`, metrics on a free port, logging warnings only.
pub fn worker(manifest: &std::path::Path, redis_url: &str) -> std::process::Command {
    let mut command = std::process::Command::new(agentfleet_bin());
    command
        .args([
            "worker",
            "--agent",
            manifest.to_str().unwrap(),
            "--metrics-addr",
            &format!("127.0.0.1:{}", agentfleet::testing::free_port().unwrap()),
        ])
        .env("AGENTFLEET_REDIS_URL", redis_url)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit());
    command
}

/// Husam posts `text` in `space`.
pub async fn husam_says(store: &RedisStore, space: &agentfleet::identity::SpaceKey, text: String) {
    let message = agentfleet::testing::human_message("Husam", &text);
    store.post_message(space, &message).await.unwrap();
}

/// Whether the model already answered in this cycle (a tool result after the last user
/// message): a well-behaved model then ends the cycle ("Done.") instead of answering again.
pub fn answered(request: &serde_json::Value) -> bool {
    agentfleet::testing::conversation(request)
        .iter()
        .rev()
        .take_while(|m| m["role"] != "user")
        .any(|m| m["role"] == "tool")
}

/// The manifest of the benchmarks' `assistant` (namespace `bench`, space `family`) on the
/// OpenAI-compatible server at `base_url`, with `more` spec lines, in a directory of its own
/// named after `tag` (remove it with `remove_dir_all` of the path's parent).
pub fn assistant_manifest(tag: &str, base_url: &str, more: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("agentfleet-bench-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let manifest = dir.join("assistant.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {{name: assistant, namespace: bench}}\nspec:\n  model: {{provider: openai, name: {tag}, baseUrl: \"{base_url}\"}}\n  spaces: [family]\n{more}"
        ),
    )
    .unwrap();
    manifest
}

/// A real `redis-server`, a store on it, and the benchmarks' space `bench/family` (the
/// `assistant` and Husam).
pub async fn family() -> (
    agentfleet::testing::RedisServer,
    RedisStore,
    agentfleet::identity::SpaceKey,
) {
    let redis = agentfleet::testing::RedisServer::start().unwrap();
    let store = RedisStore::new(&redis.url()).unwrap();
    let family = agentfleet::identity::SpaceKey::new("bench", "family");
    store
        .apply_space(
            &family,
            &agentfleet::testing::space_record("Family", &["assistant"], &["Husam"]),
        )
        .await
        .unwrap();
    (redis, store, family)
}

/// The next message of the `assistant` on `live`, waiting up to `within`.
pub async fn assistant_says(
    live: &mut futures::stream::BoxStream<'static, agentfleet::store::LiveEvent>,
    within: Duration,
) -> agentfleet::store::SpaceMessage {
    use futures::StreamExt;
    loop {
        let event = tokio::time::timeout(within, live.next())
            .await
            .unwrap_or_else(|_| panic!("the assistant said nothing within {within:?}"))
            .unwrap();
        if let agentfleet::store::LiveEvent::Message { message } = event {
            if message.sender.id == "assistant" {
                return message;
            }
        }
    }
}

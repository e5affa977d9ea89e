//! Test support: a real `redis-server` on a free loopback port, owned by the test.
//!
//! Used by the crate's own tests and by the integration tests under `tests/`. A test that
//! needs Redis fails with a clear message when `redis-server` is missing; it never skips.
#![doc(hidden)]

pub mod browser;
pub mod cluster;
pub mod inbox;
pub mod ports;
pub mod s3;
pub mod secure;

pub use self::cluster::RedisCluster;
pub use self::inbox::WaitInbox;
pub use self::ports::{free_port, listening, spawn_on_free_ports};
pub use self::s3::S3Server;
pub use self::secure::{SecureRedis, Secured};

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` process that lives as long as this value.
pub struct RedisServer {
    child: Child,
    port: u16,
    dir: PathBuf,
    persistent: bool,
}

fn spawn(port: u16, dir: &std::path::Path, persistent: bool) -> Result<Child, String> {
    let persistence: &[&str] = if persistent {
        &[
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
        ]
    } else {
        &["--save", "", "--appendonly", "no"]
    };
    Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(persistence)
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| {
            format!("cannot start redis-server ({e}); install it (Debian: apt-get install -y redis-server)")
        })
}

/// Whether a plain `redis-server` on `port` answers `PING`.
fn answers_ping(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = [0u8; 7];
    s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

impl RedisServer {
    /// Starts `redis-server` (from `PATH`) on a free port with persistence off, and waits until
    /// it accepts connections.
    pub fn start() -> Result<Self, String> {
        Self::start_with(false)
    }

    /// Like [`RedisServer::start`], with every write appended and synced to disk first, so the
    /// data survives [`RedisServer::kill`] and [`RedisServer::restart`].
    pub fn start_persistent() -> Result<Self, String> {
        Self::start_with(true)
    }

    fn start_with(persistent: bool) -> Result<Self, String> {
        // One directory for every start (one that exits at start writes nothing there).
        let dir = std::env::temp_dir().join(format!(
            "agentfleet-redis-{}-{}",
            std::process::id(),
            free_port()?
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let started = spawn_on_free_ports(
            "redis-server",
            |[port]| spawn(port, &dir, persistent),
            answers_ping,
        );
        let (child, [port]) = started.inspect_err(|_| {
            let _ = std::fs::remove_dir_all(&dir);
        })?;
        Ok(Self {
            child,
            port,
            dir,
            persistent,
        })
    }

    /// Kills the server as `kill -9` would (no chance to save anything).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the server again on the same port and directory (after [`RedisServer::kill`]).
    pub fn restart(&mut self) -> Result<(), String> {
        self.kill();
        self.child = spawn(self.port, &self.dir, self.persistent)?;
        ports::wait_ready("redis-server", &mut self.child, self.port, answers_ping)
    }

    /// The server's URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Husam's message `text` in space `family`, as an inbox event of id `id`.
pub fn human_event(id: &str, text: &str) -> crate::store::InboxEvent {
    use crate::store::{now_ms, EventKind, InboxEvent, Sender};
    InboxEvent {
        id: id.into(),
        kind: EventKind::SpaceMessage,
        time_ms: now_ms(),
        urgent: false,
        space: Some("family".into()),
        sender: Some(Sender {
            id: "husam".into(),
            name: "Husam".into(),
            kind: Some(crate::store::MemberKind::Human),
        }),
        text: Some(text.into()),
        data: None,
        depth: 0,
    }
}

/// A human's message `text` to post (id: the name in lower case), starting a chain.
pub fn human_message(name: &str, text: &str) -> crate::store::NewMessage {
    crate::store::NewMessage {
        sender: crate::store::Sender {
            id: name.to_lowercase(),
            name: name.into(),
            kind: Some(crate::store::MemberKind::Human),
        },
        text: text.into(),
        mention: None,
        idempotency_key: None,
        urgent: false,
        depth: 0,
    }
}

/// A space record with these agents, then these humans (id: the name in lower case), keeping
/// up to 1,000 messages.
pub fn space_record(
    display_name: &str,
    agents: &[&str],
    humans: &[&str],
) -> crate::store::SpaceRecord {
    use crate::store::{Member, MemberKind};
    let agents = agents.iter().map(|a| Member {
        kind: MemberKind::Agent,
        id: a.to_string(),
        name: a.to_string(),
    });
    let humans = humans.iter().map(|h| Member {
        kind: MemberKind::Human,
        id: h.to_lowercase(),
        name: h.to_string(),
    });
    crate::store::SpaceRecord {
        v: crate::store::V1,
        display_name: display_name.into(),
        members: agents.chain(humans).collect(),
        max_messages: 1000,
        loop_guard: Default::default(),
        context_id: None,
    }
}

/// Where a chat completions request leaves the conversation: the last message's role and
/// text, and the tool the model called last (empty when none).
pub struct LastTurn {
    /// `user`, `tool`, `assistant`…
    pub role: String,
    /// Its text.
    pub content: String,
    /// The name of the last tool called in the conversation.
    pub called: String,
}

/// The [`LastTurn`] of a request body as [`MockModel`] received it.
pub fn last_turn(request: &serde_json::Value) -> LastTurn {
    let messages = conversation(request);
    let last = messages.last().cloned().unwrap_or_default();
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    LastTurn {
        role: text(&last["role"]),
        content: text(&last["content"]),
        called: messages
            .iter()
            .rev()
            .find_map(|m| m["tool_calls"][0]["function"]["name"].as_str())
            .unwrap_or_default()
            .to_string(),
    }
}

/// The conversation of a chat completions request body as [`MockModel`] received it: its
/// messages without the fresh context the worker sends last (see `Request::context`).
pub fn conversation(request: &serde_json::Value) -> Vec<serde_json::Value> {
    let mut messages = request["messages"].as_array().cloned().unwrap_or_default();
    if messages.last().is_some_and(|m| {
        m["role"] == "user"
            && m["content"]
                .as_str()
                .is_some_and(crate::model::format::is_context)
    }) {
        messages.pop();
    }
    messages
}

/// A chat completions request body as a provider's prompt cache sees it: the tools, then
/// every message in order (the fresh context last), each as the exact JSON that was sent.
pub fn cached_form(request: &serde_json::Value) -> String {
    let mut out = request["tools"].to_string();
    for m in request["messages"].as_array().into_iter().flatten() {
        out.push_str(&m.to_string());
    }
    out
}

/// How many leading bytes two texts share.
pub fn shared_prefix(a: &str, b: &str) -> usize {
    a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
}

/// The fresh context of a chat completions request body (its last message), if it has one.
pub fn context_of(request: &serde_json::Value) -> Option<String> {
    request["messages"]
        .as_array()?
        .last()
        .filter(|m| m["role"] == "user")?["content"]
        .as_str()
        .filter(|c| crate::model::format::is_context(c))
        .map(str::to_string)
}

/// One scripted answer of [`MockModel`].
#[derive(Clone, Debug)]
pub enum MockTurn {
    /// A streamed completion: text and/or tool calls `(name, arguments JSON text)`.
    Reply {
        /// Text, streamed in small pieces.
        text: Option<String>,
        /// Tool calls, arguments streamed in small pieces.
        tool_calls: Vec<(String, String)>,
        /// Usage reported in the final chunk `(prompt, completion)`.
        usage: (u32, u32),
    },
    /// A streamed completion of these raw `delta` objects (each in a chunk of its own), then
    /// `finish_reason` "stop" and a usage chunk: for what real servers send beyond the
    /// common fields (`reasoning_content`, odd call indices).
    Deltas(Vec<serde_json::Value>),
    /// An HTTP error status with an OpenAI-style error body.
    Status(u16, String),
    /// Another turn, answered only after a delay.
    Slow(std::time::Duration, Box<MockTurn>),
}

impl MockTurn {
    /// A text-only answer.
    pub fn text(t: &str) -> Self {
        MockTurn::Reply {
            text: Some(t.into()),
            tool_calls: Vec::new(),
            usage: (100, 10),
        }
    }

    /// An answer that calls tools.
    pub fn tools(calls: &[(&str, serde_json::Value)]) -> Self {
        MockTurn::Reply {
            text: None,
            tool_calls: calls
                .iter()
                .map(|(n, a)| (n.to_string(), a.to_string()))
                .collect(),
            usage: (100, 20),
        }
    }
}

type Responder = dyn Fn(&serde_json::Value) -> MockTurn + Send + Sync;

struct MockState {
    turns: std::sync::Mutex<std::collections::VecDeque<MockTurn>>,
    requests: std::sync::Mutex<Vec<serde_json::Value>>,
    responder: Option<Box<Responder>>,
    /// `usage.prompt_tokens_details.cached_tokens` of every answer (0: not reported).
    cached: std::sync::atomic::AtomicU32,
}

/// An OpenAI-compatible chat completions server on a free loopback port, playing scripted
/// turns as real SSE streams, and recording every request body.
pub struct MockModel {
    /// Base URL to put in an Agent's `model.baseUrl`.
    pub base_url: String,
    state: std::sync::Arc<MockState>,
    task: tokio::task::JoinHandle<()>,
}

impl MockModel {
    /// Serves `turns` in order; once they run out, answers 500.
    pub async fn start(turns: Vec<MockTurn>) -> Result<Self, String> {
        Self::serve(turns, None).await
    }

    /// Answers each request with `responder(request body)` (after any queued turns).
    pub async fn responding(
        responder: impl Fn(&serde_json::Value) -> MockTurn + Send + Sync + 'static,
    ) -> Result<Self, String> {
        Self::serve(Vec::new(), Some(Box::new(responder))).await
    }

    async fn serve(
        turns: Vec<MockTurn>,
        responder: Option<Box<Responder>>,
    ) -> Result<Self, String> {
        use axum::routing::post;
        let state = std::sync::Arc::new(MockState {
            turns: std::sync::Mutex::new(turns.into()),
            requests: std::sync::Mutex::new(Vec::new()),
            responder,
            cached: std::sync::atomic::AtomicU32::new(0),
        });
        let app = axum::Router::new()
            .route("/v1/chat/completions", post(mock_completions))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("binding the mock model server: {e}"))?;
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            base_url: format!("http://127.0.0.1:{port}/v1"),
            state,
            task,
        })
    }

    /// How many requests arrived so far.
    pub fn request_count(&self) -> usize {
        self.state
            .requests
            .lock()
            .map(|r| r.len())
            .unwrap_or_default()
    }

    /// The request bodies received after the first `n`.
    pub fn requests_since(&self, n: usize) -> Vec<serde_json::Value> {
        self.state
            .requests
            .lock()
            .map(|r| r.iter().skip(n).cloned().collect())
            .unwrap_or_default()
    }

    /// Every request body received so far.
    pub fn requests(&self) -> Vec<serde_json::Value> {
        self.state
            .requests
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    /// From now on every answer reports `cached` of its prompt tokens as read from the
    /// provider's cache (`usage.prompt_tokens_details.cached_tokens`).
    pub fn report_cached_tokens(&self, cached: u32) {
        self.state
            .cached
            .store(cached, std::sync::atomic::Ordering::Relaxed);
    }

    /// Queues more turns.
    pub fn push(&self, turn: MockTurn) {
        if let Ok(mut t) = self.state.turns.lock() {
            t.push_back(turn);
        }
    }
}

impl Drop for MockModel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn mock_completions(
    axum::extract::State(state): axum::extract::State<std::sync::Arc<MockState>>,
    body: axum::body::Bytes,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let request: serde_json::Value =
        serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    if let Ok(mut r) = state.requests.lock() {
        r.push(request.clone());
    }
    let cached = state.cached.load(std::sync::atomic::Ordering::Relaxed);
    let queued = state.turns.lock().ok().and_then(|mut t| t.pop_front());
    let mut turn = match (queued, &state.responder) {
        (Some(t), _) => t,
        (None, Some(f)) => f(&request),
        (None, None) => MockTurn::Status(500, "the mock model has no more scripted turns".into()),
    };
    while let MockTurn::Slow(delay, inner) = turn {
        tokio::time::sleep(delay).await;
        turn = *inner;
    }
    match turn {
        MockTurn::Slow(..) => axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        MockTurn::Status(code, message) => (
            axum::http::StatusCode::from_u16(code)
                .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR),
            axum::Json(serde_json::json!({"error": {"message": message, "type": "mock"}})),
        )
            .into_response(),
        MockTurn::Reply {
            text,
            tool_calls,
            usage,
        } => {
            let sse = sse_body(text.as_deref(), &tool_calls, usage, cached);
            (
                [(axum::http::header::CONTENT_TYPE, "text/event-stream")],
                sse,
            )
                .into_response()
        }
        MockTurn::Deltas(deltas) => {
            let mut sse = String::new();
            for delta in deltas {
                let chunk = serde_json::json!({
                    "id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1, "model": "mock",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": null}]
                });
                sse.push_str(&format!("data: {chunk}\n\n"));
            }
            sse.push_str(&sse_body(None, &[], (100, 10), cached));
            (
                [(axum::http::header::CONTENT_TYPE, "text/event-stream")],
                sse,
            )
                .into_response()
        }
    }
}

fn sse_body(
    text: Option<&str>,
    tool_calls: &[(String, String)],
    usage: (u32, u32),
    cached: u32,
) -> String {
    let chunk = |delta: serde_json::Value, finish: Option<&str>| {
        serde_json::json!({
            "id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1, "model": "mock",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
        })
    };
    let mut events = vec![chunk(
        serde_json::json!({"role": "assistant", "content": ""}),
        None,
    )];
    // Seven characters a chunk; a long text (past 64 KiB) in a thousandth of it a chunk, so
    // that a megabyte stays well inside what the worker reads of an answer.
    let pieces = |s: &str| -> Vec<String> {
        let chars: Vec<char> = s.chars().collect();
        let size = if chars.len() > 64 << 10 {
            chars.len() / 1000
        } else {
            7
        };
        chars.chunks(size).map(|c| c.iter().collect()).collect()
    };
    if let Some(t) = text {
        events.extend(
            pieces(t)
                .into_iter()
                .map(|p| chunk(serde_json::json!({"content": p}), None)),
        );
    }
    for (i, (name, args)) in tool_calls.iter().enumerate() {
        events.push(chunk(
            serde_json::json!({"tool_calls": [{"index": i, "id": format!("call_mock_{i}"), "type": "function", "function": {"name": name, "arguments": ""}}]}),
            None,
        ));
        events.extend(pieces(args).into_iter().map(|p| {
            chunk(
                serde_json::json!({"tool_calls": [{"index": i, "function": {"arguments": p}}]}),
                None,
            )
        }));
    }
    let finish = if tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    events.push(chunk(serde_json::json!({}), Some(finish)));
    events.push(serde_json::json!({
        "id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1, "model": "mock", "choices": [],
        "usage": {"prompt_tokens": usage.0, "completion_tokens": usage.1, "total_tokens": usage.0 + usage.1}
    }));
    if cached > 0 {
        if let Some(u) = events.last_mut().and_then(|e| e.get_mut("usage")) {
            u["prompt_tokens_details"] = serde_json::json!({"cached_tokens": cached});
        }
    }
    let mut out = String::new();
    for e in events {
        out.push_str("data: ");
        out.push_str(&e.to_string());
        out.push_str("\n\n");
    }
    out.push_str("data: [DONE]\n\n");
    out
}

/// Applies the CRDs to a real API server (server-side, field manager `manager`) and waits
/// until it serves them (for the e2e suite and the operator benchmark).
pub async fn install_crds(client: &kube::Client, manager: &str) -> Result<(), String> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Patch, PatchParams};
    use kube::ResourceExt;
    let crds: kube::Api<CustomResourceDefinition> = kube::Api::all(client.clone());
    for crd in crate::crd::definitions() {
        let name = crd.name_any();
        crds.patch(
            &name,
            &PatchParams::apply(manager).force(),
            &Patch::Apply(&crd),
        )
        .await
        .map_err(|e| format!("applying CRD {name}: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let established = crds
                .get(&name)
                .await
                .ok()
                .and_then(|c| c.status?.conditions)
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
            if established {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("CRD {name} not established within 30s"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// Everything logged on this thread while it lives (a subscriber of this thread only): what
/// the tests that look for leaked secrets read.
#[derive(Clone, Default)]
pub struct CapturedLogs(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl CapturedLogs {
    /// Captures every level up to `level` as text lines (as `agentfleet` writes them, without
    /// colours), until the guard is dropped.
    pub fn capture(level: tracing::Level) -> (Self, tracing::subscriber::DefaultGuard) {
        Self::capture_as(crate::telemetry::LogFormat::Text, level)
    }

    /// Captures every level up to `level` as JSON lines (`--log-format json`), until the guard
    /// is dropped.
    pub fn capture_json(level: tracing::Level) -> (Self, tracing::subscriber::DefaultGuard) {
        Self::capture_as(crate::telemetry::LogFormat::Json, level)
    }

    fn capture_as(
        format: crate::telemetry::LogFormat,
        level: tracing::Level,
    ) -> (Self, tracing::subscriber::DefaultGuard) {
        use tracing_subscriber::layer::SubscriberExt as _;
        let logs = CapturedLogs::default();
        let writer = logs.clone();
        let lines = crate::telemetry::logs::layer(format, move || writer.clone(), false);
        let subscriber =
            tracing_subscriber::registry().with(tracing_subscriber::Layer::with_filter(
                lines,
                tracing_subscriber::filter::LevelFilter::from_level(level),
            ));
        (logs, tracing::subscriber::set_default(subscriber))
    }

    /// What was logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }
}

impl std::io::Write for CapturedLogs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Reads the events of an SSE response (a space's stream) as a client does.
pub struct SseReader {
    body: futures::stream::BoxStream<'static, reqwest::Result<Vec<u8>>>,
    parser: crate::chat::SseParser,
    read: std::collections::VecDeque<crate::chat::SseEvent>,
}

impl SseReader {
    /// Reads `response`'s body.
    pub fn new(response: reqwest::Response) -> Self {
        use futures::StreamExt;
        Self {
            body: response
                .bytes_stream()
                .map(|r| r.map(|b| b.to_vec()))
                .boxed(),
            parser: crate::chat::SseParser::default(),
            read: Default::default(),
        }
    }

    /// The data (JSON) of the next event named `event` within `within`, skipping others.
    pub async fn next(
        &mut self,
        event: &str,
        within: Duration,
    ) -> Result<serde_json::Value, String> {
        use futures::StreamExt;
        let deadline = tokio::time::Instant::now() + within;
        loop {
            while let Some(e) = self.read.pop_front() {
                if e.event == event {
                    return serde_json::from_str(&e.data)
                        .map_err(|err| format!("{event} event not JSON ({err}): {}", e.data));
                }
            }
            let chunk = tokio::time::timeout_at(deadline, self.body.next())
                .await
                .map_err(|_| format!("no {event} event within {within:?}"))?
                .ok_or_else(|| format!("the stream ended before a {event} event"))?
                .map_err(|e| format!("the stream failed: {e}"))?;
            self.read.extend(self.parser.feed(&chunk));
        }
    }
}

/// `BIN worker` for the agent of `manifest` on the Redis at `redis_url`: a one-second lease
/// (a killed worker's successor takes over at once), metrics on a free loopback port, stdout
/// dropped. The caller decides stderr and spawns it.
pub fn worker_command(
    bin: &str,
    manifest: &std::path::Path,
    redis_url: &str,
) -> Result<Command, String> {
    let manifest = manifest
        .to_str()
        .ok_or_else(|| format!("{} is not UTF-8", manifest.display()))?;
    let mut command = Command::new(bin);
    command
        .args([
            "worker",
            "--agent",
            manifest,
            "--lease-seconds",
            "1",
            "--metrics-addr",
            &format!("127.0.0.1:{}", free_port()?),
        ])
        .env("AGENTFLEET_REDIS_URL", redis_url)
        .stdout(Stdio::null());
    Ok(command)
}

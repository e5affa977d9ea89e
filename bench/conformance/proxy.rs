//! The recording proxy between `agentfleet dev` and the real model server: it forwards each
//! chat completions request, answers with the server's whole stream once it has ended, and
//! keeps what the report needs (the request as sent, time to the first byte, the whole
//! time, the usage the server reported). It also applies the request **layout** under test,
//! so a layout can be measured on a real model without a knob in the product:
//! - `last`: as agentfleet sends it (the fresh `[CONTEXT …]` message last);
//! - `before`: that message moved before the cycle's inbox message (`anchor`);
//! - `kept`: as `before`, and each earlier cycle's context stays where it was, before that
//!   cycle's inbox message, as if the conversation kept it;
//! - `minimal`: the reference arm, the bar the product is held to — a naive loop's request on
//!   the same conversation: the system prompt "You are NAME. Use send_message to talk. Call
//!   skip when not addressed.", two tools (`send_message`, `skip`), the inbox as one user
//!   message under its count (`INBOX (1 events): [family] Husam: "…"`) and no context
//!   message. The loop around it is still agentfleet's (its nudge, its reading of
//!   calls written as text), so the bar is, if anything, set high.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::response::IntoResponse;
use futures::StreamExt;
use serde_json::Value;

/// Where the fresh context goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    Last,
    Before,
    Kept,
    Minimal,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Last => "context last",
            Layout::Before => "context before the inbox",
            Layout::Kept => "context kept before each inbox",
            Layout::Minimal => "minimal loop (the bar)",
        }
    }
}

/// One model call as the proxy saw it.
#[derive(Clone, Debug)]
pub struct Call {
    /// The request as the model server received it.
    pub request: Value,
    pub first_byte: Duration,
    pub took: Duration,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Prompt tokens the server reused from its cache, when it says (`cached_tokens`).
    pub cached_tokens: u64,
    /// Not the agent's first request of the run: the server's cache share counts only these,
    /// since what a first request finds in the cache depends on what ran before it.
    pub warm: bool,
}

/// What the proxy knows of one agent (told apart by the start of its system prompt).
#[derive(Default)]
struct Agent {
    /// The inbox message the current cycle's context goes before.
    anchor: Option<Value>,
    /// `kept`: each earlier cycle's inbox message and the context it had.
    kept: Vec<(Value, Value)>,
    /// The context last sent before `anchor`.
    last_context: Option<Value>,
}

struct Shared {
    upstream: String,
    layout: Layout,
    http: reqwest::Client,
    calls: Mutex<Vec<Call>>,
    agents: Mutex<std::collections::HashMap<String, Agent>>,
    /// When the last answer ended.
    ended: Mutex<Option<Instant>>,
}

pub struct Proxy {
    pub base_url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Proxy {
    pub async fn start(upstream: &str, layout: Layout) -> Proxy {
        let shared = Arc::new(Shared {
            upstream: format!("{}/chat/completions", upstream.trim_end_matches('/')),
            layout,
            http: reqwest::Client::new(),
            calls: Mutex::new(Vec::new()),
            agents: Mutex::new(Default::default()),
            ended: Mutex::new(None),
        });
        let app = axum::Router::new()
            .route("/v1/chat/completions", axum::routing::post(forward))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Proxy {
            base_url: format!("http://127.0.0.1:{port}/v1"),
            shared,
            task,
        }
    }

    /// When the model's last answer ended, if it has answered.
    pub fn last_call_ended(&self) -> Option<Instant> {
        *self.shared.ended.lock().unwrap()
    }

    pub fn calls(&self) -> Vec<Call> {
        self.shared.calls.lock().unwrap().clone()
    }
}

async fn forward(State(shared): State<Arc<Shared>>, body: axum::body::Bytes) -> impl IntoResponse {
    let mut request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let warm = {
        let mut agents = shared.agents.lock().unwrap();
        let key = agent_of(&request);
        let warm = agents.contains_key(&key);
        let agent = agents.entry(key).or_default();
        arrange(&mut request, shared.layout, agent);
        warm
    };
    let started = Instant::now();
    let sent = shared
        .http
        .post(&shared.upstream)
        .json(&request)
        .send()
        .await;
    let resp = match sent {
        Ok(r) => r,
        Err(e) => {
            return (
                axum::http::StatusCode::BAD_GATEWAY,
                format!("upstream: {e}"),
            )
                .into_response()
        }
    };
    let status = resp.status();
    let content_type = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("text/event-stream")
        .to_string();
    let mut first_byte = None;
    let mut out = Vec::new();
    let mut stream = resp.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let Ok(chunk) = chunk else { break };
        first_byte.get_or_insert_with(|| started.elapsed());
        out.extend_from_slice(&chunk);
    }
    let took = started.elapsed();
    let (prompt_tokens, completion_tokens, cached_tokens) = usage(&out);
    if let Ok(dir) = std::env::var("AGENTFLEET_REAL_MODEL_DUMP") {
        let n = shared.calls.lock().unwrap().len();
        let stamp = agentfleet::store::now_ms();
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(
            format!("{dir}/{stamp}-{n}.request.json"),
            serde_json::to_vec_pretty(&request).unwrap_or_default(),
        );
        let _ = std::fs::write(format!("{dir}/{stamp}-{n}.answer.sse"), &out);
    }
    shared.calls.lock().unwrap().push(Call {
        request,
        first_byte: first_byte.unwrap_or(took),
        took,
        prompt_tokens,
        completion_tokens,
        cached_tokens,
        warm,
    });
    *shared.ended.lock().unwrap() = Some(Instant::now());
    (
        axum::http::StatusCode::from_u16(status.as_u16())
            .unwrap_or(axum::http::StatusCode::BAD_GATEWAY),
        [(axum::http::header::CONTENT_TYPE, content_type)],
        out,
    )
        .into_response()
}

/// The usage of an SSE answer (its last `usage` object): prompt, completion, cached tokens.
fn usage(sse: &[u8]) -> (u64, u64, u64) {
    let text = String::from_utf8_lossy(sse);
    let mut found = (0, 0, 0);
    for line in text.lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        let Ok(chunk) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        let u = &chunk["usage"];
        if u.is_object() {
            found = (
                u["prompt_tokens"].as_u64().unwrap_or(0),
                u["completion_tokens"].as_u64().unwrap_or(0),
                u["prompt_tokens_details"]["cached_tokens"]
                    .as_u64()
                    .unwrap_or(0),
            );
        }
    }
    found
}

/// Which agent sent a request: the start of its system prompt names it.
pub fn agent_of(request: &Value) -> String {
    request["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .chars()
        .take(200)
        .collect()
}

fn text(m: &Value) -> &str {
    m["content"].as_str().unwrap_or_default()
}

fn is_context(m: &Value) -> bool {
    m["role"] == "user" && agentfleet::model::format::is_context(text(m))
}

/// A message from outside the agent that begins a cycle: not its context, a preview, events
/// that came in mid-cycle, or agentfleet's own word (the nudge).
fn is_inbox(m: &Value) -> bool {
    m["role"] == "user"
        && !is_context(m)
        && !agentfleet::model::format::is_preview(text(m))
        && !text(m).starts_with("[new events since this cycle began]")
        && !text(m).starts_with("[agentfleet]")
}

/// The message the cycle's context goes before: the inbox message after the agent's last
/// turn (a cycle's first request), else the cycle's anchor so far (its later steps).
fn anchor(messages: &[Value], agent: &Agent) -> Option<Value> {
    let after_turns = messages
        .iter()
        .rposition(|m| m["role"] == "assistant" || m["role"] == "tool")
        .map_or(0, |last| last + 1);
    if let Some(m) = messages[after_turns..].iter().find(|m| is_inbox(m)) {
        return Some(m.clone());
    }
    agent.anchor.clone().filter(|a| messages.contains(a))
}

/// The system prompt of the minimal loop.
pub fn minimal_system(name: &str) -> String {
    format!("You are {name}. Use send_message to talk. Call skip when not addressed.")
}

/// The minimal loop's request on the conversation agentfleet sent: its own system prompt,
/// `send_message` and `skip` only, no context message.
fn minimal(request: &mut Value) {
    let name = request["messages"][0]["content"]
        .as_str()
        .and_then(|s| s.strip_prefix("You are "))
        .and_then(|s| s.split([',', '.', ' ']).next())
        .unwrap_or("agent")
        .to_string();
    if let Some(messages) = request["messages"].as_array_mut() {
        messages.retain(|m| !is_context(m));
        // The inbox as one user message under its count, as the naive loop writes it.
        for m in messages.iter_mut().filter(|m| is_inbox(m)) {
            let lines = text(m).lines().count();
            m["content"] = Value::String(format!("INBOX ({lines} events): {}", text(m)));
        }
        if let Some(system) = messages.first_mut().filter(|m| m["role"] == "system") {
            system["content"] = Value::String(minimal_system(&name));
        }
    }
    if let Some(tools) = request["tools"].as_array_mut() {
        tools.retain(|t| {
            matches!(
                t["function"]["name"].as_str(),
                Some("send_message" | "skip")
            )
        });
    }
    // The naive loop lets the model choose, whatever agentfleet asked.
    if let Some(r) = request.as_object_mut() {
        r.insert("tool_choice".into(), Value::String("auto".into()));
    }
}

/// Applies `layout` to the request agentfleet sent (its fresh context last).
fn arrange(request: &mut Value, layout: Layout, agent: &mut Agent) {
    if layout == Layout::Minimal {
        minimal(request);
        return;
    }
    let Some(messages) = request["messages"].as_array_mut() else {
        return;
    };
    if !messages.last().is_some_and(is_context) {
        return;
    }
    let Some(fresh) = messages.pop() else { return };
    let at = anchor(messages, agent);
    if let Some(a) = &at {
        if let Some(past) = agent.anchor.take().filter(|past| past != a) {
            agent.kept.retain(|(k, _)| *k != past);
            if let Some(context) = agent.last_context.take() {
                agent.kept.push((past, context));
            }
        }
        agent.anchor = Some(a.clone());
        agent.last_context = Some(fresh.clone());
    }
    let mut out = Vec::with_capacity(messages.len() + agent.kept.len() + 1);
    for m in messages.drain(..) {
        if layout == Layout::Kept {
            if let Some((_, context)) = agent.kept.iter().find(|(k, _)| *k == m) {
                out.push(context.clone());
            }
        }
        if layout != Layout::Last && at.as_ref() == Some(&m) {
            out.push(fresh.clone());
        }
        out.push(m);
    }
    if layout == Layout::Last || at.is_none() {
        out.push(fresh);
    }
    *messages = out;
}

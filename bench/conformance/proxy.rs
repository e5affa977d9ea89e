//! The recording proxy between `agentfleet dev` and the real model server: it forwards each
//! chat completions request, answers with the server's whole stream once it has ended, and
//! keeps what the report needs (the request as sent, time to the first byte, the whole
//! time, the usage the server reported). It also applies the request **layout** under test,
//! so a layout can be measured on a real model without a knob in the product:
//! - `last`: as agentfleet sends it (the fresh `[CONTEXT …]` message last);
//! - `before`: that message moved before the cycle's first inbox message (found by the
//!   texts the scenario posted since the agent last answered).

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
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Last => "context last",
            Layout::Before => "context before the inbox",
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
}

struct Shared {
    upstream: String,
    layout: Layout,
    http: reqwest::Client,
    calls: Mutex<Vec<Call>>,
    /// Texts posted since the agent last answered: the cycle's inbox message quotes them.
    pending: Mutex<Vec<String>>,
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
            pending: Mutex::new(Vec::new()),
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

    /// The scenario posted `text`: the next cycle's inbox message quotes it.
    pub fn posted(&self, text: &str) {
        self.shared.pending.lock().unwrap().push(text.to_string());
    }

    /// The agent answered: what was posted is no longer this cycle's.
    pub fn answered(&self) {
        self.shared.pending.lock().unwrap().clear();
    }

    pub fn calls(&self) -> Vec<Call> {
        self.shared.calls.lock().unwrap().clone()
    }
}

async fn forward(State(shared): State<Arc<Shared>>, body: axum::body::Bytes) -> impl IntoResponse {
    let mut request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if shared.layout == Layout::Before {
        let pending = shared.pending.lock().unwrap().clone();
        move_context_before_inbox(&mut request, &pending);
    }
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
    });
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

/// Moves the fresh context (the last message, a user message that is the context) before
/// the first message that quotes one of `pending`.
fn move_context_before_inbox(request: &mut Value, pending: &[String]) {
    let Some(messages) = request["messages"].as_array_mut() else {
        return;
    };
    let is_context = |m: &Value| {
        m["role"] == "user"
            && m["content"]
                .as_str()
                .is_some_and(agentfleet::model::format::is_context)
    };
    if !messages.last().is_some_and(is_context) {
        return;
    }
    let quotes = |m: &Value| {
        m["role"] == "user"
            && m["content"]
                .as_str()
                .is_some_and(|c| pending.iter().any(|p| c.contains(p.as_str())))
    };
    let Some(at) = messages.iter().position(quotes) else {
        return;
    };
    if let Some(context) = messages.pop() {
        messages.insert(at, context);
    }
}

//! A model for tests: an OpenAI-compatible chat completions server on a free loopback port
//! ([`MockModel`]) playing scripted turns ([`MockTurn`]) as real SSE streams, and what tests
//! read of the requests it received (the conversation, its last turn, the fresh context, the
//! prompt as a cache sees it).

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
    /// A stream that never ends: its first chunk, then one byte every this long (each read
    /// well inside any per-read timeout).
    Trickle(std::time::Duration),
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
    /// The bearer token of every request (none: it had none).
    keys: std::sync::Mutex<Vec<Option<String>>>,
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
            keys: std::sync::Mutex::new(Vec::new()),
            responder,
            cached: std::sync::atomic::AtomicU32::new(0),
        });
        // Any request is read and kept, however large: tests check what reached the model.
        let app = axum::Router::new()
            .route("/v1/chat/completions", post(mock_completions))
            .layer(axum::extract::DefaultBodyLimit::disable())
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

    /// The API key (bearer token) each request came with, in order.
    pub fn keys(&self) -> Vec<Option<String>> {
        self.state
            .keys
            .lock()
            .map(|k| k.clone())
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
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let request: serde_json::Value =
        serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    let key = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    if let Ok(mut k) = state.keys.lock() {
        k.push(key);
    }
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
        MockTurn::Trickle(every) => {
            let first = serde_json::json!({
                "id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1, "model": "mock",
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]
            });
            let first = format!("data: {first}\n\n").into_bytes();
            let bytes = futures::stream::unfold(Some(first), move |first| async move {
                let chunk = match first {
                    Some(first) => first,
                    None => {
                        tokio::time::sleep(every).await;
                        b" ".to_vec()
                    }
                };
                Some((Ok::<_, std::convert::Infallible>(chunk), None))
            });
            (
                [(axum::http::header::CONTENT_TYPE, "text/event-stream")],
                axum::body::Body::from_stream(bytes),
            )
                .into_response()
        }
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

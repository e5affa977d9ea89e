//! The provider against a real HTTP server on a free port that speaks the Messages API's exact
//! SSE event sequence (and its errors), recording what it is sent.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use super::*;
use crate::crd::ModelSpec;
use crate::model::{Message, ToolChoice, ToolSpec};

/// What the server answers to one request.
enum Answer {
    /// 200 with these SSE events (each `(event name, data)`).
    Events(Vec<Value>),
    /// An error status, a `retry-after` and a JSON error body.
    Status(u16, Option<u64>, &'static str, &'static str),
}

#[derive(Clone, Default)]
struct Seen {
    bodies: Arc<Mutex<Vec<Value>>>,
    headers: Arc<Mutex<Vec<axum::http::HeaderMap>>>,
}

struct Server {
    url: String,
    seen: Seen,
}

async fn serve(answers: Vec<Answer>) -> Server {
    let answers = Arc::new(Mutex::new(VecDeque::from(answers)));
    let seen = Seen::default();
    let handler = {
        let seen = seen.clone();
        move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
            let seen = seen.clone();
            let answers = answers.clone();
            async move {
                use axum::response::IntoResponse;
                seen.bodies
                    .lock()
                    .unwrap()
                    .push(serde_json::from_slice(&body).unwrap());
                seen.headers.lock().unwrap().push(headers);
                match answers.lock().unwrap().pop_front() {
                    Some(Answer::Events(events)) => {
                        let mut sse = String::new();
                        for e in events {
                            sse.push_str(&format!(
                                "event: {}\ndata: {e}\n\n",
                                e["type"].as_str().unwrap()
                            ));
                        }
                        (
                            [(axum::http::header::CONTENT_TYPE, "text/event-stream")],
                            sse,
                        )
                            .into_response()
                    }
                    Some(Answer::Status(code, retry, kind, message)) => {
                        let mut r = (
                            axum::http::StatusCode::from_u16(code).unwrap(),
                            axum::Json(json!({"type": "error", "error": {"type": kind, "message": message}})),
                        )
                            .into_response();
                        if let Some(s) = retry {
                            r.headers_mut()
                                .insert("retry-after", s.to_string().parse().unwrap());
                        }
                        r
                    }
                    None => axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response(),
                }
            }
        }
    };
    let app = axum::Router::new().route("/v1/messages", axum::routing::post(handler));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Server { url, seen }
}

/// A whole answer: text, then a tool call whose input arrives in pieces, with usage.
fn answer_with_tool_use() -> Vec<Value> {
    vec![
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "claude", "stop_reason": null,
            "usage": {"input_tokens": 12, "cache_creation_input_tokens": 300, "cache_read_input_tokens": 2000, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "ping"}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me "}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "answer."}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_01", "name": "send_message", "input": {}}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": ""}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"text\": \"Hi Hu"}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "sam!\"}"}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 42}}),
        json!({"type": "message_stop"}),
    ]
}

fn text_answer(text: &str) -> Vec<Value> {
    vec![
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 5, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}}),
        json!({"type": "message_stop"}),
    ]
}

fn provider(url: &str) -> Anthropic {
    let spec: ModelSpec = serde_yaml::from_str(&format!(
        "{{provider: anthropic, name: claude-sonnet-4-5, baseUrl: '{url}', maxOutputTokens: 512}}"
    ))
    .unwrap();
    Anthropic::new(&spec, Some("sk-ant-test-secret-key".into()).into())
        .unwrap()
        .with_backoff(Duration::from_millis(10))
}

fn request() -> Request {
    Request {
        system: "You are assistant.".into(),
        messages: vec![
            Message::user("[Family] Husam: \"hello\""),
            Message::Assistant {
                content: None,
                tool_calls: vec![ToolCall {
                    id: "toolu_00".into(),
                    name: "read_messages".into(),
                    arguments: r#"{"space":"family"}"#.into(),
                }],
            },
            Message::Tool {
                tool_call_id: "toolu_00".into(),
                content: r#"{"messages":[]}"#.into(),
            },
            Message::user("[new events since this cycle began]\n[Family] Husam: \"still there?\""),
        ],
        context: "[CONTEXT …]\nCurrent time: 2026-11-23T10:00:00Z".into(),
        tools: vec![
            ToolSpec {
                name: "read_messages".into(),
                description: "Read a space.".into(),
                parameters: json!({"type": "object", "properties": {"space": {"type": "string"}}}),
            },
            ToolSpec {
                name: "send_message".into(),
                description: "Post a message.".into(),
                parameters: json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
            },
        ],
        tool_choice: ToolChoice::Required,
    }
}

#[tokio::test]
async fn streams_text_and_tool_use_with_cached_tokens_and_sends_cache_breakpoints() {
    let server = serve(vec![Answer::Events(answer_with_tool_use())]).await;
    let mut deltas = Vec::new();
    let turn = provider(&format!("{}/v1", server.url))
        .complete(&request(), &mut |d| deltas.push(d))
        .await
        .unwrap();
    assert_eq!(turn.text.as_deref(), Some("Let me answer."));
    assert_eq!(
        turn.tool_calls,
        [ToolCall {
            id: "toolu_01".into(),
            name: "send_message".into(),
            arguments: "{\"text\": \"Hi Husam!\"}".into(),
        }]
    );
    assert_eq!(turn.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(
        turn.usage,
        Usage {
            input: 12 + 300 + 2000,
            output: 42,
            cache_read: 2000,
            cache_write: 300,
        }
    );
    let streamed: String = deltas
        .iter()
        .filter_map(|d| match d {
            Delta::ToolArguments {
                index: 0,
                name,
                delta,
            } if name == "send_message" => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        streamed, turn.tool_calls[0].arguments,
        "streamed as it came"
    );
    assert!(deltas.contains(&Delta::Text("Let me ".into())));

    let sent = server.seen.bodies.lock().unwrap()[0].clone();
    let headers = server.seen.headers.lock().unwrap()[0].clone();
    assert_eq!(headers["x-api-key"], "sk-ant-test-secret-key");
    assert_eq!(headers["anthropic-version"], API_VERSION);
    assert!(headers.get("authorization").is_none());
    assert_eq!(sent["model"], "claude-sonnet-4-5");
    assert_eq!(sent["max_tokens"], 512);
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["tool_choice"], json!({"type": "any"}));
    // The stable prefix and the conversation end in cache breakpoints.
    assert_eq!(
        sent["system"],
        json!([{"type": "text", "text": "You are assistant.", "cache_control": {"type": "ephemeral"}}])
    );
    assert!(sent["tools"][0].get("cache_control").is_none());
    assert_eq!(
        sent["tools"][1]["cache_control"],
        json!({"type": "ephemeral"})
    );
    assert_eq!(
        sent["tools"][1]["input_schema"]["required"],
        json!(["text"])
    );
    // Roles alternate: the tool's result and the next user text are one user message.
    let roles: Vec<&str> = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
    assert_eq!(
        sent["messages"][1]["content"],
        json!([{"type": "tool_use", "id": "toolu_00", "name": "read_messages", "input": {"space": "family"}}])
    );
    let last = &sent["messages"][2]["content"];
    assert_eq!(
        last[0],
        json!({"type": "tool_result", "tool_use_id": "toolu_00", "content": "{\"messages\":[]}"})
    );
    assert_eq!(last[1]["type"], "text");
    assert_eq!(last[1]["cache_control"], json!({"type": "ephemeral"}));
    // The fresh context comes after the conversation's breakpoint, outside the cache.
    assert_eq!(
        last[2],
        json!({"type": "text", "text": "[CONTEXT …]\nCurrent time: 2026-11-23T10:00:00Z"})
    );
    assert_eq!(last.as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn overloaded_and_rate_limited_answers_are_retried_after_their_retry_after() {
    let server = serve(vec![
        Answer::Status(529, None, "overloaded_error", "Overloaded"),
        Answer::Status(429, Some(1), "rate_limit_error", "slow down"),
        Answer::Events(text_answer("Fine now.")),
    ])
    .await;
    let started = std::time::Instant::now();
    let turn = provider(&server.url)
        .complete(&request(), &mut |_| {})
        .await
        .unwrap();
    assert_eq!(turn.text.as_deref(), Some("Fine now."));
    assert_eq!(server.seen.bodies.lock().unwrap().len(), 3);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "the retry-after of the 429 was honoured"
    );
    assert_eq!(turn.usage.input, 5);
    assert_eq!(turn.finish_reason, Some(FinishReason::Stop));
}

#[tokio::test]
async fn an_error_event_mid_stream_is_retried_when_transient_and_refused_otherwise() {
    let mut broken = answer_with_tool_use();
    broken.truncate(4);
    broken.push(
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    );
    let server = serve(vec![
        Answer::Events(broken),
        Answer::Events(text_answer("Recovered.")),
    ])
    .await;
    let mut deltas = Vec::new();
    let turn = provider(&server.url)
        .complete(&request(), &mut |d| deltas.push(d))
        .await
        .unwrap();
    assert_eq!(
        turn.text.as_deref(),
        Some("Recovered."),
        "only the retry's text"
    );
    assert_eq!(server.seen.bodies.lock().unwrap().len(), 2);

    let invalid = vec![
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 5}}}),
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": "bad tool schema; key sk-ant-test-secret-key"}}),
    ];
    let server = serve(vec![Answer::Events(invalid)]).await;
    let err = provider(&server.url)
        .complete(&request(), &mut |_| {})
        .await
        .unwrap_err();
    assert_eq!(err.failure, Failure::Refused);
    assert_eq!(server.seen.bodies.lock().unwrap().len(), 1, "not retried");
    let text = err.to_string();
    assert!(
        text.contains("bad tool schema") && text.contains("invalid_request_error"),
        "{text}"
    );
    assert!(!text.contains("sk-ant-test-secret-key"), "{text}");

    // A stream that ends before message_stop is not an answer.
    let mut cut = answer_with_tool_use();
    cut.truncate(6);
    let server = serve(vec![
        Answer::Events(cut.clone()),
        Answer::Events(cut.clone()),
        Answer::Events(cut.clone()),
        Answer::Events(cut),
    ])
    .await;
    let err = provider(&server.url)
        .complete(&request(), &mut |_| {})
        .await
        .unwrap_err();
    assert_eq!(err.failure, Failure::Unreachable);
    assert!(err.to_string().contains("before message_stop"), "{err}");
}

#[tokio::test]
async fn refused_credentials_are_one_clear_error_without_the_key() {
    let server = serve(vec![Answer::Status(
        401,
        None,
        "authentication_error",
        "invalid x-api-key sk-ant-test-secret-key",
    )])
    .await;
    let err = provider(&server.url)
        .complete(&request(), &mut |_| {})
        .await
        .unwrap_err();
    assert_eq!(err.failure, Failure::Unauthorized);
    assert_eq!(server.seen.bodies.lock().unwrap().len(), 1);
    let text = err.to_string();
    assert!(
        text.contains("401") && text.contains("invalid x-api-key ***"),
        "{text}"
    );
}

//! Any OpenAI-compatible chat completions endpoint (OpenAI, vLLM, Ollama, LiteLLM, …),
//! streamed, with tool calls and usage. Wire types come from `async-openai`.

use std::collections::HashMap;
use std::time::Duration;

use async_openai::types::chat::{
    ChatCompletionMessageToolCall, ChatCompletionMessageToolCalls,
    ChatCompletionRequestAssistantMessage, ChatCompletionRequestAssistantMessageContent,
    ChatCompletionRequestMessage, ChatCompletionRequestSystemMessage,
    ChatCompletionRequestSystemMessageContent, ChatCompletionRequestToolMessage,
    ChatCompletionRequestToolMessageContent, ChatCompletionRequestUserMessage,
    ChatCompletionRequestUserMessageContent, ChatCompletionStreamOptions, ChatCompletionTool,
    ChatCompletionToolChoiceOption, ChatCompletionTools, CreateChatCompletionRequest,
    CreateChatCompletionStreamResponse, FinishReason as WireFinishReason, FunctionCall,
    FunctionObject, ToolChoiceOptions,
};
use async_trait::async_trait;

use super::http::Endpoint;
use super::{
    ApiKey, Delta, Failure, FinishReason, Message, Model, ModelError, Request, ToolCall,
    ToolChoice, Turn, Usage,
};
use crate::crd::ModelSettings;

/// The public endpoint when an Agent names no `baseUrl`.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// The base URL of `spec`'s endpoint (without a trailing `/`).
pub(crate) fn base_of(spec: &ModelSettings) -> String {
    super::http::base_of(spec, DEFAULT_BASE_URL)
}

/// An OpenAI-compatible provider.
pub struct OpenAi {
    /// The client, the key, and what keeps secrets out of errors.
    endpoint: Endpoint,
    url: String,
    model: String,
    max_tokens: u32,
    temperature: Option<f64>,
    backoff: Duration,
    /// `prompt_cache_key`: the agent's identity.
    cache_key: Option<String>,
}

impl OpenAi {
    /// A provider for the Agent's model spec.
    pub fn new(spec: &ModelSettings, api_key: ApiKey) -> Result<Self, ModelError> {
        let base = base_of(spec);
        let base = base.as_str();
        Ok(Self {
            endpoint: Endpoint::new(base, api_key)?,
            url: format!("{base}/chat/completions"),
            model: spec.name.clone(),
            max_tokens: spec.max_output_tokens(),
            temperature: spec.temperature,
            backoff: Duration::from_millis(500),
            cache_key: None,
        })
    }

    fn error(&self, failure: Failure, detail: String) -> ModelError {
        self.endpoint.error(failure, detail)
    }

    /// The endpoint as messages name it (no credentials).
    fn shown(&self) -> String {
        super::http::without_credentials(&self.url)
    }

    /// Sends `key` as `prompt_cache_key` (the agent's identity), so that the provider routes
    /// the agent's requests to where their shared prefix is cached.
    pub fn with_cache_key(mut self, key: &str) -> Self {
        self.cache_key = Some(key.to_string());
        self
    }

    /// Sets the first retry delay (doubling after each failure).
    pub fn with_backoff(mut self, backoff: Duration) -> Self {
        self.backoff = backoff;
        self
    }

    fn body(&self, request: &Request) -> CreateChatCompletionRequest {
        let mut messages = vec![ChatCompletionRequestMessage::System(
            ChatCompletionRequestSystemMessage {
                content: ChatCompletionRequestSystemMessageContent::Text(request.system.clone()),
                name: None,
            },
        )];
        messages.extend(request.messages.iter().map(wire_message));
        if !request.context.is_empty() {
            messages.push(wire_message(&Message::user(request.context.clone())));
        }
        let tools: Vec<ChatCompletionTools> = request
            .tools
            .iter()
            .map(|t| {
                ChatCompletionTools::Function(ChatCompletionTool {
                    function: FunctionObject {
                        name: t.name.clone(),
                        description: Some(t.description.clone()),
                        parameters: Some(t.parameters.clone()),
                        strict: None,
                    },
                })
            })
            .collect();
        let tool_choice = (!tools.is_empty()).then_some(ChatCompletionToolChoiceOption::Mode(
            match request.tool_choice {
                ToolChoice::Auto => ToolChoiceOptions::Auto,
                ToolChoice::Required => ToolChoiceOptions::Required,
                ToolChoice::None => ToolChoiceOptions::None,
            },
        ));
        CreateChatCompletionRequest {
            messages,
            model: self.model.clone(),
            stream: Some(true),
            stream_options: Some(ChatCompletionStreamOptions {
                include_usage: Some(true),
                ..Default::default()
            }),
            max_completion_tokens: Some(self.max_tokens),
            temperature: self.temperature.map(|t| t as f32),
            tools: (!tools.is_empty()).then_some(tools),
            tool_choice,
            prompt_cache_key: self.cache_key.clone(),
            ..Default::default()
        }
    }

    async fn attempt(
        &self,
        body: &CreateChatCompletionRequest,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<Turn, (ModelError, Option<Duration>)> {
        let json = serde_json::to_vec(body).map_err(|e| {
            (
                ModelError::new(Failure::Refused, format!("encoding the request: {e}")),
                None,
            )
        })?;
        let mut req = self
            .endpoint
            .http
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(json);
        if let Some(key) = self.endpoint.key()? {
            req = req.bearer_auth(key);
        }
        let resp = self.endpoint.send(req, &self.url).await?;
        let mut acc = Accumulator::default();
        let done = self
            .endpoint
            .each_data(resp, |data| {
                if data == "[DONE]" {
                    return Ok(Some(()));
                }
                let chunk: CreateChatCompletionStreamResponse = serde_json::from_str(data)
                    .map_err(|e| {
                        (
                            self.error(
                                Failure::BadResponse,
                                format!("malformed stream chunk from {}: {e}", self.shown()),
                            ),
                            None,
                        )
                    })?;
                acc.add(chunk, on_delta);
                Ok(None)
            })
            .await?;
        if done.is_some() || acc.seen_any {
            Ok(acc.finish())
        } else {
            Err((
                self.error(
                    Failure::Unreachable,
                    format!("{} closed the stream without an answer", self.shown()),
                ),
                None,
            ))
        }
    }
}

#[async_trait]
impl Model for OpenAi {
    async fn complete(
        &self,
        request: &Request,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<Turn, ModelError> {
        let body = self.body(request);
        let mut retries = super::http::Retries::new(self.backoff);
        loop {
            match self.attempt(&body, on_delta).await {
                Ok(turn) => return Ok(turn.or_estimated(request)),
                Err((e, retry_after)) => match retries.after(&e, retry_after) {
                    Some(wait) => tokio::time::sleep(wait).await,
                    None => return Err(e),
                },
            }
        }
    }
}

fn wire_message(m: &Message) -> ChatCompletionRequestMessage {
    match m {
        Message::User { content } => {
            ChatCompletionRequestMessage::User(ChatCompletionRequestUserMessage {
                content: ChatCompletionRequestUserMessageContent::Text(content.clone()),
                name: None,
            })
        }
        Message::Assistant {
            content,
            tool_calls,
        } => ChatCompletionRequestMessage::Assistant(ChatCompletionRequestAssistantMessage {
            content: content
                .clone()
                .map(ChatCompletionRequestAssistantMessageContent::Text),
            tool_calls: (!tool_calls.is_empty()).then(|| {
                tool_calls
                    .iter()
                    .map(|c| {
                        ChatCompletionMessageToolCalls::Function(ChatCompletionMessageToolCall {
                            id: c.id.clone(),
                            function: FunctionCall {
                                name: c.name.clone(),
                                arguments: c.arguments.clone(),
                            },
                        })
                    })
                    .collect()
            }),
            ..Default::default()
        }),
        Message::Tool {
            tool_call_id,
            content,
        } => ChatCompletionRequestMessage::Tool(ChatCompletionRequestToolMessage {
            content: ChatCompletionRequestToolMessageContent::Text(content.clone()),
            tool_call_id: tool_call_id.clone(),
        }),
    }
}

/// Puts a streamed turn together.
#[derive(Default)]
struct Accumulator {
    text: String,
    /// The calls in the order they began; a call's wire index is the server's word and
    /// only names it (a far index costs nothing), see `positions`.
    calls: Vec<ToolCall>,
    /// Each wire index seen, and where its call is in `calls`.
    positions: HashMap<u32, usize>,
    usage: Usage,
    finish_reason: Option<FinishReason>,
    seen_any: bool,
}

impl Accumulator {
    fn add(
        &mut self,
        chunk: CreateChatCompletionStreamResponse,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) {
        self.seen_any = true;
        if let Some(u) = chunk.usage {
            self.usage = Usage {
                input: u64::from(u.prompt_tokens),
                output: u64::from(u.completion_tokens),
                cache_read: u
                    .prompt_tokens_details
                    .and_then(|d| d.cached_tokens)
                    .map_or(0, u64::from),
                cache_write: 0,
            };
        }
        for choice in chunk.choices.into_iter().filter(|c| c.index == 0) {
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(match reason {
                    WireFinishReason::Stop => FinishReason::Stop,
                    WireFinishReason::Length => FinishReason::Length,
                    WireFinishReason::ToolCalls | WireFinishReason::FunctionCall => {
                        FinishReason::ToolCalls
                    }
                    WireFinishReason::ContentFilter => FinishReason::ContentFilter,
                });
            }
            if let Some(text) = choice.delta.content.filter(|t| !t.is_empty()) {
                self.text.push_str(&text);
                on_delta(Delta::Text(text));
            }
            for tc in choice.delta.tool_calls.unwrap_or_default() {
                let calls = &mut self.calls;
                let index = *self.positions.entry(tc.index).or_insert_with(|| {
                    calls.push(ToolCall {
                        id: String::new(),
                        name: String::new(),
                        arguments: String::new(),
                    });
                    calls.len() - 1
                });
                let call = &mut self.calls[index];
                if let Some(id) = tc.id.filter(|s| !s.is_empty()) {
                    call.id = id;
                }
                if let Some(f) = tc.function {
                    if let Some(name) = f.name.filter(|s| !s.is_empty()) {
                        call.name.push_str(&name);
                    }
                    if let Some(args) = f.arguments.filter(|s| !s.is_empty()) {
                        call.arguments.push_str(&args);
                        on_delta(Delta::ToolArguments {
                            index,
                            name: call.name.clone(),
                            delta: args,
                        });
                    }
                }
            }
        }
    }

    fn finish(self) -> Turn {
        let calls = self
            .calls
            .into_iter()
            .enumerate()
            .filter(|(_, c)| !c.name.is_empty())
            .map(|(i, mut c)| {
                if c.id.is_empty() {
                    c.id = format!("call_{i}");
                }
                c
            })
            .collect();
        Turn {
            text: (!self.text.is_empty()).then_some(self.text),
            tool_calls: calls,
            usage: self.usage,
            finish_reason: self.finish_reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ToolSpec, Usage};
    use crate::testing::{MockModel, MockTurn};
    use serde_json::json;

    fn spec(base_url: &str) -> ModelSettings {
        serde_yaml::from_str(&format!("{{provider: openai, name: mock-1, baseUrl: '{base_url}', maxOutputTokens: 256, temperature: 0.2}}")).unwrap()
    }

    fn request() -> Request {
        Request {
            system: "You are assistant.".into(),
            messages: vec![
                Message::user("[Family] Husam: \"hi\""),
                Message::Assistant {
                    content: None,
                    tool_calls: vec![ToolCall {
                        id: "c1".into(),
                        name: "read_messages".into(),
                        arguments: "{}".into(),
                    }],
                },
                Message::Tool {
                    tool_call_id: "c1".into(),
                    content: "[]".into(),
                },
            ],
            context: "[CONTEXT …]\nCurrent time: 2026-11-23T10:00:00Z".into(),
            tools: vec![ToolSpec {
                name: "send_message".into(),
                description: "Post a message.".into(),
                parameters: json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
            }],
            tool_choice: ToolChoice::Required,
        }
    }

    #[tokio::test]
    async fn streams_text_and_tool_calls_with_usage() {
        let mock = MockModel::start(vec![MockTurn::Reply {
            text: Some("Let me answer.".into()),
            tool_calls: vec![(
                "send_message".into(),
                json!({"text": "Hi Husam! How can I help today?"}).to_string(),
            )],
            usage: (321, 45),
        }])
        .await
        .unwrap();
        mock.report_cached_tokens(256);
        let model = OpenAi::new(&spec(&mock.base_url), Some("sk-test-secret".into()).into())
            .unwrap()
            .with_cache_key("assistant");
        let mut deltas = Vec::new();
        let turn = model
            .complete(&request(), &mut |d| deltas.push(d))
            .await
            .unwrap();
        assert_eq!(turn.text.as_deref(), Some("Let me answer."));
        assert_eq!(turn.tool_calls.len(), 1);
        assert_eq!(turn.tool_calls[0].name, "send_message");
        assert_eq!(turn.tool_calls[0].id, "call_mock_0");
        let args: serde_json::Value = serde_json::from_str(&turn.tool_calls[0].arguments).unwrap();
        assert_eq!(args["text"], "Hi Husam! How can I help today?");
        assert_eq!(
            turn.usage,
            Usage {
                input: 321,
                output: 45,
                cache_read: 256,
                cache_write: 0,
            }
        );
        assert_eq!(
            turn.usage.by_direction(),
            [
                ("input", 65),
                ("cache_read", 256),
                ("cache_write", 0),
                ("output", 45)
            ]
        );
        assert_eq!(turn.finish_reason, Some(FinishReason::ToolCalls));
        let streamed: String = deltas
            .iter()
            .filter_map(|d| match d {
                Delta::ToolArguments { delta, .. } => Some(delta.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(streamed, turn.tool_calls[0].arguments);
        assert!(
            deltas
                .iter()
                .filter(|d| matches!(d, Delta::ToolArguments { .. }))
                .count()
                > 3,
            "streamed in pieces"
        );

        let sent = &mock.requests()[0];
        assert_eq!(sent["model"], "mock-1");
        assert_eq!(sent["stream"], true);
        assert_eq!(sent["stream_options"]["include_usage"], true);
        assert_eq!(sent["prompt_cache_key"], "assistant");
        assert_eq!(sent["max_completion_tokens"], 256);
        assert_eq!(sent["tool_choice"], "required");
        assert_eq!(sent["tools"][0]["function"]["name"], "send_message");
        let roles: Vec<&str> = sent["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "user"]);
        assert_eq!(sent["messages"][2]["tool_calls"][0]["id"], "c1");
        assert_eq!(sent["messages"][3]["tool_call_id"], "c1");
        // The fresh context is the last message, after everything a cache can keep.
        assert_eq!(
            sent["messages"][4]["content"],
            "[CONTEXT …]\nCurrent time: 2026-11-23T10:00:00Z"
        );
    }

    #[tokio::test]
    async fn reasoning_is_neither_said_nor_remembered() {
        let mock = MockModel::start(vec![MockTurn::Deltas(vec![
            json!({"role": "assistant", "reasoning_content": "The user wants a greeting."}),
            json!({"reasoning_content": " I will send one."}),
            json!({"content": "Hello."}),
        ])])
        .await
        .unwrap();
        let model = OpenAi::new(&spec(&mock.base_url), Default::default()).unwrap();
        let mut deltas = Vec::new();
        let turn = model
            .complete(&request(), &mut |d| deltas.push(d))
            .await
            .unwrap();
        assert_eq!(turn.text.as_deref(), Some("Hello."));
        assert_eq!(deltas, vec![Delta::Text("Hello.".into())]);
    }

    #[tokio::test]
    async fn a_far_call_index_names_a_call_without_growing_memory() {
        let far = json!({"tool_calls": [{"index": 4_000_000_000u32, "id": "x", "type": "function",
            "function": {"name": "send_message", "arguments": "{}"}}]});
        let mock = MockModel::responding(move |_| MockTurn::Deltas(vec![far.clone()]))
            .await
            .unwrap();
        let model = OpenAi::new(&spec(&mock.base_url), Default::default()).unwrap();
        let turn = model.complete(&request(), &mut |_| {}).await.unwrap();
        assert_eq!(turn.tool_calls.len(), 1);
        assert_eq!(turn.tool_calls[0].id, "x");
    }

    #[tokio::test]
    async fn an_answer_past_the_size_bound_fails_as_a_bad_response() {
        let mib = "x".repeat(1 << 20);
        let deltas: Vec<serde_json::Value> = (0..=(super::super::http::MAX_ANSWER_BYTES >> 20))
            .map(|_| json!({"content": mib}))
            .collect();
        let mock = MockModel::responding(move |_| MockTurn::Deltas(deltas.clone()))
            .await
            .unwrap();
        let model = OpenAi::new(&spec(&mock.base_url), Default::default())
            .unwrap()
            .with_backoff(Duration::from_millis(1));
        let err = model.complete(&request(), &mut |_| {}).await.unwrap_err();
        assert_eq!(err.category(), "bad_response");
        assert!(err.to_string().contains("more than 16 MiB"), "{err}");
    }

    #[tokio::test]
    async fn transient_errors_are_retried_fatal_ones_are_not() {
        let mock = MockModel::start(vec![
            MockTurn::Status(503, "overloaded".into()),
            MockTurn::Status(429, "slow down".into()),
            MockTurn::text("finally"),
        ])
        .await
        .unwrap();
        let model = OpenAi::new(&spec(&mock.base_url), Default::default())
            .unwrap()
            .with_backoff(Duration::from_millis(10));
        let turn = model.complete(&request(), &mut |_| {}).await.unwrap();
        assert_eq!(turn.text.as_deref(), Some("finally"));
        assert_eq!(mock.requests().len(), 3);

        let mock = MockModel::start(vec![MockTurn::Status(401, "invalid api key".into())])
            .await
            .unwrap();
        let model = OpenAi::new(&spec(&mock.base_url), Some("sk-live-123456".into()).into())
            .unwrap()
            .with_backoff(Duration::from_millis(10));
        let err = model.complete(&request(), &mut |_| {}).await.unwrap_err();
        assert_eq!(err.category(), "unauthorized");
        assert!(!err.is_transient());
        assert!(
            err.to_string().contains("401") && err.to_string().contains("invalid api key"),
            "{err}"
        );
        assert!(
            !err.to_string().contains("sk-live-123456"),
            "the key never appears in errors"
        );
        assert_eq!(mock.requests().len(), 1);
    }

    #[tokio::test]
    async fn an_unreachable_endpoint_is_a_transient_error_after_the_retries() {
        let port = crate::testing::free_port().unwrap();
        let model = OpenAi::new(
            &spec(&format!("http://127.0.0.1:{port}/v1")),
            Default::default(),
        )
        .unwrap()
        .with_backoff(Duration::from_millis(5));
        let err = model.complete(&request(), &mut |_| {}).await.unwrap_err();
        assert_eq!(err.category(), "unreachable", "{err}");
        assert!(err.is_transient());
        let text = err.to_string();
        assert_eq!(
            text.matches("Connection refused").count(),
            1,
            "each cause once: {text}"
        );
        assert!(!text.contains("url ()"), "{text}");
    }
}

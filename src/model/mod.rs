//! Models: the provider trait, the message types consciousness is made of, and the
//! providers (`openai` for any OpenAI-compatible endpoint, `anthropic` for Anthropic's
//! Messages API, `scripted` for demos and tests).

pub mod anthropic;
mod deadline;
pub mod fallback;
pub mod format;
mod http;
pub mod key;
pub mod lenient;
pub mod openai;
pub mod probe;
pub mod scripted;
mod tokens;

pub use http::without_credentials;
pub use key::{ApiKey, ReadKey};
pub use tokens::estimate_tokens;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::crd::{ModelProvider, ModelSettings, ModelSpec};

/// One message of a conversation, as consciousness stores it (JSON, stable across providers).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    /// Input to the agent (inbox events, urgent injections, summaries).
    User {
        /// The text.
        content: String,
    },
    /// What the agent produced in one step: text and/or tool calls.
    Assistant {
        /// Text (the agent's own reasoning; not shown to anyone).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<String>,
        /// Tool calls of the step.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call.
    Tool {
        /// The call it answers.
        tool_call_id: String,
        /// The result (JSON text).
        content: String,
    },
}

impl Message {
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Message::User {
            content: content.into(),
        }
    }

    /// The tool call ids an assistant message makes (empty for others).
    pub fn tool_call_ids(&self) -> impl Iterator<Item = &str> {
        let calls: &[ToolCall] = match self {
            Message::Assistant { tool_calls, .. } => tool_calls,
            _ => &[],
        };
        calls.iter().map(|c| c.id.as_str())
    }
}

/// A tool call the model made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Id the result must carry.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments as the model wrote them (JSON text, possibly malformed).
    pub arguments: String,
}

/// A tool the model may call.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolSpec {
    /// Name.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON schema of the arguments.
    pub parameters: serde_json::Value,
}

/// Whether the model must call a tool this step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides.
    #[default]
    Auto,
    /// The model must call some tool.
    Required,
    /// The model must not call tools.
    None,
}

/// One model call.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// The system prompt: stable from cycle to cycle (never stored).
    pub system: String,
    /// The conversation.
    pub messages: Vec<Message>,
    /// What is fresh for this step and never stored (the time, spaces, memories, goals,
    /// plans, a preview of waiting events): providers send it after the conversation, as its
    /// last user message, so that everything before it stays a cacheable prefix. Empty: none.
    pub context: String,
    /// Tools available this step.
    pub tools: Vec<ToolSpec>,
    /// Tool choice this step.
    pub tool_choice: ToolChoice,
}

/// Tokens a call used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens, all of them (including those read from or written to the provider's
    /// prompt cache).
    pub input: u64,
    /// Completion tokens.
    pub output: u64,
    /// Of `input`, the tokens the provider read from its prompt cache (billed at a fraction).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read: u64,
    /// Of `input`, the tokens the provider wrote to its prompt cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        self.input += other.input;
        self.output += other.output;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
    }
}

impl Usage {
    /// Tokens of each direction of `agentfleet_model_tokens_total`, disjoint: `input` (prompt
    /// tokens billed in full), `cache_read`, `cache_write`, `output`.
    pub fn by_direction(&self) -> [(&'static str, u64); 4] {
        let cached = self.cache_read + self.cache_write;
        [
            ("input", self.input.saturating_sub(cached)),
            ("cache_read", self.cache_read),
            ("cache_write", self.cache_write),
            ("output", self.output),
        ]
    }
}

/// What the model produced in one call.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Turn {
    /// Text, if any.
    pub text: Option<String>,
    /// Tool calls, if any.
    pub tool_calls: Vec<ToolCall>,
    /// Tokens used (estimated when the provider reports none).
    pub usage: Usage,
    /// Why the model stopped, when the provider says.
    pub finish_reason: Option<FinishReason>,
}

/// Why a model stopped generating (the values of OpenTelemetry's
/// `gen_ai.response.finish_reasons`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// It was done.
    Stop,
    /// It reached the output token limit.
    Length,
    /// It called tools.
    ToolCalls,
    /// A content filter stopped it.
    ContentFilter,
}

impl FinishReason {
    /// The value as OpenAI and the GenAI semantic conventions spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::ContentFilter => "content_filter",
        }
    }
}

impl Turn {
    /// The turn, with estimated token counts when the endpoint reported none.
    pub fn or_estimated(mut self, request: &Request) -> Turn {
        if self.usage == Usage::default() {
            self.usage = Usage {
                input: request.estimate_tokens(),
                output: self.message().estimate_tokens(),
                ..Usage::default()
            };
        }
        self
    }

    /// The turn as an assistant message.
    pub fn message(&self) -> Message {
        Message::Assistant {
            content: self.text.clone(),
            tool_calls: self.tool_calls.clone(),
        }
    }
}

/// A piece of a turn as it streams.
#[derive(Clone, Debug, PartialEq)]
pub enum Delta {
    /// More text.
    Text(String),
    /// More arguments of tool call number `index` (its name once known).
    ToolArguments {
        /// Position of the call in the turn.
        index: usize,
        /// The tool's name.
        name: String,
        /// The next piece of the arguments' JSON text.
        delta: String,
    },
}

/// What went wrong with a model call, as a bounded set (metrics, conditions, backoff).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Failure {
    /// The endpoint refused the credentials (401, 403).
    Unauthorized,
    /// The endpoint could not be reached, or the connection broke.
    Unreachable,
    /// The endpoint asks to slow down (429).
    RateLimited,
    /// The endpoint failed (5xx).
    ServerError,
    /// The endpoint refused this request (another 4xx: a bad request, an unknown model).
    Refused,
    /// The answer could not be used (malformed stream, empty summary).
    BadResponse,
    /// The answer was not whole within the call's deadline (`spec.model.timeoutSeconds`).
    TimedOut,
    /// Its API key could not be read (its Secret is not mounted, or lacks the key): it was
    /// not asked.
    NoKey,
}

impl Failure {
    /// Every failure, in a stable order.
    pub const ALL: [Failure; 8] = [
        Failure::Unauthorized,
        Failure::Unreachable,
        Failure::RateLimited,
        Failure::ServerError,
        Failure::Refused,
        Failure::BadResponse,
        Failure::TimedOut,
        Failure::NoKey,
    ];

    /// Worth retrying the same call soon.
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            Failure::Unreachable | Failure::RateLimited | Failure::ServerError | Failure::TimedOut
        )
    }

    /// A snake_case label for metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Failure::Unauthorized => "unauthorized",
            Failure::Unreachable => "unreachable",
            Failure::RateLimited => "rate_limited",
            Failure::ServerError => "server_error",
            Failure::Refused => "refused",
            Failure::BadResponse => "bad_response",
            Failure::TimedOut => "timed_out",
            Failure::NoKey => "no_key",
        }
    }

    /// The CamelCase reason of the `ModelAvailable` condition.
    pub fn reason(self) -> &'static str {
        match self {
            Failure::Unauthorized => "Unauthorized",
            Failure::Unreachable => "Unreachable",
            Failure::RateLimited => "RateLimited",
            Failure::ServerError => "ServerError",
            Failure::Refused => "Refused",
            Failure::BadResponse => "BadResponse",
            Failure::TimedOut => "TimedOut",
            Failure::NoKey => "NoKey",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Failure::Unauthorized => "the model refused the credentials",
            Failure::Unreachable => "the model is unreachable",
            Failure::RateLimited => "the model is rate-limiting",
            Failure::ServerError => "the model's server failed",
            Failure::Refused => "the model refused the request",
            Failure::BadResponse => "the model's answer was unusable",
            Failure::TimedOut => "the model did not answer in time",
            Failure::NoKey => "the model's API key cannot be read",
        }
    }

    /// Parses [`Failure::reason`].
    pub fn from_reason(reason: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.reason() == reason)
    }
}

/// Why a model call failed. Never carries a secret: providers build it through their
/// [`crate::secrets::Redactor`].
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}: {detail}", failure.describe())]
pub struct ModelError {
    /// What kind of failure.
    pub failure: Failure,
    /// What happened (the endpoint, its status and its answer's message).
    pub detail: String,
}

impl ModelError {
    /// An error of this kind.
    pub fn new(failure: Failure, detail: impl Into<String>) -> Self {
        Self {
            failure,
            detail: detail.into(),
        }
    }

    /// Worth retrying soon.
    pub fn is_transient(&self) -> bool {
        self.failure.is_transient()
    }

    /// A bounded label for metrics.
    pub fn category(&self) -> &'static str {
        self.failure.as_str()
    }
}

/// A language model.
#[async_trait]
pub trait Model: Send + Sync {
    /// Runs one call, streaming pieces to `on_delta` as they arrive.
    async fn complete(
        &self,
        request: &Request,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<Turn, ModelError>;

    /// The name of the model of a list that answers now (a fallback's); none for a model
    /// that is one.
    fn in_use(&self) -> Option<String> {
        None
    }

    /// The changes of the model in use since last asked, oldest first (a fallback's).
    fn switches(&self) -> Vec<fallback::Switch> {
        Vec::new()
    }
}

/// The environment variable a process that runs agents by hand reads its model's API key
/// from (`agentfleet dev`, `agentfleet worker` outside a pod): the first model's key when it
/// names no Secret it can read. In a pod each model's key is read from its mounted Secret.
pub const API_KEY_ENV: &str = "AGENTFLEET_MODEL_API_KEY";

/// One model's client: its provider with its key, each call bounded by its `timeoutSeconds`.
/// `agent_name` is the scripted model's identity and the prompt cache key.
pub fn client(
    settings: &ModelSettings,
    agent_name: &str,
    api_key: ApiKey,
) -> Result<Box<dyn Model>, ModelError> {
    let provider: Box<dyn Model> = match settings.provider() {
        ModelProvider::Scripted => Box::new(scripted::Scripted::new(agent_name)),
        ModelProvider::Openai => {
            let openai = openai::OpenAi::new(settings, api_key)?;
            Box::new(if settings.prompt_caching() {
                openai.with_cache_key(agent_name)
            } else {
                openai
            })
        }
        ModelProvider::Anthropic => Box::new(anthropic::Anthropic::new(settings, api_key)?),
    };
    Ok(Box::new(deadline::Deadline::new(
        provider,
        settings.timeout(),
    )))
}

/// Refuses a `spec.model` that names a Model without having been resolved (by the operator
/// or `agentfleet dev`): its settings are the Model's, and asking anything else would send a
/// key where it does not belong.
fn resolved(spec: &ModelSpec) -> Result<(), ModelError> {
    match (&spec.model_ref, spec.provider) {
        (Some(name), None) => Err(ModelError::new(
            Failure::Refused,
            format!(
                "spec.model.ref names Model {name:?}, which the operator and `agentfleet dev` resolve: run the agent under either, or give its model's settings inline"
            ),
        )),
        _ => Ok(()),
    }
}

/// The first model of a `spec.model` alone (a rehearsal asks no fallback), with `api_key`.
pub fn first_of(
    spec: &ModelSpec,
    agent_name: &str,
    api_key: ApiKey,
) -> Result<Box<dyn Model>, ModelError> {
    resolved(spec)?;
    client(&spec.settings, agent_name, api_key)
}

/// The model a resolved `spec.model` ([`crate::models`]) names: its first model alone, or with
/// fallbacks a [`fallback::Fallback`] over them in order, telling `on_switch` of each change
/// and sharing which answers with other agents through `shared`.
/// `key` gives each model's key (its index, its settings): its own, never another's.
pub fn from_spec(
    spec: &ModelSpec,
    agent_name: &str,
    key: &dyn Fn(usize, &ModelSettings) -> ApiKey,
    on_switch: fallback::OnSwitch,
    shared: Option<fallback::Shared>,
) -> Result<Box<dyn Model>, ModelError> {
    resolved(spec)?;
    if spec.fallback.is_empty() {
        return client(&spec.settings, agent_name, key(0, &spec.settings));
    }
    let links = crate::models::links(spec)
        .enumerate()
        .map(|(i, (name, settings))| {
            let model = client(settings, agent_name, key(i, settings))
                .map_err(|e| ModelError::new(e.failure, format!("model {name}: {}", e.detail)))?;
            Ok(fallback::Link {
                name: name.to_string(),
                model,
            })
        })
        .collect::<Result<Vec<_>, ModelError>>()?;
    let retry_after = std::time::Duration::from_secs(u64::from(
        spec.retry_after_seconds
            .unwrap_or(crate::crd::DEFAULT_RETRY_AFTER_SECONDS),
    ));
    let list = fallback::Fallback::new(links, retry_after, on_switch);
    Ok(Box::new(match shared {
        Some(in_use) => list.sharing(in_use),
        None => list,
    }))
}

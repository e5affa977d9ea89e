//! Models: the provider trait, the message types consciousness is made of, and the
//! providers (`openai` for any OpenAI-compatible endpoint, `scripted` for demos and tests).

pub mod format;
pub mod openai;
pub mod scripted;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::crd::{ModelProvider, ModelSpec};

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

    /// Rough token estimate (4 characters a token, plus overhead), used for the window and
    /// budgets when the provider reports no usage.
    pub fn estimate_tokens(&self) -> u64 {
        let chars = match self {
            Message::User { content } => content.len(),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                content.as_deref().map_or(0, str::len)
                    + tool_calls
                        .iter()
                        .map(|c| c.name.len() + c.arguments.len())
                        .sum::<usize>()
            }
            Message::Tool { content, .. } => content.len(),
        };
        (chars as u64).div_ceil(4) + 4
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
    /// The system prompt (rebuilt every cycle; never stored).
    pub system: String,
    /// The conversation.
    pub messages: Vec<Message>,
    /// Tools available this step.
    pub tools: Vec<ToolSpec>,
    /// Tool choice this step.
    pub tool_choice: ToolChoice,
}

/// Tokens a call used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens.
    pub input: u64,
    /// Completion tokens.
    pub output: u64,
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
}

impl Turn {
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

/// Why a model call failed. Never carries the API key.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// Worth retrying: network trouble, rate limits, server errors.
    #[error("model unavailable: {0}")]
    Transient(String),
    /// Not worth retrying: bad request, bad key, unusable response.
    #[error("model refused the request: {0}")]
    Fatal(String),
}

impl ModelError {
    /// A bounded label for metrics.
    pub fn category(&self) -> &'static str {
        match self {
            ModelError::Transient(_) => "transient",
            ModelError::Fatal(_) => "fatal",
        }
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
}

/// Why an Agent with `provider: anthropic` cannot run (the operator and `dev` refuse it as an
/// invalid spec, see [`crate::operator::agent::validate`]).
pub const ANTHROPIC_UNAVAILABLE: &str = "the anthropic provider is not available in this build; use an OpenAI-compatible gateway (provider: openai)";

/// The model an Agent's spec names. `api_key` comes from `AGENTFLEET_MODEL_API_KEY`.
pub fn from_spec(
    spec: &ModelSpec,
    agent_name: &str,
    api_key: Option<String>,
) -> Result<Box<dyn Model>, ModelError> {
    Ok(match spec.provider {
        ModelProvider::Scripted => Box::new(scripted::Scripted::new(agent_name)),
        ModelProvider::Openai => Box::new(openai::OpenAi::new(spec, api_key)?),
        ModelProvider::Anthropic => return Err(ModelError::Fatal(ANTHROPIC_UNAVAILABLE.into())),
    })
}

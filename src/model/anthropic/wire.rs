//! Anthropic's Messages API on the wire, written from the API reference (there is no
//! maintained Rust SDK): the request with its `cache_control` breakpoints, and the streamed
//! events (`message_start` … `content_block_delta` with `text_delta` / `input_json_delta` …
//! `message_delta` with usage … `message_stop`, and `error`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::{Message, Request, ToolChoice};

/// A cache breakpoint: the prefix up to here may be cached.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct CacheControl {
    #[serde(rename = "type")]
    pub kind: &'static str,
}

const EPHEMERAL: CacheControl = CacheControl { kind: "ephemeral" };

/// A content block of a request.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    Text {
        text: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    ToolResult {
        tool_use_id: String,
        content: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
}

impl Block {
    fn breakpoint(&mut self) -> &mut Option<CacheControl> {
        let (Block::Text { cache_control, .. }
        | Block::ToolUse { cache_control, .. }
        | Block::ToolResult { cache_control, .. }) = self;
        cache_control
    }

    fn mark(&mut self) {
        *self.breakpoint() = Some(EPHEMERAL);
    }
}

/// A message of a request.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct WireMessage {
    pub role: &'static str,
    pub content: Vec<Block>,
}

/// A tool of a request.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct WireTool {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<CacheControl>,
}

/// The request body of `POST /v1/messages`.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Body {
    pub model: String,
    pub max_tokens: u32,
    pub stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    pub system: Vec<Block>,
    pub messages: Vec<WireMessage>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<WireTool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
}

impl Body {
    /// The same body without cache breakpoints (`promptCaching: false`).
    pub fn uncached(mut self) -> Self {
        for tool in &mut self.tools {
            tool.cache_control = None;
        }
        let blocks = self.messages.iter_mut().flat_map(|m| m.content.iter_mut());
        for block in self.system.iter_mut().chain(blocks) {
            *block.breakpoint() = None;
        }
        self
    }

    /// The body of `request`, with cache breakpoints after the tools, after the system
    /// prompt and after the conversation (so the stable prefix and the consciousness are
    /// read from the cache by the next request).
    pub fn new(request: &Request, model: &str, max_tokens: u32, temperature: Option<f64>) -> Self {
        let mut tools: Vec<WireTool> = request
            .tools
            .iter()
            .map(|t| WireTool {
                name: t.name.clone(),
                description: t.description.clone(),
                input_schema: t.parameters.clone(),
                cache_control: None,
            })
            .collect();
        if let Some(last) = tools.last_mut() {
            last.cache_control = Some(EPHEMERAL);
        }
        // The conversation is cached up to its end; the context after it is fresh.
        let mut messages = messages(&request.messages);
        if let Some(block) = messages.last_mut().and_then(|m| m.content.last_mut()) {
            block.mark();
        }
        if !request.context.is_empty() {
            let context = Block::Text {
                text: request.context.clone(),
                cache_control: None,
            };
            match messages.last_mut() {
                Some(last) if last.role == "user" => last.content.push(context),
                _ => messages.push(WireMessage {
                    role: "user",
                    content: vec![context],
                }),
            }
        }
        let tool_choice = (!tools.is_empty()).then(|| match request.tool_choice {
            ToolChoice::Auto => serde_json::json!({"type": "auto"}),
            ToolChoice::Required => serde_json::json!({"type": "any"}),
            ToolChoice::None => serde_json::json!({"type": "none"}),
        });
        Body {
            model: model.to_string(),
            max_tokens,
            stream: true,
            temperature,
            system: vec![Block::Text {
                text: request.system.clone(),
                cache_control: Some(EPHEMERAL),
            }],
            messages,
            tools,
            tool_choice,
        }
    }
}

/// Our messages as the API takes them: roles alternate (tool results are the user's, and
/// consecutive messages of one role become one), and the first is the user's.
fn messages(ours: &[Message]) -> Vec<WireMessage> {
    let mut out: Vec<WireMessage> = Vec::new();
    for m in ours {
        let (role, blocks) = match m {
            Message::User { content } => (
                "user",
                vec![Block::Text {
                    text: content.clone(),
                    cache_control: None,
                }],
            ),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                let text = content
                    .iter()
                    .filter(|t| !t.trim().is_empty())
                    .map(|t| Block::Text {
                        text: t.clone(),
                        cache_control: None,
                    });
                let calls = tool_calls.iter().map(|c| Block::ToolUse {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    input: serde_json::from_str::<Value>(&c.arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| serde_json::json!({})),
                    cache_control: None,
                });
                ("assistant", text.chain(calls).collect())
            }
            Message::Tool {
                tool_call_id,
                content,
            } => (
                "user",
                vec![Block::ToolResult {
                    tool_use_id: tool_call_id.clone(),
                    content: content.clone(),
                    cache_control: None,
                }],
            ),
        };
        if blocks.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => out.push(WireMessage {
                role,
                content: blocks,
            }),
        }
    }
    if out.first().is_some_and(|m| m.role != "user") {
        out.insert(
            0,
            WireMessage {
                role: "user",
                content: vec![Block::Text {
                    text: "(the conversation so far)".into(),
                    cache_control: None,
                }],
            },
        );
    }
    out
}

/// Token counts as the API reports them (`input_tokens` excludes the cached ones).
#[derive(Deserialize, Clone, Copy, Debug, Default, PartialEq)]
pub struct WireUsage {
    #[serde(default)]
    pub input_tokens: Option<u64>,
    #[serde(default)]
    pub output_tokens: Option<u64>,
    #[serde(default)]
    pub cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    pub cache_read_input_tokens: Option<u64>,
}

/// A block as `content_block_start` announces it.
#[derive(Deserialize, Clone, Debug, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StartBlock {
    Text {
        #[serde(default)]
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
    },
    #[serde(other)]
    Other,
}

/// A piece of a block.
#[derive(Deserialize, Clone, Debug, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BlockDelta {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize, Clone, Debug, PartialEq)]
pub struct MessageStart {
    #[serde(default)]
    pub usage: WireUsage,
}

#[derive(Deserialize, Clone, Debug, PartialEq)]
pub struct MessageDeltaBody {
    #[serde(default)]
    pub stop_reason: Option<String>,
}

#[derive(Deserialize, Clone, Debug, PartialEq)]
pub struct ErrorBody {
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default)]
    pub message: String,
}

/// One streamed event.
#[derive(Deserialize, Clone, Debug, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    MessageStart {
        message: MessageStart,
    },
    ContentBlockStart {
        index: usize,
        content_block: StartBlock,
    },
    ContentBlockDelta {
        index: usize,
        delta: BlockDelta,
    },
    ContentBlockStop {
        index: usize,
    },
    MessageDelta {
        delta: MessageDeltaBody,
        #[serde(default)]
        usage: WireUsage,
    },
    MessageStop,
    Ping,
    Error {
        error: ErrorBody,
    },
    #[serde(other)]
    Unknown,
}

//! The one token estimate: about four bytes of text a token. Used for the consciousness
//! window and compaction, the cycle's token budget, and the usage of a provider that reports
//! none (and of the `scripted` model, which has none to report).

use super::{Message, Request};

/// Bytes of text a token stands for, roughly (English prose and JSON).
const BYTES_PER_TOKEN: u64 = 4;

/// What a message costs beyond its text (role and separators).
const MESSAGE_OVERHEAD: u64 = 4;

/// The estimated tokens of `text`.
pub fn estimate_tokens(text: &str) -> u64 {
    tokens_of_bytes(text.len())
}

fn tokens_of_bytes(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(BYTES_PER_TOKEN)
}

impl Message {
    /// The estimated tokens of the message: its text, tool names and arguments, plus overhead.
    pub fn estimate_tokens(&self) -> u64 {
        let bytes = match self {
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
        tokens_of_bytes(bytes) + MESSAGE_OVERHEAD
    }
}

impl Request {
    /// The estimated prompt tokens of the request: the system prompt, every message and the
    /// context (the tools' schemas are not counted).
    pub fn estimate_tokens(&self) -> u64 {
        estimate_tokens(&self.system)
            + estimate_tokens(&self.context)
            + self
                .messages
                .iter()
                .map(Message::estimate_tokens)
                .sum::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ToolCall, ToolChoice};

    #[test]
    fn four_bytes_a_token_rounded_up() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("abcd"), 1);
        assert_eq!(estimate_tokens("abcde"), 2);
        assert_eq!(estimate_tokens("é"), 1, "bytes, not characters");
    }

    #[test]
    fn a_message_counts_its_text_calls_and_overhead() {
        assert_eq!(Message::user("").estimate_tokens(), 4);
        assert_eq!(Message::user("x".repeat(400)).estimate_tokens(), 104);
        let call = Message::Assistant {
            content: Some("ab".into()),
            tool_calls: vec![ToolCall {
                id: "not counted".into(),
                name: "skip".into(),
                arguments: "{}".into(),
            }],
        };
        // 2 + 4 + 2 bytes read as one text: 2 tokens, not one per part.
        assert_eq!(call.estimate_tokens(), 2 + 4);
        let result = Message::Tool {
            tool_call_id: "not counted".into(),
            content: "12345".into(),
        };
        assert_eq!(result.estimate_tokens(), 2 + 4);
    }

    #[test]
    fn a_request_counts_its_system_prompt_messages_and_context() {
        let request = Request {
            system: "x".repeat(40),
            messages: vec![Message::user("abcd"), Message::user("")],
            context: "y".repeat(8),
            tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
        };
        assert_eq!(request.estimate_tokens(), 10 + 2 + 5 + 4);
    }
}

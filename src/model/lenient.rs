//! What real models write instead of the protocol, read the way a person would, after a
//! turn is complete (every provider, one rule):
//!
//! - **thinking** — `<think>…</think>` blocks that reasoning models put in the text (an
//!   unclosed one runs to the end): removed; they are not the agent's words, and they would
//!   only grow its consciousness. (`reasoning_content` fields never reach a turn at all.)
//! - **a tool call written as text** — small models often write the call instead of making
//!   it, and inference servers do not always turn it into `tool_calls`: the whole text being
//!   one call or several (`{"name": …, "arguments": {…}}`, also `parameters`, or the
//!   `{"type": "function", "function": {…}}` shape; bare, in a list, one after another, in a
//!   Markdown code fence, or in Hermes `<tool_call>` tags with only whitespace between
//!   them) makes it those
//!   calls. Text that merely contains JSON stays text. An unknown name is then answered like
//!   any unknown tool: with an error result the model can correct.
//! - **the context repeated** — a text that begins with the request's `[CONTEXT …]`
//!   heading is the model copying its input (Qwen2.5-Coder does, after a tool result):
//!   dropped, so the fresh context never enters the conversation (seed 002) and the copy is
//!   not copied again in the next cycle. The calls beside it are made.
//! - **an empty turn** — no text, no calls: remembered as nothing (a provider may refuse an
//!   assistant message with neither).

use serde_json::Value;

use super::{ToolCall, Turn};

/// What [`read`] made of a turn, when it changed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reading {
    /// The text was tool calls.
    CallsInText,
    /// The text repeated the request's fresh context, and was dropped.
    ContextEcho,
    /// Nothing was said and nothing called.
    Empty,
}

impl Reading {
    /// Every kind (the metric's label values).
    pub const ALL: [Reading; 3] = [Reading::CallsInText, Reading::ContextEcho, Reading::Empty];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Reading::CallsInText => "tool_call_in_text",
            Reading::ContextEcho => "context_echo",
            Reading::Empty => "empty",
        }
    }
}

/// Calls one text may hold; text that would hold more stays text.
const MAX_CALLS_IN_TEXT: usize = 16;

/// Reads a complete turn: thinking removed, a copy of the context dropped, a text that is
/// only tool calls made those calls (when the model made none itself). Says what changed, if
/// it matters.
pub fn read(turn: &mut Turn) -> Option<Reading> {
    if let Some(text) = turn.text.take() {
        let said = without_thinking(&text);
        let said = said.trim();
        if super::format::is_context(said) {
            return Some(Reading::ContextEcho);
        }
        if turn.tool_calls.is_empty() {
            if let Some(calls) = calls_in(said) {
                turn.tool_calls = calls;
                return Some(Reading::CallsInText);
            }
        }
        turn.text = (!said.is_empty()).then(|| said.to_string());
    }
    (turn.text.is_none() && turn.tool_calls.is_empty()).then_some(Reading::Empty)
}

/// `text` without its `<think>…</think>` blocks.
fn without_thinking(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find("<think>") {
        out.push_str(&rest[..open]);
        match rest[open..].find("</think>") {
            Some(close) => rest = &rest[open + close + "</think>".len()..],
            None => return out,
        }
    }
    out.push_str(rest);
    out
}

/// The calls a text is made of, if it is made of nothing else.
fn calls_in(text: &str) -> Option<Vec<ToolCall>> {
    // Mistral's models put their marker first.
    let text = text
        .strip_prefix("[TOOL_CALLS]")
        .map_or(text, str::trim_start);
    if text.starts_with("<tool_call>") {
        return tagged(text);
    }
    let json = fenced(text).unwrap_or(text);
    json_calls(json).or_else(|| {
        // Braces doubled, as a template's escaping taught some models to write them
        // (`{{"name": …, "arguments": {…}}}`, Qwen2.5-Coder 1.5B), and not always closed
        // twice: the first brace dropped, the call is what follows, and only closing braces
        // may be left after it.
        let call = json.strip_prefix('{').filter(|c| c.starts_with('{'))?;
        let mut values = serde_json::Deserializer::from_str(call).into_iter::<Value>();
        let value = values.next()?.ok()?;
        call[values.byte_offset()..]
            .chars()
            .all(|c| c == '}' || c.is_whitespace())
            .then(|| calls(vec![value]))?
    })
}

/// The calls of JSON text: one value, a list, or values one after another (a line each, as
/// small models write several calls).
fn json_calls(json: &str) -> Option<Vec<ToolCall>> {
    let mut values = serde_json::Deserializer::from_str(json)
        .into_iter::<Value>()
        .take(MAX_CALLS_IN_TEXT + 1)
        .collect::<Result<Vec<_>, _>>()
        .ok()?;
    if let [Value::Array(items)] = values.as_mut_slice() {
        values = std::mem::take(items);
    }
    calls(values)
}

/// The body of a text that is one Markdown code fence (```` ```json … ``` ````).
fn fenced(text: &str) -> Option<&str> {
    let body = text.strip_prefix("```")?.strip_suffix("```")?;
    let body = body.strip_prefix("json").unwrap_or(body);
    Some(body.trim())
}

/// Hermes-style calls: `<tool_call>{…}</tool_call>` blocks and whitespace only (the last one
/// may be left unclosed, as a model that stopped at its stop token leaves it).
fn tagged(text: &str) -> Option<Vec<ToolCall>> {
    let mut values = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let body = rest.strip_prefix("<tool_call>")?;
        let (inside, after) = match body.find("</tool_call>") {
            Some(end) => (&body[..end], &body[end + "</tool_call>".len()..]),
            None => (body, ""),
        };
        values.push(serde_json::from_str(inside.trim()).ok()?);
        rest = after.trim_start();
    }
    calls(values)
}

/// Calls from JSON values, if every one is a call.
fn calls(values: Vec<Value>) -> Option<Vec<ToolCall>> {
    if values.is_empty() || values.len() > MAX_CALLS_IN_TEXT {
        return None;
    }
    values
        .into_iter()
        .enumerate()
        .map(|(i, v)| call(v, i))
        .collect()
}

/// One call from `{"name", "arguments" | "parameters"}`, possibly under `"function"`.
fn call(value: Value, index: usize) -> Option<ToolCall> {
    let mut object = match value {
        Value::Object(o) => o,
        _ => return None,
    };
    if let Some(Value::Object(function)) = object.remove("function") {
        object = function;
    }
    let name = object.get("name")?.as_str()?.trim().to_string();
    if name.is_empty() {
        return None;
    }
    let arguments = match object.get("arguments").or_else(|| object.get("parameters")) {
        None | Some(Value::Null) => "{}".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(v @ Value::Object(_)) => v.to_string(),
        Some(_) => return None,
    };
    Some(ToolCall {
        id: format!("call_text_{index}"),
        name,
        arguments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Usage;

    fn turn(text: &str) -> Turn {
        Turn {
            text: Some(text.into()),
            tool_calls: Vec::new(),
            usage: Usage::default(),
            finish_reason: None,
        }
    }

    fn read_calls(text: &str) -> Vec<(String, Value)> {
        let mut t = turn(text);
        assert_eq!(read(&mut t), Some(Reading::CallsInText), "{text}");
        assert_eq!(t.text, None);
        t.tool_calls
            .into_iter()
            .map(|c| (c.name, serde_json::from_str(&c.arguments).unwrap()))
            .collect()
    }

    #[test]
    fn a_call_written_as_text_is_made() {
        let hello = || {
            (
                "send_message".to_string(),
                serde_json::json!({"text": "hi"}),
            )
        };
        for text in [
            r#"{"name": "send_message", "arguments": {"text": "hi"}}"#,
            r#" {"name":"send_message","parameters":{"text":"hi"}} "#,
            r#"{"type": "function", "function": {"name": "send_message", "arguments": "{\"text\": \"hi\"}"}}"#,
            "```json\n{\"name\": \"send_message\", \"arguments\": {\"text\": \"hi\"}}\n```",
            r#"{{"name": "send_message", "arguments": {"text": "hi"}}}"#,
            r#"{{"name": "send_message", "arguments": {"text": "hi"}}"#,
            "<tool_call>\n{\"name\": \"send_message\", \"arguments\": {\"text\": \"hi\"}}\n</tool_call>",
            "<tool_call>{\"name\": \"send_message\", \"arguments\": {\"text\": \"hi\"}}",
            "[TOOL_CALLS][{\"name\": \"send_message\", \"arguments\": {\"text\": \"hi\"}}]",
            "<think>I should greet.</think>\n{\"name\": \"send_message\", \"arguments\": {\"text\": \"hi\"}}",
        ] {
            assert_eq!(read_calls(text), vec![hello()], "{text}");
        }
        let two = read_calls(
            "<tool_call>{\"name\": \"a\"}</tool_call>\n<tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>",
        );
        assert_eq!(two.len(), 2);
        assert_eq!(read_calls(r#"[{"name": "a"}, {"name": "b"}]"#).len(), 2);
        // As Qwen2.5-Coder 0.5B wrote them: a call a line.
        let lines = read_calls(
            "{\"name\": \"enter_space\", \"arguments\": {\"space\": \"desk\"}}\n{\"name\": \"read_messages\", \"arguments\": {\"limit\": 15}}",
        );
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1].0, "read_messages");
    }

    #[test]
    fn text_that_only_contains_json_stays_text() {
        for text in [
            r#"Here you go: {"name": "send_message", "arguments": {}}"#,
            r#"{"name": "send_message", "arguments": [1]}"#,
            r#"{"title": "no name"}"#,
            r#"{"name": ""}"#,
            "<tool_call>{\"name\": \"a\"}</tool_call> and then some prose",
            "<tool_call>not json</tool_call>",
            "[]",
            "42",
            r#"{{"title": "doubled, but no call"}}"#,
            r#"{{"name": "send_message", "arguments": {"text": "hi"}}} and more"#,
        ] {
            let mut t = turn(text);
            assert_eq!(read(&mut t), None, "{text}");
            assert_eq!(t.text.as_deref(), Some(text.trim()));
        }
        let many = format!("[{}]", vec![r#"{"name": "a"}"#; 17].join(","));
        assert_eq!(
            read(&mut turn(&many)),
            None,
            "more calls than a text may hold"
        );
    }

    #[test]
    fn thinking_is_removed_and_an_empty_turn_is_said_to_be() {
        let mut t = turn("<think>plan</think>Dinner at 8.<think>unclosed");
        assert_eq!(read(&mut t), None);
        assert_eq!(t.text.as_deref(), Some("Dinner at 8."));
        let mut t = turn("<think>only thoughts</think>\n");
        assert_eq!(read(&mut t), Some(Reading::Empty));
        assert_eq!(t.text, None);
        let mut t = turn("");
        t.text = None;
        assert_eq!(read(&mut t), Some(Reading::Empty));
    }

    #[test]
    fn a_copy_of_the_context_is_dropped_and_the_calls_beside_it_are_made() {
        let echo = format!(
            "{}\nCurrent time: 2026-11-27T07:02:02.234Z\n\nSpaces you are a member of:\n- [desk]",
            crate::model::format::CONTEXT_HEADING
        );
        let mut t = turn(&echo);
        assert_eq!(read(&mut t), Some(Reading::ContextEcho));
        assert_eq!((t.text, t.tool_calls.len()), (None, 0));
        let mut t = turn(&format!("<think>copy</think>\n  {echo}"));
        t.tool_calls.push(ToolCall {
            id: "c1".into(),
            name: "send_message".into(),
            arguments: "{}".into(),
        });
        assert_eq!(read(&mut t), Some(Reading::ContextEcho));
        assert_eq!((t.text, t.tool_calls.len()), (None, 1));
        // The heading quoted inside the model's own words is its own text.
        let mut t = turn(&format!("It said: {echo}"));
        assert_eq!(read(&mut t), None);
        assert!(t.text.is_some());
    }

    #[test]
    fn made_calls_keep_the_text_beside_them() {
        let mut t = turn(r#"{"name": "skip"}"#);
        t.tool_calls.push(ToolCall {
            id: "c1".into(),
            name: "send_message".into(),
            arguments: "{}".into(),
        });
        assert_eq!(read(&mut t), None);
        assert_eq!(t.text.as_deref(), Some(r#"{"name": "skip"}"#));
        assert_eq!(
            t.tool_calls.len(),
            1,
            "the calls the model made are the calls"
        );
    }
}

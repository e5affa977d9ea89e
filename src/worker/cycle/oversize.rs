//! What the cycle keeps of a model's turn, bounded. A model may stream 16 MiB for one answer;
//! what it said is then carried in every later request of the cycle, journaled and remembered,
//! so a model that writes 15 MB of arguments a step would hold hundreds of megabytes in the
//! worker and the data plane. A turn keeps at most [`MAX_TEXT_BYTES`] of text (cut, and said
//! so) and [`MAX_ARGUMENT_BYTES`] of its calls' arguments in all, in order: a call that would
//! pass it keeps, instead of its arguments, a note of their size ([`CUT_KEY`]), and is not
//! made — its result tells the model why, so it can send less.

use crate::model::Turn;

/// The most text of one turn kept (the model's own, private words).
pub(super) const MAX_TEXT_BYTES: usize = 64 << 10;

/// The most arguments (JSON text) of one turn's calls kept, all together: above the largest
/// message a space may take (1 MiB).
pub(super) const MAX_ARGUMENT_BYTES: usize = (1 << 20) + (4 << 10);

/// The key of the arguments a cut call keeps: `{"agentfleet.cut": BYTES}`.
const CUT_KEY: &str = "agentfleet.cut";

/// Bounds `turn` in place (see the module's doc); how many bytes were dropped.
pub(super) fn bound(turn: &mut Turn) -> usize {
    let mut dropped = 0;
    if let Some(text) = turn.text.as_mut() {
        if text.len() > MAX_TEXT_BYTES {
            let mut end = MAX_TEXT_BYTES;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            dropped += text.len() - end;
            let note = format!("… [{} bytes more not kept]", text.len() - end);
            text.truncate(end);
            text.push_str(&note);
        }
    }
    let mut kept = 0;
    for call in &mut turn.tool_calls {
        let size = call.arguments.len();
        if kept + size > MAX_ARGUMENT_BYTES {
            dropped += size;
            call.arguments = serde_json::json!({ CUT_KEY: size }).to_string();
        } else {
            kept += size;
        }
    }
    dropped
}

/// The refusal of a call whose arguments were not kept, if `arguments` are such a note.
pub(super) fn refusal(arguments: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(arguments).ok()?;
    let object = value.as_object().filter(|o| o.len() == 1)?;
    let size = object.get(CUT_KEY)?.as_u64()?;
    Some(format!(
        "not made: its arguments were {size} bytes, more than a step's calls may carry ({} bytes in all); they were not kept — send less, or in parts over several calls",
        MAX_ARGUMENT_BYTES
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolCall;

    fn call(id: &str, arguments: String) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "send_message".into(),
            arguments,
        }
    }

    #[test]
    fn a_turn_keeps_its_bounds_and_a_cut_call_says_why_it_is_not_made() {
        let big = format!(r#"{{"text":"{}"}}"#, "x".repeat(15_000_000));
        let small = r#"{"text":"hi"}"#.to_string();
        let mut turn = Turn {
            text: Some("é".repeat(100_000)),
            tool_calls: vec![
                call("a", small.clone()),
                call("b", big.clone()),
                call("c", small.clone()),
            ],
            ..Turn::default()
        };
        let dropped = bound(&mut turn);
        assert!(dropped > 15_000_000);
        let text = turn.text.as_deref().unwrap();
        assert!(text.len() < MAX_TEXT_BYTES + 64, "{}", text.len());
        assert!(
            text.ends_with("bytes more not kept]"),
            "{}",
            &text[text.len() - 40..]
        );
        // In order: the small ones are kept, the big one is a note of its size.
        assert_eq!(turn.tool_calls[0].arguments, small);
        assert_eq!(turn.tool_calls[2].arguments, small);
        let note = &turn.tool_calls[1].arguments;
        assert_eq!(note, &format!(r#"{{"agentfleet.cut":{}}}"#, big.len()));
        let why = refusal(note).unwrap();
        assert!(
            why.starts_with("not made: its arguments were 15000011 bytes"),
            "{why}"
        );
        assert_eq!(refusal(&small), None);
        assert_eq!(refusal(r#"{"agentfleet.cut": 3, "text": "x"}"#), None);
        // A turn within its bounds is left as it is.
        let mut fine = Turn {
            text: Some("ok".into()),
            tool_calls: vec![call("a", small.clone())],
            ..Turn::default()
        };
        assert_eq!(bound(&mut fine), 0);
        assert_eq!(fine.text.as_deref(), Some("ok"));
    }
}

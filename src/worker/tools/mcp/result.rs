//! What the model sees of a `tools/call` answer. Pure.
//!
//! - `isError`: `{"error": TEXT}` (the server's own words), a failed call.
//! - structured content: that JSON value, as the tool's output schema describes it.
//! - otherwise `{"text": TEXT}`: the text parts joined by newlines (an embedded text resource
//!   counts as text), with `attachments` describing what the model cannot read (images,
//!   audio, binary resources, links) by type, MIME type and URI.
//!
//! Results longer than [`MAX_RESULT_BYTES`] are cut (and say so), and known secrets are
//! masked, as in every result.

use serde_json::{json, Map, Value};

use crate::secrets::Redactor;
use crate::worker::tools::Outcome;

/// The longest result the model is given, in bytes (as an HTTP tool's default
/// `maxResponseBytes`).
pub const MAX_RESULT_BYTES: usize = 64 * 1024;

/// The most attachments described (the rest are counted), and the longest text of each
/// field of one.
const MAX_ATTACHMENTS: usize = 32;
const MAX_ATTACHMENT_FIELD: usize = 512;

/// The model's view of a tool's answer.
pub fn outcome(result: &rmcp::model::CallToolResult, redactor: &Redactor) -> Outcome {
    let blocks = serde_json::to_value(&result.content).unwrap_or(Value::Null);
    let blocks = blocks.as_array().map(Vec::as_slice).unwrap_or_default();
    let (text, attachments) = read(blocks);
    let failed = result.is_error == Some(true);
    let mut body = Map::new();
    if failed {
        let text = if text.is_empty() {
            match &result.structured_content {
                Some(s) => s.to_string(),
                None => "the tool reported an error and said nothing more".to_string(),
            }
        } else {
            text
        };
        body.insert("error".into(), Value::String(text));
    } else if let Some(structured) = &result.structured_content {
        let content = redactor.redact(&structured.to_string());
        if content.len() <= MAX_RESULT_BYTES {
            return Outcome { content, ok: true };
        }
        // Too long to give whole: its text, cut like any other.
        body.insert("text".into(), Value::String(content));
    } else {
        body.insert("text".into(), Value::String(text));
    }
    if attachments.len() > MAX_ATTACHMENTS {
        body.insert(
            "moreAttachments".into(),
            json!(attachments.len() - MAX_ATTACHMENTS),
        );
    }
    if !attachments.is_empty() {
        let shown = attachments.into_iter().take(MAX_ATTACHMENTS).collect();
        body.insert("attachments".into(), Value::Array(shown));
    }
    Outcome {
        content: fit(body, redactor),
        ok: !failed,
    }
}

/// The text of `blocks`, and a description of each block that is not text.
fn read(blocks: &[Value]) -> (String, Vec<Value>) {
    let mut texts: Vec<&str> = Vec::new();
    let mut attachments = Vec::new();
    for block in blocks {
        let kind = block["type"].as_str().unwrap_or("unknown");
        match kind {
            "text" => texts.push(block["text"].as_str().unwrap_or_default()),
            "resource" if block["resource"]["text"].is_string() => {
                texts.push(block["resource"]["text"].as_str().unwrap_or_default())
            }
            _ => {
                let inner = if kind == "resource" {
                    &block["resource"]
                } else {
                    block
                };
                let mut about = Map::new();
                about.insert("type".into(), Value::String(kind.to_string()));
                for key in ["mimeType", "uri", "name"] {
                    if let Some(v) = inner[key].as_str() {
                        let cut = &v[..floor_char_boundary(v, MAX_ATTACHMENT_FIELD)];
                        about.insert(key.into(), Value::String(cut.to_string()));
                    }
                }
                attachments.push(Value::Object(about));
            }
        }
    }
    (texts.join("\n"), attachments)
}

/// `body` as JSON text, masked, its text cut so that the whole stays within
/// [`MAX_RESULT_BYTES`].
fn fit(mut body: Map<String, Value>, redactor: &Redactor) -> String {
    let key = if body.contains_key("error") {
        "error"
    } else {
        "text"
    };
    let text = body
        .get(key)
        .and_then(Value::as_str)
        .map(|t| redactor.redact(t))
        .unwrap_or_default();
    body.insert(key.into(), Value::String(text.clone()));
    let whole = redactor.redact(&Value::Object(body.clone()).to_string());
    if whole.len() <= MAX_RESULT_BYTES {
        return whole;
    }
    // JSON escaping can make text longer than its bytes: cut until it fits.
    let mut keep = MAX_RESULT_BYTES.min(text.len());
    loop {
        keep = floor_char_boundary(&text, keep);
        body.insert(key.into(), Value::String(text[..keep].to_string()));
        body.insert(
            "truncated".into(),
            json!(format!(
                "the result was {} bytes; only the first {keep} are shown",
                text.len()
            )),
        );
        let out = redactor.redact(&Value::Object(body.clone()).to_string());
        if out.len() <= MAX_RESULT_BYTES {
            return out;
        }
        if keep == 0 {
            // What is left besides the text is too large itself.
            return json!({
                "error": format!("the result is too large to show ({} bytes)", whole.len())
            })
            .to_string();
        }
        keep = keep.saturating_sub((out.len() - MAX_RESULT_BYTES).max(1));
    }
}

/// The largest index ≤ `i` that starts a character of `s`.
fn floor_char_boundary(s: &str, i: usize) -> usize {
    let mut i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{CallToolResult, ContentBlock as Content};

    fn view(result: &CallToolResult) -> (Value, bool) {
        let out = outcome(result, &Redactor::new(["s3cr3t-token"]));
        (serde_json::from_str(&out.content).unwrap(), out.ok)
    }

    #[test]
    fn text_parts_are_joined() {
        let r = CallToolResult::success(vec![
            Content::text("line one"),
            Content::embedded_text("file:///notes.txt", "line two"),
        ]);
        assert_eq!(view(&r), (json!({"text": "line one\nline two"}), true));
    }

    #[test]
    fn structured_content_is_the_result() {
        let r = CallToolResult::structured(json!({"open": 3, "closed": 7}));
        assert_eq!(view(&r), (json!({"open": 3, "closed": 7}), true));
    }

    #[test]
    fn an_error_result_is_a_failed_call_in_the_servers_words() {
        let r = CallToolResult::error(vec![Content::text("no such ticket: 42")]);
        assert_eq!(view(&r), (json!({"error": "no such ticket: 42"}), false));
        let silent = CallToolResult::error(Vec::new());
        let (v, ok) = view(&silent);
        assert!(!ok);
        assert!(v["error"].as_str().unwrap().contains("reported an error"));
    }

    #[test]
    fn what_the_model_cannot_read_is_described() {
        let r = CallToolResult::success(vec![
            Content::text("a chart"),
            Content::image("aGVsbG8=", "image/png"),
        ]);
        let (v, ok) = view(&r);
        assert!(ok);
        assert_eq!(v["text"], "a chart");
        assert_eq!(
            v["attachments"],
            json!([{"type": "image", "mimeType": "image/png"}])
        );
        assert!(!v.to_string().contains("aGVsbG8="), "no raw data: {v}");
    }

    #[test]
    fn long_results_are_cut_and_say_so() {
        let long = "é\"".repeat(MAX_RESULT_BYTES);
        let r = CallToolResult::success(vec![Content::text(long.clone())]);
        let out = outcome(&r, &Redactor::default());
        assert!(
            out.content.len() <= MAX_RESULT_BYTES,
            "{}",
            out.content.len()
        );
        let v: Value = serde_json::from_str(&out.content).unwrap();
        assert!(long.starts_with(v["text"].as_str().unwrap()));
        assert!(v["truncated"].as_str().unwrap().contains("only the first"));
    }

    #[test]
    fn a_flood_of_attachments_stays_within_the_limit() {
        let mime = format!("image/{}", "x".repeat(5000));
        let blocks: Vec<Content> = (0..20_000)
            .map(|_| Content::image("aGVsbG8=", mime.clone()))
            .collect();
        let out = outcome(&CallToolResult::success(blocks), &Redactor::default());
        assert!(
            out.content.len() <= MAX_RESULT_BYTES,
            "{}",
            out.content.len()
        );
        let v: Value = serde_json::from_str(&out.content).unwrap();
        assert_eq!(v["attachments"].as_array().unwrap().len(), MAX_ATTACHMENTS);
        assert_eq!(v["moreAttachments"], 20_000 - MAX_ATTACHMENTS);
        assert_eq!(
            v["attachments"][0]["mimeType"].as_str().unwrap().len(),
            MAX_ATTACHMENT_FIELD
        );
    }

    #[test]
    fn secrets_are_masked() {
        let r = CallToolResult::success(vec![Content::text("your token is s3cr3t-token")]);
        assert_eq!(view(&r).0, json!({"text": "your token is ***"}));
        let r = CallToolResult::structured(json!({"echo": "s3cr3t-token"}));
        assert_eq!(view(&r).0, json!({"echo": "***"}));
    }
}

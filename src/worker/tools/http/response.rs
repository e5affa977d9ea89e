//! From an HTTP answer to the result the model sees: the body read up to `maxResponseBytes`
//! (what is beyond is counted, not kept), secrets masked, JSON when it is JSON, else text.

use serde_json::{json, Map, Value};

use crate::secrets::Redactor;
use crate::worker::tools::Outcome;

/// How far past the cut a body is still read, only to say how large it is.
const COUNT_BEYOND: u64 = 1024 * 1024;

/// How large a body was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Size {
    /// Exactly this many bytes.
    Exact(u64),
    /// More than this many bytes (reading stopped).
    MoreThan(u64),
}

/// A body as read: its first bytes, and its size.
#[derive(Debug, PartialEq)]
pub(super) struct Body {
    /// At most the limit's bytes.
    pub kept: Vec<u8>,
    /// How large the whole body was.
    pub size: Size,
    /// Whether its `Content-Type` says it is JSON (`application/json`, `…+json`).
    pub declared_json: bool,
}

impl Body {
    /// Whether the body was cut.
    fn truncated(&self) -> bool {
        self.size != Size::Exact(self.kept.len() as u64)
    }
}

/// Reads `response`'s body, keeping at most `max` bytes. A body longer than that is counted
/// on (up to a megabyte more) unless its length was declared.
pub(super) async fn read(
    mut response: reqwest::Response,
    max: usize,
) -> Result<Body, reqwest::Error> {
    let declared = response.content_length();
    let declared_json = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(is_json_type);
    let mut kept = Vec::new();
    let mut seen: u64 = 0;
    while let Some(chunk) = response.chunk().await? {
        seen += chunk.len() as u64;
        let room = max.saturating_sub(kept.len());
        kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if seen > max as u64 {
            if let Some(total) = declared {
                return Ok(Body {
                    kept,
                    size: Size::Exact(total),
                    declared_json,
                });
            }
            if seen > max as u64 + COUNT_BEYOND {
                return Ok(Body {
                    kept,
                    size: Size::MoreThan(seen),
                    declared_json,
                });
            }
        }
    }
    Ok(Body {
        kept,
        size: Size::Exact(seen),
        declared_json,
    })
}

/// Whether a `Content-Type` names JSON: `application/json` or a `+json` type, any parameters.
fn is_json_type(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json" || essence.ends_with("+json")
}

/// The body as the model sees it: JSON when it parses, else text (a cut character dropped,
/// invalid UTF-8 replaced), with every secret masked first.
fn body_value(body: &Body, redactor: &Redactor) -> Value {
    let text = match std::str::from_utf8(&body.kept) {
        Ok(t) => t.to_string(),
        // A body cut inside a character: drop the partial character.
        Err(e) if e.error_len().is_none() => {
            String::from_utf8_lossy(&body.kept[..e.valid_up_to()]).into_owned()
        }
        Err(_) => String::from_utf8_lossy(&body.kept).into_owned(),
    };
    let text = redactor.redact(&text);
    serde_json::from_str(&text).unwrap_or(Value::String(text))
}

/// The fields every answer's result has: `status`, `body`, `truncated` (and, when cut, the
/// body's size and a note).
fn answer(status: u16, body: &Body, max: usize, redactor: &Redactor) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("status".into(), json!(status));
    out.insert("body".into(), body_value(body, redactor));
    out.insert("truncated".into(), json!(body.truncated()));
    if body.truncated() {
        let note = match body.size {
            Size::Exact(n) => {
                out.insert("size".into(), json!(n));
                format!("the body is {n} bytes; only the first {max} are shown")
            }
            Size::MoreThan(n) => {
                format!("the body is more than {n} bytes; only the first {max} are shown")
            }
        };
        out.insert("note".into(), json!(note));
    }
    out
}

/// The result of a sync call's answer: the answer for 2xx, else an error result with the
/// status and body.
pub(super) fn sync_outcome(status: u16, body: &Body, max: usize, redactor: &Redactor) -> Outcome {
    let mut fields = answer(status, body, max, redactor);
    let mut ok = (200..300).contains(&status);
    if !ok {
        fields.insert("error".into(), json!(status_error(status)));
    } else if body.declared_json
        && !body.truncated()
        && !body.kept.iter().all(u8::is_ascii_whitespace)
        && serde_json::from_slice::<serde::de::IgnoredAny>(&body.kept).is_err()
    {
        // Said to be JSON, whole, and still not JSON: a broken answer, not a text one.
        ok = false;
        fields.insert(
            "error".into(),
            json!("the service's answer says it is JSON but is not valid JSON"),
        );
    }
    Outcome {
        content: Value::Object(fields).to_string(),
        ok,
    }
}

/// The error result of an async call the service did not accept.
pub(super) fn refused_start(status: u16, body: &Body, max: usize, redactor: &Redactor) -> Outcome {
    let mut fields = answer(status, body, max, redactor);
    fields.insert(
        "error".into(),
        json!(format!(
            "{}: the call was not started, and no result will come",
            status_error(status)
        )),
    );
    Outcome {
        content: Value::Object(fields).to_string(),
        ok: false,
    }
}

/// What an answer other than 2xx says.
fn status_error(status: u16) -> String {
    let reason = reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .map(|r| format!(" {r}"))
        .unwrap_or_default();
    format!("the service answered HTTP {status}{reason}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(text: &[u8], size: Size) -> Body {
        Body {
            kept: text.to_vec(),
            size,
            declared_json: false,
        }
    }

    fn parse(o: &Outcome) -> Value {
        serde_json::from_str(&o.content).unwrap()
    }

    #[test]
    fn an_answer_said_to_be_json_that_is_not_is_an_error() {
        let r = Redactor::default();
        let said = |text: &[u8], size| Body {
            declared_json: true,
            ..body(text, size)
        };
        let o = sync_outcome(200, &said(b"{\"id\": 1,", Size::Exact(9)), 100, &r);
        assert!(!o.ok);
        let v = parse(&o);
        assert_eq!(v["body"], json!("{\"id\": 1,"));
        assert!(
            v["error"].as_str().unwrap().contains("not valid JSON"),
            "{v}"
        );
        // No body at all (a 204, a bare 202) is no broken JSON; a JSON string is JSON; a cut
        // body cannot be judged.
        assert!(sync_outcome(202, &said(b"", Size::Exact(0)), 100, &r).ok);
        assert!(sync_outcome(200, &said(b" \n", Size::Exact(2)), 100, &r).ok);
        assert!(sync_outcome(200, &said(b"\"ok\"", Size::Exact(4)), 100, &r).ok);
        assert!(sync_outcome(200, &said(b"{\"a\": [1,", Size::Exact(400)), 9, &r).ok);
        assert!(is_json_type("application/problem+json; charset=utf-8"));
        assert!(is_json_type("Application/JSON"));
        assert!(!is_json_type("text/plain"));
    }

    #[test]
    fn json_bodies_stay_json_and_text_is_text() {
        let r = Redactor::default();
        let o = sync_outcome(200, &body(br#"{"id": 1}"#, Size::Exact(9)), 100, &r);
        assert!(o.ok);
        assert_eq!(
            parse(&o),
            json!({"status": 200, "body": {"id": 1}, "truncated": false})
        );
        let o = sync_outcome(201, &body(b"created", Size::Exact(7)), 100, &r);
        assert_eq!(parse(&o)["body"], "created");
    }

    #[test]
    fn a_cut_body_says_how_large_it_was() {
        let r = Redactor::default();
        let o = sync_outcome(
            200,
            &body(&"{\"a\": \"é".as_bytes()[..8], Size::Exact(500)),
            8,
            &r,
        );
        let v = parse(&o);
        assert_eq!(v["truncated"], true);
        assert_eq!(v["size"], 500);
        assert_eq!(v["body"], "{\"a\": \"", "the cut character is dropped");
        assert!(v["note"]
            .as_str()
            .unwrap()
            .contains("500 bytes; only the first 8"));
        let o = sync_outcome(200, &body(b"xxxx", Size::MoreThan(2_000_000)), 4, &r);
        let v = parse(&o);
        assert!(v.get("size").is_none());
        assert!(v["note"]
            .as_str()
            .unwrap()
            .contains("more than 2000000 bytes"));
    }

    #[test]
    fn other_statuses_are_errors_with_their_body_and_secrets_are_masked() {
        let r = Redactor::new(["s3cr3t-token"]);
        let o = sync_outcome(
            500,
            &body(br#"{"echo": "Bearer s3cr3t-token"}"#, Size::Exact(31)),
            100,
            &r,
        );
        assert!(!o.ok);
        let v = parse(&o);
        assert_eq!(v["status"], 500);
        assert_eq!(
            v["error"],
            "the service answered HTTP 500 Internal Server Error"
        );
        assert_eq!(v["body"], json!({"echo": "Bearer ***"}));
        assert!(!o.content.contains("s3cr3t"));
        let o = refused_start(409, &body(b"", Size::Exact(0)), 100, &r);
        assert!(parse(&o)["error"]
            .as_str()
            .unwrap()
            .contains("no result will come"));
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        let o = sync_outcome(
            200,
            &body(&[0xff, b'a'], Size::Exact(2)),
            10,
            &Redactor::default(),
        );
        assert_eq!(parse(&o)["body"], "\u{fffd}a");
    }
}

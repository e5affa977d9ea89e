//! A message on an `INPUT_REQUIRED` task answers the call the task waits for, by the same
//! rule as the gateway's answer route and `agentfleet approve|deny|answer`
//! ([`crate::decisions`]: the schema check of an interactive result, the audit line in the
//! conversation, once).
//!
//! - An approval: a data part `{"decision": "approve"|"deny", "reason": "…"}`, or text that
//!   starts with `approve`/`yes` or `deny`/`no` (the rest is the reason).
//! - An interactive tool: a data part `{"result": …}` or any other data part (the result
//!   itself), or text (JSON when it parses as JSON, else the text as a string).

use serde_json::Value;

use crate::a2a::{A2aError, Message, PartContent};
use crate::decisions::{self, Refusal, Reply};
use crate::identity::SpaceKey;
use crate::store::{CallKind, RegisteredCall, Store};

/// What `message` answers to `call`.
fn reply(call: &RegisteredCall, message: &Message) -> Result<Reply, A2aError> {
    let data = message.parts.iter().find_map(|p| match &p.content {
        PartContent::Data(d) => Some(d.clone()),
        _ => None,
    });
    let text = message.text();
    let text = text.trim();
    match call.record.kind {
        CallKind::Interactive => Ok(Reply::Result(match data {
            Some(Value::Object(mut o)) if o.len() == 1 && o.contains_key("result") => {
                o.remove("result").unwrap_or(Value::Null)
            }
            Some(d) => d,
            None => serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.into())),
        })),
        _ => {
            if let Some(Value::Object(o)) = &data {
                let approve = match o.get("decision").and_then(Value::as_str) {
                    Some("approve") => true,
                    Some("deny") => false,
                    _ => return Err(unclear()),
                };
                let reason = o.get("reason").and_then(Value::as_str).map(str::to_string);
                return Ok(Reply::Decision { approve, reason });
            }
            let (word, rest) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
            let word = word
                .trim_end_matches(|c: char| c.is_ascii_punctuation())
                .to_ascii_lowercase();
            let approve = match word.as_str() {
                "approve" | "approved" | "yes" => true,
                "deny" | "denied" | "no" => false,
                _ => return Err(unclear()),
            };
            let reason = rest
                .trim_start_matches(|c: char| c.is_ascii_punctuation() || c.is_whitespace())
                .trim();
            Ok(Reply::Decision {
                approve,
                reason: (!reason.is_empty()).then(|| reason.to_string()),
            })
        }
    }
}

fn unclear() -> A2aError {
    A2aError::InvalidParams(
        "the task waits for an approval: answer \"approve\" or \"deny\" (and a reason after it), or a data part {\"decision\": \"approve\"|\"deny\"}".into(),
    )
}

/// Answers `call` (asked in `space`) with `message`, as `by`.
pub(super) async fn answer(
    store: &dyn Store,
    call: &RegisteredCall,
    space: &SpaceKey,
    by: &crate::party::Principal,
    message: &Message,
) -> Result<(), A2aError> {
    let reply = reply(call, message)?;
    decisions::answer(store, &call.id, Some(space), by, reply)
        .await
        .map(|_| ())
        .map_err(|refusal| match refusal {
            r @ Refusal::Forbidden(_) => A2aError::PermissionDenied(r.to_string()),
            Refusal::Mismatch(why) => A2aError::InvalidParams(why),
            r @ Refusal::Invalid { .. } => A2aError::InvalidParams(r.to_string()),
            r @ (Refusal::Answered(_) | Refusal::Expired(_) | Refusal::Unknown(_)) => {
                A2aError::UnsupportedOperation(r.to_string())
            }
            Refusal::Store(e) => super::tasks::unavailable(&e),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::a2a::{Part, Role};
    use crate::store::{CallId, CallRecord};

    fn call(kind: CallKind) -> RegisteredCall {
        RegisteredCall {
            id: CallId::parse(&format!("ns.agent.{}", "ab".repeat(16)))
                .unwrap_or_else(|| panic!("a call id")),
            record: CallRecord {
                tool: "restart".into(),
                kind,
                token_hash: String::new(),
                since_ms: 0,
                expires_ms: i64::MAX,
                space: Some("a2a_x".into()),
                arguments: None,
                result_schema: None,
                depth: 0,
                remote: None,
                approvers: Vec::new(),
                conversation: Some("a2a_x".into()),
            },
            done: false,
        }
    }

    fn message(parts: Vec<Part>) -> Message {
        Message {
            message_id: "m".into(),
            context_id: None,
            task_id: None,
            role: Role::User,
            parts,
            metadata: None,
            extensions: Vec::new(),
            reference_task_ids: Vec::new(),
        }
    }

    fn data(v: Value) -> Part {
        Part {
            content: PartContent::Data(v),
            metadata: None,
            filename: None,
            media_type: None,
        }
    }

    #[test]
    fn approvals_read_words_or_a_decision() {
        let c = call(CallKind::Approval);
        let r = |p| reply(&c, &message(vec![p]));
        assert_eq!(
            r(Part::text("Approve, go ahead")).ok(),
            Some(Reply::Decision {
                approve: true,
                reason: Some("go ahead".into())
            })
        );
        assert_eq!(
            r(Part::text("no")).ok(),
            Some(Reply::Decision {
                approve: false,
                reason: None
            })
        );
        assert_eq!(
            r(data(
                serde_json::json!({"decision": "deny", "reason": "freeze"})
            ))
            .ok(),
            Some(Reply::Decision {
                approve: false,
                reason: Some("freeze".into())
            })
        );
        assert!(r(Part::text("maybe later")).is_err());
        assert!(r(data(serde_json::json!({"decision": "perhaps"}))).is_err());
    }

    #[test]
    fn interactive_answers_are_data_or_text() {
        let c = call(CallKind::Interactive);
        let r = |p| reply(&c, &message(vec![p]));
        assert_eq!(
            r(data(serde_json::json!({"result": 3}))).ok(),
            Some(Reply::Result(3.into()))
        );
        assert_eq!(
            r(data(serde_json::json!({"a": 1}))).ok(),
            Some(Reply::Result(serde_json::json!({"a": 1})))
        );
        assert_eq!(
            r(Part::text("[1, 2]")).ok(),
            Some(Reply::Result(serde_json::json!([1, 2])))
        );
        assert_eq!(
            r(Part::text("blue")).ok(),
            Some(Reply::Result("blue".into()))
        );
    }
}

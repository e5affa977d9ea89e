//! A human's answer to a paused tool call (issue 14): an approval's approve or deny, an
//! interactive tool's result. One rule for every route that answers one — the gateway's
//! `POST /v1/spaces/{ns}/{space}/tool-calls/{callId}` (which the console and chat use), a
//! message on an A2A task, and `agentfleet approve|deny|answer`: the call must wait for a
//! human, be asked in that space, be the one answering's to answer
//! ([`crate::party::may_answer`]: its approvers, by default the humans of its space, never an
//! outside caller for its own conversation's approval), have no answer yet and not be
//! expired, and the answer must fit the call (a decision for an approval, a result matching
//! the tool's schema for an interactive tool). The store takes it once ([`Calls::complete_call`]: the call is done and
//! its `tool_result` event is in the agent's inbox, waking it); then a notice from agentfleet
//! records it in the space's log (who, the decision, the reason; the message's time is
//! when): the audit trail, posted once per call (its idempotency key is the call's).
//! A refusal writes nothing.

use serde_json::Value;

use crate::crd::validate::check_arguments;
use crate::identity::SpaceKey;
use crate::party::{may_answer, Principal};
use crate::store::prelude::*;
use crate::store::{
    now_ms, Answer, CallId, CallKind, CallRecord, CallResult, Completion, StoreError, Verdict,
};

/// The longest reason, in characters.
pub const MAX_REASON_CHARS: usize = 1000;

/// The most characters of an interactive result the audit message quotes.
const AUDIT_RESULT_CHARS: usize = 300;

/// What a human answers a call with.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// For an approval: approve (`true`) or deny, and why.
    Decision {
        /// Approve the call.
        approve: bool,
        /// Why, when said.
        reason: Option<String>,
    },
    /// For an interactive tool: its result.
    Result(Value),
}

/// A call answered.
#[derive(Clone, Debug, PartialEq)]
pub struct Answered {
    /// Which call was answered.
    pub call: CallId,
    /// The name of the tool it called (for the audit line).
    pub tool: String,
    /// `approved`, `denied` or `answered`.
    pub decision: &'static str,
    /// No worker held the agent, so a wake signal was sent.
    pub woke: bool,
    /// The audit message's id in the space's log (`None`: posting it failed; logged).
    pub audit: Option<String>,
}

/// Why an answer was refused; nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// No call of that id waits for a human there (never registered, forgotten, a service's
    /// call, or asked in another space).
    #[error("no tool call {0} waits for a human here")]
    Unknown(String),
    /// The answer does not fit the call (a result for an approval, a decision for an
    /// interactive tool, a reason too long).
    #[error("{0}")]
    Mismatch(String),
    /// An interactive result does not match the tool's schema.
    #[error("the result does not match the schema of {tool}: {}", .problems.join("; "))]
    Invalid {
        /// The interactive tool whose `resultSchema` refused it.
        tool: String,
        /// What does not match, each with its path.
        problems: Vec<String>,
    },
    /// The one answering may not answer this call (see [`crate::party::may_answer`]).
    #[error("{0}")]
    Forbidden(String),
    /// The call already has its answer.
    #[error("tool call {0} was already answered")]
    Answered(String),
    /// The call's time is over.
    #[error("tool call {0} expired before it was answered")]
    Expired(String),
    /// The data plane failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Refusal {
    /// The exit code of `agentfleet approve|deny|answer` refused this way: 3 unknown call,
    /// 4 already answered, 5 expired, 6 not the one answering's to answer, 1 anything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            Refusal::Unknown(_) => 3,
            Refusal::Answered(_) => 4,
            Refusal::Expired(_) => 5,
            Refusal::Forbidden(_) => 6,
            _ => 1,
        }
    }
}

/// The space `call` was asked in (the agent's namespace), for a call a human answers.
pub fn asked_in(call: &CallId, record: &CallRecord) -> Option<SpaceKey> {
    let space = record.space.as_deref().filter(|_| record.kind.human())?;
    Some(SpaceKey::new(call.agent().namespace.clone(), space))
}

/// Answers `id` as `by` with `reply`: when `space` is given, only a call asked in that space
/// (see the module's description).
pub async fn answer(
    store: &dyn Store,
    id: &CallId,
    space: Option<&SpaceKey>,
    by: &Principal,
    reply: Reply,
) -> Result<Answered, Refusal> {
    let unknown = || Refusal::Unknown(id.to_string());
    let call = store.call(id).await?.ok_or_else(unknown)?;
    let home = asked_in(id, &call.record).ok_or_else(unknown)?;
    if space.is_some_and(|s| *s != home) {
        return Err(unknown());
    }
    let record = store.space(&home).await?;
    may_answer(&call.record, &home.name, record.as_ref(), by)
        .map_err(|why| Refusal::Forbidden(why.to_string()))?;
    let by = by.name.as_str();
    if call.done {
        return Err(Refusal::Answered(id.to_string()));
    }
    if now_ms() > call.record.expires_ms {
        return Err(Refusal::Expired(id.to_string()));
    }
    let decision = decide(&call.record, by, reply)?;
    let completion = store
        .complete_call(id, None, &CallResult::Decision(decision.clone()))
        .await?;
    let pushed = match completion {
        Completion::Accepted(pushed) => pushed,
        Completion::Unknown | Completion::Unauthorized => return Err(unknown()),
        Completion::Duplicate => return Err(Refusal::Answered(id.to_string())),
        Completion::Expired => return Err(Refusal::Expired(id.to_string())),
    };
    let text = audit_text(id, &call.record.tool, &decision);
    let audit = post_audit(store, &home, id, &text).await;
    Ok(Answered {
        call: id.clone(),
        tool: call.record.tool,
        decision: verb(&decision.answer),
        woke: pushed.woke,
        audit,
    })
}

/// The audit message, posted once per call; a passing failure is tried again. `None` when it
/// could not be posted (the decision stands: it is in the agent's inbox).
async fn post_audit(
    store: &dyn Store,
    space: &SpaceKey,
    id: &CallId,
    text: &str,
) -> Option<String> {
    let key = format!("decision:{id}");
    let mut attempt = 1;
    loop {
        match store.post_notice(space, text, Some(&key)).await {
            Ok(posted) => return Some(posted.id),
            Err(e) if e.is_transient() && attempt < 3 => {
                tokio::time::sleep(std::time::Duration::from_millis(100) * attempt).await;
                attempt += 1;
            }
            Err(e) => {
                tracing::warn!(call = %id, space = %space, error = %e, "the decision was taken but its audit message could not be posted");
                return None;
            }
        }
    }
}

/// The decision `reply` makes for a call of `record`, or why it does not fit (pure).
pub fn decide(record: &CallRecord, by: &str, reply: Reply) -> Result<Verdict, Refusal> {
    let (answer, reason) = match (record.kind, reply) {
        (CallKind::Approval, Reply::Decision { approve, reason }) => {
            let reason = reason
                .map(|r| r.trim().to_string())
                .filter(|r| !r.is_empty());
            if reason
                .as_ref()
                .is_some_and(|r| r.chars().count() > MAX_REASON_CHARS)
            {
                return Err(Refusal::Mismatch(format!(
                    "reason: at most {MAX_REASON_CHARS} characters"
                )));
            }
            let answer = if approve {
                Answer::Approve
            } else {
                Answer::Deny
            };
            (answer, reason)
        }
        (CallKind::Approval, Reply::Result(_)) => {
            return Err(Refusal::Mismatch(format!(
                "{} waits for an approval: answer with a decision (approve or deny), not a result",
                record.tool
            )))
        }
        (CallKind::Interactive, Reply::Result(value)) => {
            if let Some(schema) = &record.result_schema {
                let problems = check_arguments(schema, &value);
                if !problems.is_empty() {
                    return Err(Refusal::Invalid {
                        tool: record.tool.clone(),
                        problems,
                    });
                }
            }
            (Answer::Result(value), None)
        }
        (CallKind::Interactive, Reply::Decision { .. }) => {
            return Err(Refusal::Mismatch(format!(
                "{} is an interactive tool: answer with its result, not a decision",
                record.tool
            )))
        }
        (CallKind::Async, _) => {
            return Err(Refusal::Mismatch(format!(
                "{} is an asynchronous call: its service posts the result",
                record.tool
            )))
        }
    };
    Ok(Verdict {
        answer,
        by: by.to_string(),
        reason,
    })
}

/// How a decision is named: `approved`, `denied`, `answered`.
pub fn verb(answer: &Answer) -> &'static str {
    match answer {
        Answer::Approve => "approved",
        Answer::Deny => "denied",
        Answer::Result(_) => "answered",
    }
}

/// The audit message: `Husam approved restart_deployment (call ID): reason`; an interactive
/// tool's answer quotes the result (cut short).
pub fn audit_text(id: &CallId, tool: &str, decision: &Verdict) -> String {
    let mut text = format!(
        "{} {} {tool} (call {id})",
        decision.by,
        verb(&decision.answer)
    );
    if let Answer::Result(value) = &decision.answer {
        let json = value.to_string();
        let mut chars = json.chars();
        let cut: String = chars.by_ref().take(AUDIT_RESULT_CHARS).collect();
        text.push_str(": ");
        text.push_str(&cut);
        if chars.next().is_some() {
            text.push('…');
        }
    }
    if let Some(reason) = &decision.reason {
        text.push_str(": ");
        text.push_str(reason);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::AgentKey;
    use crate::store::HumanCall;
    use serde_json::json;

    fn call(kind: CallKind, schema: Option<Value>) -> HumanCall {
        HumanCall::new(
            &AgentKey::new("ops", "sre"),
            "confirm_deployment",
            kind,
            "oncall",
            json!({}),
            schema,
            60_000,
        )
        .unwrap()
    }

    #[test]
    fn an_answer_must_fit_its_call() {
        let approval = call(CallKind::Approval, None).record;
        let deny = Reply::Decision {
            approve: false,
            reason: Some("  freeze ".into()),
        };
        assert_eq!(
            decide(&approval, "Sam", deny).unwrap(),
            Verdict {
                answer: Answer::Deny,
                by: "Sam".into(),
                reason: Some("freeze".into())
            }
        );
        let blank = Reply::Decision {
            approve: true,
            reason: Some(" ".into()),
        };
        assert_eq!(decide(&approval, "Sam", blank).unwrap().reason, None);
        assert!(matches!(
            decide(&approval, "Sam", Reply::Result(json!(1))),
            Err(Refusal::Mismatch(_))
        ));
        let long = Reply::Decision {
            approve: true,
            reason: Some("x".repeat(MAX_REASON_CHARS + 1)),
        };
        assert!(matches!(
            decide(&approval, "Sam", long),
            Err(Refusal::Mismatch(_))
        ));

        let schema = json!({"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}});
        let form = call(CallKind::Interactive, Some(schema)).record;
        assert_eq!(
            decide(&form, "Dana", Reply::Result(json!({"ok": true})))
                .unwrap()
                .answer,
            Answer::Result(json!({"ok": true}))
        );
        match decide(&form, "Dana", Reply::Result(json!({"ok": "yes"}))) {
            Err(Refusal::Invalid { problems, .. }) => {
                assert!(problems.iter().any(|p| p.contains("ok")), "{problems:?}")
            }
            other => panic!("{other:?}"),
        }
        let approve = Reply::Decision {
            approve: true,
            reason: None,
        };
        assert!(matches!(
            decide(&form, "Dana", approve),
            Err(Refusal::Mismatch(_))
        ));
    }

    #[test]
    fn the_audit_says_who_decided_what_and_why() {
        let id = call(CallKind::Approval, None).id;
        let decision = |answer, reason: Option<&str>| Verdict {
            answer,
            by: "Husam".into(),
            reason: reason.map(str::to_string),
        };
        assert_eq!(
            audit_text(
                &id,
                "restart_deployment",
                &decision(Answer::Approve, Some("go"))
            ),
            format!("Husam approved restart_deployment (call {id}): go")
        );
        assert_eq!(
            audit_text(&id, "restart_deployment", &decision(Answer::Deny, None)),
            format!("Husam denied restart_deployment (call {id})")
        );
        let big = Answer::Result(json!({"note": "x".repeat(1000)}));
        let text = audit_text(&id, "confirm_deployment", &decision(big, None));
        assert!(text.starts_with(&format!(
            "Husam answered confirm_deployment (call {id}): {{\"note\""
        )));
        assert!(text.ends_with('…') && text.chars().count() < 400, "{text}");
    }

    #[test]
    fn refusals_have_their_exit_codes() {
        let codes: Vec<u8> = [
            Refusal::Unknown("c".into()),
            Refusal::Answered("c".into()),
            Refusal::Expired("c".into()),
            Refusal::Mismatch("m".into()),
        ]
        .iter()
        .map(Refusal::exit_code)
        .collect();
        assert_eq!(codes, [3, 4, 5, 1]);
    }
}

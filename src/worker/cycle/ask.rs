//! Calls that wait for a human (issue 14; seeds 003 "Interactive Tool Pause", 004
//! "Interactive UI Tools"): an approval before a call runs (`requireApproval`), or an
//! interactive tool's answer in place of running it.
//!
//! Asking registers the call in the data plane (so the gateway can take one answer from a
//! member of the space), journals it, and tells the space: a message from the agent naming
//! the tool, its arguments and the call id, and a live `tool_request` event. The
//! cycle then pauses: nothing is committed, its events stay in flight, the worker sleeps until
//! something new arrives. The answer arrives as a `tool_result` inbox event; the cycle resumes
//! from its journal and reads it here: approved, the call runs (once, through the journal);
//! denied, the model gets an error result with the reason; answered, the answer is the
//! result; past its time, the model is told it timed out.

use serde_json::{json, Value};
use tracing::{info, warn};

use super::journal::{Asked, Entry};
use super::Cycle;
use crate::identity::SpaceKey;
use crate::model::ToolCall;
use crate::party::answers::{answerable, approvers_for};
use crate::store::{now_ms, CallKind, EventKind, HumanCall, LiveEvent, NewMessage, StoreError};
use crate::worker::tools::{Ask, Outcome};

/// What the answer to a call asked of a human says now.
pub(super) enum Answered {
    /// Approved: make the call.
    Run,
    /// The result to give the model instead of making the call (denied, answered, timed out).
    Instead(Outcome),
    /// No answer yet: the cycle stays paused.
    Waiting,
}

impl Cycle<'_> {
    /// How a call of `call`'s tool waits for a human, if it does.
    pub(super) fn asks(&self, call: &ToolCall) -> Option<Ask> {
        self.agentlet
            .toolbox()
            .external(&call.name)
            .and_then(|e| e.asks(&call.name))
    }

    /// Asks the active space about `call` (call `index` of `step`): registers it, journals it
    /// and tells the space. `Err(outcome)`: it cannot be asked (the result to give instead).
    pub(super) async fn ask(
        &mut self,
        step: u32,
        index: usize,
        call: &ToolCall,
        ask: Ask,
    ) -> Result<Result<Asked, Outcome>, StoreError> {
        let agentlet = self.agentlet;
        // Asked where the cycle's party is: the space it answers, else the first the party
        // sees (the cycle's spaces are its party's).
        let Some(space) = self
            .active
            .clone()
            .or_else(|| self.spaces.first().map(|(name, _)| name.clone()))
        else {
            return Ok(Err(Outcome::error(format!(
                "{} needs a human's answer, and this agent is in no space to ask",
                call.name
            ))));
        };
        let approvers = approvers_for(&agentlet.agent.spec.tools.approvers, &call.name);
        if !answerable(ask.kind, self.party.is_outside(), &approvers) {
            return Ok(Err(Outcome::error(format!(
                "{} needs an approval, and nobody here may give it: a caller never approves a call its own conversation provoked, and this agent names no approvers for {} (spec.tools.approvers). The call was not made; tell the caller so",
                call.name, call.name
            ))));
        }
        let masks = agentlet.toolbox().masks();
        let arguments: Value = serde_json::from_str(&masks.redact(&call.arguments))
            .unwrap_or_else(|_| Value::String(masks.redact(&call.arguments)));
        let seconds = ask
            .timeout_seconds
            .unwrap_or(agentlet.agent.spec.tools.approval_timeout_seconds);
        let human = match HumanCall::new(
            &agentlet.key,
            &call.name,
            ask.kind,
            &space,
            arguments.clone(),
            ask.result_schema,
            i64::from(seconds) * 1000,
        ) {
            Ok(h) => h.answered_by(approvers),
            Err(e) => return Ok(Err(Outcome::error(format!("{e}: nobody was asked")))),
        };
        agentlet.store.register_human_call(&human).await?;
        let asked = Asked {
            call: human.id.to_string(),
            since_ms: human.record.since_ms,
            expires_ms: human.record.expires_ms,
        };
        self.journal(vec![Entry::Asked {
            step,
            index,
            call: asked.call.clone(),
            since_ms: asked.since_ms,
            expires_ms: asked.expires_ms,
        }])
        .await?;
        self.tell(&space, call, &human, &arguments, seconds).await;
        info!(tool = %call.name, call = %human.id, space = %space, "waiting for a human");
        Ok(Ok(asked))
    }

    /// Tells `space` what is asked: a message from the agent (the audit trail starts here) and
    /// a live `tool_request` event clients render.
    async fn tell(
        &self,
        space: &str,
        call: &ToolCall,
        human: &HumanCall,
        arguments: &Value,
        seconds: u32,
    ) {
        let agentlet = self.agentlet;
        let id = &human.id;
        // Who may answer, when the tool names them (else the humans here).
        let by = match human.record.approvers.as_slice() {
            [] => String::new(),
            named => format!("; {} may answer", named.join(" or ")),
        };
        let arguments_shown = shown(arguments);
        let text = match human.record.kind {
            CallKind::Interactive => format!(
                "{} asks: {} {arguments_shown} (call {id}; answer within {seconds}s with /answer {id} JSON{by})",
                agentlet.key.name, call.name
            ),
            _ => format!(
                "{} wants to call {} with {arguments_shown} (call {id}; approve within {seconds}s with /approve {id}, or /deny {id} REASON{by})",
                agentlet.key.name, call.name
            ),
        };
        let key = SpaceKey::new(agentlet.key.namespace.clone(), space.to_string());
        let message = NewMessage {
            sender: agentlet.me(),
            text,
            mention: None,
            idempotency_key: Some(format!("ask:{id}")),
            urgent: false,
            depth: self.depth,
        };
        if let Err(e) = agentlet.store.post_message(&key, &message).await {
            warn!(error = %e, call = %id, "the request was not posted to the space");
        }
        let event = LiveEvent::ToolRequest {
            sender: agentlet.me(),
            call_id: id.to_string(),
            tool: call.name.clone(),
            kind: human.record.kind,
            arguments: arguments.clone(),
            result_schema: human.record.result_schema.clone(),
            since_ms: human.record.since_ms,
            expires_ms: human.record.expires_ms,
        };
        if let Err(e) = agentlet.store.publish_live(&key, &event).await {
            warn!(error = %e, call = %id, "the request was not shown live");
        }
    }

    /// What the answer to `asked` says: read from the cycle's events (the answer arrives as
    /// a `tool_result` event naming the call).
    pub(super) fn answer(&self, asked: &Asked, call: &ToolCall) -> Answered {
        let answer = self.events.iter().find_map(|e| {
            let data = e.data.as_ref()?;
            (e.kind == EventKind::ToolResult && data["callId"] == asked.call.as_str())
                .then_some((e.time_ms, data))
        });
        let Some((answered_ms, data)) = answer else {
            if now_ms() > asked.expires_ms {
                return Answered::Instead(Outcome::error(format!(
                    "nobody answered the call of {} (call {}) in time: it timed out and was not made",
                    call.name, asked.call
                )));
            }
            return Answered::Waiting;
        };
        let [ns, agent] = self.agentlet.labels();
        let waited = answered_ms.saturating_sub(asked.since_ms).max(0) as f64 / 1000.0;
        self.agentlet
            .metrics
            .decision_time
            .with_label_values(&[ns, agent, call.name.as_str()])
            .observe(waited);
        let by = data["by"].as_str().unwrap_or("someone");
        let reason = data["reason"].as_str();
        match data["decision"].as_str() {
            Some("approved") => Answered::Run,
            Some("answered") => Answered::Instead(Outcome {
                content: json!({"answer": data["result"], "by": by}).to_string(),
                ok: true,
            }),
            _ => Answered::Instead(Outcome::error(match reason {
                Some(r) => format!("{by} denied the call of {}: {r}", call.name),
                None => format!("{by} denied the call of {}", call.name),
            })),
        }
    }
}

/// The most of a call's arguments its request message shows: the message always fits a
/// space's message bound; the whole call is in the live `tool_request` and `/v1/calls`.
const SHOWN_ARGUMENT_BYTES: usize = 4096;

/// `arguments` as the request message shows them (cut, and said so, past
/// [`SHOWN_ARGUMENT_BYTES`]).
fn shown(arguments: &Value) -> String {
    let text = arguments.to_string();
    if text.len() <= SHOWN_ARGUMENT_BYTES {
        return text;
    }
    let mut end = SHOWN_ARGUMENT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}… ({} bytes in all; the whole call is in the console and GET /v1/calls)",
        &text[..end],
        text.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requests_message_shows_at_most_4_kib_of_its_arguments() {
        let small = serde_json::json!({"amount": 12});
        assert_eq!(shown(&small), r#"{"amount":12}"#);
        let huge = serde_json::json!({"note": "é".repeat(100_000)});
        let text = shown(&huge);
        assert!(text.len() < SHOWN_ARGUMENT_BYTES + 100, "{}", text.len());
        assert!(
            text.ends_with(
                "… (200011 bytes in all; the whole call is in the console and GET /v1/calls)"
            ),
            "{text}"
        );
    }
}

//! Agents' requests for a human (issue 14) in chat: how a `tool_request` is shown, and the
//! lines that answer one (`/approve [ID] [reason]`, `/deny [ID] REASON`, `/answer [ID]
//! {json}`; without an ID, the latest request this chat saw), sent to
//! `POST /v1/spaces/{ns}/{space}/tool-calls/{callId}`.
//!
//! A request comes as the SSE event `tool_request` ([`ToolRequestEvent`]) and as a message
//! from the agent in the space's log (which names its call); chat shows it once: the message,
//! or the request's own line when no message said it.

use serde_json::Value;

use std::collections::HashSet;

use crate::api::{Message, ToolRequestEvent};
use crate::store::CallId;

/// The most characters of a request's arguments shown.
const ARGUMENT_CHARS: usize = 300;

/// How to answer, as chat says it.
pub(super) const HELP: &str =
    "answer an agent's request with /approve [ID] [reason], /deny [ID] REASON or /answer [ID] {json} (no ID: the latest request)";

/// The requests this chat has shown, and the latest: what an answer without an ID answers.
#[derive(Debug, Default)]
pub(super) struct Waiting {
    shown: HashSet<String>,
    latest: Option<String>,
}

impl Waiting {
    /// An agent's message of the log: a request names its call (`(call ID;`), which is then
    /// shown; a live one (`live`) is the latest.
    pub(super) fn saw_message(&mut self, m: &Message, live: bool) {
        if m.sender.kind != "agent" {
            return;
        }
        let Some(id) = m
            .text
            .split("(call ")
            .nth(1)
            .and_then(|rest| rest.split(';').next())
            .filter(|id| CallId::parse(id).is_some())
        else {
            return;
        };
        self.shown.insert(id.to_string());
        if live {
            self.latest = Some(id.to_string());
        }
    }

    /// A live request, now the latest: whether to show its line (not when its message was).
    pub(super) fn saw_request(&mut self, r: &ToolRequestEvent) -> bool {
        self.latest = Some(r.call_id.clone());
        self.shown.insert(r.call_id.clone())
    }

    /// The call an answer is for: the one it names, else the latest.
    pub(super) fn call(&self, named: Option<String>) -> Option<String> {
        named.or_else(|| self.latest.clone())
    }

    /// `call` was answered: no longer the latest.
    pub(super) fn answered(&mut self, call: &str) {
        if self.latest.as_deref() == Some(call) {
            self.latest = None;
        }
    }
}

/// The request an SSE event carries, if it is a `tool_request`.
pub(super) fn request(event: &str, data: &str) -> Option<ToolRequestEvent> {
    (event == "tool_request")
        .then(|| serde_json::from_str(data).ok())
        .flatten()
}

/// The line chat shows for a request: who asks what, and how to answer.
pub(super) fn line(r: &ToolRequestEvent) -> String {
    let who = &r.sender.name;
    let tool = &r.tool;
    let args = crate::names::cut(&r.arguments.to_string(), ARGUMENT_CHARS);
    let id = &r.call_id;
    if r.kind == "interactive" {
        format!("? {who} asks for {tool} {args} — /answer {id} {{json}}")
    } else {
        format!("? {who} asks to run {tool} {args} — /approve {id} [reason] or /deny {id} REASON")
    }
}

/// What a typed line asks for.
#[derive(Debug, PartialEq)]
pub(super) enum Typed {
    /// A message to post: the line, or for a line starting `//`, the line from its second `/`.
    Say(String),
    /// An answer to a call: its id (none: the latest request) and the body to send.
    Answer(Option<String>, Value),
    /// A command chat cannot send, and why.
    Bad(String),
}

/// Reads a typed line: a command (`/approve`, `/deny`, `/answer`) or a message (`//…` posts
/// `/…`).
pub(super) fn parse(line: &str) -> Typed {
    let line = line.trim();
    let Some(command) = line.strip_prefix('/') else {
        return Typed::Say(line.to_string());
    };
    if command.starts_with('/') {
        return Typed::Say(command.to_string());
    }
    let (verb, rest) = command
        .split_once(char::is_whitespace)
        .unwrap_or((command, ""));
    let rest = rest.trim_start();
    let usage = match verb {
        "approve" => "/approve [ID] [reason]",
        "deny" => "/deny [ID] REASON",
        "answer" => "/answer [ID] {json}",
        _ => {
            return Typed::Bad(format!(
                "unknown command /{verb}: {HELP} (type //{verb} to post it as a message)"
            ))
        }
    };
    // A first word that is a call id names the call; anything else is the rest of the line.
    let (first, after) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let (id, tail) = if CallId::parse(first).is_some() {
        (Some(first.to_string()), after.trim())
    } else {
        (None, rest.trim())
    };
    let body = match verb {
        "approve" if tail.is_empty() => serde_json::json!({"decision": "approve"}),
        "approve" => serde_json::json!({"decision": "approve", "reason": tail}),
        "deny" if tail.is_empty() => return Typed::Bad(format!("{usage}: say why")),
        "deny" => serde_json::json!({"decision": "deny", "reason": tail}),
        _ => match serde_json::from_str::<Value>(tail) {
            Ok(result) => serde_json::json!({ "result": result }),
            Err(e) => return Typed::Bad(format!("{usage}: not JSON ({e})")),
        },
    };
    Typed::Answer(id, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ID: &str = "ops.sre.0123456789abcdef0123456789abcdef";

    #[test]
    fn typed_commands_become_answers() {
        assert_eq!(parse("hello /approve"), Typed::Say("hello /approve".into()));
        assert_eq!(parse("//shrug"), Typed::Say("/shrug".into()));
        assert_eq!(
            parse(&format!("/approve {ID}")),
            Typed::Answer(Some(ID.into()), json!({"decision": "approve"}))
        );
        assert_eq!(
            parse(&format!(" /approve  {ID}  looks  fine ")),
            Typed::Answer(
                Some(ID.into()),
                json!({"decision": "approve", "reason": "looks  fine"})
            )
        );
        assert_eq!(
            parse(&format!("/deny {ID} not now")),
            Typed::Answer(
                Some(ID.into()),
                json!({"decision": "deny", "reason": "not now"})
            )
        );
        assert_eq!(
            parse(&format!("/answer {ID} {{\"ok\": true}}")),
            Typed::Answer(Some(ID.into()), json!({"result": {"ok": true}}))
        );
        // No ID: the latest request, the whole rest of the line being the reason or result.
        assert_eq!(
            parse("/approve"),
            Typed::Answer(None, json!({"decision": "approve"}))
        );
        assert_eq!(
            parse("/approve looks fine"),
            Typed::Answer(None, json!({"decision": "approve", "reason": "looks fine"}))
        );
        assert_eq!(
            parse("/deny not now"),
            Typed::Answer(None, json!({"decision": "deny", "reason": "not now"}))
        );
        assert_eq!(
            parse("/answer {\"ok\": 1}"),
            Typed::Answer(None, json!({"result": {"ok": 1}}))
        );
        for bad in [
            format!("/deny {ID}"),
            "/deny".to_string(),
            format!("/answer {ID} {{nope"),
            format!("/answer {ID}"),
            "/answer".to_string(),
            "/retry".to_string(),
        ] {
            assert!(matches!(parse(&bad), Typed::Bad(_)), "{bad}");
        }
    }

    /// Issue 43: each request printed once, and answered without typing its 40-character id.
    #[test]
    fn a_request_is_shown_once_and_the_latest_is_answered_without_its_id() {
        let message = |sender_kind: &str, text: String| -> Message {
            serde_json::from_value(json!({
                "id": "1-0", "space": "desk", "timeMs": 1, "text": text,
                "sender": {"kind": sender_kind, "id": "sre", "name": "sre"}
            }))
            .unwrap()
        };
        let event = |id: &str| -> ToolRequestEvent {
            serde_json::from_value(json!({
                "sender": {"kind": "agent", "id": "sre", "name": "sre"},
                "callId": id, "tool": "restart_deployment", "kind": "approval",
                "arguments": {}, "sinceMs": 1, "expiresMs": 5
            }))
            .unwrap()
        };
        let other = "ops.sre.ffffffffffffffffffffffffffffffff";
        let mut w = Waiting::default();
        assert_eq!(w.call(None), None, "nothing asked yet");
        // The agent's message names the call: its live event adds no second line.
        w.saw_message(
            &message("agent", format!("sre wants to call restart_deployment with {{}} (call {ID}; approve within 60s with /approve {ID}, or /deny {ID} REASON)")),
            true,
        );
        assert_eq!(w.call(None).as_deref(), Some(ID));
        assert!(!w.saw_request(&event(ID)), "shown by its message already");
        // A request no message said is shown, and is the latest now.
        assert!(w.saw_request(&event(other)));
        assert_eq!(w.call(None).as_deref(), Some(other));
        assert_eq!(
            w.call(Some(ID.into())).as_deref(),
            Some(ID),
            "a named one wins"
        );
        w.answered(other);
        assert_eq!(w.call(None), None);
        // A person quoting a call id is no request; history marks requests shown, not latest.
        w.saw_message(&message("human", format!("(call {ID}; ok)")), true);
        assert_eq!(w.call(None), None);
        let mut fresh = Waiting::default();
        fresh.saw_message(&message("agent", format!("x (call {other}; y)")), false);
        assert_eq!(fresh.call(None), None);
        assert!(!fresh.saw_request(&event(other)));
    }

    #[test]
    fn requests_come_as_their_own_event() {
        let own = json!({
            "sender": {"kind": "agent", "id": "sre", "name": "sre"},
            "callId": ID, "tool": "restart_deployment", "kind": "approval",
            "arguments": {"deployment": "api"}, "sinceMs": 1, "expiresMs": 5
        });
        let r = request("tool_request", &own.to_string()).unwrap();
        assert_eq!(
            line(&r),
            format!("? sre asks to run restart_deployment {{\"deployment\":\"api\"}} — /approve {ID} [reason] or /deny {ID} REASON")
        );
        let mut interactive = own.clone();
        interactive["kind"] = json!("interactive");
        interactive["tool"] = json!("confirm_deployment");
        interactive["arguments"] = json!({"env": "prod"});
        let r = request("tool_request", &interactive.to_string()).unwrap();
        assert_eq!(
            line(&r),
            format!(
                "? sre asks for confirm_deployment {{\"env\":\"prod\"}} — /answer {ID} {{json}}"
            )
        );
        let thinking = json!({"sender": {"kind": "agent", "id": "sre", "name": "sre"}, "activity": "thinking"});
        assert!(request("activity", &thinking.to_string()).is_none());
        assert!(request("tool_request", "{}").is_none());
        assert!(request("message", "{}").is_none());
    }
}

//! Agents' requests for a human (issue 14) in chat: how a `tool_request` is shown, and the
//! lines that answer one (`/approve ID [reason]`, `/deny ID REASON`, `/answer ID {json}`),
//! sent to `POST /v1/spaces/{ns}/{space}/tool-calls/{callId}`.
//!
//! A request comes as the SSE event `tool_request` ([`ToolRequestEvent`]); it is also a message
//! from the agent in the space's log, which chat shows as any message.

use serde_json::Value;

use crate::api::ToolRequestEvent;
use crate::store::CallId;

/// The most characters of a request's arguments shown.
const ARGUMENT_CHARS: usize = 300;

/// How to answer, as chat says it.
pub(super) const HELP: &str =
    "answer an agent's request with /approve ID [reason], /deny ID REASON or /answer ID {json}";

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
    /// An answer to a call: its id and the body to send.
    Answer(String, Value),
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
    let (id, tail) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let tail = tail.trim();
    let usage = match verb {
        "approve" => "/approve ID [reason]",
        "deny" => "/deny ID REASON",
        "answer" => "/answer ID {json}",
        _ => {
            return Typed::Bad(format!(
                "unknown command /{verb}: {HELP} (type //{verb} to post it as a message)"
            ))
        }
    };
    if CallId::parse(id).is_none() {
        return Typed::Bad(format!("{usage}: ID is the call id the request names"));
    }
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
    Typed::Answer(id.to_string(), body)
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
            Typed::Answer(ID.into(), json!({"decision": "approve"}))
        );
        assert_eq!(
            parse(&format!(" /approve  {ID}  looks  fine ")),
            Typed::Answer(
                ID.into(),
                json!({"decision": "approve", "reason": "looks  fine"})
            )
        );
        assert_eq!(
            parse(&format!("/deny {ID} not now")),
            Typed::Answer(ID.into(), json!({"decision": "deny", "reason": "not now"}))
        );
        assert_eq!(
            parse(&format!("/answer {ID} {{\"ok\": true}}")),
            Typed::Answer(ID.into(), json!({"result": {"ok": true}}))
        );
        for bad in [
            format!("/deny {ID}"),
            format!("/answer {ID} {{nope"),
            format!("/answer {ID}"),
            "/approve".to_string(),
            "/approve ../../messages".to_string(),
            "/retry".to_string(),
        ] {
            assert!(matches!(parse(&bad), Typed::Bad(_)), "{bad}");
        }
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

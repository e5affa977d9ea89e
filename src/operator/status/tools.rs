//! `status.tools` and `ToolsReady`, from the tools the worker reports to the data plane.

use super::Cond;
use crate::crd::ToolStatus;

/// Condition: every tool the worker has can be called now (written from the data plane, from
/// the tools the worker reports; reasons `AllReady`, `SecretUnavailable`, `McpUnreachable`,
/// `ToolUnavailable`).
pub const TOOLS_READY: &str = "ToolsReady";

/// The longest text of one tool's `lastError` shown in status.
const MAX_TOOL_ERROR: usize = 512;
/// The longest condition message.
pub(super) const MAX_MESSAGE: usize = 1024;

/// The most tools `status.tools` lists (a server may offer thousands; the status must stay
/// far below the API server's object size limit).
pub const MAX_SHOWN_TOOLS: usize = 200;

/// The tools as `status.tools` shows them: what the worker reported, each name once, errors
/// cut to a bounded length; at most [`MAX_SHOWN_TOOLS`], those not ready kept first (in the
/// reported order).
pub(super) fn shown_tools(reported: &[ToolStatus]) -> Vec<ToolStatus> {
    let mut seen = std::collections::HashSet::new();
    let unique: Vec<&ToolStatus> = reported
        .iter()
        .filter(|t| seen.insert(t.name.as_str()))
        .collect();
    let down = unique.iter().filter(|t| !t.ready).count();
    let mut ready_room = MAX_SHOWN_TOOLS.saturating_sub(down);
    unique
        .into_iter()
        .filter(|t| {
            !t.ready || {
                let room = ready_room > 0;
                ready_room = ready_room.saturating_sub(1);
                room
            }
        })
        .take(MAX_SHOWN_TOOLS)
        .map(|t| ToolStatus {
            last_error: t.last_error.as_deref().map(|e| cut(e, MAX_TOOL_ERROR)),
            note: None,
            ..t.clone()
        })
        .collect()
}

pub(super) use crate::names::cut;

/// Whether a tool's error is a bound of its `limits` (the worker names the field:
/// `(limits.maxTools)`).
fn over_limit(error: &str) -> bool {
    error.contains("(limits.")
}

/// The Secret a tool's error names (`Secret "NAME" …`, as the worker's Secrets say it).
fn secret_named(error: &str) -> Option<&str> {
    let (_, rest) = error.split_once("Secret \"")?;
    rest.split_once('"').map(|(name, _)| name)
}

/// `ToolsReady`, from the tools the worker reported (`None`: it has not reported yet, Unknown
/// `NotReported`): True when every one can be called, else False with the first of these that
/// applies, the message naming every unavailable tool and its last error:
/// `SecretUnavailable` (a tool's error names a Secret it cannot read), `OverLimit` (a tool
/// or a whole MCP server refused for a bound of its `limits`), `McpUnreachable` (an MCP
/// server, `source: mcp:SERVER`, none of whose tools can be called), `ToolUnavailable` (any
/// other, such as one tool of a server that answers).
pub fn tools_condition(reported: Option<&[ToolStatus]>) -> Cond {
    let Some(tools) = reported else {
        return Cond::unknown(
            TOOLS_READY,
            "NotReported",
            "no worker has reported its tools yet",
        );
    };
    let reachable = |server: &str| {
        tools
            .iter()
            .any(|t| t.ready && t.source.strip_prefix("mcp:") == Some(server))
    };
    let down: Vec<&ToolStatus> = tools.iter().filter(|t| !t.ready).collect();
    if down.is_empty() {
        return Cond::ok(
            TOOLS_READY,
            "AllReady",
            format!("{} tool(s) ready", tools.len()),
        );
    }
    let error = |t: &ToolStatus| t.last_error.clone().unwrap_or_else(|| "not ready".into());
    // Secret → its tools; server → its first error; tool → its error. In report order.
    let mut secrets: Vec<(&str, Vec<&str>)> = Vec::new();
    let mut servers: Vec<(&str, String)> = Vec::new();
    let mut others: Vec<(&str, String)> = Vec::new();
    let mut limited = false;
    for t in &down {
        limited |= t.last_error.as_deref().is_some_and(over_limit);
        if let Some(secret) = t.last_error.as_deref().and_then(secret_named) {
            match secrets.iter_mut().find(|(s, _)| *s == secret) {
                Some((_, users)) => users.push(&t.name),
                None => secrets.push((secret, vec![&t.name])),
            }
        } else if let Some(server) = t.source.strip_prefix("mcp:").filter(|s| !reachable(s)) {
            if servers.iter().all(|(s, _)| *s != server) {
                servers.push((server, error(t)));
            }
        } else {
            others.push((&t.name, error(t)));
        }
    }
    let reason = if !secrets.is_empty() {
        "SecretUnavailable"
    } else if limited {
        "OverLimit"
    } else if !servers.is_empty() {
        "McpUnreachable"
    } else {
        "ToolUnavailable"
    };
    let parts = secrets
        .iter()
        .map(|(s, users)| {
            format!(
                "Secret {s} is not available to the worker (tools {})",
                users.join(", ")
            )
        })
        .chain(servers.iter().map(|(s, e)| server_down(s, &cut(e, 200))))
        .chain(
            others
                .iter()
                .map(|(t, e)| format!("tool {t} unavailable: {}", cut(e, 200))),
        )
        .collect::<Vec<_>>()
        .join("; ");
    Cond::fail(
        TOOLS_READY,
        reason,
        cut(
            &format!(
                "{} of {} tool(s) unavailable: {parts}",
                down.len(),
                tools.len()
            ),
            MAX_MESSAGE,
        ),
    )
}

/// Condition: every pattern that names tools for approval matches a tool the agent has
/// (reasons `AllMatch`, `UnmatchedPattern`; Unknown `NotReported` before the worker reported
/// its tools). A warning: the agent runs either way, but a misspelt pattern gates nothing.
pub const APPROVERS_MATCH_TOOLS: &str = "ApproversMatchTools";

/// `ApproversMatchTools`, from the spec's patterns and the tools the worker reported; `None`
/// when the spec has no pattern.
pub fn approvals_condition(
    spec: Option<&crate::crd::ToolsSpec>,
    reported: Option<&[ToolStatus]>,
) -> Option<Cond> {
    let spec = spec?;
    let patterns = spec
        .mcp
        .iter()
        .map(|m| m.require_approval.len())
        .sum::<usize>()
        + spec
            .a2a
            .iter()
            .map(|a| a.require_approval.len())
            .sum::<usize>()
        + spec.approvers.iter().map(|r| r.tools.len()).sum::<usize>();
    if patterns == 0 {
        return None;
    }
    let Some(tools) = reported else {
        return Some(Cond::unknown(
            APPROVERS_MATCH_TOOLS,
            "NotReported",
            "no worker has reported its tools yet",
        ));
    };
    let unmatched = crate::party::answers::unmatched_patterns(spec, tools);
    Some(if unmatched.is_empty() {
        Cond::ok(
            APPROVERS_MATCH_TOOLS,
            "AllMatch",
            format!("{patterns} approval pattern(s), each naming a tool the agent has"),
        )
    } else {
        Cond::fail(
            APPROVERS_MATCH_TOOLS,
            "UnmatchedPattern",
            cut(
                &format!(
                    "{} of {patterns} approval pattern(s) name no tool, so they gate nothing: {}",
                    unmatched.len(),
                    unmatched.join("; ")
                ),
                MAX_MESSAGE,
            ),
        )
    })
}

/// What a server that is down says: the worker's error when it names the server already
/// (`MCP server S is unavailable: …`), else the error after the server's name.
fn server_down(server: &str, error: &str) -> String {
    if error.starts_with(&format!("MCP server {server} ")) {
        error.to_string()
    } else {
        format!("MCP server {server} unreachable: {error}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::status::{data_status, find};
    use crate::store::AgentObservation;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    fn t0() -> Timestamp {
        Timestamp::from_second(1_795_000_000).unwrap()
    }

    fn condition(tools: &[ToolStatus]) -> Cond {
        tools_condition(Some(tools))
    }

    fn refs(cycle: u64) -> String {
        format!("r{cycle}")
    }

    /// `tools` as a worker reports them to the data plane.
    fn recorded(tools: Vec<ToolStatus>) -> Option<Vec<crate::store::ToolRecord>> {
        Some(tools.iter().map(crate::store::ToolRecord::from).collect())
    }

    fn tool(name: &str, source: &str, error: Option<&str>) -> ToolStatus {
        ToolStatus {
            name: name.into(),
            source: source.into(),
            ready: error.is_none(),
            last_error: error.map(str::to_string),
            note: None,
        }
    }

    #[test]
    fn tools_ready_says_what_cannot_be_called_and_why() {
        let ok = [
            tool("skip", "builtin", None),
            tool("open_ticket", "http", None),
            tool("grafana__query", "mcp:grafana", None),
        ];
        let c = condition(&ok);
        assert_eq!(
            (c.status, c.reason, c.message.as_str()),
            (Some(true), "AllReady", "3 tool(s) ready")
        );

        let mcp_down = [
            tool("skip", "builtin", None),
            tool(
                "grafana__*",
                "mcp:grafana",
                Some("cannot reach http://g/mcp: connection refused"),
            ),
            tool("tracker__*", "mcp:tracker", Some("timed out")),
            tool("tracker__create", "mcp:tracker", Some("timed out")),
        ];
        let c = condition(&mcp_down);
        assert_eq!((c.status, c.reason), (Some(false), "McpUnreachable"));
        assert_eq!(
            c.message,
            "3 of 4 tool(s) unavailable: MCP server grafana unreachable: cannot reach http://g/mcp: connection refused; MCP server tracker unreachable: timed out"
        );

        // The worker's own words name the server: said once.
        let worded = [tool(
            "tracker__*",
            "mcp:tracker",
            Some("MCP server tracker is unavailable: unreachable at http://t/mcp: connection refused"),
        )];
        assert_eq!(
            condition(&worded).message,
            "1 of 1 tool(s) unavailable: MCP server tracker is unavailable: unreachable at http://t/mcp: connection refused"
        );

        // One server answers but one of its tools cannot be offered: not the server's fault.
        let one_bad = [
            tool("gh__search", "mcp:gh", None),
            tool(
                "gh__bad",
                "mcp:gh",
                Some("its input schema is not an object"),
            ),
        ];
        let c = condition(&one_bad);
        assert_eq!(c.reason, "ToolUnavailable");
        assert!(c
            .message
            .ends_with("tool gh__bad unavailable: its input schema is not an object"));

        // The errors as the worker's Secrets word them, mounted or given.
        use crate::worker::tools::secrets::Secrets;
        let mounted = Secrets::Dir("/nonexistent".into())
            .get("tracker-token")
            .unwrap_err();
        let given = Secrets::from_map(Default::default())
            .get("tracker-token")
            .unwrap_err();
        let secret = [
            tool("open_ticket", "http", Some(&mounted)),
            tool("get_ticket", "http", Some(&format!("headers: {given}"))),
            tool("grafana__*", "mcp:grafana", Some("connection refused")),
            tool("ping", "http", Some("answered 503")),
        ];
        let c = condition(&secret);
        assert_eq!(c.reason, "SecretUnavailable", "the cause first");
        assert_eq!(
            c.message,
            "4 of 4 tool(s) unavailable: Secret tracker-token is not available to the worker (tools open_ticket, get_ticket); MCP server grafana unreachable: connection refused; tool ping unavailable: answered 503"
        );

        let c = condition(&[tool("ping", "http", Some("x")), tool("pong", "http", None)]);
        assert_eq!(c.reason, "ToolUnavailable");
        assert_eq!(
            c.message,
            "1 of 2 tool(s) unavailable: tool ping unavailable: x"
        );
        let c = tools_condition(None);
        assert_eq!((c.status, c.reason), (None, "NotReported"));

        let mut no_error = tool("ping", "http", None);
        no_error.ready = false;
        assert!(condition(&[no_error])
            .message
            .ends_with("tool ping unavailable: not ready"));

        let many: Vec<ToolStatus> = (0..100)
            .map(|i| tool(&format!("t{i}"), "http", Some(&"e".repeat(300))))
            .collect();
        assert!(condition(&many).message.chars().count() <= MAX_MESSAGE);
    }

    #[test]
    fn tools_over_a_bound_of_their_limits_are_over_limit() {
        let refused = [
            tool("skip", "builtin", None),
            tool(
                "endless__*",
                "mcp:endless",
                Some("MCP server endless lists more than 20 pages of tools (limits.maxListPages); none of its tools are offered"),
            ),
            tool("grafana__*", "mcp:grafana", Some("connection refused")),
        ];
        let c = condition(&refused);
        assert_eq!((c.status, c.reason), (Some(false), "OverLimit"));
        assert_eq!(
            c.message,
            "2 of 3 tool(s) unavailable: MCP server endless lists more than 20 pages of tools (limits.maxListPages); none of its tools are offered; MCP server grafana unreachable: connection refused"
        );
        let cut = [
            tool("gh__search", "mcp:gh", None),
            tool(
                "gh__*",
                "mcp:gh",
                Some("MCP server gh: 36 more of its tools are not offered: at most 64 are (limits.maxTools); name the ones to offer in its tools allowlist"),
            ),
        ];
        let c = condition(&cut);
        assert_eq!(c.reason, "OverLimit");
        assert!(
            c.message
                .contains("tool gh__* unavailable: MCP server gh: 36 more"),
            "{}",
            c.message
        );
    }

    #[test]
    fn status_tools_are_bounded_and_keep_what_is_not_ready() {
        let mut reported: Vec<ToolStatus> = (0..1000)
            .map(|i| tool(&format!("t{i}"), "mcp:big", None))
            .collect();
        reported[700] = tool("t700", "mcp:big", Some("gone"));
        let shown = shown_tools(&reported);
        assert_eq!(shown.len(), MAX_SHOWN_TOOLS);
        assert!(shown.iter().any(|t| t.name == "t700" && !t.ready));
        assert_eq!(shown[0].name, "t0", "in the reported order");
    }

    #[test]
    fn status_tools_are_what_the_worker_reported() {
        let mut o = AgentObservation::default();
        let s = data_status(false, Some(1), 1, None, None, None, &o, &[], t0(), refs);
        assert!(s.tools.is_empty(), "not reported yet: {s:?}");
        let c = find(&s.conditions, TOOLS_READY).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("Unknown", "NotReported")
        );

        let long = "x".repeat(2000);
        o.tools = recorded(vec![
            tool("skip", "builtin", None),
            tool("grafana__*", "mcp:grafana", Some(&long)),
            tool("skip", "builtin", Some("a second entry of one name")),
        ]);
        let s = data_status(false, Some(1), 1, None, None, None, &o, &[], t0(), refs);
        assert_eq!(
            s.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            ["skip", "grafana__*"],
            "each name once (status.tools is a map keyed by name)"
        );
        assert_eq!(
            s.tools[1].last_error.as_ref().unwrap().chars().count(),
            MAX_TOOL_ERROR
        );
        let c = find(&s.conditions, TOOLS_READY).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "McpUnreachable")
        );
        assert_eq!(c.last_transition_time, Time(t0()));
        assert_eq!(c.observed_generation, None);
    }

    #[test]
    fn tools_ready_keeps_its_transition_time_until_it_flips() {
        let later = Timestamp::from_second(1_795_000_100).unwrap();
        let much_later = Timestamp::from_second(1_795_000_200).unwrap();
        let mut o = AgentObservation {
            tools: recorded(vec![tool("grafana__*", "mcp:grafana", Some("refused"))]),
            ..AgentObservation::default()
        };
        let first = data_status(false, Some(1), 1, None, None, None, &o, &[], t0(), refs);
        let again = data_status(
            false,
            Some(1),
            1,
            None,
            None,
            None,
            &o,
            &first.conditions,
            later,
            refs,
        );
        assert_eq!(first, again, "the same on every pass: nothing to write");

        o.tools = recorded(vec![tool("grafana__*", "mcp:grafana", Some("timed out"))]);
        let other_error = data_status(
            false,
            Some(1),
            1,
            None,
            None,
            None,
            &o,
            &again.conditions,
            later,
            refs,
        );
        let c = find(&other_error.conditions, TOOLS_READY).unwrap();
        assert_eq!(c.last_transition_time, Time(t0()), "still False");
        assert!(c.message.contains("timed out"));

        o.tools = recorded(vec![tool("grafana__query", "mcp:grafana", None)]);
        let up = data_status(
            false,
            Some(1),
            1,
            None,
            None,
            None,
            &o,
            &other_error.conditions,
            much_later,
            refs,
        );
        let c = find(&up.conditions, TOOLS_READY).unwrap();
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "AllReady"));
        assert_eq!(c.last_transition_time, Time(much_later), "flipped");
    }
}

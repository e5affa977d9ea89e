//! What a request says besides the conversation, laid out so that providers can cache it:
//! the system prompt is stable (identity, instructions, how the agent works: nothing that
//! changes between cycles), and the fresh context (the time, the spaces and their members,
//! memories, goals, plans) comes after the conversation, rebuilt for every cycle. Neither is
//! ever stored in consciousness (seed 002: fresh context is never copied into history).

use std::collections::BTreeMap;

use crate::crd::{Agent, PlanSpec};
use crate::model::format::{self, memory_line, space_line, InboxLine};
use crate::plans::{self, Source};
use crate::store::MemberKind;
use crate::store::{EventKind, Goal, InboxEvent, Memories, SpaceRecord};

/// What the fresh context is built from.
pub struct PromptInput<'a> {
    /// The plans of its spec the cycle is told of (none for a conversation with a memory
    /// of its own: they are the agent's).
    pub spec_plans: &'a [PlanSpec],
    /// The agent's spaces: (name, record) — `None` when the data plane does not know it.
    pub spaces: &'a [(String, Option<SpaceRecord>)],
    /// Memories.
    pub memories: &'a Memories,
    /// Goals.
    pub goals: &'a [Goal],
    /// Plans the agent made itself.
    pub plans: &'a [PlanSpec],
    /// Per plan id, the last due time handled.
    pub plan_marks: &'a BTreeMap<String, i64>,
    /// Current time (ms since the epoch).
    pub now_ms: i64,
}

/// The instruction every agent gets about inbox lines and tools (seeds 000, 004): short, since
/// every request carries it and a small model reads the longest paragraph as the task (issue
/// 44: a paragraph on when to skip made a 1.5B model skip its only human).
const HOW_YOU_WORK: &str = "\
How you work:
- Events arrive as one message, a line each: [Space] Sender: \"text\". Lines from outside your spaces start with (service), (plan) or (tool result): answer them in the space they concern.
- The last message, headed [CONTEXT …], is from nobody: the time, your spaces, what you keep.
- Only send_message reaches people; text outside tool calls is private.
- You remember this conversation across cycles.";

/// The line of an agent that shares a space with other agents, and only of such an agent:
/// when to stay silent.
const SHARED: &str = "- Other agents share your spaces. [Space] Sender (to NAME): \"text\" is for the agent NAME; when a message is for one of them (it names them, or they are better suited), call skip and send nothing.";

/// The system prompt: the same for every cycle of an agent until its manifest changes (or
/// whether it `shares_spaces` with other agents does), so that it stays in the providers'
/// prompt caches.
pub fn system_prompt(agent: &Agent, shares_spaces: bool) -> String {
    let name = agent.metadata.name.as_deref().unwrap_or("agent");
    let ns = agent.metadata.namespace.as_deref().unwrap_or("default");
    let mut out = format!("You are {name}, an agent of namespace {ns}.\n");
    if !agent.spec.instructions.trim().is_empty() {
        out.push('\n');
        out.push_str(agent.spec.instructions.trim());
        out.push('\n');
    }
    out.push('\n');
    out.push_str(HOW_YOU_WORK);
    out.push('\n');
    if shares_spaces {
        out.push_str(SHARED);
        out.push('\n');
    }
    out
}

/// The fresh context of a cycle (the last message of its requests, never stored).
pub fn context(input: &PromptInput<'_>) -> String {
    let mut out = format!(
        "{}\nCurrent time: {}\n",
        format::CONTEXT_HEADING,
        plans::rfc3339(input.now_ms)
    );
    out.push_str("\nSpaces you are a member of:\n");
    if input.spaces.is_empty() {
        out.push_str("(none)\n");
    }
    for (space, record) in input.spaces {
        match record {
            Some(r) => {
                let agents: Vec<&str> = r.agents().collect();
                let humans: Vec<&str> = r
                    .members
                    .iter()
                    .filter(|m| m.kind == MemberKind::Human)
                    .map(|m| m.name.as_str())
                    .collect();
                out.push_str(&space_line(&r.display_name, space, &agents, &humans));
            }
            None => out.push_str(&format!("- space \"{space}\" (not set up yet)")),
        }
        out.push('\n');
    }
    if !input.memories.is_empty() {
        out.push_str("\nMemories:\n");
        for (k, v) in input.memories {
            out.push_str(&memory_line(k, v));
            out.push('\n');
        }
    }
    if !input.goals.is_empty() {
        out.push_str("\nGoals:\n");
        for g in input.goals {
            out.push_str(&format!("- [{}] {}: {}\n", g.status, g.id, g.description));
        }
    }
    let all_plans = input
        .spec_plans
        .iter()
        .map(|p| (Source::Spec, p))
        .chain(input.plans.iter().map(|p| (Source::Agent, p)));
    let mut first = true;
    for (source, p) in all_plans {
        if first {
            out.push_str("\nPlans (each comes back to you as an inbox event when due):\n");
            first = false;
        }
        let mark = input
            .plan_marks
            .get(&plans::plan_id(source, &p.name))
            .copied();
        out.push_str(&plans::describe(p, source, mark, input.now_ms));
        out.push('\n');
    }
    out
}

/// The display name of a space the agent knows, else its name.
pub fn display<'a>(spaces: &'a [(String, Option<SpaceRecord>)], space: &'a str) -> &'a str {
    spaces
        .iter()
        .find(|(n, _)| n == space)
        .and_then(|(_, r)| r.as_ref())
        .map_or(space, |r| r.display_name.as_str())
}

/// One inbox event as a line (with its data, for events that are not space messages).
pub fn event_line(spaces: &[(String, Option<SpaceRecord>)], e: &InboxEvent) -> String {
    let line = inbox_line(spaces, e);
    match e
        .data
        .as_ref()
        .filter(|_| e.kind != EventKind::SpaceMessage)
    {
        Some(data) => format!("{} {data}", line.render()),
        None => line.render(),
    }
}

/// The parts of an event's line.
fn inbox_line(spaces: &[(String, Option<SpaceRecord>)], e: &InboxEvent) -> InboxLine {
    let source = match (&e.space, e.kind) {
        (Some(s), _) => format::Source::Space(display(spaces, s).to_string()),
        (None, EventKind::Plan) => format::Source::Plan,
        (None, EventKind::ToolResult) => format::Source::ToolResult,
        (None, EventKind::Service | EventKind::SpaceMessage) => format::Source::Service,
    };
    InboxLine {
        source,
        sender: e
            .sender
            .as_ref()
            .map_or_else(|| "system".to_string(), |s| s.name.clone()),
        mention: e.mention().map(str::to_string),
        text: e.text.clone().unwrap_or_default(),
    }
}

/// The user message of a batch of events.
pub fn inbox_message(spaces: &[(String, Option<SpaceRecord>)], events: &[InboxEvent]) -> String {
    events
        .iter()
        .map(|e| event_line(spaces, e))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The transient mid-cycle preview of waiting events (seed 000, strategy 2).
pub fn preview_message(
    spaces: &[(String, Option<SpaceRecord>)],
    waiting: &[InboxEvent],
    total: u64,
) -> String {
    let lines: Vec<InboxLine> = waiting.iter().map(|e| inbox_line(spaces, e)).collect();
    format::preview(&lines, total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::AgentKey;
    use crate::store::{CallId, CallResult, NewCall};

    #[test]
    fn the_system_prompt_says_only_what_the_agents_situation_needs() {
        let agent: Agent = serde_yaml::from_str(
            "apiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {name: bot, namespace: ns}\nspec: {model: {provider: scripted, name: bot}, spaces: [desk]}",
        )
        .unwrap();
        let lone = system_prompt(&agent, false);
        assert!(
            !lone.contains("skip") && !lone.contains("set_memories"),
            "{lone}"
        );
        let full = system_prompt(&agent, true);
        assert!(full.contains(SHARED), "{full}");
        assert!(
            full.starts_with(&lone[..lone.len() - 1]),
            "one stable prefix"
        );
    }

    #[test]
    fn the_context_lists_what_the_agent_keeps() {
        // The scripted model (and anyone) still reads the context's lists.
        let memories: Memories = [("dinner".to_string(), "at 8".to_string())].into();
        let context = context(&PromptInput {
            spec_plans: &[],
            spaces: &[],
            memories: &memories,
            goals: &[],
            plans: &[],
            plan_marks: &BTreeMap::new(),
            now_ms: 0,
        });
        assert_eq!(
            format::parse_memories(&context),
            vec![("dinner".to_string(), "at 8".to_string())]
        );
    }

    #[test]
    fn an_async_result_is_one_line_naming_the_tool_and_the_call() {
        let id = CallId::new(&AgentKey::new("ops", "bot")).unwrap();
        let record = NewCall::new(&AgentKey::new("ops", "bot"), "create_ticket", 0)
            .unwrap()
            .record;
        let multiline = serde_json::json!({"ticket": "T-1", "note": "a\nb"});
        let event = record.event(&id, &CallResult::Result(multiline));
        let line = event_line(&[], &event);
        assert_eq!(line.lines().count(), 1, "{line}");
        assert!(
            line.starts_with(&format!(
                "(tool result) create_ticket: \"call {id} finished\" {{"
            )),
            "{line}"
        );
        assert!(line.contains(r#""ticket":"T-1""#), "{line}");
        let parsed = format::parse_inbox(&line);
        assert_eq!(parsed.len(), 1);
        assert_eq!(parsed[0].source, format::Source::ToolResult);
        assert_eq!(parsed[0].sender, "create_ticket");
        let failed = event_line(&[], &record.event(&id, &CallResult::Error("quota".into())));
        assert!(
            failed.contains(&format!("\"call {id} failed\""))
                && failed.contains(r#""error":"quota""#),
            "{failed}"
        );
    }
}

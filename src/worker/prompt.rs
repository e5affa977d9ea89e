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
    /// The agent's manifest.
    pub agent: &'a Agent,
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
    /// The events the cycle woke for (its inbox message).
    pub events: &'a [InboxEvent],
}

/// The instruction every agent gets about inbox lines, tools and `skip` (seeds 000, 004).
const HOW_YOU_WORK: &str = "\
How you work:
- You wake when events arrive in your inbox; they come as one message, one line each: [Space] Sender: \"text\". A line [Space] Sender (to NAME): \"text\" is addressed to the agent NAME: if NAME is you, answer it. Events from outside your spaces start with (service), (plan) or (tool result); answer those in the space they concern.
- The last message of every request, headed [CONTEXT …], is not from anyone: it is what was true as this cycle began (the time, your spaces and their members, your memories, goals and plans).
- Everything you want others to see goes through send_message (to a space you are a member of). Text you write outside tool calls is private reasoning: nobody sees it.
- You remember this conversation across cycles. Use set_memories and set_goals for what must outlive it, and set_plans to get back to something at a later time.
- In spaces with several agents and humans you will receive many messages that are not directed at you and are better handled by someone else. If after reading the inbox events you determine that the message is not addressed to you (by name, role, or context), another agent or human is better suited to respond, or you have nothing useful to contribute, call skip() immediately. Do NOT send any messages first.";

/// The system prompt: the same for every cycle of an agent until its manifest changes, so
/// that it stays in the providers' prompt caches.
pub fn system_prompt(agent: &Agent) -> String {
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
    out
}

/// The fresh context of a cycle (the last message of its requests, never stored).
pub fn context(input: &PromptInput<'_>) -> String {
    let agent = input.agent;
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
    let me = agent.metadata.name.as_deref().unwrap_or_default();
    out.push_str(&woke_for(me, input.spaces, input.events));
    out
}

/// The context's last line: what the cycle woke for and where it is. Small real models answer
/// the last message they read; with the context last and no such line they answered the
/// context ("no relevant messages") instead of the human (docs/real-models.md).
fn woke_for(me: &str, spaces: &[(String, Option<SpaceRecord>)], events: &[InboxEvent]) -> String {
    // (what, where from) → how many, in the order they came.
    let mut kinds: Vec<((&str, String), usize)> = Vec::new();
    for e in events {
        let kind = match (e.kind, &e.space) {
            (EventKind::SpaceMessage, Some(space)) => {
                let sender = e.sender.as_ref().map_or("someone", |s| s.name.as_str());
                let to = match e.mention() {
                    Some(m) if m == me => " to you".to_string(),
                    Some(m) => format!(" to {m}"),
                    None => String::new(),
                };
                (
                    "message",
                    format!(" from {sender} in {}{to}", display(spaces, space)),
                )
            }
            (EventKind::Plan, _) => ("plan reminder", String::new()),
            (EventKind::ToolResult, _) => ("tool result", String::new()),
            _ => ("service event", String::new()),
        };
        match kinds.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => kinds.push((kind, 1)),
        }
    }
    if kinds.is_empty() {
        return String::new();
    }
    let list: Vec<String> = kinds
        .iter()
        .map(|((what, from), n)| match n {
            1 => format!("1 {what}{from}"),
            n => format!("{n} {what}s{from}"),
        })
        .collect();
    format!(
        "\nThis cycle you woke for {}: the inbox message above, after your last turn. \
         Reply with send_message where a reply is due; call skip if none is.\n",
        list.join(", ")
    )
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

    fn message(space: &str, sender: &str) -> InboxEvent {
        InboxEvent {
            id: format!("{space}-{sender}"),
            kind: EventKind::SpaceMessage,
            time_ms: 0,
            urgent: false,
            space: Some(space.into()),
            sender: Some(crate::store::Sender {
                groups: Vec::new(),
                id: sender.to_lowercase(),
                name: sender.into(),
                kind: Some(MemberKind::Human),
            }),
            text: Some("hi".into()),
            data: None,
            depth: 0,
        }
    }

    #[test]
    fn the_context_ends_with_what_the_cycle_woke_for() {
        let mut plan = message("desk", "Husam");
        plan.kind = EventKind::Plan;
        plan.space = None;
        let mut to_bob = message("desk", "Lena");
        to_bob.data = Some(serde_json::json!({"mention": "bob"}));
        let events = [
            message("desk", "Husam"),
            message("desk", "Lena"),
            message("desk", "Husam"),
            to_bob,
            plan,
        ];
        assert_eq!(
            woke_for("alice", &[], &events),
            "\nThis cycle you woke for 2 messages from Husam in desk, 1 message from Lena in \
             desk, 1 message from Lena in desk to bob, 1 plan reminder: the inbox message above, \
             after your last turn. Reply with send_message where a reply is due; call skip if \
             none is.\n"
        );
        assert!(woke_for("bob", &[], &events).contains("from Lena in desk to you,"));
        assert_eq!(woke_for("alice", &[], &[]), "");
        // The scripted model (and anyone) still reads the context's lists.
        let agent: Agent = serde_yaml::from_str(
            "apiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {name: bot, namespace: ns}\nspec: {model: {provider: scripted, name: bot}, spaces: [desk]}",
        )
        .unwrap();
        let memories: Memories = [("dinner".to_string(), "at 8".to_string())].into();
        let context = context(&PromptInput {
            spec_plans: &[],
            agent: &agent,
            spaces: &[],
            memories: &memories,
            goals: &[],
            plans: &[],
            plan_marks: &BTreeMap::new(),
            now_ms: 0,
            events: &events,
        });
        assert!(context.ends_with("call skip if none is.\n"), "{context}");
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

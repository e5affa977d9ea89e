//! What a cycle offers its model, by the agent's situation (issue 44): every request carries
//! the system prompt and each schema it offers, and a small model reads each one as something
//! to do. Qwen2.5-Coder 1.5B called `enter_space` and `read_messages` before answering the
//! only human of its only space, and filled `space`, `mention` and `wait` where none applied.
//! So, from the tools the spec enables:
//! - `enter_space` only to an agent of more than one space (there is nowhere to go);
//! - `read_messages` only to an agent of more than one space, or whose conversation was
//!   compacted, or whose phases name it: an agent of one space wakes for every message of it,
//!   so its conversation already holds them, unless a compaction summed them up;
//! - the memory, goal and plan tools only where the agent remembers (as before: a
//!   conversation with a memory of its own cannot call them either), and `delete_memories`
//!   only where a phase names it (`set_memories` forgets a key given an empty fact);
//! - `send_message` without `space` for an agent of one space, and without `mention` and
//!   `wait` when no other agent shares its spaces (the tool still takes them);
//! - and the system prompt's line on other agents only where one shares its spaces.
//!
//! A built-in that is not offered still works when a model calls it (it may have read of it
//! in its conversation). All of it is stable between cycles until the agent's spaces, their
//! agents, its spec or a compaction change it, so providers' prompt caches keep it.

use crate::crd::{Agent, BuiltinTool};
use crate::model::ToolSpec;
use crate::store::SpaceRecord;
use crate::worker::prompt;
use crate::worker::tools::schemas::fit_to;

use super::Agentlet;

/// The built-ins, system prompt and tool specs of a cycle.
pub(super) struct Offer {
    /// The built-ins the cycle may call: a model that calls one it was not offered (it read
    /// of it in its conversation) is served all the same.
    pub builtin: Vec<BuiltinTool>,
    /// The system prompt and the specs offered.
    pub system: String,
    pub tools: Vec<ToolSpec>,
}

/// What a cycle of `agentlet` offers, in its `spaces`, with a conversation that `remembers`
/// across cycles and that was `compacted` or not.
pub(super) fn offer(
    agentlet: &Agentlet,
    spaces: &[(String, Option<SpaceRecord>)],
    remembers: bool,
    compacted: bool,
) -> Offer {
    let agent = &agentlet.agent;
    let one_space = spaces.len() <= 1;
    let builtin: Vec<BuiltinTool> = agentlet
        .enabled()
        .iter()
        .copied()
        .filter(|t| remembers || !t.long_memory())
        .collect();
    let shown: Vec<BuiltinTool> = builtin
        .iter()
        .copied()
        .filter(|t| offered(*t, agent, one_space, compacted))
        .collect();
    let me = agentlet.key.name.as_str();
    let shares_spaces = spaces
        .iter()
        .filter_map(|(_, r)| r.as_ref())
        .any(|r| r.agents().any(|a| a != me));
    let mut tools = agentlet.toolbox().specs_for(&shown);
    fit_to(&mut tools, one_space, shares_spaces);
    Offer {
        builtin,
        system: prompt::system_prompt(agent, shares_spaces),
        tools,
    }
}

/// Whether a built-in the cycle has is offered in this situation.
fn offered(tool: BuiltinTool, agent: &Agent, one_space: bool, compacted: bool) -> bool {
    let named_by_a_phase = || {
        agent.spec.cycle.phases.iter().any(|p| {
            p.active_tools
                .as_ref()
                .is_some_and(|names| names.iter().any(|n| n == tool.name()))
        })
    };
    match tool {
        BuiltinTool::EnterSpace => !one_space || named_by_a_phase(),
        BuiltinTool::ReadMessages => !one_space || compacted || named_by_a_phase(),
        // `set_memories` forgets a key given an empty fact.
        BuiltinTool::DeleteMemories => named_by_a_phase(),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(extra: &str) -> Agent {
        serde_yaml::from_str(&format!(
            "apiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {{name: bot, namespace: ns}}\nspec: {{model: {{provider: scripted, name: bot}}, spaces: [desk]{extra}}}"
        ))
        .unwrap()
    }

    #[test]
    fn navigation_is_offered_where_there_is_somewhere_to_go() {
        let plain = agent("");
        let offered_in = |t, one, compacted| offered(t, &plain, one, compacted);
        assert!(!offered_in(BuiltinTool::EnterSpace, true, false));
        assert!(!offered_in(BuiltinTool::ReadMessages, true, false));
        assert!(offered_in(BuiltinTool::EnterSpace, false, false));
        assert!(offered_in(BuiltinTool::ReadMessages, false, false));
        // After a compaction the messages it summed up are there to read again.
        assert!(offered_in(BuiltinTool::ReadMessages, true, true));
        assert!(!offered_in(BuiltinTool::EnterSpace, true, true));
        assert!(offered_in(BuiltinTool::SendMessage, true, false));
        assert!(offered_in(BuiltinTool::Skip, true, false));
        assert!(!offered_in(BuiltinTool::DeleteMemories, false, true));
        // A phase that names a tool gets it, one space or not.
        let phased = agent(
            ", cycle: {phases: [{toStep: 0, activeTools: [read_messages], toolChoice: required}]}",
        );
        assert!(offered(BuiltinTool::ReadMessages, &phased, true, false));
        assert!(!offered(BuiltinTool::EnterSpace, &phased, true, false));
    }
}

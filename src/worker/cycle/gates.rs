//! Tool phase gates (seed 000 "Tool Phase Gates"): which tools a step offers and whether the
//! model must call one, and what a call of a tool its phase does not offer gets instead of
//! running. Pure: the spec, the step and the tools in, the decision out.

use crate::crd::{CycleSpec, PhaseToolChoice};
use crate::model::{ToolChoice, ToolSpec};

/// What step `step` offers the model, from the agent's enabled `tools` (in their order): the
/// tools of the phase that applies and its tool choice; every tool and `auto` outside any
/// phase.
pub fn offer(cycle: &CycleSpec, step: u32, tools: &[ToolSpec]) -> (Vec<ToolSpec>, ToolChoice) {
    let Some(phase) = cycle.phase(step) else {
        return (tools.to_vec(), ToolChoice::Auto);
    };
    let offered = tools
        .iter()
        .filter(|t| {
            phase
                .active_tools
                .as_ref()
                .is_none_or(|active| active.contains(&t.name))
        })
        .cloned()
        .collect();
    (offered, phase.tool_choice.into())
}

/// The error result of a call of `name` when the step's phase gates it: the agent has the
/// tool but the step did not offer it. `None` when the call may run (a tool the agent does
/// not have is the tool runner's to refuse).
pub fn refusal(name: &str, offered: &[ToolSpec], tools: &[ToolSpec]) -> Option<String> {
    let has = |list: &[ToolSpec]| list.iter().any(|t| t.name == name);
    if has(offered) || !has(tools) {
        return None;
    }
    let available: Vec<&str> = offered.iter().map(|t| t.name.as_str()).collect();
    Some(format!(
        "tool {name:?} is not available at this step; available now: {}",
        available.join(", ")
    ))
}

impl From<PhaseToolChoice> for ToolChoice {
    fn from(choice: PhaseToolChoice) -> Self {
        match choice {
            PhaseToolChoice::Auto => ToolChoice::Auto,
            PhaseToolChoice::Required => ToolChoice::Required,
            PhaseToolChoice::None => ToolChoice::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::BuiltinTool;
    use crate::worker::tools::specs;

    fn cycle(phases: &str) -> CycleSpec {
        serde_yaml::from_str(&format!("phases: {phases}")).unwrap()
    }

    fn names(tools: &[ToolSpec]) -> Vec<&str> {
        tools.iter().map(|t| t.name.as_str()).collect()
    }

    /// Observe (steps 0–1, reading, required) → act (2–6, everything) → respond (7+).
    fn seed_phases() -> CycleSpec {
        cycle(
            "[{fromStep: 0, toStep: 1, activeTools: [read_messages, enter_space], toolChoice: required},
              {fromStep: 7, activeTools: [send_message, enter_space, set_memories, set_goals]}]",
        )
    }

    #[test]
    fn without_phases_every_step_offers_every_tool() {
        let tools = specs(&BuiltinTool::all());
        for step in [0, 1, 19] {
            let (offered, choice) = offer(&cycle("[]"), step, &tools);
            assert_eq!(offered, tools);
            assert_eq!(choice, ToolChoice::Auto);
        }
    }

    #[test]
    fn the_seeds_observe_think_respond_phases() {
        let tools = specs(&BuiltinTool::all());
        let phases = seed_phases();
        for step in [0, 1] {
            let (offered, choice) = offer(&phases, step, &tools);
            assert_eq!(
                names(&offered),
                ["enter_space", "read_messages"],
                "in the tools' order, not the phase's"
            );
            assert_eq!(choice, ToolChoice::Required);
        }
        for step in 2..=6 {
            assert_eq!(
                offer(&phases, step, &tools),
                (tools.clone(), ToolChoice::Auto)
            );
        }
        for step in [7, 50] {
            let (offered, choice) = offer(&phases, step, &tools);
            assert_eq!(
                names(&offered),
                ["send_message", "enter_space", "set_memories", "set_goals"]
            );
            assert_eq!(choice, ToolChoice::Auto);
        }
    }

    #[test]
    fn a_phase_offers_only_enabled_tools_and_the_first_match_wins() {
        let tools = specs(&[BuiltinTool::SendMessage, BuiltinTool::Skip]);
        let phases = cycle(
            "[{fromStep: 0, toStep: 3, activeTools: [skip, read_messages], toolChoice: none},
              {fromStep: 2, activeTools: [send_message]}]",
        );
        let (offered, choice) = offer(&phases, 2, &tools);
        assert_eq!(names(&offered), ["skip"]);
        assert_eq!(choice, ToolChoice::None);
        let all = cycle("[{fromStep: 1, toolChoice: required}]");
        assert_eq!(offer(&all, 0, &tools), (tools.clone(), ToolChoice::Auto));
        assert_eq!(
            offer(&all, 1, &tools),
            (tools.clone(), ToolChoice::Required)
        );
    }

    #[test]
    fn only_a_tool_the_agent_has_but_the_step_does_not_offer_is_refused() {
        let tools = specs(&[BuiltinTool::SendMessage, BuiltinTool::ReadMessages]);
        let (offered, _) = offer(&seed_phases(), 0, &tools);
        assert_eq!(
            refusal("send_message", &offered, &tools).as_deref(),
            Some(
                "tool \"send_message\" is not available at this step; available now: read_messages"
            )
        );
        assert_eq!(refusal("read_messages", &offered, &tools), None);
        assert_eq!(
            refusal("set_goals", &offered, &tools),
            None,
            "not the agent's: the tool runner says so"
        );
        assert_eq!(refusal("send_message", &tools, &tools), None);
    }
}

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ModelSpec, ToolsSpec};
use crate::rehearsals::Criteria;

/// How a change of the agent goes live.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSpec {
    /// Rehearse a change of the model, instructions or tools on the agent's own last
    /// recorded cycles first (a Rehearsal the operator makes, `NAME-REVISION`); the worker
    /// keeps the last revision that passed until this one passes. A failed rehearsal leaves
    /// the agent as it was (the `Rollout` condition and an event say why); the annotation
    /// `agentfleet.dev/rollout-override: REVISION` pushes that revision through. Other
    /// fields (spaces, cycle limits, budget…) go live at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rehearse: Option<RehearseSpec>,
}

/// How a rehearsal runs: on how many cycles, against what, within how long (a
/// Rehearsal's, and the one a held change must pass).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RehearseSpec {
    /// How many of the agent's last recorded cycles are rehearsed.
    #[serde(default = "default_cycles")]
    #[schemars(range(min = 1, max = 100))]
    pub cycles: u32,

    /// What the rehearsal must show to pass.
    #[serde(default)]
    pub criteria: Criteria,

    /// The most the rehearsal may take, in seconds; past it, it fails.
    #[serde(default = "default_timeout_seconds")]
    #[schemars(range(min = 10, max = 86400))]
    pub timeout_seconds: u32,
}

fn default_cycles() -> u32 {
    crate::rehearsals::DEFAULT_CYCLES
}

fn default_timeout_seconds() -> u32 {
    crate::rehearsals::DEFAULT_TIMEOUT_SECONDS
}

/// What a rollout judges of an agent: its model, instructions and tools.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutParts {
    /// The model.
    pub model: ModelSpec,
    /// The instructions.
    #[serde(default)]
    pub instructions: String,
    /// The tools.
    #[serde(default)]
    pub tools: ToolsSpec,
}

/// Where a rehearsed rollout stands (`spec.rollout.rehearse`).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// The revision of the model, instructions and tools the worker runs (a hash of them).
    #[serde(default)]
    pub revision: String,

    /// The model, instructions and tools of that revision: what the worker keeps running
    /// while a change is held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<RolloutParts>,

    /// The revision the spec asks for, while it is held (rehearsing, or failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate: Option<String>,

    /// The Rehearsal that judges it (or, once it runs, judged it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rehearsal: Option<String>,

    /// Whether the revision that runs was pushed through without a passed rehearsal
    /// (`agentfleet.dev/rollout-override`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub overridden: bool,
}

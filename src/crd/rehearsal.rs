use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ModelSpec, ToolsSpec};
use crate::rehearsals::{CycleResult, Summary};

/// A change of an Agent (its model, instructions or tools) tried on the agent's own last
/// recorded cycles before it goes live: each cycle run again by the candidate from the
/// consciousness it began with and the events it woke for, its tools answered from the
/// record, nothing posted, remembered or billed to the agent. The status compares each
/// cycle (replied or not and where, tool calls, steps, tokens) and says whether the criteria
/// hold. It runs once per generation, as a Job of the worker's image.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "agentfleet.dev",
    version = "v1alpha1",
    kind = "Rehearsal",
    namespaced,
    status = "RehearsalStatus",
    shortname = "rh",
    category = "agentfleet",
    printcolumn = r#"{"name":"Agent","type":"string","jsonPath":".spec.agent"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Replies","type":"number","jsonPath":".status.summary.replyAgreement"}"#,
    printcolumn = r#"{"name":"Tools","type":"number","jsonPath":".status.summary.toolAgreement"}"#,
    printcolumn = r#"{"name":"Cycles","type":"integer","jsonPath":".status.summary.rehearsed"}"#,
    printcolumn = r#"{"name":"Verdict","type":"string","priority":1,"jsonPath":".status.summary.verdict"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RehearsalSpec {
    /// The Agent (in this namespace) whose recorded cycles are rehearsed.
    #[schemars(length(min = 1, max = 63))]
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub agent: String,

    /// The change: what the candidate has instead of the agent's own. What it leaves out is
    /// the agent's.
    #[serde(default)]
    pub candidate: Candidate,

    /// How many cycles, against what criteria, within how long.
    #[serde(flatten)]
    pub run: super::RehearseSpec,
}

/// What a candidate changes of an agent.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Candidate {
    /// The model it thinks with instead (as `spec.model`); its key is the Secret it names,
    /// else the agent's, but only when it has the agent's provider and `baseUrl` (a key
    /// never goes to another endpoint than its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelSpec>,

    /// Its instructions instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 262144))]
    pub instructions: Option<String>,

    /// Its tools instead (as `spec.tools`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<ToolsSpec>,
}

impl Candidate {
    /// `spec` with this candidate's changes.
    pub fn apply(&self, spec: &mut super::AgentSpec) {
        if let Some(model) = &self.model {
            // The agent's key goes only where the agent's model is: a candidate elsewhere
            // names its own Secret (or is called without a key).
            let same_endpoint =
                model.provider == spec.model.provider && model.base_url == spec.model.base_url;
            let key = spec
                .model
                .api_key_secret_ref
                .take()
                .filter(|_| same_endpoint);
            spec.model = model.clone();
            if spec.model.api_key_secret_ref.is_none() {
                spec.model.api_key_secret_ref = key;
            }
        }
        if let Some(instructions) = &self.instructions {
            spec.instructions = instructions.clone();
        }
        if let Some(tools) = &self.tools {
            spec.tools = tools.clone();
        }
    }
}

/// Where a rehearsal is.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RehearsalPhase {
    /// Its Job is not started yet (or cannot be: the conditions say why).
    #[default]
    Pending,
    /// Its Job runs.
    Running,
    /// It ran and its criteria hold.
    Passed,
    /// It ran and a criterion does not hold, or it could not run (the summary or the
    /// `Complete` condition says why).
    Failed,
}

/// What the rehearsal found.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RehearsalStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// `Pending`, `Running`, `Passed` or `Failed`.
    #[serde(default)]
    pub phase: RehearsalPhase,

    /// The Job that runs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,

    /// When its Job was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,

    /// When its result was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,

    /// The figures and the verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<Summary>,

    /// Each recorded cycle, oldest first, and what the candidate did in its place.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cycles: Vec<CycleResult>,

    /// `Complete` (it ran, or cannot) and `Passed` (its criteria hold).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(model: &str) -> crate::crd::AgentSpec {
        serde_yaml::from_str(&format!(
            "{{model: {model}, instructions: Be kind., spaces: [desk]}}"
        ))
        .unwrap()
    }

    fn change(model: &str) -> Candidate {
        Candidate {
            model: Some(serde_yaml::from_str(model).unwrap()),
            ..Candidate::default()
        }
    }

    #[test]
    fn the_agents_key_goes_only_to_the_agents_endpoint() {
        let agent = "{provider: openai, name: a, baseUrl: 'http://llm:8000/v1', apiKeySecretRef: {name: llm}}";
        // Another model at the same endpoint keeps the agent's key.
        let mut same = spec(agent);
        change("{provider: openai, name: b, baseUrl: 'http://llm:8000/v1'}").apply(&mut same);
        assert_eq!(same.model.name, "b");
        assert_eq!(same.model.api_key_secret_ref.as_ref().unwrap().name, "llm");
        // Elsewhere, it has none unless it names its own.
        let mut elsewhere = spec(agent);
        change("{provider: openai, name: b, baseUrl: 'http://evil.example/v1'}")
            .apply(&mut elsewhere);
        assert_eq!(elsewhere.model.api_key_secret_ref, None);
        let mut own = spec(agent);
        change("{provider: anthropic, name: c, apiKeySecretRef: {name: claude}}").apply(&mut own);
        assert_eq!(
            own.model.api_key_secret_ref.as_ref().unwrap().name,
            "claude"
        );
        // What it leaves out is the agent's.
        assert_eq!(own.instructions, "Be kind.");
    }
}

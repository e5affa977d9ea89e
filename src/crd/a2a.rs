//! `spec.a2a`: the agent served to other agent systems over A2A, through the gateway.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Serves the agent over the A2A protocol (v1.0) through the gateway: its agent card at
/// `/a2a/NAMESPACE/NAME/.well-known/agent-card.json`, and messages from the `callers`.
/// Each caller's `contextId` is a conversation of its own with the agent (a space only the
/// caller and the agent are in); each message a task that completes when the agent's cycle
/// commits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct A2aSpec {
    /// Serve the agent (`false` keeps the settings but serves nothing).
    #[serde(default = "enabled")]
    pub enabled: bool,

    /// What the agent does, as its card says (default: "Agent NAME of namespace NAMESPACE").
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 2048))]
    pub description: String,

    /// The skills its card lists (default: one, named after the agent, with its description).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["id"]))]
    pub skills: Vec<A2aSkillSpec>,

    /// Who may send it messages, by gateway token: `human:ID`, `service:ID`, or `*` for any
    /// token. Empty: nobody (the card is still served).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    #[schemars(inner(regex(pattern = r"^(\*|(human|service):[^\s/]{1,253})$")))]
    pub callers: Vec<String>,
}

fn enabled() -> bool {
    true
}

/// A skill as the agent card lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct A2aSkillSpec {
    /// Its id, unique in the card.
    #[schemars(regex(pattern = r"^[A-Za-z0-9][-_.A-Za-z0-9]{0,62}$"))]
    pub id: String,

    /// Its name for people (default: the id).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 200))]
    pub name: String,

    /// What it does.
    #[schemars(length(min = 1, max = 2048))]
    pub description: String,

    /// Keywords.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    #[schemars(inner(length(min = 1, max = 64)))]
    pub tags: Vec<String>,

    /// Example requests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    #[schemars(inner(length(max = 512)))]
    pub examples: Vec<String>,
}

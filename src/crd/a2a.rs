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

    /// Who may send it messages, by gateway token: `human:ID` (a person's id, as a Space
    /// member's), `service:ID`, or `*` for any token. Empty: nobody (the card is still
    /// served).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    #[schemars(inner(regex(
        pattern = r"^(\*|human:[A-Za-z0-9][-A-Za-z0-9_.@]{0,127}|service:[^\s/:]{1,253})$"
    )))]
    pub callers: Vec<String>,

    /// What a conversation remembers. `perConversation` (the default): each conversation
    /// has a memory of its own — what was said in it — and never reads or changes the
    /// agent's (its window, memories, goals, plans), so no caller reads another's words or
    /// the agent's members'. `shared`: conversations read and extend the agent's long memory
    /// like its spaces, so what one caller said reaches the others' answers: only for
    /// callers trusted as much as the agent's members.
    #[serde(default)]
    pub memory: A2aMemory,

    /// How long a conversation (a `contextId`) lasts from its first message, in seconds
    /// (default 604800: 7 days). Then it is removed with its tasks, which read
    /// `TASK_NOT_FOUND`, and the same `contextId` starts a new conversation. A task's final
    /// state is kept at least as long as its conversation.
    #[serde(default = "conversation_seconds")]
    #[schemars(range(min = 1, max = 31_536_000))]
    pub conversation_seconds: u64,
}

fn conversation_seconds() -> u64 {
    crate::store::CONVERSATION_SECONDS
}

/// What an A2A conversation remembers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum A2aMemory {
    /// Each conversation its own memory; the agent's long memory is not read or changed.
    #[default]
    PerConversation,
    /// Conversations share the agent's long memory with its spaces.
    Shared,
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

/// A remote agent the agent calls over A2A (v1.0): its card is read when the worker starts,
/// and each of its skills is offered to the model as a tool `NAME__SKILL` taking a `message`
/// (and, to go on with a remote task that asked something, its `taskId`). A call sends the
/// message and returns the remote task's answer; a task still working after `timeoutSeconds`
/// becomes an asynchronous call, whose result comes into the inbox when the remote task is
/// over (followed by the worker, also across restarts). A call is never sent twice: a worker
/// that died during one tells the model its outcome is unknown. While the card cannot be read
/// the skills are unavailable (`status.tools` says why) and it is read again later.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct A2aAgentToolSpec {
    /// Prefix of its tools' names: letters, digits, `_` and `-`.
    #[schemars(
        length(min = 1, max = 32),
        regex(pattern = r"^[A-Za-z][A-Za-z0-9_-]*$")
    )]
    pub name: String,

    /// The remote agent: its card's URL (`…/.well-known/agent-card.json`), or the URL it is
    /// served at (the card is read below it).
    #[schemars(length(min = 1, max = 2048), regex(pattern = r"^https?://"))]
    pub url: String,

    /// A Secret (in the Agent's namespace) whose keys become headers of every request (the
    /// remote agent's `Authorization`, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers_from: Option<super::HeadersFrom>,

    /// How long a call waits for the remote task to be over before it becomes asynchronous,
    /// in seconds.
    #[serde(default = "a2a_timeout_seconds")]
    #[schemars(range(min = 1, max = 600))]
    pub timeout_seconds: u32,

    /// How long the worker follows a remote task that became asynchronous, in seconds; after
    /// that the call expires and the model is told.
    #[serde(default = "a2a_result_ttl_seconds")]
    #[schemars(range(min = 60, max = 2592000))]
    pub result_ttl_seconds: u32,

    /// Skills (by the card's ids; without regard to case, `*` for any run of characters)
    /// whose calls one of their approvers must approve first (see `tools.approvers`). A
    /// pattern that matches none of the card's skills is a warning (`ApproversMatchTools`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    #[schemars(inner(length(min = 1, max = 128), regex(pattern = r"^[^*]*(\*[^*]*){0,4}$")))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub require_approval: Vec<String>,
}

fn a2a_timeout_seconds() -> u32 {
    30
}

fn a2a_result_ttl_seconds() -> u32 {
    86_400
}

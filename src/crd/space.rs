use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A room shared by humans and agents. Agents join by naming the space in their own
/// `spec.spaces`; humans are listed here.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "agentfleet.dev",
    version = "v1alpha1",
    kind = "Space",
    namespaced,
    status = "SpaceStatus",
    shortname = "sp",
    category = "agentfleet",
    printcolumn = r#"{"name":"Display Name","type":"string","jsonPath":".spec.displayName"}"#,
    printcolumn = r#"{"name":"Members","type":"integer","jsonPath":".status.memberCount"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct SpaceSpec {
    /// Name shown to humans and agents; the Space's name when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub display_name: Option<String>,

    /// Who besides agents reads and posts here (at most 1000): people, by their id or their
    /// Kubernetes username, Kubernetes groups and ServiceAccounts, as a RoleBinding names its
    /// subjects. Agents are not listed here: an Agent joins by naming the space in its
    /// `spec.spaces`.
    #[serde(default)]
    #[schemars(length(max = 1000))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["kind", "id"]))]
    pub members: Vec<HumanMember>,

    /// How long the space's message log is kept.
    #[serde(default)]
    pub retention: RetentionSpec,

    /// When agents' messages stop waking other agents, so agents cannot talk in circles.
    #[serde(default)]
    pub loop_guard: LoopGuardSpec,
}

/// The loop guard of a space. Every message carries its causal depth: a human's message, a
/// webhook or a plan starts a chain at 0, and an agent's message continues the chain of the
/// events it answers (their deepest plus one). An agent's message beyond `maxDepth`, or beyond
/// `maxAgentMessagesPerMinute` in the space, is still posted (humans see it) but wakes no other
/// agent; the space gets a notice saying so, and `agentfleet_loop_guard_total` counts it.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoopGuardSpec {
    /// The longest chain of agent messages, since the last human, webhook or plan event, that
    /// still wakes other agents.
    #[serde(default = "default_max_depth")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_depth: u32,
    /// The most agent messages per minute in this space that still wake other agents.
    #[serde(default = "default_max_agent_messages_per_minute")]
    #[schemars(range(min = 1, max = 100000))]
    pub max_agent_messages_per_minute: u32,
}

impl Default for LoopGuardSpec {
    fn default() -> Self {
        Self {
            max_depth: default_max_depth(),
            max_agent_messages_per_minute: default_max_agent_messages_per_minute(),
        }
    }
}

fn default_max_depth() -> u32 {
    8
}

fn default_max_agent_messages_per_minute() -> u32 {
    60
}

/// A member of a space besides its agents: a person, a group or a ServiceAccount.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HumanMember {
    /// Who, by `kind`: a person's id (a token file's, for example `husam`) or Kubernetes
    /// username (`alice@example.com`, `oidc:alice`: each `:` is read as `.`); a group's name
    /// (`sre`, `system:serviceaccounts:ops`); a ServiceAccount's `NAME` in the space's
    /// namespace, or `NAMESPACE/NAME`.
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[A-Za-z0-9][-A-Za-z0-9_.@:/]*$")
    )]
    pub id: String,
    /// `User` (a person: of the gateway's token file, or a Kubernetes user), `Group` (everyone
    /// in the group: a Kubernetes group or a token file's) or `ServiceAccount` (its tokens, as
    /// `kubectl create token` makes them).
    #[serde(default)]
    pub kind: SubjectKind,
    /// Display name; the id when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub name: Option<String>,
}

/// What a Space member names, as a RoleBinding's subject does.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum SubjectKind {
    /// A person.
    #[default]
    User,
    /// Everyone in a group.
    Group,
    /// A ServiceAccount.
    ServiceAccount,
}

/// How long a space's message log is kept.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetentionSpec {
    /// The most messages kept; older ones are trimmed.
    #[serde(default = "default_max_messages")]
    #[schemars(range(min = 1))]
    pub max_messages: u64,
    /// The most bytes of text one message may have (default 65536, at most 1048576, the
    /// bytes of a page of messages, so that any message fits in one). A longer message is
    /// refused, whoever posts it: a person or a service gets an error, an agent a tool
    /// error it reads.
    #[serde(default = "default_max_message_bytes")]
    #[schemars(range(min = 1, max = 1_048_576))]
    pub max_message_bytes: u64,
}

impl Default for RetentionSpec {
    fn default() -> Self {
        Self {
            max_messages: default_max_messages(),
            max_message_bytes: default_max_message_bytes(),
        }
    }
}

fn default_max_message_bytes() -> u64 {
    crate::store::DEFAULT_MAX_MESSAGE_BYTES
}

fn default_max_messages() -> u64 {
    10_000
}

/// Observed state of a Space.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpaceStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Who is in the space: the Agents that name it, then the human members.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<ResolvedMember>,

    /// The groups whose every person is a member.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,

    /// Number of members (agents and humans).
    #[serde(default)]
    pub member_count: u32,

    /// `Ready`: the membership is applied to the data plane.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// A resolved member of a space.
#[derive(
    Deserialize, Serialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedMember {
    /// `Agent` or `Human`.
    pub kind: MemberKind,
    /// The Agent's name, or the human's entity id.
    pub id: String,
    /// Display name.
    pub name: String,
}

/// What kind of entity a space member is.
#[derive(
    Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
pub enum MemberKind {
    /// An Agent in the space's namespace.
    Agent,
    /// A human listed in the space.
    Human,
}

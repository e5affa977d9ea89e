use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvVar, ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ConsciousnessSpec, ModelSpec, ToolsSpec};

/// An LLM agent that lives in a worker process: it sleeps on its inbox, wakes when humans or
/// other agents write to it, thinks in one multi-step tool-calling cycle, persists its memory
/// ("consciousness") and sleeps again.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "agentfleet.dev",
    version = "v1alpha1",
    kind = "Agent",
    namespaced,
    status = "AgentStatus",
    shortname = "ag",
    category = "agentfleet",
    printcolumn = r#"{"name":"Model","type":"string","jsonPath":".spec.model.name"}"#,
    printcolumn = r#"{"name":"Model Ref","type":"string","jsonPath":".spec.model.ref"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Inbox","type":"integer","jsonPath":".status.inboxDepth"}"#,
    printcolumn = r#"{"name":"Cycles","type":"integer","jsonPath":".status.cycles"}"#,
    printcolumn = r#"{"name":"Checkpoint","type":"integer","jsonPath":".status.checkpoint.cycle"}"#,
    printcolumn = r#"{"name":"Budget","type":"string","jsonPath":".status.conditions[?(@.type==\"BudgetExhausted\")].reason"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Tools","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"ToolsReady\")].reason"}"#,
    printcolumn = r#"{"name":"Pool","type":"string","priority":1,"jsonPath":".spec.runtime.pool"}"#,
    printcolumn = r#"{"name":"Host","type":"string","priority":1,"jsonPath":".status.host"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct AgentSpec {
    /// The language model this agent thinks with.
    pub model: ModelSpec,

    /// The author's part of the system prompt: who the agent is and how it behaves. The worker
    /// adds the agent's identity and how it works; what changes (the time, spaces and their
    /// members, memories, goals, plans) comes fresh every cycle after the conversation, so
    /// that the system prompt stays in the providers' prompt caches.
    #[serde(default)]
    #[schemars(length(max = 262144))]
    pub instructions: String,

    /// Names of the Spaces (in this namespace) the agent is a member of (at most 100: each is
    /// in every cycle's context). Membership is declared here: a Space's member list is
    /// derived from the Agents that name it.
    #[serde(default)]
    #[schemars(length(max = 100))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    #[schemars(inner(regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")))]
    #[schemars(inner(length(max = 63)))]
    pub spaces: Vec<String>,

    /// The tools the agent may call.
    #[serde(default)]
    pub tools: ToolsSpec,

    /// Limits and behaviour of one think cycle.
    #[serde(default)]
    pub cycle: CycleSpec,

    /// How the agent's persisted memory (its conversation history) is kept bounded and
    /// checkpointed.
    #[serde(default)]
    pub consciousness: ConsciousnessSpec,

    /// How many worker replicas the agent runs and when.
    #[serde(default)]
    pub scaling: ScalingSpec,

    /// Scheduled triggers: at each due time the operator puts a `plan` event with the plan's
    /// instruction in the agent's inbox, waking it if it is scaled to zero. A due time fires
    /// once, also across operator restarts. Plans the agent makes itself (`set_plans`) live in
    /// the data plane beside these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    #[schemars(length(max = 100))]
    pub plans: Vec<PlanSpec>,

    /// Tokens the agent may spend per UTC day and per UTC month; see `BudgetExhausted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<super::BudgetSpec>,

    /// Where the agent runs: a Pool of this namespace (`runtime.pool`), or, when unset, a
    /// worker Deployment of its own (`worker`, `scaling`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<super::RuntimeSpec>,

    /// The worker pod that runs the agent (not in a pool).
    #[serde(default)]
    pub worker: WorkerSpec,

    /// Serve the agent to other agent systems over A2A, through the gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub a2a: Option<super::A2aSpec>,

    /// Hold the agent at zero workers. Events still queue in its inbox and are handled when
    /// it is resumed.
    #[serde(default)]
    pub paused: bool,

    /// How a change of its model, instructions or tools goes live: at once (unset), or
    /// after a rehearsal on its own recorded cycles passes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<super::RolloutSpec>,
}

/// A key in a Secret in the Agent's namespace.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Name of the Secret, in the Agent's namespace.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key within the Secret.
    #[serde(default = "default_secret_key")]
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

fn default_secret_key() -> String {
    "apiKey".to_string()
}

/// Limits and behaviour of one think cycle.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CycleSpec {
    /// The most model steps (model call + tool calls) one cycle may take. A cycle that
    /// reaches it while the model still calls tools ends there, committed: the space gets a
    /// notice saying so and `agentfleet_cycle_stops_total{reason="max_steps"}` counts it.
    #[serde(default = "default_max_steps")]
    #[schemars(range(min = 1, max = 200))]
    pub max_steps: u32,

    /// The most tokens (prompt + completion, over all steps) one cycle may spend; the cycle
    /// stops after the step that crosses it, committed, with a notice in the space
    /// (`reason="token_budget"`).
    #[serde(default = "default_token_budget")]
    #[schemars(range(min = 1000))]
    pub token_budget: u64,

    /// The longest chain of cycles that tool results may start without a person: a human's
    /// message, a webhook or a plan starts a chain (its cycle is the first), and a cycle
    /// woken by an async tool's result continues the chain of the cycle that made the call.
    /// The last cycle of a chain may not start async tool calls (the model is told why, the
    /// space gets a notice, `reason="chain"` counts it); a person's message starts a new
    /// chain. Agents' messages to each other are bounded by the space's `loopGuard`.
    #[serde(default = "default_max_chain_depth")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_chain_depth: u32,

    /// What the agent sees of events that arrive while it is thinking: `off` (nothing until the
    /// next cycle), `preview` (a short transient preview of waiting events at every step), or
    /// `urgent` (the preview, plus urgent events injected in full and remembered).
    #[serde(default)]
    pub mid_cycle_inbox: MidCycleInbox,

    /// Tool phase gates: for a range of steps (0 is the first), which tools the model may call
    /// and whether it must call one — for example observe (reading tools, `required`) before
    /// acting. The first phase whose range holds the step applies; other steps get every
    /// tool and `auto`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub phases: Vec<ToolPhase>,

    /// What the data plane keeps of the agent's cycles, to see what it did and why.
    #[serde(default)]
    pub records: super::CycleRecordsSpec,
}

impl Default for CycleSpec {
    fn default() -> Self {
        Self {
            max_steps: default_max_steps(),
            token_budget: default_token_budget(),
            max_chain_depth: default_max_chain_depth(),
            mid_cycle_inbox: MidCycleInbox::default(),
            phases: Vec::new(),
            records: Default::default(),
        }
    }
}

impl CycleSpec {
    /// The phase that applies to `step`, if any.
    pub fn phase(&self, step: u32) -> Option<&ToolPhase> {
        self.phases
            .iter()
            .find(|p| step >= p.from_step && p.to_step.is_none_or(|to| step <= to))
    }
}

/// Which tools the model may call during a range of steps.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolPhase {
    /// First step of the phase (0 is the cycle's first step).
    #[serde(default)]
    pub from_step: u32,
    /// Last step of the phase (inclusive); open-ended when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_step: Option<u32>,
    /// Tools the model may call in the phase; every enabled tool when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_tools: Option<Vec<String>>,
    /// `auto` (the model decides), `required` (it must call a tool) or `none` (no tools).
    #[serde(default)]
    pub tool_choice: PhaseToolChoice,
}

/// Whether the model must call a tool in a phase.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PhaseToolChoice {
    /// The model decides.
    #[default]
    Auto,
    /// The model must call one of the phase's tools.
    Required,
    /// The model may not call tools.
    None,
}

fn default_max_steps() -> u32 {
    20
}

fn default_token_budget() -> u64 {
    50_000
}

fn default_max_chain_depth() -> u32 {
    8
}

/// What the agent sees of events that arrive mid-cycle.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MidCycleInbox {
    /// Nothing until the next cycle.
    Off,
    /// A transient preview of waiting events at every step.
    Preview,
    /// The preview, plus urgent events injected in full.
    #[default]
    Urgent,
}

/// How many workers an agent runs.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScalingSpec {
    /// Workers kept when the agent is idle: 0 (scale to zero, woken by its inbox) or 1
    /// (always on).
    #[serde(default)]
    #[schemars(range(min = 0, max = 1))]
    pub min_replicas: i32,

    /// Seconds with an empty inbox and nothing in flight before an idle worker is scaled to
    /// zero.
    #[serde(default = "default_idle_seconds")]
    #[schemars(range(min = 0))]
    pub idle_seconds: u32,

    /// Someone else (HPA, KEDA, GitOps) owns the worker's replica count; the operator never
    /// writes it.
    #[serde(default)]
    pub external: bool,
}

impl Default for ScalingSpec {
    fn default() -> Self {
        Self {
            min_replicas: 0,
            idle_seconds: default_idle_seconds(),
            external: false,
        }
    }
}

fn default_idle_seconds() -> u32 {
    300
}

/// A scheduled trigger: a recurring `schedule` or a one-shot time `at` (exactly one), and the
/// instruction the agent gets when it is due.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlanSpec {
    /// Name, unique among the agent's plans; it identifies the plan's fired due times, so
    /// renaming a plan starts it afresh.
    #[schemars(length(min = 1, max = 63))]
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub name: String,

    /// Cron schedule, five fields (`minute hour day-of-month month day-of-week`, for example
    /// `0 6 * * 1-5` for 06:00 on weekdays), or `@hourly`, `@daily`, `@weekly`, `@monthly`,
    /// `@yearly`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub schedule: Option<String>,

    /// One-shot due time, RFC 3339 (for example `2026-12-24T18:00:00Z`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<Time>,

    /// IANA time zone of `schedule` (for example `Europe/Berlin`); UTC when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub time_zone: Option<String>,

    /// What the agent is asked to do when the plan is due.
    #[schemars(length(min = 1, max = 4096))]
    pub instruction: String,
}

/// The pod that runs the agent.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkerSpec {
    /// Container image of the worker; the operator's configured worker image when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub image: Option<String>,

    /// Compute resources of the worker container; small defaults when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// Extra environment variables of the worker container. Names starting with
    /// `AGENTFLEET_` are reserved.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,

    /// Service account the worker pod runs as. The worker needs no Kubernetes API access; its
    /// token is never mounted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,

    /// Node labels the worker pod must be scheduled on.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,

    /// Tolerations of the worker pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
}

/// Observed state of an Agent.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentStatus {
    /// `Pending` (worker not up yet), `Sleeping` (waiting on its inbox), `Thinking` (in a
    /// cycle), `ScaledToZero` (no worker; events wake it), or `Failed` (the spec or its model
    /// configuration cannot run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<AgentPhase>,

    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// `Ready` (the first reason the agent cannot run), `WorkerAvailable`, `ModelConfigured`
    /// (the model's API key Secret), `ToolsConfigured` (the tools' `headersFrom` Secrets exist),
    /// `SpacesResolved`; with `spec.rollout.rehearse`, `Rollout` (the spec's revision runs, or
    /// is held: rehearsing, or failed and why); from what the worker reports, `ModelAvailable` (its model answers) and
    /// `ToolsReady` (every tool in `tools` can be called; else why not: `SecretUnavailable`,
    /// `OverLimit`, `McpUnreachable`, `ToolUnavailable`); while a deleted Agent waits for its data to be
    /// removed, `DataPlaneCleanup`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,

    /// Worker replicas the operator asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// Worker replicas that are available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,

    /// The process (pod) that ran the agent's latest session: its worker, or the replica of
    /// its Pool where it stays loaded between cycles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,

    /// Hash of the rendered agent configuration the worker Deployment runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_hash: Option<String>,

    /// Events waiting in the agent's inbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inbox_depth: Option<i64>,

    /// Think cycles committed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles: Option<u64>,

    /// When the last cycle was committed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_cycle_time: Option<Time>,

    /// Model tokens used over the agent's life (prompt + completion).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_used: Option<u64>,

    /// Model tokens by direction and by budget period, counted at every model call (also of
    /// cycles that skip or fail), as the worker records them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<TokensStatus>,

    /// The latest consciousness checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<CheckpointStatus>,

    /// The checkpoint the consciousness was last restored from (a restore, a fork, a
    /// recovery after the data plane lost it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_from: Option<RestoredFromStatus>,

    /// The tools the worker actually has right now (as it last reported), with whether each
    /// can be called; see the `ToolsReady` condition. At most 200 are listed (those not ready
    /// first); `ToolsReady` counts them all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub tools: Vec<super::ToolStatus>,

    /// Calls the agent waits on a human for (an approval, an interactive tool's answer),
    /// oldest first: what `kubectl describe agent` says it is waiting for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["callId"]))]
    pub pending_calls: Vec<PendingCallStatus>,

    /// With `spec.rollout.rehearse`: the revision that runs, and the change held until its
    /// rehearsal passes (see the `Rollout` condition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<super::RolloutStatus>,
}

/// A call waiting for a human.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingCallStatus {
    /// The tool called.
    pub tool: String,
    /// The call's id (what a human answers: `POST /v1/spaces/NS/SPACE/tool-calls/ID`,
    /// `agentfleet approve|deny NS/AGENT ID`).
    pub call_id: String,
    /// `approval` (approve or deny before it runs) or `interactive` (a human's answer).
    pub kind: String,
    /// The space it was asked in (its members answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub space: Option<String>,
    /// When it was asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Time>,
    /// When it times out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<Time>,
}

/// Lifecycle phase of an Agent.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum AgentPhase {
    /// The worker is not running yet.
    Pending,
    /// The worker waits on the inbox.
    Sleeping,
    /// The worker is in a think cycle.
    Thinking,
    /// No worker runs; an event wakes the agent.
    ScaledToZero,
    /// The spec or its model configuration cannot run; see the conditions.
    Failed,
}

impl AgentPhase {
    /// Every phase.
    pub const ALL: [AgentPhase; 5] = [
        AgentPhase::Pending,
        AgentPhase::Sleeping,
        AgentPhase::Thinking,
        AgentPhase::ScaledToZero,
        AgentPhase::Failed,
    ];

    /// The name in status (and in metric labels).
    pub fn as_str(self) -> &'static str {
        match self {
            AgentPhase::Pending => "Pending",
            AgentPhase::Sleeping => "Sleeping",
            AgentPhase::Thinking => "Thinking",
            AgentPhase::ScaledToZero => "ScaledToZero",
            AgentPhase::Failed => "Failed",
        }
    }
}

/// Model tokens by direction and by budget period (`status.tokens`).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TokensStatus {
    /// Prompt tokens billed in full, over the agent's life.
    pub input: u64,
    /// Prompt tokens the provider read from its prompt cache (billed at a fraction).
    pub cache_read: u64,
    /// Prompt tokens the provider wrote to its prompt cache.
    pub cache_write: u64,
    /// Output tokens.
    pub output: u64,
    /// Every token of this UTC day (what `budget.tokensPerDay` counts).
    pub today: u64,
    /// Every token of this UTC month (what `budget.tokensPerMonth` counts).
    pub this_month: u64,
}

/// Metadata of a consciousness checkpoint (the content itself lives in the data plane).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointStatus {
    /// The cycle the checkpoint was taken after.
    pub cycle: u64,
    /// Where the checkpoint is stored.
    pub storage_ref: String,
    /// Content digest (`sha256:…`).
    pub digest: String,
    /// Messages in the checkpointed consciousness.
    pub messages: u64,
    /// Estimated tokens of the checkpointed consciousness.
    pub tokens: u64,
    /// When the checkpoint was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<Time>,
    /// The newest cycle whose checkpoint is in the archive (object storage), when archiving
    /// is on; `storageRef` is the archived object's URL once `cycle` is archived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archived_cycle: Option<u64>,
}

/// Where the agent's consciousness was last restored from.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoredFromStatus {
    /// Why: `Restore` (`spec.consciousness.restore`), `Seed` (`spec.consciousness.seedFrom`) or
    /// `Recovery` (the data plane had lost it; the latest archived checkpoint was taken).
    pub reason: String,
    /// The checkpoint's URL (or the data plane's reference).
    pub storage_ref: String,
    /// The cycle of that checkpoint.
    pub cycle: u64,
    /// Its digest (`sha256:…`), verified before it was applied.
    pub digest: String,
    /// What was asked for (`cycle:40`, `ref:URL`, `seed:AGENT@N`), for `restore` and `seedFrom`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// When it was applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<Time>,
}

//! The gateway's HTTP API as data: the bodies and events it sends and takes, documented in
//! its `/openapi.json`. Below the roles, so the gateway that serves them and the clients that
//! read them (`agentfleet chat`) share one definition.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::store::{self, MemberKind};

/// Who wrote or did something.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct EntityRef {
    /// `agent`, `human` or `service`.
    pub kind: String,
    /// Id: an Agent's name, a human's member id or a service's name.
    pub id: String,
    /// Display name.
    pub name: String,
}

/// How the API names a member kind.
pub fn member_kind(kind: MemberKind) -> &'static str {
    match kind {
        MemberKind::Agent => "agent",
        MemberKind::Human => "human",
    }
}

impl From<&store::Sender> for EntityRef {
    fn from(s: &store::Sender) -> Self {
        Self {
            // A sender without a member kind is a service.
            kind: s.kind.map_or("service", member_kind).into(),
            id: s.id.clone(),
            name: s.name.clone(),
        }
    }
}

/// A message of a space.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    /// Stable id, ordered by posting time (`MILLIS-SEQ`); also the SSE event id.
    pub id: String,
    /// The space's name.
    pub space: String,
    /// Who posted it.
    pub sender: EntityRef,
    /// What was said: plain text, to be shown as text (never as markup).
    pub text: String,
    /// When it was posted, milliseconds since the Unix epoch.
    pub time_ms: i64,
    /// The agent member it addresses, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mention: Option<String>,
}

impl From<&store::SpaceMessage> for Message {
    fn from(m: &store::SpaceMessage) -> Self {
        Self {
            id: m.id.clone(),
            space: m.space.clone(),
            sender: EntityRef::from(&m.sender),
            text: m.text.clone(),
            time_ms: m.time_ms,
            mention: m.mention.clone(),
        }
    }
}

/// A message to post as the caller.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PostMessage {
    /// The text (not empty).
    pub text: String,
    /// An agent member to address: it is woken even where agents answer only when named.
    #[serde(default)]
    pub mention: Option<String>,
    /// Deliver as urgent: injected into a cycle already under way.
    #[serde(default)]
    pub urgent: bool,
}

/// The outcome of a post.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Posted {
    /// The message's id (the first message's, for a repeated `Idempotency-Key`).
    pub id: String,
    /// An earlier post had the same `Idempotency-Key`; nothing new was written.
    pub duplicate: bool,
    /// Agents whose inbox received the message.
    pub delivered: Vec<String>,
}

/// One page of a space's messages.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessagePage {
    /// Newest first, or oldest first when reading `after` an id.
    pub messages: Vec<Message>,
    /// When the page is full (its `limit`, or 1 MiB of messages): the id to pass as `before`
    /// (or `after`) for the next page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// A member of a space.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct Member {
    /// `agent` or `human`.
    pub kind: String,
    /// Agent name or human id.
    pub id: String,
    /// Display name.
    pub name: String,
}

/// A space as its members see it.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpaceInfo {
    /// Namespace of the Space.
    pub namespace: String,
    /// Name of the Space.
    pub name: String,
    /// Name shown to humans and agents.
    pub display_name: String,
    /// Agents, then humans.
    pub members: Vec<Member>,
}

/// A service event for an agent (a webhook).
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TriggerEvent {
    /// What happened, as the agent will read it.
    #[serde(default)]
    pub text: Option<String>,
    /// Structured payload, shown to the agent as JSON after the text.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub data: Option<serde_json::Value>,
    /// Event id: sending the same id again is dropped (so retries are safe). Defaults to the
    /// `Idempotency-Key` header, else a fresh id.
    #[serde(default)]
    pub id: Option<String>,
    /// Inject into a cycle already under way.
    #[serde(default)]
    pub urgent: bool,
}

/// The outcome of a trigger.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Triggered {
    /// The event id.
    pub id: String,
    /// The inbox had this id already; nothing new was queued.
    pub duplicate: bool,
    /// No worker held the agent, so a wake signal was sent.
    pub woke: bool,
}

/// The caller, as the gateway knows it.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct Me {
    /// `human` or `service`.
    pub kind: String,
    /// Id.
    pub id: String,
    /// Display name.
    pub name: String,
}

/// A streamed piece of an agent's message (SSE event `delta`).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeltaEvent {
    /// Groups the pieces of one message.
    pub stream_id: String,
    /// The writing agent.
    pub sender: EntityRef,
    /// The next piece of text.
    pub delta: String,
}

/// What an agent is doing (SSE event `activity`).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ActivityEvent {
    /// The agent.
    pub sender: EntityRef,
    /// `thinking`, `tool`, `tool_result` (a `visible` tool's arguments and result; see
    /// `detail`), `idle`, or `error` (its cycle failed; see `detail`).
    pub activity: String,
    /// The tool being run, for `tool`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// For `error`: what failed and what happens next (a retry in so many seconds, or giving
    /// up on the messages). For `tool_result`: JSON `{"arguments", "result"}`, secrets masked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// An agent asks the space's members about a call (SSE event `tool_request`): approve or deny
/// it, or answer it, at `POST /v1/spaces/{ns}/{space}/tool-calls/{callId}`. The same request is
/// also a message from the agent in the space's log, for clients that were not connected.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolRequestEvent {
    /// The asking agent.
    pub sender: EntityRef,
    /// The call to answer.
    pub call_id: String,
    /// The name of the tool the agent called, as its Agent declares it.
    pub tool: String,
    /// `approval` (answer `{"decision": "approve"|"deny", "reason"?}`) or `interactive`
    /// (answer `{"result": …}`).
    pub kind: String,
    /// The call's arguments, secrets masked.
    #[schema(value_type = Object)]
    pub arguments: serde_json::Value,
    /// What an interactive answer must match (JSON Schema), if the tool says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub result_schema: Option<serde_json::Value>,
    /// When it was asked (ms since the epoch).
    pub since_ms: i64,
    /// When it times out (ms since the epoch); the agent is then told nobody answered.
    pub expires_ms: i64,
}

/// An error.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// What went wrong, as a code and a sentence.
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable, machine-readable: `unauthenticated`, `forbidden`, `not_member`, `not_found`,
    /// `method_not_allowed`, `invalid_request`, `duplicate`, `conflict`, `expired`, `payload_too_large`,
    /// `rate_limited`, `unavailable`, `request_timeout`, `uri_too_long`, `headers_too_large`,
    /// `bad_request`.
    pub code: String,
    /// For humans; quotes client input only cut short (see `gateway::error::quote`).
    pub message: String,
}

/// A call answered.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallAnswered {
    /// The call.
    pub call_id: String,
    /// `approved`, `denied` or `answered`.
    pub decision: String,
    /// No worker held the agent, so a wake signal was sent.
    pub woke: bool,
}

/// The spaces the caller is a member of.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct SpaceList {
    /// Sorted by namespace and name.
    pub spaces: Vec<SpaceInfo>,
}

/// A call that waits for a person's answer in one of the caller's spaces.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaitingCall {
    /// The call, as its answer route names it.
    pub call_id: String,
    /// Namespace of the space it was asked in.
    pub namespace: String,
    /// The space it was asked in (members answer it there).
    pub space: String,
    /// The agent that asks.
    pub agent: String,
    /// The tool the agent called.
    pub tool: String,
    /// `approval` (approve or deny it) or `interactive` (give its result).
    pub kind: String,
    /// The call's arguments, secrets masked.
    #[schema(value_type = Object)]
    pub arguments: serde_json::Value,
    /// For an interactive tool: the JSON Schema its result must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub result_schema: Option<serde_json::Value>,
    /// When it was asked (ms since the epoch).
    pub since_ms: i64,
    /// When it stops waiting (ms since the epoch); later answers are refused.
    pub expires_ms: i64,
    /// Who may answer it, when the agent names them (`human:ID`, `group:NAME`); empty: the
    /// humans of its space.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvers: Vec<String>,
    /// Whether the caller may answer it (a member sees the calls of the space; only its
    /// approvers answer them).
    #[serde(default = "yes")]
    pub may_answer: bool,
}

fn yes() -> bool {
    true
}

impl WaitingCall {
    /// `call`, asked in space `namespace/space`; `may_answer`: whether the reader may answer it.
    pub fn new(
        call: &store::RegisteredCall,
        namespace: &str,
        space: &str,
        may_answer: bool,
    ) -> Self {
        let r = &call.record;
        Self {
            call_id: call.id.to_string(),
            namespace: namespace.to_string(),
            space: space.to_string(),
            agent: call.id.agent().name.clone(),
            tool: r.tool.clone(),
            kind: r.kind.name().into(),
            arguments: r.arguments.clone().unwrap_or_default(),
            result_schema: r.result_schema.clone(),
            since_ms: r.since_ms,
            expires_ms: r.expires_ms,
            approvers: r.approvers.clone(),
            may_answer,
        }
    }
}

/// The calls waiting for the caller.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct WaitingCalls {
    /// Oldest first.
    pub calls: Vec<WaitingCall>,
}

/// An agent as the members of its spaces see it (read-only): what it is, what it does, what
/// it spends. Live from the data plane; the model, budget and problem as the operator last
/// wrote them.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentView {
    /// Namespace of the Agent.
    pub namespace: String,
    /// Name of the Agent.
    pub name: String,
    /// `failed` (see `problem`), `suspended` (`spec.paused`: events wait), `asking` (a cycle
    /// waits for a person's answer), `thinking`, `sleeping` (a worker waits on its inbox),
    /// `stopped` (no worker holds it now — asleep in its pool or scaled to zero; an event
    /// wakes it, and the console says "Asleep"), or `unknown` (the operator has not
    /// described it: not reconciled yet, or no longer an Agent).
    pub state: String,
    /// Why it cannot run, for `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// Who serves its model (`openai`, `anthropic`, `scripted`); empty until the operator
    /// has written it.
    pub model_provider: String,
    /// The model's name.
    pub model_name: String,
    /// How the model answered lately, once a worker has called it: `Available` or what failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_health: Option<String>,
    /// The caller's spaces it is a member of.
    pub spaces: Vec<String>,
    /// Events waiting in its inbox.
    pub waiting: u64,
    /// Committed cycles.
    pub cycles: u64,
    /// When its last cycle was committed (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_cycle_ms: Option<i64>,
    /// Model tokens used today (UTC).
    pub tokens_today: u64,
    /// Its budget per UTC day, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_day: Option<u64>,
    /// Model tokens used this month (UTC).
    pub tokens_this_month: u64,
    /// Its budget per UTC month, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_month: Option<u64>,
    /// Model tokens used over its life, counted as `tokensToday` is (every call, every
    /// direction), so never fewer than this month's.
    pub tokens_used: u64,
    /// Its tools, once a worker has reported them.
    pub tools: Vec<AgentTool>,
    /// The process that took it last (a worker's or a pool's pod in a cluster, `dev` on one
    /// machine), once one has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The Pool that runs it (`spec.runtime.pool`, in its namespace), if one does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// How its last cycle ended (`committed`, `skipped`, `failed`, `paused`), once one has
    /// (the cycle itself is for those who may read its consciousness).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_outcome: Option<String>,
    /// Calls waiting for a person's answer.
    pub asking: u64,
    /// Those calls, oldest first: their ids (`#/calls/ID` in the console) and tools.
    #[serde(default)]
    pub asking_calls: Vec<AskingCall>,
    /// Its retained checkpoints, newest first: one per committed cycle.
    pub checkpoints: Vec<AgentCheckpoint>,
}

/// The agents of the caller's spaces (`GET /v1/agents`).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct AgentList {
    /// By namespace and name.
    pub agents: Vec<AgentView>,
}

/// A call of an agent that waits for a person.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AskingCall {
    /// The call's id.
    pub call_id: String,
    /// The tool it calls.
    pub tool: String,
}

/// A tool of an agent.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentTool {
    /// The name the model calls it by.
    pub name: String,
    /// `builtin`, `http`, `interactive`, `mcp:SERVER` or `a2a:AGENT`.
    pub source: String,
    /// Whether it can be called now.
    pub ready: bool,
    /// Why not, when it cannot (secrets masked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// A retained checkpoint: the consciousness after one cycle.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentCheckpoint {
    /// The cycle it was taken after.
    pub cycle: u64,
    /// When (ms since the epoch).
    pub time_ms: i64,
    /// Model tokens that cycle used.
    pub tokens_used: u64,
    /// Estimated tokens of the consciousness it holds.
    pub context_tokens: u64,
    /// Messages in its window.
    pub messages: u64,
}

/// An agent's consciousness as `agentfleet consciousness show` prints it: what the gateway's
/// `GET /v1/agents/{namespace}/{agent}/consciousness` answers, and what the command reads
/// from the data plane when it goes there directly.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConsciousnessView {
    /// `NAMESPACE/NAME`.
    pub agent: String,
    /// Committed cycles.
    pub cycle: u64,
    /// When the last cycle was committed (ms since the epoch).
    pub last_cycle_ms: Option<i64>,
    /// Estimated tokens of the summary and messages.
    pub tokens: u64,
    /// Model tokens used over the agent's life.
    pub tokens_used: u64,
    /// Digest chained over every commit (`sha256:…`); empty before the first.
    pub digest: String,
    /// Summary of the messages compacted out of the window.
    pub summary: Option<String>,
    /// The window's messages, oldest first (model messages as JSON).
    #[schema(value_type = Vec<Object>)]
    pub messages: Vec<serde_json::Value>,
    /// Memories, by key.
    pub memories: std::collections::BTreeMap<String, String>,
    /// Goals.
    #[schema(value_type = Vec<Object>)]
    pub goals: Vec<store::Goal>,
    /// The checkpoints retained, oldest first.
    #[schema(value_type = Vec<Object>)]
    pub checkpoints: Vec<store::Checkpoint>,
    /// The last restore request applied (`spec.consciousness.restore`, `seedFrom`).
    pub restored: Option<String>,
    /// Its archive and restores, or where an archived checkpoint was read: label → value.
    pub archive: Vec<(String, String)>,
}

/// What `POST /v1/agents/{namespace}/{agent}/consciousness/restore` takes.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct RestoreRequest {
    /// The cycle of a checkpoint the data plane retains.
    pub cycle: u64,
}

/// What a restore made the consciousness.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Restored {
    /// The cycle of the checkpoint it now is.
    pub cycle: u64,
    /// Messages in its window.
    pub messages: u64,
    /// Estimated tokens of it.
    pub tokens: u64,
    /// Its digest (`sha256:…`).
    pub digest: String,
}

impl From<&store::Checkpoint> for Restored {
    fn from(cp: &store::Checkpoint) -> Self {
        Self {
            cycle: cp.cycle,
            messages: cp.messages,
            tokens: cp.tokens,
            digest: cp.digest.clone(),
        }
    }
}

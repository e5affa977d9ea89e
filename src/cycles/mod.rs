//! Cycle records: what one cycle woke for, each step (its model request's tokens and times,
//! the model's private text, its calls with their arguments and results, what the worker
//! noted), how the cycle ended and why, its tokens and the id of its OpenTelemetry trace.
//!
//! The worker writes one per cycle, in the data-plane step that ends the cycle (the commit,
//! the rollback of a `skip`, the pause for a person; a model failure, which ends nothing,
//! in a fenced write of its own), masked with the agent's secrets and cut to the bounds
//! below. The data plane keeps an agent's newest records within `spec.cycle.records` (a
//! count and bytes) and forgets them with the agent. Who may read them is
//! [`crate::inspect`]'s rule: those allowed to read the agent's consciousness.
//!
//! | file | what it holds |
//! |---|---|
//! | `mod.rs` | the record, its head (what a list shows) and a page of heads |
//! | `bound.rs` | cutting texts and lists to their bounds, and a whole record to its size |
//! | `read.rs` | reading them: a page of heads, one record (the gateway's and the CLI's) |

mod bound;
pub mod read;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

pub use bound::{
    clip, fit, CALLS_PER_STEP, EVENTS, NOTES, POSTED, RECORD_BYTES, STEPS, TEXT_BYTES,
};

/// How a cycle ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum CycleOutcome {
    /// Committed: what it did is remembered (or, in an A2A conversation with a memory of
    /// its own, answered there).
    Committed,
    /// The model chose `skip`: rolled back, only its events acknowledged.
    Skipped,
    /// The model failed (its events stay for the next cycle), or a batch it kept refusing
    /// was committed as failed.
    Failed,
    /// Paused for a person's answer: it resumes from its journal once the answer comes.
    Paused,
}

impl CycleOutcome {
    /// The outcome as the API and the console say it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Committed => "committed",
            Self::Skipped => "skipped",
            Self::Failed => "failed",
            Self::Paused => "paused",
        }
    }
}

/// Model tokens of a cycle or a step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CycleTokens {
    /// Prompt tokens, all of them.
    pub input: u64,
    /// Of `input`, those read from the provider's prompt cache.
    pub cached: u64,
    /// Completion tokens.
    pub output: u64,
}

/// An event the cycle woke for (or took in while it ran).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventTrace {
    /// The event's id.
    pub id: String,
    /// `message`, `webhook`, `plan`, `tool_result`, …
    pub kind: String,
    /// Its space, if it came from one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub space: Option<String>,
    /// Who sent it, if anyone (their display name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The sender's id, when it is not their display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_id: Option<String>,
    /// The sender's kind (`Agent`, `Human`), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_kind: Option<crate::store::MemberKind>,
    /// When it arrived (ms since the epoch).
    pub time_ms: i64,
    /// Injected mid-cycle in full (`cycle.midCycleInbox`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub urgent: bool,
    /// How many agent messages in a row led to it.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub depth: u32,
    /// Its text (or data, as JSON, when it has no text), masked and cut.
    pub text: String,
    /// Bytes of it not kept.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub text_cut: u64,
    /// Whether it had no text (`text` shows its data).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_text: bool,
    /// Its structured data (a mention, a service's payload, a tool's result) as JSON, masked
    /// and cut, when it has both text and data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// Bytes of the data not kept.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub data_cut: u64,
}

/// One tool call of a step.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallTrace {
    /// The call's id (the model's).
    pub id: String,
    /// The tool called.
    pub tool: String,
    /// Its arguments (JSON as the model wrote them), masked and cut.
    pub arguments: String,
    /// Bytes of them not kept.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub arguments_cut: u64,
    /// Its result as the model got it, masked and cut; none while it waits for a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// Bytes of it not kept.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub result_cut: u64,
    /// Whether it succeeded, once it has a result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    /// How long it took (ms).
    pub duration_ms: u64,
}

/// One step: a model request, then its tool calls.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StepTrace {
    /// The step's number in the cycle (0 is the first).
    pub step: u32,
    /// When it started, from the cycle's start (ms).
    pub offset_ms: u64,
    /// How long the model took (ms).
    pub duration_ms: u64,
    /// The model asked (its Model's name, else its own), when it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// How long until the model's first streamed chunk (ms), when it streamed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_token_ms: Option<u64>,
    /// Its tokens.
    pub tokens: CycleTokens,
    /// Why the model stopped, when the provider said (`stop`, `length`, `tool_calls`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish: Option<String>,
    /// The model's own text in this step (what it wrote outside its tools, which reaches
    /// no space), masked and cut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Bytes of it not kept.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub text_cut: u64,
    /// Its calls, in order.
    #[serde(default)]
    pub calls: Vec<CallTrace>,
    /// Calls not kept (beyond [`CALLS_PER_STEP`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub calls_cut: u64,
    /// What the worker did besides: a nudge, a lenient reading of the model's output, a
    /// correction, a stop.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// A message the cycle posted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PostedMessage {
    /// The space.
    pub space: String,
    /// The message's id there.
    pub id: String,
}

/// What one cycle did, and why.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CycleRecord {
    /// Its number among the agent's records (1, 2, …, one per cycle run, committed or
    /// not), given by the data plane.
    #[serde(default)]
    pub seq: u64,
    /// When it started (ms since the epoch).
    pub started_ms: i64,
    /// How long it ran (ms).
    pub duration_ms: u64,
    /// How it ended.
    pub outcome: Option<CycleOutcome>,
    /// Why, for people: the failure, the call it waits on, why it stopped short.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The checkpoint it committed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<u64>,
    /// The checkpoint its consciousness was at when it began (0: before the first), for a
    /// cycle that reads and extends the agent's long memory: what a rehearsal starts it
    /// from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_checkpoint: Option<u64>,
    /// Whom it answered: `members` (its spaces' people and agents) or an A2A conversation.
    pub party: String,
    /// Whether it went on from its journal (a cycle paused or stopped before).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resumed: bool,
    /// What it woke for, oldest first, then what it took in while it ran.
    pub events: Vec<EventTrace>,
    /// Events not kept (beyond [`EVENTS`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub events_cut: u64,
    /// Its steps, in order.
    pub steps: Vec<StepTrace>,
    /// Steps not kept (beyond [`STEPS`]: the first and the last are kept).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub steps_cut: u64,
    /// Its tokens, every step and compaction's summary.
    pub tokens: CycleTokens,
    /// The messages it posted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub posted: Vec<PostedMessage>,
    /// What the notes it changed were before it (`memories`, `goals`, `plans` → key → the
    /// value, none where there was none), masked and cut: what a rehearsal undoes to start
    /// an older cycle from the notes it had.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub notes_before:
        std::collections::BTreeMap<String, std::collections::BTreeMap<String, Option<String>>>,
    /// Notes changed but not kept in `notes_before` (beyond [`NOTES`], or cut, or not read).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub notes_cut: u64,
    /// The id of its OpenTelemetry trace (32 hex digits), when traces are exported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

/// What a list of cycles shows of one: its head.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CycleHead {
    /// Its number among the agent's records.
    #[serde(default)]
    pub seq: u64,
    /// When it started (ms since the epoch).
    pub started_ms: i64,
    /// How long it ran (ms).
    pub duration_ms: u64,
    /// How it ended.
    pub outcome: Option<CycleOutcome>,
    /// Why, cut to a line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The checkpoint it committed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<u64>,
    /// Whom it answered.
    pub party: String,
    /// Its steps and calls, counting those not kept.
    pub steps: u64,
    /// Its calls.
    pub calls: u64,
    /// Its tokens.
    pub tokens: CycleTokens,
    /// The messages it posted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub posted: Vec<PostedMessage>,
    /// The size of its record as kept (bytes).
    #[serde(default)]
    pub bytes: u64,
}

/// Longest reason a head keeps.
const HEAD_REASON_BYTES: usize = 240;

impl CycleRecord {
    /// Its head, as a list shows it.
    pub fn head(&self) -> CycleHead {
        CycleHead {
            seq: self.seq,
            started_ms: self.started_ms,
            duration_ms: self.duration_ms,
            outcome: self.outcome,
            reason: self.reason.as_deref().map(|r| clip(r, HEAD_REASON_BYTES).0),
            checkpoint: self.checkpoint,
            party: self.party.clone(),
            steps: self.steps.len() as u64 + self.steps_cut,
            calls: self
                .steps
                .iter()
                .map(|s| s.calls.len() as u64 + s.calls_cut)
                .sum(),
            tokens: self.tokens,
            posted: self.posted.clone(),
            bytes: 0,
        }
    }
}

/// A page of an agent's cycles, newest first (`GET /v1/agents/{namespace}/{agent}/cycles`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CyclePage {
    /// The cycles' heads, newest first.
    pub cycles: Vec<CycleHead>,
    /// The `before` of the next (older) page, if there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_before: Option<u64>,
}

/// One cycle's record as the gateway serves it (`GET …/cycles/{seq}`).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CycleView {
    /// The record.
    #[serde(flatten)]
    pub record: CycleRecord,
    /// The size of the record as kept (bytes).
    pub bytes: u64,
    /// Where its trace is shown, when the gateway has a tracing URL (`--trace-url`) and the
    /// record a trace id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_url: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

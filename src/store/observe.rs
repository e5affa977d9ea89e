//! What the operator reads of the data plane and does to it: every agent in one round trip,
//! the model's health as workers report it, forgetting an agent, and where things live.

use async_trait::async_trait;

use super::{ArchiveReport, RestoreReport, StoreError, TokenSpend, ToolRecord};
use super::{Checkpoint, Plan};
use crate::identity::AgentKey;
use crate::periods::Periods;
use serde::{Deserialize, Serialize};

/// Rehearsal reports an agent keeps (the newest).
pub const REHEARSALS_KEPT: usize = 20;

/// The largest rehearsal report read back (bytes of JSON); a larger one is not read.
pub const REHEARSAL_REPORT_BYTES: usize = 4 << 20;

/// The most bytes of tool specs an agent's worker records ([`Observe::set_tool_specs`]).
pub const TOOL_SPECS_BYTES: usize = 1 << 20;

/// The operator's view of the data plane.
#[async_trait]
pub trait Observe: Send + Sync {
    /// Checks that the store answers.
    async fn ping(&self) -> Result<(), StoreError>;

    /// What the operator needs of each agent, for all of them in one round trip (the same
    /// order as `agents`).
    async fn observe(&self, agents: &[AgentKey]) -> Result<Vec<AgentObservation>, StoreError>;

    /// Only whether work waits for each agent (what a pool's sweep of its sleeping agents
    /// reads: four commands an agent, not [`Observe::observe`]'s sixteen), in one round trip.
    async fn observe_work(&self, agents: &[AgentKey]) -> Result<Vec<AgentWork>, StoreError>;

    /// Records how the agent's model answered lately (the worker writes it when it changes).
    async fn set_model_health(
        &self,
        agent: &AgentKey,
        health: &ModelHealth,
    ) -> Result<(), StoreError>;

    /// Records the tools the worker has and whether each can be called (written when it
    /// changes; the operator shows it in `status.tools` and the `ToolsReady` condition).
    async fn set_tools(&self, agent: &AgentKey, tools: &[ToolRecord]) -> Result<(), StoreError>;

    /// Records what the worker offers the model of its tools outside the worker (HTTP,
    /// interactive, its MCP servers' and A2A agents'), each with its source, as JSON (within
    /// [`TOOL_SPECS_BYTES`]): what a rehearsal offers of the servers' tools without asking
    /// any server.
    async fn set_tool_specs(&self, agent: &AgentKey, json: &str) -> Result<(), StoreError>;

    /// What [`Observe::set_tool_specs`] last recorded, if anything.
    async fn tool_specs(&self, agent: &AgentKey) -> Result<Option<String>, StoreError>;

    /// Records the report of the agent's rehearsal `name` (JSON), finished at `time_ms`;
    /// the agent keeps the newest [`REHEARSALS_KEPT`].
    async fn set_rehearsal_report(
        &self,
        agent: &AgentKey,
        name: &str,
        json: &str,
        time_ms: i64,
    ) -> Result<(), StoreError>;

    /// The report of the agent's rehearsal `name`, if one is kept.
    async fn rehearsal_report(
        &self,
        agent: &AgentKey,
        name: &str,
    ) -> Result<Option<String>, StoreError>;

    /// The agent's rehearsals' reports kept, newest first.
    async fn rehearsal_reports(&self, agent: &AgentKey) -> Result<Vec<String>, StoreError>;

    /// Records how archiving the agent's checkpoints goes (the worker writes it).
    async fn set_archive_report(
        &self,
        agent: &AgentKey,
        report: &ArchiveReport,
    ) -> Result<(), StoreError>;

    /// Forgets how archiving went (the agent's checkpoints are no longer archived).
    async fn forget_archive_report(&self, agent: &AgentKey) -> Result<(), StoreError>;

    /// Records the agent's last restore, fork or recovery and how the last attempt went.
    async fn set_restore_report(
        &self,
        agent: &AgentKey,
        report: &RestoreReport,
    ) -> Result<(), StoreError>;

    /// Counts the tokens of model calls (`usage`, made in `periods`) and returns what the agent
    /// has spent: a period's count starts again when the period rolls over. Zero usage only
    /// reads (and rolls the periods over).
    async fn record_tokens(
        &self,
        agent: &AgentKey,
        periods: &Periods,
        usage: &crate::model::Usage,
    ) -> Result<TokenSpend, StoreError>;

    /// Removes everything the data plane holds of an agent: inbox, queues, consciousness,
    /// checkpoints, memories, goals, plans, lease, registration.
    async fn purge_agent(&self, agent: &AgentKey) -> Result<(), StoreError>;

    /// Where the checkpoint of `agent` after `cycle` lives, as status shows it (the store's
    /// own reference: callers never spell the store's keys).
    fn checkpoint_ref(&self, agent: &AgentKey, cycle: u64) -> String;

    /// What the data plane holds of `agent`, named for a human: what is left behind when
    /// [`Observe::purge_agent`] cannot run.
    fn agent_data(&self, agent: &AgentKey) -> String;
}

/// The cycle a data plane's checkpoint reference names (what [`Observe::checkpoint_ref`] gives:
/// `redis:KEY#cycle=N`, `memory:AGENT#cycle=N`); `None` for anything else.
pub fn checkpoint_ref_cycle(reference: &str) -> Option<u64> {
    let rest = reference
        .strip_prefix("redis:")
        .or_else(|| reference.strip_prefix("memory:"))?;
    let (at, cycle) = rest.rsplit_once("#cycle=")?;
    if at.is_empty() || !cycle.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    cycle.parse().ok()
}

/// How the agent's model answered lately, as its worker reports it (written only when it
/// changes). The operator turns it into the Agent's `ModelAvailable` condition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelHealth {
    /// The last model call succeeded.
    pub available: bool,
    /// CamelCase reason: `Available`, or what failed (`Unauthorized`, `Unreachable`, …).
    pub reason: String,
    /// What happened, without secrets.
    pub message: String,
    /// When it became so (ms since the epoch).
    pub since_ms: i64,
}

/// What the operator reads of one agent on every sweep (one round trip for all agents).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentObservation {
    /// Events waiting: inbox plus urgent queue.
    pub waiting: u64,
    /// Events taken by a cycle that has not been acknowledged.
    pub in_flight: u64,
    /// A cycle is under way.
    pub thinking: bool,
    /// A cycle waits for a human (its events in flight); idle for the scaler.
    pub paused: bool,
    /// A worker holds the agent's lease.
    pub worker: bool,
    /// The process that took the agent's lease last (a pod name in a cluster).
    pub host: Option<String>,
    /// Committed cycles.
    pub cycles: u64,
    /// Model tokens used over the agent's life.
    pub tokens_used: u64,
    /// When the last cycle was committed (ms since the epoch).
    pub last_cycle_ms: Option<i64>,
    /// The latest checkpoint.
    pub checkpoint: Option<Checkpoint>,
    /// The restore request last applied (see [`crate::crd::ConsciousnessSpec::pending`]).
    pub restored: Option<String>,
    /// Plans the agent made itself (`set_plans`), by name.
    pub plans: Vec<Plan>,
    /// Per plan id (`spec/NAME`, `agent/NAME`): the last due time handled (ms).
    pub plan_marks: std::collections::BTreeMap<String, i64>,
    /// How the model answered lately, once a worker has reported it.
    pub model: Option<ModelHealth>,
    /// The tools the worker has, once it has reported them.
    pub tools: Option<Vec<ToolRecord>>,
    /// Calls that wait for a human (approvals, interactive tools), oldest first.
    pub pending: Vec<super::RegisteredCall>,
    /// How archiving goes, once a worker has archived (or tried).
    pub archive: Option<ArchiveReport>,
    /// The last restore, fork or recovery, once a worker has done one (or tried).
    pub restore: Option<RestoreReport>,
    /// The tokens spent, once a model was called.
    pub tokens: Option<super::TokenSpend>,
}

/// Whether work waits for an agent: the part of [`AgentObservation`] a pool's sweep reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AgentWork {
    /// Events waiting: inbox plus urgent queue.
    pub waiting: u64,
    /// Events taken by a cycle that has not been acknowledged.
    pub in_flight: u64,
    /// A cycle is under way.
    pub thinking: bool,
    /// A cycle waits for a human.
    pub paused: bool,
}

impl AgentWork {
    /// Something waits or is being worked on. Not while a cycle is paused for a human: until
    /// the answer (or the time to answer runs out, see [`AgentObservation::at`]) nothing can
    /// go on, and what arrives meanwhile waits, so its worker may go.
    pub fn busy(&self) -> bool {
        self.thinking || (!self.paused && (self.waiting > 0 || self.in_flight > 0))
    }
}

impl AgentObservation {
    /// Its [`AgentWork`].
    pub fn work(&self) -> AgentWork {
        AgentWork {
            waiting: self.waiting,
            in_flight: self.in_flight,
            thinking: self.thinking,
            paused: self.paused,
        }
    }

    /// See [`AgentWork::busy`].
    pub fn busy(&self) -> bool {
        self.work().busy()
    }

    /// The observation as the scaler weighs it at `now_ms`: a cycle paused for a human whose
    /// wait has ended (a call's time is up) is no longer just waiting: its worker must come
    /// back to tell the model.
    pub fn at(&self, now_ms: i64) -> AgentObservation {
        let mut o = self.clone();
        if o.paused && o.pending.iter().any(|c| c.record.expires_ms <= now_ms) {
            o.paused = false;
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{MemoryStore, RedisStore};

    #[test]
    fn both_stores_references_name_their_cycle() {
        let agent = AgentKey::new("ops", "sre");
        let redis = RedisStore::new("redis://127.0.0.1:1/").unwrap();
        for reference in [
            redis.checkpoint_ref(&agent, 40),
            MemoryStore::new().checkpoint_ref(&agent, 40),
        ] {
            assert_eq!(checkpoint_ref_cycle(&reference), Some(40), "{reference}");
        }
        for other in [
            "s3://bucket/ops/sre/40",
            "redis:#cycle=4",
            "redis:k#cycle=",
            "redis:k#cycle=+4",
            "memory:ops/sre",
            "cycle:40",
        ] {
            assert_eq!(checkpoint_ref_cycle(other), None, "{other}");
        }
    }
}

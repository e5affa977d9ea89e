//! What the operator reads of the data plane and does to it: every agent in one round trip,
//! the model's health as workers report it, forgetting an agent, and where things live.

use async_trait::async_trait;

use super::{
    AgentKey, AgentObservation, AgentWork, ArchiveReport, ModelHealth, RestoreReport, StoreError,
    TokenSpend, ToolRecord,
};
use crate::periods::Periods;

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

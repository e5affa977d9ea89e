//! An agent's consciousness in memory.

use async_trait::async_trait;

use super::{AgentState, MemoryStore};
use crate::identity::AgentKey;
use crate::store::consciousness::{at_checkpoint, plan_commit, replaced_checkpoint, WindowState};
use crate::store::{
    now_ms, Checkpoint, Consciousness, ConsciousnessLog, CycleCommit, Lease, Snapshot, StoreError,
};

impl AgentState {
    /// The logged message of sequence number `seq`, unless trimmed.
    fn message(&self, seq: u64) -> Option<&String> {
        seq.checked_sub(self.base)
            .and_then(|i| self.log.get(usize::try_from(i).ok()?))
    }
}

#[async_trait]
impl ConsciousnessLog for MemoryStore {
    async fn commit_cycle(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        commit: &CycleCommit,
    ) -> Result<Checkpoint, StoreError> {
        self.agent(agent, |a| {
            a.check(agent, lease)?;
            let plan =
                plan_commit(&a.window, &a.checkpoints, commit, now_ms()).map_err(|reason| {
                    StoreError::InvalidCommit {
                        agent: agent.to_string(),
                        reason,
                    }
                })?;
            a.log.extend(commit.new_messages.iter().cloned());
            if let (Some(c), Some(cycle)) = (&commit.compaction, plan.checkpoint.summary_cycle) {
                if let Some(summary) = &c.summary {
                    a.summaries.insert(cycle, summary.clone());
                }
            }
            for s in &plan.drop_summaries {
                a.summaries.remove(s);
            }
            let cp = &plan.checkpoint;
            a.window = WindowState::from(cp);
            a.tokens = cp.tokens;
            a.tokens_used += commit.cycle_tokens;
            a.last_cycle_ms = Some(cp.time_ms);
            a.checkpoints = plan.retained.clone();
            if plan.trim_before > a.base {
                let drop = usize::try_from(plan.trim_before - a.base)
                    .unwrap_or(usize::MAX)
                    .min(a.log.len());
                a.log.drain(..drop);
                a.base = plan.trim_before;
            }
            a.ack(&commit.receipt(plan.checkpoint.cycle));
            if let Some(record) = &commit.record {
                a.records.keep(record, Some(plan.checkpoint.cycle))?;
            }
            Ok(plan.checkpoint)
        })
    }

    async fn consciousness(&self, agent: &AgentKey) -> Result<Consciousness, StoreError> {
        Ok(self.agent(agent, |a| Consciousness {
            cycle: a.window.cycle,
            summary: a
                .window
                .summary_cycle
                .and_then(|c| a.summaries.get(&c).cloned()),
            messages: (a.window.start..a.window.end)
                .filter_map(|seq| a.message(seq).cloned())
                .collect(),
            start: a.window.start,
            tokens: a.tokens,
            digest: a.window.digest.clone(),
            tokens_used: a.tokens_used,
            last_cycle_ms: a.last_cycle_ms,
            restored: a.restored.clone(),
        }))
    }

    async fn checkpoints(&self, agent: &AgentKey) -> Result<Vec<Checkpoint>, StoreError> {
        Ok(self.agent(agent, |a| a.checkpoints.clone()))
    }

    async fn consciousness_at(
        &self,
        agent: &AgentKey,
        cycle: u64,
    ) -> Result<Option<Consciousness>, StoreError> {
        if cycle == 0 {
            return Ok(Some(Consciousness::default()));
        }
        Ok(self.agent(agent, |a| {
            let cp = a.checkpoints.iter().find(|c| c.cycle == cycle)?;
            let messages = (cp.start..cp.end)
                .filter_map(|seq| a.message(seq).cloned())
                .collect();
            let summary = cp.summary_cycle.and_then(|c| a.summaries.get(&c).cloned());
            at_checkpoint(cp, messages, summary)
        }))
    }

    async fn restore_checkpoint(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        cycle: u64,
        request: Option<&str>,
    ) -> Result<Option<Checkpoint>, StoreError> {
        self.agent(agent, |a| {
            a.check(agent, lease)?;
            let Some(cp) = a.checkpoints.iter().find(|c| c.cycle == cycle).cloned() else {
                return Ok(None);
            };
            if a.cycle_in_flight() {
                return Err(StoreError::CycleInFlight {
                    agent: agent.to_string(),
                });
            }
            if let Some(r) = request {
                a.restored = Some(r.to_string());
            }
            a.checkpoints.retain(|c| c.cycle <= cycle);
            let keep = usize::try_from(cp.end.saturating_sub(a.base)).unwrap_or(usize::MAX);
            a.log.truncate(keep);
            a.window = a.window.restored(&cp);
            a.tokens = cp.tokens;
            Ok(Some(cp))
        })
    }

    async fn replace_consciousness(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        snapshot: &Snapshot,
    ) -> Result<Checkpoint, StoreError> {
        self.agent(agent, |a| {
            a.check(agent, lease)?;
            if a.cycle_in_flight() {
                return Err(StoreError::CycleInFlight {
                    agent: agent.to_string(),
                });
            }
            let c = &snapshot.consciousness;
            let cp = replaced_checkpoint(c, now_ms());
            a.log = c.messages.clone();
            a.base = c.start;
            a.summaries.clear();
            if let (Some(s), Some(cycle)) = (&c.summary, cp.summary_cycle) {
                a.summaries.insert(cycle, s.clone());
            }
            a.window = a.window.restored(&cp);
            a.window.highest = a.window.highest.max(snapshot.highest);
            a.tokens = cp.tokens;
            if a.tokens_used == 0 {
                a.tokens_used = c.tokens_used;
            }
            a.last_cycle_ms = Some(cp.time_ms);
            a.checkpoints = vec![cp.clone()];
            a.restored = c.restored.clone();
            a.notes = snapshot.notes.clone();
            Ok(cp)
        })
    }

    async fn forget_restore(&self, agent: &AgentKey, lease: &Lease) -> Result<(), StoreError> {
        self.agent(agent, |a| {
            a.check(agent, lease)?;
            a.restored = None;
            Ok(())
        })
    }
}

//! An agent's consciousness: committing cycles, reading the window, checkpoints, restoring.
//! The commit's plan is computed here once, for both stores.

use async_trait::async_trait;

use super::{AgentKey, Checkpoint, Consciousness, CycleCommit, Lease, Snapshot, StoreError};

/// An agent's persisted conversation and its versioned checkpoints.
#[async_trait]
pub trait ConsciousnessLog: Send + Sync {
    /// Commits a cycle: appends its messages, applies its compaction, records the checkpoint
    /// and acknowledges the in-flight events, atomically. Fenced.
    async fn commit_cycle(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        commit: &CycleCommit,
    ) -> Result<Checkpoint, StoreError>;

    /// The agent's consciousness (empty before its first cycle).
    async fn consciousness(&self, agent: &AgentKey) -> Result<Consciousness, StoreError>;

    /// The retained checkpoints, newest first.
    async fn checkpoints(&self, agent: &AgentKey) -> Result<Vec<Checkpoint>, StoreError>;

    /// Makes the consciousness what it was after `cycle` (a retained checkpoint); later
    /// checkpoints and messages are dropped, the notes stay as they are, and `request` (if
    /// any) is recorded as the restore request applied. Fenced: take the lease first. `None`
    /// when no such checkpoint is retained; [`StoreError::CycleInFlight`] while a cycle is in
    /// flight.
    async fn restore_checkpoint(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        cycle: u64,
        request: Option<&str>,
    ) -> Result<Option<Checkpoint>, StoreError>;

    /// Replaces the agent's consciousness and notes with `snapshot` (an archived checkpoint
    /// restored, another agent's copied, the latest recovered), with `snapshot`'s digest and
    /// cycle, and that checkpoint as the only one retained; `snapshot.consciousness.restored`
    /// is recorded as the restore request applied. Model tokens used stay as counted unless
    /// nothing was. Fenced; refused with [`StoreError::CycleInFlight`] while a cycle is under
    /// way, paused or left to resume (nothing is changed then).
    async fn replace_consciousness(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        snapshot: &Snapshot,
    ) -> Result<Checkpoint, StoreError>;

    /// Forgets which restore request was applied (the spec no longer asks for one), so that
    /// asking for the same one again applies it again. Fenced.
    async fn forget_restore(&self, agent: &AgentKey, lease: &Lease) -> Result<(), StoreError>;
}

/// The checkpoint a replaced consciousness starts from (written at `time_ms`).
pub(super) fn replaced_checkpoint(c: &Consciousness, time_ms: i64) -> Checkpoint {
    Checkpoint {
        cycle: c.cycle,
        start: c.start,
        end: c.start + c.messages.len() as u64,
        summary_cycle: c.summary.as_ref().map(|_| c.cycle),
        digest: c.digest.clone(),
        messages: c.messages.len() as u64,
        tokens: c.tokens,
        time_ms: c.last_cycle_ms.unwrap_or(time_ms),
    }
}

/// The digest after a commit: sha256 over the previous digest, then the compaction (if any),
/// then each new message, length-prefixed. O(new messages), and verifiable by replaying the log.
pub fn next_digest(previous: &str, commit: &CycleCommit) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    let mut field = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_be_bytes());
        h.update(bytes);
    };
    field(previous.as_bytes());
    if let Some(c) = &commit.compaction {
        field(b"compact");
        field(&c.start.to_be_bytes());
        field(c.summary.as_deref().unwrap_or("").as_bytes());
    }
    for m in &commit.new_messages {
        field(m.as_bytes());
    }
    format!("sha256:{}", crate::hex(&h.finalize()))
}

/// Where the window of an agent's consciousness stands: what a commit builds on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct WindowState {
    pub cycle: u64,
    pub start: u64,
    pub end: u64,
    pub summary_cycle: Option<u64>,
    pub digest: String,
}

impl From<&Checkpoint> for WindowState {
    /// The window as the checkpoint left it.
    fn from(cp: &Checkpoint) -> Self {
        Self {
            cycle: cp.cycle,
            start: cp.start,
            end: cp.end,
            summary_cycle: cp.summary_cycle,
            digest: cp.digest.clone(),
        }
    }
}

/// Everything a commit writes, computed once for both stores.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct CommitPlan {
    pub checkpoint: Checkpoint,
    /// Checkpoints kept afterwards, newest first.
    pub retained: Vec<Checkpoint>,
    /// Log entries before this sequence number are needed by no retained checkpoint.
    pub trim_before: u64,
    /// Summaries (by cycle) no retained checkpoint refers to any more.
    pub drop_summaries: Vec<u64>,
}

/// Plans a commit on `prev` with the retained checkpoints `retained` (newest first).
pub(super) fn plan_commit(
    prev: &WindowState,
    retained: &[Checkpoint],
    commit: &CycleCommit,
    time_ms: i64,
) -> Result<CommitPlan, String> {
    let cycle = prev.cycle + 1;
    let end = prev.end + commit.new_messages.len() as u64;
    let (start, summary_cycle) = match &commit.compaction {
        Some(c) if c.start < prev.start || c.start > end => {
            return Err(format!(
                "compaction to sequence {} is outside the window {}..{end}",
                c.start, prev.start
            ))
        }
        Some(c) => (c.start, c.summary.as_ref().map(|_| cycle)),
        None => (prev.start, prev.summary_cycle),
    };
    let checkpoint = Checkpoint {
        cycle,
        start,
        end,
        summary_cycle,
        digest: next_digest(&prev.digest, commit),
        messages: end - start,
        tokens: commit.tokens,
        time_ms,
    };
    let keep = commit.checkpoints_retained.max(1) as usize;
    let mut kept: Vec<Checkpoint> = std::iter::once(checkpoint.clone())
        .chain(retained.iter().cloned())
        .take(keep)
        .collect();
    kept.sort_by_key(|c| std::cmp::Reverse(c.cycle));
    let trim_before = kept.iter().map(|c| c.start).min().unwrap_or(start);
    let referenced: std::collections::BTreeSet<u64> =
        kept.iter().filter_map(|c| c.summary_cycle).collect();
    let drop_summaries = retained
        .iter()
        .filter_map(|c| c.summary_cycle)
        .chain(prev.summary_cycle)
        .filter(|s| !referenced.contains(s))
        .collect::<std::collections::BTreeSet<u64>>()
        .into_iter()
        .collect();
    Ok(CommitPlan {
        checkpoint,
        retained: kept,
        trim_before,
        drop_summaries,
    })
}

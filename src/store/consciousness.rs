//! An agent's consciousness: committing cycles, reading the window, checkpoints, restoring.
//! The commit's plan is computed here once, for both stores.

use async_trait::async_trait;

use super::{Lease, StoreError};
use super::{Restored, V1};
use crate::identity::AgentKey;
use serde::{Deserialize, Serialize};

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

    /// The consciousness as it was after `cycle` (a retained checkpoint), read without
    /// changing anything: its window, summary, tokens, digest and time (`tokens_used` 0 and
    /// `restored` none: a checkpoint does not know them). `None` when no such checkpoint is
    /// retained (or the log kept changing as it was read). Cycle 0 is the empty
    /// consciousness before the first.
    async fn consciousness_at(
        &self,
        agent: &AgentKey,
        cycle: u64,
    ) -> Result<Option<Consciousness>, StoreError>;

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

/// The consciousness of checkpoint `cp`, given its window's messages and summary as read:
/// `None` when the messages read are not all of the window's (trimmed meanwhile).
pub(super) fn at_checkpoint(
    cp: &Checkpoint,
    messages: Vec<String>,
    summary: Option<String>,
) -> Option<Consciousness> {
    if messages.len() as u64 != cp.end.saturating_sub(cp.start)
        || (cp.summary_cycle.is_some() && summary.is_none())
    {
        return None;
    }
    Some(Consciousness {
        cycle: cp.cycle,
        summary,
        messages,
        start: cp.start,
        tokens: cp.tokens,
        digest: cp.digest.clone(),
        tokens_used: 0,
        last_cycle_ms: Some(cp.time_ms),
        restored: None,
    })
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
        // A replaced or shown consciousness used no tokens of its own.
        used: 0,
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
    /// The highest cycle the agent has had (committed, or taken back from the archive); above
    /// `cycle` after a restore to an earlier one. The next commit is numbered past it, so a
    /// restore never gives a new checkpoint the number of an abandoned one: the archived
    /// object of that abandoned cycle stays as it was.
    pub highest: u64,
}

impl WindowState {
    /// The number of the next committed cycle: past every cycle the agent has had.
    pub fn next_cycle(&self) -> u64 {
        self.cycle.max(self.highest) + 1
    }

    /// The window restored to the checkpoint `cp`, keeping the highest cycle known.
    pub fn restored(&self, cp: &Checkpoint) -> Self {
        Self {
            highest: self.highest.max(self.cycle),
            ..Self::from(cp)
        }
    }
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
            highest: cp.cycle,
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
    let cycle = prev.next_cycle();
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
        used: commit.cycle_tokens,
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

/// An agent's persisted conversation: the summary of what was compacted away, then the
/// messages of the window (model messages as JSON, opaque to the store).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Consciousness {
    /// Committed cycles.
    pub cycle: u64,
    /// Summary of the messages compacted out of the window.
    pub summary: Option<String>,
    /// The window's messages, oldest first.
    pub messages: Vec<String>,
    /// Sequence number of `messages[0]` in the agent's message log.
    pub start: u64,
    /// Estimated tokens of summary + messages.
    pub tokens: u64,
    /// Digest chained over every commit (`sha256:…`); empty before the first.
    pub digest: String,
    /// Model tokens used over the agent's life.
    pub tokens_used: u64,
    /// When the last cycle was committed (ms since the epoch).
    pub last_cycle_ms: Option<i64>,
    /// The last restore request applied (`spec.consciousness.restore`, `seedFrom`), so that
    /// each is applied once.
    pub restored: Option<String>,
}

/// An agent's whole consciousness after one cycle, with its notes: what an archived
/// checkpoint holds, and what a restore writes back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The conversation window, summary and counters, as committed after that cycle.
    pub consciousness: Consciousness,
    /// Notes by kind: entries as stored (key → text; JSON for goals and plans).
    pub notes:
        std::collections::BTreeMap<super::NoteKind, std::collections::BTreeMap<String, String>>,
    /// A cycle the agent is known to have had beyond this snapshot's (0: none known): a
    /// recovery from the archive gives the highest archived one, so that the next commit is
    /// numbered past every archived checkpoint and overwrites none. Never archived itself.
    pub highest: u64,
}

/// How archiving an agent's checkpoints goes, as its worker reports it (the operator writes
/// `status.checkpoint.archivedCycle`, `storageRef` and `CheckpointArchived` from it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveReport {
    /// The newest archived cycle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycle: Option<u64>,
    /// Its object's URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Whether the last attempt succeeded.
    pub ok: bool,
    /// CamelCase: `Archived`, or why not (`StoreUnreachable`, …).
    pub reason: String,
    /// For people.
    pub message: String,
    /// Since when it is so (ms since the epoch).
    pub since_ms: i64,
}

/// The last restore, fork or recovery of an agent's consciousness, and how the last attempt
/// went, as its worker reports it (`status.restoredFrom`, the `Restored` condition). A
/// versioned record (see [`records`](super::records)).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RestoreReport {
    /// The record's format.
    #[serde(default, rename = "v", skip_serializing_if = "V1::implied")]
    pub v: V1,
    /// Whether the last attempt succeeded.
    pub ok: bool,
    /// CamelCase: `Restored`, `Seeded`, `Recovered`, or why not.
    pub reason: String,
    /// For people.
    pub message: String,
    /// When (ms since the epoch).
    pub since_ms: i64,
    /// The request last attempted (`cycle:40`, `seed:sre@latest`; none for a recovery).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// What was last applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<Restored>,
}

/// A versioned checkpoint: the consciousness as it was after one cycle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    /// The cycle it was taken after.
    pub cycle: u64,
    /// Sequence number of the window's first message.
    pub start: u64,
    /// Sequence number after the window's last message.
    pub end: u64,
    /// Cycle whose compaction wrote the summary in force, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_cycle: Option<u64>,
    /// Content digest (`sha256:…`).
    pub digest: String,
    /// Messages in the window.
    pub messages: u64,
    /// Estimated tokens of summary + window.
    pub tokens: u64,
    /// When it was written (ms since the epoch).
    pub time_ms: i64,
    /// Model tokens the cycle used (0 in checkpoints written before this was kept).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub used: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What one committed cycle adds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CycleCommit {
    /// Messages the cycle appends (model messages as JSON).
    pub new_messages: Vec<String>,
    /// Compaction done at this commit: the window now starts at sequence `start` (counting
    /// the new messages), with `summary` covering what dropped out.
    pub compaction: Option<Compacted>,
    /// Estimated tokens of summary + window after the commit.
    pub tokens: u64,
    /// Model tokens the cycle used.
    pub cycle_tokens: u64,
    /// Checkpoints to keep (the oldest beyond are dropped, and so are log entries no
    /// retained checkpoint needs).
    pub checkpoints_retained: u32,
    /// Set when the cycle failed and its failure is what is committed: the events' receipts
    /// say so, with this reason.
    pub failure: Option<String>,
    /// The cycle's record, kept with the commit.
    pub record: Option<super::RecordWrite>,
}

impl CycleCommit {
    /// The receipt of the events this commit acknowledges, as committed at `cycle`.
    pub fn receipt(&self, cycle: u64) -> super::Receipt {
        match &self.failure {
            None => super::Receipt::new(super::ReceiptOutcome::Committed, Some(cycle), None),
            Some(reason) => super::Receipt::new(
                super::ReceiptOutcome::Failed,
                Some(cycle),
                Some(reason.clone()),
            ),
        }
    }
}

/// A compaction recorded by a commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compacted {
    /// New first sequence number of the window.
    pub start: u64,
    /// Summary of everything before `start`.
    pub summary: Option<String>,
}

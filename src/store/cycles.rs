//! An agent's cycle records ([`crate::cycles`]): each written by the step that ends its
//! cycle (with the commit, the acknowledgement of a `skip` or a conversation's answer, the
//! pause for a person), or on its own for a cycle whose model failed (which ends nothing).
//! Records are opaque JSON to the store, kept with their head (what a list shows), numbered
//! per agent, and the oldest forgotten once more than `keep` are kept or they take more than
//! `max_bytes` together (the newest always stays).

use async_trait::async_trait;

use super::{Lease, StoreError};
use crate::cycles::{fit, CycleHead, CycleRecord, RECORD_BYTES};
use crate::identity::AgentKey;

/// A cycle's record to keep.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordWrite {
    /// The record (its texts and lists already cut to their bounds).
    pub record: CycleRecord,
    /// The most records the agent keeps (0: none, and those kept are forgotten).
    pub keep: u32,
    /// The most bytes its records take together.
    pub max_bytes: u64,
}

/// A record as the data plane keeps it: its head and itself, as JSON (empty when the agent
/// keeps none), and the bounds of the agent's records.
pub(super) struct Encoded {
    pub head: String,
    pub body: String,
    pub keep: u32,
    pub max_bytes: u64,
}

impl RecordWrite {
    /// The record as kept, with the checkpoint its commit made (when it made one), within
    /// [`RECORD_BYTES`] (and the agent's bytes); empty when the agent keeps no records.
    pub(super) fn encode(&self, checkpoint: Option<u64>) -> Result<Encoded, StoreError> {
        if self.keep < 1 {
            return Ok(Encoded {
                head: String::new(),
                body: String::new(),
                keep: 0,
                max_bytes: self.max_bytes,
            });
        }
        let mut record = self.record.clone();
        record.checkpoint = checkpoint.or(record.checkpoint);
        let cap = RECORD_BYTES.min(usize::try_from(self.max_bytes).unwrap_or(usize::MAX));
        let encoding = |source| StoreError::Decode {
            what: "a cycle record".into(),
            source,
        };
        let body = fit(&mut record, cap).map_err(encoding)?;
        let head = serde_json::to_string(&record.head()).map_err(encoding)?;
        Ok(Encoded {
            head,
            body,
            keep: self.keep,
            max_bytes: self.max_bytes,
        })
    }
}

/// The cycle records of agents.
#[async_trait]
pub trait CycleRecords: Send + Sync {
    /// Keeps the record of a cycle that ended without a data-plane step of its own (its
    /// model failed: its events stay in flight); its number. Fenced.
    async fn record_cycle(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        record: &RecordWrite,
    ) -> Result<u64, StoreError>;

    /// The heads of the agent's records numbered below `before` (all when `None`), newest
    /// first, at most `limit`.
    async fn cycle_heads(
        &self,
        agent: &AgentKey,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<CycleHead>, StoreError>;

    /// The record numbered `seq` (JSON), if it is kept.
    async fn cycle_record(&self, agent: &AgentKey, seq: u64) -> Result<Option<String>, StoreError>;
}

/// A head as the store lists it: `SEQ BYTES HEAD`.
pub(super) fn head_entry(seq: u64, bytes: u64, head: &str) -> String {
    format!("{seq} {bytes} {head}")
}

/// The head of a listed entry (`SEQ BYTES HEAD`), its number and size filled in; `None` for
/// an entry that is not one (the store skips it).
pub(super) fn parse_head(entry: &str) -> Option<CycleHead> {
    let (seq, rest) = entry.split_once(' ')?;
    let (bytes, head) = rest.split_once(' ')?;
    let mut head: CycleHead = serde_json::from_str(head).ok()?;
    head.seq = seq.parse().ok()?;
    head.bytes = bytes.parse().ok()?;
    Some(head)
}

/// Heads numbered below `before`, newest first, at most `limit`, of `entries` (newest
/// first).
pub(super) fn page<'a>(
    entries: impl Iterator<Item = &'a str>,
    before: Option<u64>,
    limit: usize,
) -> Vec<CycleHead> {
    entries
        .filter_map(parse_head)
        .filter(|h| before.is_none_or(|b| h.seq < b))
        .take(limit)
        .collect()
}

//! An agent's cycle records in memory, kept and forgotten as `lib/records.lua` does.

use std::collections::{HashMap, VecDeque};

use async_trait::async_trait;

use super::MemoryStore;
use crate::cycles::CycleHead;
use crate::identity::AgentKey;
use crate::store::cycles::{head_entry, page};
use crate::store::{CycleRecords, Lease, RecordWrite, StoreError};

/// An agent's records: their heads newest first (`SEQ BYTES HEAD`), the records by number.
#[derive(Default)]
pub(super) struct Records {
    seq: u64,
    bytes: u64,
    heads: VecDeque<String>,
    bodies: HashMap<u64, (u64, String)>,
}

impl Records {
    /// Keeps `record` under the next number, as the commit that made `checkpoint` (if any)
    /// does; the number, or 0.
    pub(super) fn keep(
        &mut self,
        record: &RecordWrite,
        checkpoint: Option<u64>,
    ) -> Result<u64, StoreError> {
        let record = record.encode(checkpoint)?;
        if record.keep < 1 {
            *self = Records {
                seq: self.seq,
                ..Records::default()
            };
            return Ok(0);
        }
        if record.body.is_empty() {
            return Ok(0);
        }
        self.seq += 1;
        let bytes = record.body.len() as u64;
        self.bodies.insert(self.seq, (bytes, record.body.clone()));
        self.heads
            .push_front(head_entry(self.seq, bytes, &record.head));
        self.bytes += bytes;
        while self.heads.len() > 1
            && (self.heads.len() > record.keep as usize || self.bytes > record.max_bytes)
        {
            let Some(oldest) = self.heads.pop_back() else {
                break;
            };
            let seq = oldest
                .split_once(' ')
                .and_then(|(s, _)| s.parse::<u64>().ok());
            if let Some((bytes, _)) = seq.and_then(|s| self.bodies.remove(&s)) {
                self.bytes -= bytes;
            }
        }
        Ok(self.seq)
    }
}

#[async_trait]
impl CycleRecords for MemoryStore {
    async fn record_cycle(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        record: &RecordWrite,
    ) -> Result<u64, StoreError> {
        self.agent(agent, |a| {
            a.check(agent, lease)?;
            a.records.keep(record, None)
        })
    }

    async fn cycle_heads(
        &self,
        agent: &AgentKey,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<CycleHead>, StoreError> {
        Ok(self.agent(agent, |a| {
            page(a.records.heads.iter().map(String::as_str), before, limit)
        }))
    }

    async fn cycle_record(&self, agent: &AgentKey, seq: u64) -> Result<Option<String>, StoreError> {
        Ok(self.agent(agent, |a| {
            a.records.bodies.get(&seq).map(|(_, body)| body.clone())
        }))
    }
}

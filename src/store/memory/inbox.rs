//! The inbox of an agent in memory.

use std::collections::BTreeMap;

use async_trait::async_trait;
use futures::stream::{BoxStream, StreamExt as _};

use super::{received, AgentState, MemoryStore};
use crate::identity::AgentKey;
use crate::store::{
    Inbox, InboxEvent, Lease, Pushed, Receipt, RecordWrite, StoreError, WakeScope,
    RECEIPTS_KEPT_MS, SEEN_IDS,
};

impl AgentState {
    /// Queues `event` unless its id was seen (the last [`SEEN_IDS`]).
    pub(super) fn push(&mut self, event: &InboxEvent) -> Pushed {
        if !self.seen.insert(event.id.clone()) {
            return Pushed {
                queued: false,
                woke: false,
            };
        }
        self.seen_order.push_back(event.id.clone());
        while self.seen_order.len() > SEEN_IDS {
            if let Some(old) = self.seen_order.pop_front() {
                self.seen.remove(&old);
            }
        }
        if event.urgent && self.thinking {
            self.urgent.push_back(event.clone());
        } else {
            self.inbox.push_back(event.clone());
            self.notify.notify_one();
        }
        Pushed {
            queued: true,
            // What arrives while a cycle is paused for a human waits for the answer.
            woke: self.lease_holder().is_none() && !self.paused,
        }
    }

    /// Ends the cycle: records `receipt` for the events in flight that ask for one and drops
    /// them; urgent events that came late wait in the inbox.
    pub(super) fn ack(&mut self, receipt: &Receipt) {
        for e in self.inflight.iter().filter(|e| e.wants_receipt()) {
            if self
                .receipts
                .insert(e.id.clone(), receipt.clone())
                .is_none()
            {
                self.receipt_order.push_back(e.id.clone());
            }
        }
        // As long as the agent's conversations last (see `receipts.lua`).
        let keep = self.a2a.as_ref().map_or(RECEIPTS_KEPT_MS, |r| {
            RECEIPTS_KEPT_MS
                .max(i64::try_from(r.conversation_seconds.saturating_mul(1000)).unwrap_or(i64::MAX))
        });
        while let Some(old) = self.receipt_order.front() {
            let time = self.receipts.get(old).map_or(i64::MIN, |r| r.time_ms);
            if time.saturating_add(keep) > receipt.time_ms {
                break;
            }
            if let Some(old) = self.receipt_order.pop_front() {
                self.receipts.remove(&old);
            }
        }
        self.inflight.clear();
        self.journal.clear();
        self.thinking = false;
        self.paused = false;
        self.requeue_urgent();
    }

    /// Urgent events that came late wait in the inbox (and wake the next cycle).
    fn requeue_urgent(&mut self) {
        let late: Vec<InboxEvent> = self.urgent.drain(..).collect();
        if !late.is_empty() {
            self.inbox.extend(late);
            self.notify.notify_one();
        }
    }

    /// Moves the inbox in flight; returns everything in flight.
    fn drain(&mut self) -> Vec<InboxEvent> {
        self.inflight.extend(self.inbox.drain(..));
        self.held = 0;
        if !self.inflight.is_empty() {
            self.thinking = true;
            self.paused = false;
        }
        self.inflight.clone()
    }
}

impl MemoryStore {
    /// A failure the tests asked for (see [`MemoryStore::fail_pushes`]).
    #[cfg(test)]
    fn refused(&self, agent: &AgentKey) -> Option<StoreError> {
        self.with(|s| {
            let (times, transient) = s.refused.get_mut(agent)?;
            if *times == 0 {
                return None;
            }
            *times -= 1;
            Some(if *transient {
                StoreError::Timeout {
                    op: "push event",
                    seconds: 0,
                }
            } else {
                StoreError::Redis {
                    op: "push event",
                    source: (::redis::ErrorKind::Client, "refused by the test").into(),
                }
            })
        })
    }
}

#[async_trait]
impl Inbox for MemoryStore {
    async fn push_event(&self, agent: &AgentKey, event: &InboxEvent) -> Result<Pushed, StoreError> {
        #[cfg(test)]
        if let Some(e) = self.refused(agent) {
            return Err(e);
        }
        let pushed = self.agent(agent, |a| a.push(event));
        Ok(self.wake(agent, pushed))
    }

    async fn take_urgent(
        &self,
        agent: &AgentKey,
        lease: &Lease,
    ) -> Result<Vec<InboxEvent>, StoreError> {
        self.agent(agent, |a| {
            a.check(agent, lease)?;
            let urgent: Vec<InboxEvent> = a.urgent.drain(..).collect();
            a.inflight.extend(urgent.iter().cloned());
            Ok(urgent)
        })
    }

    async fn peek_inbox(
        &self,
        agent: &AgentKey,
        limit: usize,
    ) -> Result<Vec<InboxEvent>, StoreError> {
        Ok(self.agent(agent, |a| a.inbox.iter().take(limit).cloned().collect()))
    }

    async fn inbox_depth(&self, agent: &AgentKey) -> Result<u64, StoreError> {
        Ok(self.agent(agent, |a| (a.inbox.len() + a.urgent.len()) as u64))
    }

    async fn inflight(&self, agent: &AgentKey) -> Result<u64, StoreError> {
        Ok(self.agent(agent, |a| a.inflight.len() as u64))
    }

    async fn end_cycle_recorded(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        receipt: &Receipt,
        record: Option<&RecordWrite>,
    ) -> Result<(), StoreError> {
        self.agent(agent, |a| {
            a.check(agent, lease)?;
            a.ack(receipt);
            if let Some(record) = record {
                a.records.keep(record, None)?;
            }
            Ok(())
        })
    }

    async fn defer_events(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        ids: &[String],
    ) -> Result<u64, StoreError> {
        self.agent(agent, |a| {
            a.check(agent, lease)?;
            let (moved, kept): (Vec<InboxEvent>, Vec<InboxEvent>) = std::mem::take(&mut a.inflight)
                .into_iter()
                .partition(|e| ids.contains(&e.id));
            a.inflight = kept;
            let count = moved.len();
            // Merged by time with what waits (as defer.lua does).
            let waiting: Vec<InboxEvent> = a.inbox.drain(..).collect();
            let (mut moved, mut waiting) =
                (moved.into_iter().peekable(), waiting.into_iter().peekable());
            while let Some(next) = match (moved.peek(), waiting.peek()) {
                (Some(m), Some(w)) if m.time_ms <= w.time_ms => moved.next(),
                (Some(_), Some(_)) | (None, Some(_)) => waiting.next(),
                (Some(_), None) => moved.next(),
                (None, None) => None,
            } {
                a.inbox.push_back(next);
            }
            a.held += count;
            Ok(count as u64)
        })
    }

    async fn pause_cycle_recorded(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        record: Option<&RecordWrite>,
    ) -> Result<bool, StoreError> {
        self.agent(agent, |a| {
            a.check(agent, lease)?;
            let arrived = a.inbox.len() + a.urgent.len() > a.held;
            a.requeue_urgent();
            if arrived {
                return Ok(false);
            }
            a.thinking = false;
            a.paused = true;
            if let Some(record) = record {
                a.records.keep(record, None)?;
            }
            Ok(true)
        })
    }

    async fn subscribe_wakes(
        &self,
        scope: &WakeScope,
    ) -> Result<BoxStream<'static, AgentKey>, StoreError> {
        // A lagging listener misses signals; the sweeps catch up.
        let scope = scope.clone();
        Ok(received(self.wakes.subscribe())
            .filter(move |k| std::future::ready(scope.covers(k)))
            .boxed())
    }

    async fn take_inbox(
        &self,
        agent: &AgentKey,
        lease: &Lease,
    ) -> Result<Vec<InboxEvent>, StoreError> {
        self.agent(agent, |a| {
            a.check(agent, lease)?;
            Ok(a.drain())
        })
    }

    async fn mark_plan(
        &self,
        agent: &AgentKey,
        plan_id: &str,
        due_ms: i64,
        event: Option<&InboxEvent>,
    ) -> Result<Option<Pushed>, StoreError> {
        let pushed = self.agent(agent, |a| {
            if a.plan_marks.get(plan_id).is_some_and(|m| *m >= due_ms) {
                return None;
            }
            a.plan_marks.insert(plan_id.to_string(), due_ms);
            Some(event.map_or(
                Pushed {
                    queued: false,
                    woke: false,
                },
                |e| a.push(e),
            ))
        });
        Ok(pushed.map(|p| self.wake(agent, p)))
    }

    async fn plan_marks(&self, agent: &AgentKey) -> Result<BTreeMap<String, i64>, StoreError> {
        Ok(self.agent(agent, |a| a.plan_marks.clone()))
    }

    async fn receipt(
        &self,
        agent: &AgentKey,
        event_id: &str,
    ) -> Result<Option<Receipt>, StoreError> {
        Ok(self.agent(agent, |a| a.receipts.get(event_id).cloned()))
    }
}

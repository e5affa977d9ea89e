//! The embedded in-memory store, for `agentfleet dev` and unit tests.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::{AgentKey, InboxEvent, Lease, Pushed, SpaceRecord, Store, StoreError, SEEN_IDS};
use crate::membership::SpaceKey;

/// A [`Store`] held in this process's memory.
#[derive(Default)]
pub struct MemoryStore {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    spaces: BTreeMap<SpaceKey, SpaceRecord>,
    agents: HashMap<AgentKey, AgentState>,
}

#[derive(Default)]
struct AgentState {
    inbox: VecDeque<InboxEvent>,
    urgent: VecDeque<InboxEvent>,
    inflight: Vec<InboxEvent>,
    seen: HashSet<String>,
    seen_order: VecDeque<String>,
    thinking: bool,
    lease: Option<(String, u64, Instant)>,
    fence: u64,
    notify: Arc<Notify>,
}

impl AgentState {
    fn lease_holder(&self) -> Option<(&str, u64)> {
        self.lease
            .as_ref()
            .filter(|(_, _, expires)| *expires > Instant::now())
            .map(|(h, t, _)| (h.as_str(), *t))
    }

    fn check(&self, agent: &AgentKey, lease: &Lease) -> Result<(), StoreError> {
        if self.lease_holder() == Some((lease.holder.as_str(), lease.token)) {
            Ok(())
        } else {
            Err(StoreError::Fenced {
                agent: agent.to_string(),
            })
        }
    }

    /// Moves the inbox in flight; returns everything in flight.
    fn drain(&mut self) -> Vec<InboxEvent> {
        self.inflight.extend(self.inbox.drain(..));
        if !self.inflight.is_empty() {
            self.thinking = true;
        }
        self.inflight.clone()
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn agent<T>(&self, agent: &AgentKey, f: impl FnOnce(&mut AgentState) -> T) -> T {
        self.with(|s| f(s.agents.entry(agent.clone()).or_default()))
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        // A panic while holding the lock cannot leave `State` half-updated (every mutation is a
        // single map operation), so a poisoned lock is safe to keep using.
        let mut guard = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut guard)
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn apply_space(
        &self,
        space: &SpaceKey,
        record: &SpaceRecord,
    ) -> Result<bool, StoreError> {
        Ok(self.with(|s| {
            let changed = s.spaces.get(space) != Some(record);
            if changed {
                s.spaces.insert(space.clone(), record.clone());
            }
            changed
        }))
    }

    async fn space(&self, space: &SpaceKey) -> Result<Option<SpaceRecord>, StoreError> {
        Ok(self.with(|s| s.spaces.get(space).cloned()))
    }

    async fn remove_space(&self, space: &SpaceKey) -> Result<bool, StoreError> {
        Ok(self.with(|s| s.spaces.remove(space).is_some()))
    }

    async fn spaces(&self) -> Result<Vec<SpaceKey>, StoreError> {
        Ok(self.with(|s| s.spaces.keys().cloned().collect()))
    }

    async fn push_event(&self, agent: &AgentKey, event: &InboxEvent) -> Result<Pushed, StoreError> {
        Ok(self.agent(agent, |a| {
            if !a.seen.insert(event.id.clone()) {
                return Pushed {
                    queued: false,
                    woke: false,
                };
            }
            a.seen_order.push_back(event.id.clone());
            while a.seen_order.len() > SEEN_IDS {
                if let Some(old) = a.seen_order.pop_front() {
                    a.seen.remove(&old);
                }
            }
            if event.urgent && a.thinking {
                a.urgent.push_back(event.clone());
            } else {
                a.inbox.push_back(event.clone());
                a.notify.notify_one();
            }
            Pushed {
                queued: true,
                woke: a.lease_holder().is_none(),
            }
        }))
    }

    async fn acquire_lease(
        &self,
        agent: &AgentKey,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        Ok(self.agent(agent, |a| {
            let expires = Instant::now() + ttl;
            match a.lease_holder() {
                Some((h, token)) if h == holder => {
                    a.lease = Some((holder.to_string(), token, expires));
                    Some(Lease {
                        holder: holder.to_string(),
                        token,
                    })
                }
                Some(_) => None,
                None => {
                    a.fence += 1;
                    a.lease = Some((holder.to_string(), a.fence, expires));
                    Some(Lease {
                        holder: holder.to_string(),
                        token: a.fence,
                    })
                }
            }
        }))
    }

    async fn renew_lease(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        Ok(self.agent(agent, |a| {
            if a.check(agent, lease).is_ok() {
                a.lease = Some((lease.holder.clone(), lease.token, Instant::now() + ttl));
                true
            } else {
                false
            }
        }))
    }

    async fn release_lease(&self, agent: &AgentKey, lease: &Lease) -> Result<(), StoreError> {
        self.agent(agent, |a| {
            if a.check(agent, lease).is_ok() {
                a.lease = None;
            }
        });
        Ok(())
    }

    async fn wait_inbox(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        timeout: Duration,
    ) -> Result<Vec<InboxEvent>, StoreError> {
        let deadline = Instant::now() + timeout;
        loop {
            let notify = self.agent(agent, |a| a.notify.clone());
            let notified = notify.notified();
            tokio::pin!(notified);
            // Registered before looking, so a push in between is not missed.
            notified.as_mut().enable();
            let events = self.agent(agent, |a| {
                a.check(agent, lease)?;
                Ok::<_, StoreError>(a.drain())
            })?;
            if !events.is_empty() {
                return Ok(events);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Ok(Vec::new());
            }
        }
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

    async fn ack_cycle(&self, agent: &AgentKey, lease: &Lease) -> Result<(), StoreError> {
        self.agent(agent, |a| {
            a.check(agent, lease)?;
            a.inflight.clear();
            a.thinking = false;
            let late: Vec<InboxEvent> = a.urgent.drain(..).collect();
            if !late.is_empty() {
                a.inbox.extend(late);
                a.notify.notify_one();
            }
            Ok(())
        })
    }
}

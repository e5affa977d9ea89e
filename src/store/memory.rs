//! The embedded in-memory store, for `agentfleet dev` and unit tests.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::StreamExt;
use tokio::sync::{broadcast, Notify};
use tokio::time::Instant;

use super::types::{plan_commit, WindowState};
use super::{
    now_ms, AgentKey, AgentObservation, Checkpoint, Consciousness, CycleCommit, Goal, InboxEvent,
    Lease, LiveEvent, Memories, NewMessage, Posted, Pushed, ReadQuery, SpaceMessage, SpaceRecord,
    Store, StoreError, SEEN_IDS,
};
use crate::crd::PlanSpec;
use crate::keys::SpaceKey;

/// A [`Store`] held in this process's memory.
pub struct MemoryStore {
    state: Mutex<State>,
    wakes: broadcast::Sender<AgentKey>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self {
            state: Mutex::default(),
            wakes: broadcast::channel(1024).0,
        }
    }
}

#[derive(Default)]
struct State {
    spaces: BTreeMap<SpaceKey, SpaceRecord>,
    registered: HashSet<AgentKey>,
    agents: HashMap<AgentKey, AgentState>,
    logs: HashMap<SpaceKey, SpaceLog>,
    live: HashMap<SpaceKey, broadcast::Sender<LiveEvent>>,
}

#[derive(Default)]
struct SpaceLog {
    messages: VecDeque<SpaceMessage>,
    last_ms: i64,
    seq: u64,
    idempotency: HashMap<String, String>,
    /// When the current minute of agent messages began (ms), and how many were posted in it.
    agent_minute: (i64, u64),
}

impl SpaceLog {
    /// The next id, `MILLIS-SEQ`, strictly increasing like a Redis stream's.
    fn next_id(&mut self, now: i64) -> String {
        if now > self.last_ms {
            self.last_ms = now;
            self.seq = 0;
        } else {
            self.seq += 1;
        }
        format!("{}-{}", self.last_ms, self.seq)
    }
}

/// Orders `MILLIS-SEQ` ids (a malformed id sorts first).
fn id_key(id: &str) -> (i64, u64) {
    super::parse_message_id(id).unwrap_or((0, 0))
}

impl State {
    fn live(&mut self, space: &SpaceKey) -> broadcast::Sender<LiveEvent> {
        self.live
            .entry(space.clone())
            .or_insert_with(|| broadcast::channel(1024).0)
            .clone()
    }
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
    log: Vec<String>,
    base: u64,
    window: WindowState,
    summaries: BTreeMap<u64, String>,
    checkpoints: Vec<Checkpoint>,
    tokens: u64,
    tokens_used: u64,
    last_cycle_ms: Option<i64>,
    memories: Memories,
    goals: BTreeMap<String, Goal>,
    plans: BTreeMap<String, PlanSpec>,
    plan_marks: BTreeMap<String, i64>,
    model: Option<super::ModelHealth>,
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

    fn push(&mut self, event: &InboxEvent) -> Pushed {
        let a = self;
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
    }

    fn ack(&mut self) {
        self.inflight.clear();
        self.thinking = false;
        let late: Vec<InboxEvent> = self.urgent.drain(..).collect();
        if !late.is_empty() {
            self.inbox.extend(late);
            self.notify.notify_one();
        }
    }

    fn message(&self, seq: u64) -> Option<&String> {
        seq.checked_sub(self.base)
            .and_then(|i| self.log.get(usize::try_from(i).ok()?))
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

    /// Publishes a wake signal for `agent` when `pushed` says so.
    fn wake(&self, agent: &AgentKey, pushed: Pushed) -> Pushed {
        if pushed.woke {
            // Nobody listening is fine: wake signals are hints, the sweep is the fallback.
            let _ = self.wakes.send(agent.clone());
        }
        pushed
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

    async fn register_agent(&self, agent: &AgentKey) -> Result<bool, StoreError> {
        Ok(self.with(|s| s.registered.insert(agent.clone())))
    }

    async fn unregister_agent(&self, agent: &AgentKey) -> Result<bool, StoreError> {
        Ok(self.with(|s| s.registered.remove(agent)))
    }

    async fn agent_registered(&self, agent: &AgentKey) -> Result<bool, StoreError> {
        Ok(self.with(|s| s.registered.contains(agent)))
    }

    async fn push_event(&self, agent: &AgentKey, event: &InboxEvent) -> Result<Pushed, StoreError> {
        let pushed = self.agent(agent, |a| a.push(event));
        Ok(self.wake(agent, pushed))
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
        let left_work = self.agent(agent, |a| {
            if a.check(agent, lease).is_err() {
                return false;
            }
            a.lease = None;
            !(a.inbox.is_empty() && a.urgent.is_empty() && a.inflight.is_empty())
        });
        self.wake(
            agent,
            Pushed {
                queued: false,
                woke: left_work,
            },
        );
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
            a.ack();
            Ok(())
        })
    }

    async fn post_message(
        &self,
        space: &SpaceKey,
        message: &NewMessage,
    ) -> Result<Posted, StoreError> {
        self.with(|s| {
            let record = s
                .spaces
                .get(space)
                .filter(|r| r.admits(&message.sender))
                .cloned()
                .ok_or_else(|| StoreError::NotMember {
                    space: space.to_string(),
                    sender: message.sender.id.clone(),
                })?;
            let log = s.logs.entry(space.clone()).or_default();
            let scoped = message.scoped_idempotency_key();
            if let Some(id) = scoped.as_ref().and_then(|k| log.idempotency.get(k)) {
                return Ok(Posted {
                    id: id.clone(),
                    duplicate: true,
                    delivered: Vec::new(),
                    guarded: None,
                });
            }
            let time_ms = now_ms();
            // A window of a minute from its first agent message (as the Redis store's key
            // that expires a minute after it is created).
            if time_ms - log.agent_minute.0 >= 60_000 {
                log.agent_minute = (time_ms, 0);
            }
            let guarded = message.loop_guard(&record, log.agent_minute.1);
            if message.guarded_by_loop_guard(&record) && guarded != Some(super::Guard::Depth) {
                log.agent_minute.1 += 1;
            }
            let id = log.next_id(time_ms);
            let posted = SpaceMessage {
                id: id.clone(),
                space: space.name.clone(),
                sender: message.sender.clone(),
                text: message.text.clone(),
                time_ms,
                mention: message.mention.clone(),
                depth: message.depth,
            };
            if let Some(k) = scoped {
                log.idempotency.insert(k, id.clone());
            }
            log.messages.push_back(posted.clone());
            // The rate notice is posted once a minute (when the limit is first passed).
            let notice = guarded
                .filter(|g| {
                    *g == super::Guard::Depth
                        || log.agent_minute.1
                            == u64::from(record.loop_guard.max_agent_messages_per_minute) + 1
                })
                .map(|g| {
                    let mut n = g.notice(&space.name, &record, &message.sender, message.depth);
                    n.id = log.next_id(time_ms);
                    n
                });
            log.messages.extend(notice.iter().cloned());
            while log.messages.len() as u64 > record.max_messages {
                log.messages.pop_front();
            }
            let mut delivered = Vec::new();
            if guarded.is_none() {
                let event = posted.event(message.urgent);
                for agent in record.agents().filter(|a| *a != message.sender.id) {
                    let key = AgentKey::new(space.namespace.clone(), agent);
                    let pushed = s.agents.entry(key.clone()).or_default().push(&event);
                    if pushed.queued {
                        delivered.push(agent.to_string());
                    }
                    self.wake(&key, pushed);
                }
            }
            let live = s.live(space);
            let _ = live.send(LiveEvent::Message { message: posted });
            if let Some(n) = notice {
                let _ = live.send(LiveEvent::Message { message: n });
            }
            Ok(Posted {
                id,
                duplicate: false,
                delivered,
                guarded,
            })
        })
    }

    async fn read_messages(
        &self,
        space: &SpaceKey,
        query: &ReadQuery,
    ) -> Result<Vec<SpaceMessage>, StoreError> {
        Ok(self.with(|s| {
            let Some(log) = s.logs.get(space) else {
                return Vec::new();
            };
            if let Some(after) = &query.after {
                let after = id_key(after);
                log.messages
                    .iter()
                    .filter(|m| id_key(&m.id) > after)
                    .take(query.limit)
                    .cloned()
                    .collect()
            } else {
                let before = query.before.as_deref().map(id_key);
                log.messages
                    .iter()
                    .rev()
                    .filter(|m| before.is_none_or(|b| id_key(&m.id) < b))
                    .take(query.limit)
                    .cloned()
                    .collect()
            }
        }))
    }

    async fn publish_live(&self, space: &SpaceKey, event: &LiveEvent) -> Result<(), StoreError> {
        let sender = self.with(|s| s.live(space));
        let _ = sender.send(event.clone());
        Ok(())
    }

    async fn subscribe_live(
        &self,
        space: &SpaceKey,
    ) -> Result<BoxStream<'static, LiveEvent>, StoreError> {
        let rx = self.with(|s| s.live(space).subscribe());
        Ok(futures::stream::unfold(rx, |mut rx| async move {
            loop {
                match rx.recv().await {
                    Ok(event) => return Some((event, rx)),
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        })
        .boxed())
    }

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
            a.window = WindowState {
                cycle: cp.cycle,
                start: cp.start,
                end: cp.end,
                summary_cycle: cp.summary_cycle,
                digest: cp.digest.clone(),
            };
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
            a.ack();
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
        }))
    }

    async fn checkpoints(&self, agent: &AgentKey) -> Result<Vec<Checkpoint>, StoreError> {
        Ok(self.agent(agent, |a| a.checkpoints.clone()))
    }

    async fn restore_checkpoint(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        cycle: u64,
    ) -> Result<Option<Checkpoint>, StoreError> {
        self.agent(agent, |a| {
            a.check(agent, lease)?;
            let Some(cp) = a.checkpoints.iter().find(|c| c.cycle == cycle).cloned() else {
                return Ok(None);
            };
            a.checkpoints.retain(|c| c.cycle <= cycle);
            let keep = usize::try_from(cp.end.saturating_sub(a.base)).unwrap_or(usize::MAX);
            a.log.truncate(keep);
            a.window = WindowState {
                cycle: cp.cycle,
                start: cp.start,
                end: cp.end,
                summary_cycle: cp.summary_cycle,
                digest: cp.digest.clone(),
            };
            a.tokens = cp.tokens;
            Ok(Some(cp))
        })
    }

    async fn set_memories(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        memories: &Memories,
    ) -> Result<(), StoreError> {
        self.agent(agent, |a| {
            a.check(agent, lease)?;
            a.memories
                .extend(memories.iter().map(|(k, v)| (k.clone(), v.clone())));
            Ok(())
        })
    }

    async fn delete_memories(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        keys: &[String],
    ) -> Result<u64, StoreError> {
        self.agent(agent, |a| {
            a.check(agent, lease)?;
            Ok(keys
                .iter()
                .filter(|k| a.memories.remove(*k).is_some())
                .count() as u64)
        })
    }

    async fn memories(&self, agent: &AgentKey) -> Result<Memories, StoreError> {
        Ok(self.agent(agent, |a| a.memories.clone()))
    }

    async fn set_goals(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        goals: &[Goal],
    ) -> Result<(), StoreError> {
        self.agent(agent, |a| {
            a.check(agent, lease)?;
            for g in goals {
                a.goals.insert(g.id.clone(), g.clone());
            }
            Ok(())
        })
    }

    async fn goals(&self, agent: &AgentKey) -> Result<Vec<Goal>, StoreError> {
        Ok(self.agent(agent, |a| a.goals.values().cloned().collect()))
    }

    async fn set_plans(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        plans: &[PlanSpec],
    ) -> Result<(), StoreError> {
        self.agent(agent, |a| {
            a.check(agent, lease)?;
            for p in plans {
                a.plans.insert(p.name.clone(), p.clone());
            }
            Ok(())
        })
    }

    async fn cancel_plans(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        names: &[String],
    ) -> Result<u64, StoreError> {
        self.agent(agent, |a| {
            a.check(agent, lease)?;
            Ok(names
                .iter()
                .filter(|n| a.plans.remove(*n).is_some())
                .count() as u64)
        })
    }

    async fn plans(&self, agent: &AgentKey) -> Result<Vec<PlanSpec>, StoreError> {
        Ok(self.agent(agent, |a| a.plans.values().cloned().collect()))
    }

    async fn plan_marks(&self, agent: &AgentKey) -> Result<BTreeMap<String, i64>, StoreError> {
        Ok(self.agent(agent, |a| a.plan_marks.clone()))
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

    async fn observe(&self, agents: &[AgentKey]) -> Result<Vec<AgentObservation>, StoreError> {
        Ok(self.with(|s| {
            agents
                .iter()
                .map(|key| match s.agents.get(key) {
                    None => AgentObservation::default(),
                    Some(a) => AgentObservation {
                        waiting: (a.inbox.len() + a.urgent.len()) as u64,
                        in_flight: a.inflight.len() as u64,
                        thinking: a.thinking,
                        worker: a.lease_holder().is_some(),
                        cycles: a.window.cycle,
                        tokens_used: a.tokens_used,
                        last_cycle_ms: a.last_cycle_ms,
                        checkpoint: a.checkpoints.first().cloned(),
                        plans: a.plans.values().cloned().collect(),
                        plan_marks: a.plan_marks.clone(),
                        model: a.model.clone(),
                    },
                })
                .collect()
        }))
    }

    async fn set_model_health(
        &self,
        agent: &AgentKey,
        health: &super::ModelHealth,
    ) -> Result<(), StoreError> {
        self.agent(agent, |a| a.model = Some(health.clone()));
        Ok(())
    }

    async fn subscribe_wakes(&self) -> Result<BoxStream<'static, AgentKey>, StoreError> {
        let rx = self.wakes.subscribe();
        Ok(futures::stream::unfold(rx, |mut rx| async move {
            loop {
                match rx.recv().await {
                    Ok(key) => return Some((key, rx)),
                    // A lagging listener misses signals; the operator's sweep catches up.
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        })
        .boxed())
    }

    async fn purge_agent(&self, agent: &AgentKey) -> Result<(), StoreError> {
        self.with(|s| {
            s.agents.remove(agent);
            s.registered.remove(agent);
        });
        Ok(())
    }
}

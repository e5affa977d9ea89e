//! The embedded in-memory store, for `agentfleet dev` and unit tests. Laid out by concern like
//! the Redis store: one file per trait of [`crate::store`]; each step takes the one lock once,
//! as each Redis step is one script.

mod calls;
mod consciousness;
mod cycles;
mod inbox;
mod journal;
mod leases;
mod messages;
mod notes;
mod observe;
mod spaces;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use futures::stream::BoxStream;
use futures::StreamExt;
use tokio::sync::{broadcast, Notify};
use tokio::time::Instant;

use self::messages::SpaceLog;
use super::consciousness::WindowState;
use super::{
    Checkpoint, InboxEvent, Lease, LiveEvent, ModelHealth, NoteKind, Pushed, SpaceRecord,
    StoreError,
};
use crate::identity::AgentKey;
use crate::identity::SpaceKey;
use crate::sync::lock;

/// Wake signals a slow listener may fall behind before it misses some (its sweep catches
/// up): a burst to every agent of a large `dev`.
const WAKE_BACKLOG: usize = 16_384;

/// A [`Store`](super::Store) held in this process's memory.
pub struct MemoryStore {
    state: Mutex<State>,
    wakes: broadcast::Sender<AgentKey>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self {
            state: Mutex::default(),
            wakes: broadcast::channel(WAKE_BACKLOG).0,
        }
    }
}

#[derive(Default)]
struct State {
    spaces: BTreeMap<SpaceKey, SpaceRecord>,
    registered: HashSet<AgentKey>,
    agents: HashMap<AgentKey, AgentState>,
    logs: HashMap<SpaceKey, SpaceLog>,
    /// A2A conversations: their agent, owner and when they expire (ms).
    conversations: BTreeMap<SpaceKey, (AgentKey, String, i64)>,
    live: HashMap<SpaceKey, broadcast::Sender<LiveEvent>>,
    /// Agents whose pushes fail (tests of interrupted fan-outs): how many more times, and
    /// whether for a passing reason.
    #[cfg(test)]
    refused: HashMap<AgentKey, (u32, bool)>,
}

#[derive(Default)]
struct AgentState {
    inbox: VecDeque<InboxEvent>,
    urgent: VecDeque<InboxEvent>,
    inflight: Vec<InboxEvent>,
    seen: HashSet<String>,
    seen_order: VecDeque<String>,
    thinking: bool,
    /// A cycle paused for a human (its events stay in flight).
    paused: bool,
    lease: Option<(String, u64, Instant)>,
    fence: u64,
    /// Who took the lease last.
    host: Option<String>,
    notify: Arc<Notify>,
    log: Vec<String>,
    base: u64,
    window: WindowState,
    summaries: BTreeMap<u64, String>,
    checkpoints: Vec<Checkpoint>,
    tokens: u64,
    tokens_used: u64,
    last_cycle_ms: Option<i64>,
    notes: BTreeMap<NoteKind, BTreeMap<String, String>>,
    plan_marks: BTreeMap<String, i64>,
    model: Option<ModelHealth>,
    tools: Option<Vec<super::ToolRecord>>,
    /// What the worker offers of its servers' tools (JSON), as last recorded.
    tool_specs: Option<String>,
    /// Rehearsals' reports (name, when written, JSON), newest first.
    rehearsals: Vec<(String, i64, String)>,
    /// Asynchronous calls by id, and whether each has its result.
    calls: HashMap<String, (super::CallRecord, bool)>,
    /// The journal of the cycle under way.
    journal: Vec<String>,
    /// What the gateway serves of the agent over A2A.
    a2a: Option<super::A2aRecord>,
    /// What the control plane says of the agent.
    facts: Option<super::AgentFacts>,
    /// Receipts of acknowledged events that asked for one, and their ids newest last.
    receipts: HashMap<String, super::Receipt>,
    receipt_order: VecDeque<String>,
    /// The last restore request applied.
    restored: Option<String>,
    /// How archiving goes, as the worker reports it.
    archive: Option<super::ArchiveReport>,
    /// The last restore, fork or recovery, as the worker reports it.
    restore: Option<super::RestoreReport>,
    /// The tokens spent, once a model was called.
    spend: Option<super::TokenSpend>,
    /// Events in the inbox the cycle under way left for a later one.
    held: usize,
    /// Calls of remote A2A agents under way: key → (depth, until when in ms).
    outbound: BTreeMap<String, (u32, i64)>,
    /// Its cycle records.
    records: cycles::Records,
}

impl AgentState {
    /// The holder and token of the lease, unless it expired.
    fn lease_holder(&self) -> Option<(&str, u64)> {
        self.lease
            .as_ref()
            .filter(|(_, _, expires)| *expires > Instant::now())
            .map(|(h, t, _)| (h.as_str(), *t))
    }

    /// Whether a cycle is under way, paused or left to resume.
    fn cycle_in_flight(&self) -> bool {
        !self.inflight.is_empty() || self.thinking || self.paused || !self.journal.is_empty()
    }

    /// The fence: `lease` must be the current one.
    fn check(&self, agent: &AgentKey, lease: &Lease) -> Result<(), StoreError> {
        if self.lease_holder() == Some((lease.holder.as_str(), lease.token)) {
            Ok(())
        } else {
            Err(StoreError::Fenced {
                agent: agent.to_string(),
            })
        }
    }
}

/// What `rx` receives from now on; a listener that lags skips what it missed.
fn received<T: Clone + Send + 'static>(rx: broadcast::Receiver<T>) -> BoxStream<'static, T> {
    futures::stream::unfold(rx, |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok(item) => return Some((item, rx)),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
    .boxed()
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
        let mut guard = lock(&self.state);
        f(&mut guard)
    }

    /// Makes the next `times` pushes to `agent` fail, for a passing reason (a timeout) when
    /// `transient`, else for good; 0 heals it.
    #[cfg(test)]
    pub(crate) fn fail_pushes(&self, agent: &AgentKey, times: u32, transient: bool) {
        self.with(|s| s.refused.insert(agent.clone(), (times, transient)));
    }
}

//! Many agents in one process: the runtime of `agentfleet pool`, of a dedicated worker (a pool
//! of one) and of `agentfleet dev`.
//!
//! An agent asleep is an entry in a map: its manifest, no task, no connection, no lease. It
//! wakes by its wake signal (one subscription for the whole pool), by a timer (a paused call's
//! time, a retry) or by the sweep, which reads every sleeping agent's inbox depth now and then
//! so that a signal lost by pub/sub never leaves events waiting for ever. A woken agent runs
//! one session ([`activation`]) in a task of its own: a panic there ends that session only.
//! Looks and cycles take a slot of the pool (`cycles at once`, first come first served), so
//! one agent flooded with events takes its turn like the others.
//!
//! A woken agent is loaded (model client, tools, its consciousness cached after its first
//! cycle) and stays so while it is among the most recently active `warm` agents; the rest are
//! dropped and loaded again when they wake. A warm agent's next session skips settling when
//! nobody held its lease since (see `Agentlet::carry_over`).
//!
//! | file | what it holds |
//! |---|---|
//! | `mod.rs` | [`Pool`]: the agents, waking (signals, timers, sweep), warm agents |
//! | `activation.rs` | one session of one agent, driven by [`crate::worker::session`] |
//! | `waking.rs` | what wakes a sleeping agent: its signal, its timer, the sweep |
//! | `command.rs` | `agentfleet pool`: a namespace's Agents from a directory, their Secrets |

pub(crate) mod activation;
pub mod command;
pub(crate) mod follow;
mod waking;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{watch, Notify, Semaphore};
use tracing::{debug, error, warn};

use crate::crd::Agent;
use crate::identity::AgentKey;
use crate::store::{now_ms, Store, WakeScope};
use crate::sync::lock;
use crate::telemetry::WorkerMetrics;
use crate::worker::cycle::Agentlet;
use crate::worker::session::Backoff;
use crate::worker::Health;
use activation::{AbortOnDrop, Ended, Setting};

/// How a pool runs.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// Its name in metrics (`pool` label) and logs.
    pub name: String,
    /// Whose wake signals it hears (its namespace; one agent's for a dedicated worker).
    pub scope: WakeScope,
    /// This process in the agents' leases.
    pub holder: String,
    /// How long a lease lasts without renewal: how long a replacement waits after a process
    /// dies holding it.
    pub lease_ttl: Duration,
    /// Looks and cycles at once.
    pub cycles_at_once: usize,
    /// Agents kept loaded between their sessions, the most recently active first.
    pub warm_agents: usize,
    /// How often every sleeping agent's inbox is looked at (for signals pub/sub lost).
    pub sweep_every: Duration,
}

impl PoolConfig {
    /// A dedicated worker's pool: one agent.
    pub fn dedicated(agent: &AgentKey, holder: String, lease_ttl: Duration) -> Self {
        Self {
            name: agent.name.clone(),
            scope: WakeScope::Agent(agent.clone()),
            holder,
            lease_ttl,
            cycles_at_once: 1,
            warm_agents: 1,
            sweep_every: Duration::from_secs(5),
        }
    }
}

/// Makes an agent from its manifest (model client, tools, archive).
pub type Build = Arc<dyn Fn(&Agent) -> anyhow::Result<Agentlet> + Send + Sync>;

/// Every `reason` of `agentfleet_agent_restarts_total`: a session that ended for one of them
/// is counted, logged and tried again with backoff.
pub const RESTART_REASONS: [&str; 4] = ["data_plane", "lease_lost", "panic", "error"];

/// The agents of one process (see the module's doc).
#[derive(Clone)]
pub struct Pool {
    inner: Arc<Inner>,
}

struct Inner {
    config: PoolConfig,
    setting: Setting,
    health: Arc<Health>,
    metrics: WorkerMetrics,
    build: Option<Build>,
    agents: Mutex<HashMap<AgentKey, Entry>>,
    /// When agents are to be looked at again (ms since the epoch).
    timers: Mutex<BTreeSet<(i64, AgentKey)>>,
    timers_changed: Notify,
    /// Stamps of activity, for the least recently active warm agent.
    clock: AtomicU64,
    /// Loaded agents given by manifest (those made by the caller are not counted).
    warm: AtomicUsize,
    /// Sessions under way (aborted with the pool: a process killed takes them along), and a
    /// signal when one ends.
    tasks: Mutex<HashMap<AgentKey, tokio::task::AbortHandle>>,
    running: AtomicUsize,
    ended: Notify,
    shutdown: watch::Receiver<bool>,
}

/// An agent as given to the pool.
enum Host {
    /// Made by the caller, kept loaded (a dedicated worker's, a test's).
    Made,
    /// Its manifest: loaded when it wakes (see [`Build`]).
    Manifest(Arc<Agent>),
}

/// A loaded agent.
/// A loaded agent, whether it was just loaded, and what says it was unloaded.
type Loaded = (Arc<Agentlet>, bool, watch::Receiver<bool>);

struct Warm {
    agentlet: Arc<Agentlet>,
    /// Not one session yet: its tools may still be connecting.
    fresh: bool,
    /// Reports its tools when they change (an MCP server comes or goes).
    _reporter: AbortOnDrop,
    /// Archives its checkpoints off the cycle's path (see `crate::worker::archiver`).
    archiving: Archiving,
    /// Set when it is unloaded: a session under way ends after its cycle (the agent left the
    /// pool, or its manifest changed and the next session runs the new one).
    retire: watch::Sender<bool>,
}

/// A loaded agent's archiver task.
struct Archiving {
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Warm {
    /// Unloaded: the archiver writes what is left (bounded by its own time) and ends; a
    /// session under way ends after its cycle.
    fn drop(&mut self) {
        let _ = self.archiving.stop.send(true);
        self.retire.send_replace(true);
    }
}

struct Entry {
    host: Host,
    warm: Option<Warm>,
    /// A session task is under way.
    running: bool,
    /// Woken while its session ran: look again when it ends.
    again: bool,
    /// When it was last active (see `Inner::clock`).
    used: u64,
    /// The timer set for it, if any.
    timer: Option<i64>,
    /// The wait after a session that ended badly.
    restarts: Backoff,
}

impl Pool {
    /// A pool on `store`; `build` makes agents given by manifest.
    pub fn new(
        config: PoolConfig,
        store: Arc<dyn Store>,
        metrics: WorkerMetrics,
        health: Arc<Health>,
        build: Option<Build>,
        shutdown: watch::Receiver<bool>,
    ) -> Self {
        let setting = Setting {
            store,
            holder: config.holder.clone(),
            lease_ttl: config.lease_ttl,
            slots: Arc::new(Semaphore::new(config.cycles_at_once.max(1))),
            metrics: metrics.pool.clone(),
            pool: config.name.clone(),
        };
        Self {
            inner: Arc::new(Inner {
                config,
                setting,
                health,
                metrics,
                build,
                agents: Mutex::new(HashMap::new()),
                timers: Mutex::new(BTreeSet::new()),
                timers_changed: Notify::new(),
                clock: AtomicU64::new(0),
                warm: AtomicUsize::new(0),
                tasks: Mutex::new(HashMap::new()),
                running: AtomicUsize::new(0),
                ended: Notify::new(),
                shutdown,
            }),
        }
    }

    /// Hosts an agent made by the caller (kept loaded), and looks at it at once.
    pub fn add_agentlet(&self, agentlet: Arc<Agentlet>) {
        let key = agentlet.key.clone();
        let warm = Warm::new(agentlet, true);
        self.inner.insert(key.clone(), Host::Made, Some(warm));
        self.inner.clone().poke(&key);
    }

    /// Looks at agent `key` now (its inbox, its timers), as if it was woken.
    pub fn look(&self, key: &AgentKey) {
        self.inner.clone().poke(key);
    }

    /// Hosts exactly `agents` from now on: new and changed ones are added (loaded anew when
    /// they next wake; looked at once when their spec asks for a restore or a seed, which is
    /// applied as they settle), and the rest are dropped (a session under way ends first).
    /// What waits for them is found by the sweep.
    pub fn set_manifests(&self, agents: Vec<Agent>) {
        let mut look = Vec::new();
        let mut added = Vec::new();
        let mut following = Vec::new();
        {
            let mut map = lock(&self.inner.agents);
            let mut keep = std::collections::HashSet::new();
            for agent in agents {
                let key = crate::worker::host::key_of(&agent);
                keep.insert(key.clone());
                match map.get_mut(&key) {
                    Some(entry) => {
                        let same =
                            matches!(&entry.host, Host::Manifest(m) if same_agent(m, &agent));
                        if !same {
                            if restores(&agent) {
                                look.push(key);
                            }
                            // A session under way ends after its cycle; the next runs this.
                            entry.again |= entry.running;
                            self.inner.unload(entry);
                            entry.host = Host::Manifest(Arc::new(agent));
                        }
                    }
                    None => {
                        if restores(&agent) {
                            look.push(key.clone());
                        }
                        if !agent.spec.tools.a2a.is_empty() {
                            following.push(key.clone());
                        }
                        added.push(key.clone());
                        map.insert(key, Entry::new(Host::Manifest(Arc::new(agent)), None));
                    }
                }
            }
            for (key, entry) in map.iter_mut() {
                if !keep.contains(key) {
                    self.inner.unload(entry);
                }
            }
            map.retain(|k, e| keep.contains(k) || matches!(e.host, Host::Made));
        }
        self.inner.count();
        // Registered, so that a listener on a Redis Cluster subscribes their wake channels
        // now (the operator registers them too; registering twice changes nothing).
        let store = self.inner.setting.store.clone();
        tokio::spawn(async move {
            for key in added {
                if let Err(e) = store.register_agent(&key).await {
                    debug!(agent = %key, error = %e, "not registered; the sweep finds its events");
                }
            }
        });
        for key in look {
            self.inner.clone().poke(&key);
        }
        // An agent that calls A2A agents may have left remote tasks to follow (a restart):
        // its session starts its tools, which follow them again.
        let inner = self.inner.clone();
        tokio::spawn(async move {
            for key in following {
                let remote = inner
                    .setting
                    .store
                    .open_calls(&key)
                    .await
                    .map(|calls| calls.iter().any(|c| c.record.remote.is_some()));
                match remote {
                    Ok(true) => inner.clone().poke(&key),
                    Ok(false) => {}
                    Err(e) => {
                        debug!(agent = %key, error = %e, "cannot read its open calls; its remote tasks are followed when it wakes")
                    }
                }
            }
        });
    }

    /// The agents hosted.
    pub fn hosted(&self) -> Vec<AgentKey> {
        lock(&self.inner.agents).keys().cloned().collect()
    }

    /// Runs until shutdown: hears wake signals, fires timers, sweeps; then waits (at most
    /// `drain`) for the sessions under way to end.
    pub async fn run(&self, drain: Duration) {
        // Dropped (the process killed, a test aborting it): every task of the pool goes too.
        let _tasks = PoolTasks(self.inner.clone());
        let wakes = tokio::spawn(self.inner.clone().hear_wakes());
        let timers = tokio::spawn(self.inner.clone().fire_timers());
        let _listening = (AbortOnDrop(wakes), AbortOnDrop(timers));
        let mut shutdown = self.inner.shutdown.clone();
        let _ = shutdown.wait_for(|v| *v).await;
        drop(_listening);
        let inner = &self.inner;
        let all_ended = async {
            while inner.running.load(Ordering::SeqCst) > 0 {
                let ended = inner.ended.notified();
                if inner.running.load(Ordering::SeqCst) == 0 {
                    break;
                }
                ended.await;
            }
        };
        if tokio::time::timeout(drain, all_ended).await.is_err() {
            warn!(pool = %inner.config.name, "sessions still under way at shutdown; their events stay in flight for the next worker");
        }
        // The last checkpoints to the archive (each archiver bounds its own time).
        let flushing: Vec<_> = lock(&inner.agents)
            .values_mut()
            .filter_map(|e| e.warm.as_mut())
            .filter_map(|w| {
                let _ = w.archiving.stop.send(true);
                w.archiving.task.take()
            })
            .collect();
        for task in flushing {
            let _ = task.await;
        }
    }
}

/// Aborts every session of a pool when dropped.
struct PoolTasks(Arc<Inner>);

impl Drop for PoolTasks {
    fn drop(&mut self) {
        for (_, task) in lock(&self.0.tasks).drain() {
            task.abort();
        }
        for warm in lock(&self.0.agents)
            .values_mut()
            .filter_map(|e| e.warm.as_mut())
        {
            if let Some(task) = warm.archiving.task.take() {
                task.abort();
            }
        }
    }
}

/// Whether `agent`'s spec asks for a restore or a seed (applied by a session as it settles).
fn restores(agent: &Agent) -> bool {
    let c = &agent.spec.consciousness;
    c.restore.is_some() || c.seed_from.is_some()
}

/// Whether two manifests make the same agent (a new generation makes a new one).
fn same_agent(a: &Agent, b: &Agent) -> bool {
    a.metadata.generation == b.metadata.generation && a.spec == b.spec
}

impl Warm {
    /// `agentlet` loaded: its tools reported when they change, its checkpoints archived.
    fn new(agentlet: Arc<Agentlet>, fresh: bool) -> Self {
        let reporter = {
            let agentlet = agentlet.clone();
            AbortOnDrop(tokio::spawn(async move {
                loop {
                    agentlet.toolbox().changed().await;
                    agentlet.report_tools().await;
                }
            }))
        };
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(crate::worker::archiver::run(agentlet.clone(), stopped));
        Self {
            agentlet,
            fresh,
            _reporter: reporter,
            archiving: Archiving {
                stop,
                task: Some(task),
            },
            retire: watch::Sender::new(false),
        }
    }
}

impl Entry {
    fn new(host: Host, warm: Option<Warm>) -> Self {
        Self {
            host,
            warm,
            running: false,
            again: false,
            used: 0,
            timer: None,
            restarts: Backoff::new(Duration::from_millis(500), Duration::from_secs(30)),
        }
    }
}

impl Inner {
    fn insert(&self, key: AgentKey, host: Host, warm: Option<Warm>) {
        lock(&self.agents).insert(key, Entry::new(host, warm));
        self.count();
    }

    /// Keeps the hosted and warm gauges.
    fn count(&self) {
        let hosted = lock(&self.agents).len();
        let warm = self.warm.load(Ordering::Relaxed);
        let [ns, pool] = self.labels();
        let gauge = |g: &prometheus::IntGaugeVec, n: usize| {
            g.with_label_values(&[ns, pool])
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        };
        gauge(&self.setting.metrics.hosted, hosted);
        gauge(&self.setting.metrics.warm, warm);
    }

    /// Unloads a loaded agent given by manifest.
    fn unload(&self, entry: &mut Entry) {
        if matches!(entry.host, Host::Manifest(_)) && entry.warm.take().is_some() {
            self.warm.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The `namespace` and `pool` labels.
    fn labels(&self) -> [&str; 2] {
        let ns = match &self.config.scope {
            WakeScope::Namespace(ns) => ns.as_str(),
            WakeScope::Agent(a) => a.namespace.as_str(),
            WakeScope::All => "",
        };
        [ns, self.config.name.as_str()]
    }

    /// Looks at `key` now: starts its session unless one is under way (which then looks
    /// again when it ends).
    fn poke(self: Arc<Self>, key: &AgentKey) {
        if *self.shutdown.borrow() {
            return;
        }
        {
            let mut map = lock(&self.agents);
            let Some(entry) = map.get_mut(key) else {
                return;
            };
            if entry.running {
                entry.again = true;
                return;
            }
            entry.running = true;
            entry.again = false;
            entry.used = self.clock.fetch_add(1, Ordering::Relaxed);
        }
        self.running.fetch_add(1, Ordering::SeqCst);
        let this = self.clone();
        let served = key.clone();
        let mut tasks = lock(&self.tasks);
        let task = tokio::spawn(async move {
            this.serve(&served).await;
            lock(&this.tasks).remove(&served);
            this.running.fetch_sub(1, Ordering::SeqCst);
            this.ended.notify_waiters();
        });
        tasks.insert(key.clone(), task.abort_handle());
    }

    /// The agent, loaded if it was not; whether it was just loaded; and what says it was
    /// unloaded (see `Warm::retire`).
    fn load(&self, key: &AgentKey) -> Option<anyhow::Result<Loaded>> {
        let agent = {
            let mut map = lock(&self.agents);
            let entry = map.get_mut(key)?;
            if let Some(warm) = &mut entry.warm {
                let fresh = std::mem::replace(&mut warm.fresh, false);
                return Some(Ok((warm.agentlet.clone(), fresh, warm.retire.subscribe())));
            }
            let Host::Manifest(agent) = &entry.host else {
                return None;
            };
            agent.clone()
        };
        let Some(build) = &self.build else {
            return Some(Err(anyhow::anyhow!("this pool cannot load agents")));
        };
        // Made without the lock: the other agents wake meanwhile.
        let agentlet = match build(&agent) {
            Ok(a) => Arc::new(a),
            Err(e) => return Some(Err(e)),
        };
        let mut map = lock(&self.agents);
        let entry = map.get_mut(key)?;
        if !matches!(&entry.host, Host::Manifest(m) if Arc::ptr_eq(m, &agent)) {
            // Its manifest changed meanwhile: the next session loads the new one.
            return None;
        }
        let warm = Warm::new(agentlet.clone(), false);
        let retired = warm.retire.subscribe();
        entry.warm = Some(warm);
        self.warm.fetch_add(1, Ordering::Relaxed);
        drop(map);
        self.count();
        Some(Ok((agentlet, true, retired)))
    }

    /// Runs the agent's sessions until nothing is left to do, then puts it to sleep.
    async fn serve(self: &Arc<Self>, key: &AgentKey) {
        loop {
            let (agentlet, fresh, retired) = match self.load(key) {
                None => return,
                Some(Ok(loaded)) => loaded,
                Some(Err(e)) => {
                    error!(agent = %key, error = %crate::report::chain(&*e), "cannot load the agent; trying again later");
                    self.restart_later(key, "error");
                    return;
                }
            };
            let retry = self.retry_wait(key);
            let mut session = {
                let this = self.clone();
                let agentlet = agentlet.clone();
                let shutdown = self.shutdown.clone();
                JoinOnDrop(tokio::spawn(async move {
                    activation::run(
                        &agentlet,
                        &this.setting,
                        &this.health,
                        fresh,
                        retry,
                        shutdown,
                        retired,
                    )
                    .await
                }))
            };
            let ended = (&mut session.0).await;
            let (ns, name) = (key.namespace.as_str(), key.name.as_str());
            match ended {
                Ok(Ended::Done) => self.ok(key),
                Ok(Ended::Paused(until_ms)) => {
                    self.ok(key);
                    self.set_timer(key, until_ms);
                }
                // The holder signals when it leaves work behind; a holder that died does not:
                // look again soon, until its lease has expired.
                Ok(Ended::Elsewhere) => self.set_timer(key, now_ms() + 1_000),
                Ok(Ended::Retry(wait)) => {
                    self.restart(ns, name, "data_plane");
                    self.set_timer(key, now_ms() + millis(wait));
                }
                Ok(Ended::Lost) => {
                    agentlet.forget_cache().await;
                    self.restart(ns, name, "lease_lost");
                    self.restart_later(key, "lease_lost");
                }
                Ok(Ended::Shutdown) => {
                    self.sleep(key);
                    return;
                }
                Ok(Ended::Retired) => self.ok(key),
                Err(e) => {
                    let reason = if e.is_panic() { "panic" } else { "error" };
                    error!(agent = %key, reason, "the agent's session stopped; restarting it");
                    self.restart(ns, name, reason);
                    // Loaded again: its cache and tools may be what broke.
                    if let Some(entry) = lock(&self.agents).get_mut(key) {
                        self.unload(entry);
                    }
                    agentlet.forget_cache().await;
                    self.restart_later(key, reason);
                }
            }
            {
                let mut map = lock(&self.agents);
                let Some(entry) = map.get_mut(key) else {
                    return;
                };
                if !entry.again || *self.shutdown.borrow() {
                    entry.running = false;
                    break;
                }
                entry.again = false;
            }
        }
        self.evict();
    }

    /// A session that went well: the agent is ready, and its next bad one waits the least.
    fn ok(&self, key: &AgentKey) {
        self.health.clear_problem();
        self.metrics
            .agent_ready
            .with_label_values(&[key.namespace.as_str(), key.name.as_str()])
            .set(1);
        if let Some(entry) = lock(&self.agents).get_mut(key) {
            entry.restarts.reset();
        }
    }

    /// Counts a restart; the agent is not ready until a session goes well.
    fn restart(&self, ns: &str, name: &str, reason: &str) {
        self.metrics
            .agent_ready
            .with_label_values(&[ns, name])
            .set(0);
        self.metrics
            .agent_restarts
            .with_label_values(&[ns, name, reason])
            .inc();
    }

    /// Looks at `key` again after its restart backoff.
    fn restart_later(&self, key: &AgentKey, reason: &str) {
        let wait = self.retry_wait(key);
        warn!(agent = %key, reason, retry_in = ?wait, "the agent's session ended; looking again later");
        self.set_timer(key, now_ms() + millis(wait));
    }

    /// The next restart wait of `key`.
    fn retry_wait(&self, key: &AgentKey) -> Duration {
        lock(&self.agents)
            .get_mut(key)
            .map_or(Duration::from_secs(1), |e| e.restarts.take())
    }

    /// Marks `key` asleep (its session ended by shutdown).
    fn sleep(&self, key: &AgentKey) {
        if let Some(entry) = lock(&self.agents).get_mut(key) {
            entry.running = false;
        }
    }

    /// Drops the least recently active loaded agents when more than `warm_agents` are loaded,
    /// down to nine tenths of it (never one in a session, never one made by the caller).
    fn evict(&self) {
        let limit = self.config.warm_agents;
        if self.warm.load(Ordering::Relaxed) <= limit {
            return;
        }
        let mut map = lock(&self.agents);
        let mut warm: Vec<(u64, AgentKey)> = map
            .iter()
            .filter(|(_, e)| e.warm.is_some() && !e.running && matches!(e.host, Host::Manifest(_)))
            .map(|(k, e)| (e.used, k.clone()))
            .collect();
        warm.sort_unstable();
        let keep = limit - limit / 10;
        let over = self.warm.load(Ordering::Relaxed).saturating_sub(keep);
        for (_, key) in warm.into_iter().take(over) {
            if let Some(entry) = map.get_mut(&key) {
                self.unload(entry);
            }
        }
        drop(map);
        self.count();
    }
}

/// A task aborted when its handle is dropped (a session goes with the task serving it).
struct JoinOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for JoinOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

//! Pools in the data-plane loop: each sweep adds up the pooled agents' load per Pool (hosted,
//! thinking, with events waiting) and sets the Pool's replicas by it; a wake signal for an
//! agent whose Pool runs no replica starts one at once.
//!
//! Replicas: enough for every agent with work to have a cycle slot (`thinking + waiting`
//! over `cyclesAtOnce`, at least one while any has work), between `replicas.min` and
//! `replicas.max`. Up at once; down to the most the load asked for over the last
//! `replicas.scaleDownSeconds` (as a HorizontalPodAutoscaler's stabilization window), so that
//! a pause between bursts does not churn pods. A replica that goes finishes its cycles and
//! gives its agents up; they wake on another.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::Held;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{info, warn};

use super::cluster::Notice;
use super::decide::Trigger;
use super::Deps;
use crate::crd::Pool;
use crate::sync::lock;

/// A Pool by namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolKey {
    /// The namespace of the Pool and of every agent it runs.
    pub namespace: String,
    /// `metadata.name` of the Pool (its agents name it in `spec.runtime.pool`).
    pub name: String,
}

impl PoolKey {
    /// The Pool `name` of `namespace`.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for PoolKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// What a Pool's agents ask of it, as the last sweep saw them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolLoad {
    /// Agents that name the pool (and run: not paused, not failed).
    pub agents: u32,
    /// Of them, in a cycle.
    pub thinking: u32,
    /// Of them, with events waiting and not in a cycle.
    pub waiting: u32,
}

/// What the Pool's reconcile tells the loop.
#[derive(Clone, Debug)]
pub struct PoolTracked {
    /// The Pool, for Events.
    pub object: ObjectReference,
    /// `spec.replicas.min`.
    pub min: i32,
    /// `spec.replicas.max`.
    pub max: i32,
    /// `spec.cyclesAtOnce`.
    pub cycles_at_once: u32,
    /// `spec.replicas.scaleDownSeconds`.
    pub scale_down: Duration,
    /// The replicas of its Deployment as applied.
    pub replicas: Option<i32>,
}

struct Entry {
    spec: PoolTracked,
    /// The replicas asked for: the scaler's own after the first sight.
    replicas: Option<i32>,
    load: Option<PoolLoad>,
    /// What the load asked for over the scale-down window, oldest first.
    recent: VecDeque<(Instant, i32)>,
}

/// A change of a Pool's replicas.
pub struct PoolScale {
    key: PoolKey,
    object: ObjectReference,
    from: i32,
    to: i32,
    load: PoolLoad,
    slots: u32,
    /// The agent whose wake signal started it.
    woken_by: Option<String>,
}

/// The replicas `load` needs: a cycle slot for each agent with work, between `min` and `max`.
pub fn desired(min: i32, max: i32, cycles_at_once: u32, load: PoolLoad) -> i32 {
    let busy = load.thinking.saturating_add(load.waiting);
    let need = i32::try_from(busy.div_ceil(cycles_at_once.max(1))).unwrap_or(i32::MAX);
    need.clamp(min.max(0), max.max(min).max(0))
}

/// The loop's state of every Pool, shared with the reconcile.
pub struct Pools {
    entries: Mutex<HashMap<PoolKey, Entry>>,
    locks: Mutex<HashMap<PoolKey, Arc<tokio::sync::Mutex<()>>>>,
    changed: mpsc::UnboundedSender<ObjectRef<Pool>>,
    changes: Mutex<Option<mpsc::UnboundedReceiver<ObjectRef<Pool>>>>,
}

impl Default for Pools {
    fn default() -> Self {
        let (changed, changes) = mpsc::unbounded_channel();
        Self {
            entries: Mutex::new(HashMap::new()),
            locks: Mutex::new(HashMap::new()),
            changed,
            changes: Mutex::new(Some(changes)),
        }
    }
}

impl Pools {
    fn entries(&self) -> MutexGuard<'_, HashMap<PoolKey, Entry>> {
        lock(&self.entries)
    }

    /// The Pools whose load or replicas changed, to reconcile (their status); taken once.
    pub fn changes(&self) -> Option<mpsc::UnboundedReceiver<ObjectRef<Pool>>> {
        lock(&self.changes).take()
    }

    fn notify(&self, key: &PoolKey) {
        let _ = self
            .changed
            .send(ObjectRef::new(&key.name).within(&key.namespace));
    }

    /// The Pool's scaling lock: whoever writes its replicas holds it.
    async fn lock(&self, key: &PoolKey) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = lock(&self.locks).entry(key.clone()).or_default().clone();
        lock.lock_owned().await
    }

    /// Records what the reconcile applied.
    pub fn track(&self, key: &PoolKey, spec: PoolTracked) {
        let mut entries = self.entries();
        match entries.get_mut(key) {
            Some(e) => {
                e.replicas = e
                    .replicas
                    .map(|r| r.clamp(spec.min.max(0), spec.max.max(spec.min)));
                e.spec = spec;
            }
            None => {
                entries.insert(
                    key.clone(),
                    Entry {
                        replicas: spec.replicas,
                        spec,
                        load: None,
                        recent: VecDeque::new(),
                    },
                );
            }
        }
    }

    /// Forgets a deleted Pool.
    pub fn forget(&self, key: &PoolKey) {
        self.entries().remove(key);
        lock(&self.locks).remove(key);
    }

    /// The replicas the reconcile applies: the loop's count (or `last_known`, the status',
    /// across operator restarts; else `min`) within `min..=max`.
    fn replicas_for(&self, key: &PoolKey, min: i32, max: i32, last_known: Option<i32>) -> i32 {
        let current = self
            .entries()
            .get(key)
            .and_then(|e| e.replicas)
            .or(last_known)
            .unwrap_or(min);
        current.clamp(min.max(0), max.max(min).max(0))
    }

    /// [`Pools::replicas_for`], read under the Pool's scaling lock, which the returned
    /// [`Held`] keeps until it is dropped: an apply never undoes a scale change made meanwhile.
    pub async fn hold(
        &self,
        key: &PoolKey,
        min: i32,
        max: i32,
        last_known: Option<i32>,
    ) -> Held<i32> {
        let lock = self.lock(key).await;
        Held {
            replicas: self.replicas_for(key, min, max, last_known),
            _lock: lock,
        }
    }

    /// The load the last sweep saw.
    pub fn load(&self, key: &PoolKey) -> Option<PoolLoad> {
        self.entries().get(key).and_then(|e| e.load)
    }

    /// A wake signal for `agent` of `key`: a replica at once if it runs none.
    pub fn wake(&self, key: &PoolKey, agent: &str) -> Option<PoolScale> {
        let mut entries = self.entries();
        let e = entries.get_mut(key)?;
        if e.replicas.unwrap_or(0) >= 1 || e.spec.max < 1 {
            return None;
        }
        e.replicas = Some(1);
        e.recent.push_back((Instant::now(), 1));
        Some(PoolScale {
            key: key.clone(),
            object: e.spec.object.clone(),
            from: 0,
            to: 1,
            load: e.load.unwrap_or_default(),
            slots: e.spec.cycles_at_once,
            woken_by: Some(agent.to_string()),
        })
    }

    /// A sweep's loads (Pools absent from `loads` have no agents): the replica changes to make.
    pub fn observe(&self, loads: &HashMap<PoolKey, PoolLoad>, now: Instant) -> Vec<PoolScale> {
        let mut out = Vec::new();
        let mut changed = Vec::new();
        for (key, e) in self.entries().iter_mut() {
            let load = loads.get(key).copied().unwrap_or_default();
            if e.load != Some(load) {
                e.load = Some(load);
                changed.push(key.clone());
            }
            let s = &e.spec;
            let current = e.replicas.unwrap_or(s.min);
            let want = desired(s.min, s.max, s.cycles_at_once, load);
            while e
                .recent
                .front()
                .is_some_and(|(t, _)| now.duration_since(*t) > s.scale_down)
            {
                e.recent.pop_front();
            }
            e.recent.push_back((now, want));
            // Down only as far as the most the window asked for.
            let floor = e.recent.iter().map(|(_, n)| *n).max().unwrap_or(want);
            let to = if want > current {
                Some(want)
            } else {
                (floor < current).then_some(floor)
            };
            if let Some(to) = to {
                e.replicas = Some(to);
                out.push(PoolScale {
                    key: key.clone(),
                    object: s.object.clone(),
                    from: current,
                    to,
                    load,
                    slots: s.cycles_at_once,
                    woken_by: None,
                });
            }
        }
        for key in changed {
            self.notify(&key);
        }
        out
    }

    /// Sets the replicas of a change; on failure the entry goes back, so the next sweep tries
    /// again.
    pub async fn scale(&self, deps: &Deps, s: PoolScale, trigger: Trigger) {
        let written = {
            let _scaling = self.lock(&s.key).await;
            if self.entries().get(&s.key).and_then(|e| e.replicas) != Some(s.to) {
                return;
            }
            deps.cluster.set_pool_replicas(&s.key, s.to).await
        };
        if let Err(e) = written {
            if matches!(&e, kube::Error::Api(status) if status.code == 404) {
                // Its Deployment is gone: the Pool was deleted (its reconcile tracks it again
                // if it was not).
                info!(pool = %s.key, "the pool's Deployment is gone; forgetting the pool");
                self.forget(&s.key);
                return;
            }
            warn!(pool = %s.key, error = %crate::report::chain(&e), to = s.to, "cannot set the pool's replicas; the next sweep retries");
            if let Some(entry) = self.entries().get_mut(&s.key) {
                if entry.replicas == Some(s.to) {
                    entry.replicas = Some(s.from);
                }
            }
            return;
        }
        let reason = if s.to > s.from {
            "ScaledUp"
        } else {
            "ScaledDown"
        };
        let why = match &s.woken_by {
            Some(agent) => format!("an event for agent {agent}"),
            None => format!(
                "{} agent(s) thinking and {} waiting, {} cycle slot(s) per replica",
                s.load.thinking, s.load.waiting, s.slots
            ),
        };
        let trigger = trigger.as_str();
        info!(pool = %s.key, from = s.from, to = s.to, trigger, "pool scaled");
        let notice = Notice {
            kind: EventType::Normal,
            reason: reason.into(),
            action: "Scale",
            note: format!("pool scaled {} → {} by the {trigger}: {why}", s.from, s.to),
        };
        deps.cluster.publish(&s.object, notice).await;
        self.notify(&s.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(thinking: u32, waiting: u32) -> PoolLoad {
        PoolLoad {
            agents: 100,
            thinking,
            waiting,
        }
    }

    #[test]
    fn replicas_follow_the_agents_with_work_within_the_bounds() {
        assert_eq!(desired(0, 3, 16, load(0, 0)), 0, "nothing to do, min 0");
        assert_eq!(desired(1, 3, 16, load(0, 0)), 1);
        assert_eq!(desired(0, 3, 16, load(0, 1)), 1, "one event starts one");
        assert_eq!(desired(0, 3, 16, load(16, 0)), 1);
        assert_eq!(desired(0, 3, 16, load(16, 1)), 2);
        assert_eq!(desired(0, 3, 16, load(40, 100)), 3, "at most max");
        assert_eq!(desired(2, 5, 4, load(1, 0)), 2, "at least min");
    }

    fn tracked(min: i32, max: i32, replicas: Option<i32>) -> PoolTracked {
        PoolTracked {
            object: ObjectReference::default(),
            min,
            max,
            cycles_at_once: 4,
            scale_down: Duration::from_secs(60),
            replicas,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn up_at_once_down_after_the_delay_and_a_wake_starts_one() {
        let pools = Pools::default();
        let mut changes = pools.changes().unwrap();
        let key = PoolKey::new("fam", "shared");
        pools.track(&key, tracked(0, 3, Some(0)));
        assert_eq!(pools.replicas_for(&key, 0, 3, None), 0);
        let loads = |t, w| HashMap::from([(key.clone(), load(t, w))]);
        let t0 = Instant::now();
        let up: Vec<(i32, i32)> = pools
            .observe(&loads(4, 5), t0)
            .iter()
            .map(|s| (s.from, s.to))
            .collect();
        assert_eq!(up, [(0, 3)]);
        assert_eq!(
            changes.try_recv().unwrap().name,
            "shared",
            "status to write"
        );
        assert_eq!(pools.load(&key), Some(load(4, 5)));
        // Quiet: down only once a minute has asked for fewer.
        let at = |s: u64| t0 + Duration::from_secs(s);
        let to = |v: Vec<PoolScale>| v.iter().map(|s| (s.from, s.to)).collect::<Vec<_>>();
        assert!(pools.observe(&loads(1, 0), at(1)).is_empty());
        assert!(pools.observe(&loads(1, 0), at(60)).is_empty());
        assert_eq!(to(pools.observe(&loads(1, 0), at(61))), [(3, 1)]);
        // Down as far as the window's most: a burst within it holds what it needed.
        assert!(
            pools.observe(&loads(3, 0), at(100)).is_empty(),
            "4 slots for 3"
        );
        assert_eq!(to(pools.observe(&loads(8, 0), at(110))), [(1, 2)]);
        assert!(pools.observe(&loads(0, 0), at(130)).is_empty());
        assert!(
            pools.observe(&loads(0, 0), at(170)).is_empty(),
            "110 is in the window"
        );
        assert_eq!(to(pools.observe(&loads(0, 0), at(171))), [(2, 0)]);
        // Asleep at zero, a wake starts one replica, once.
        let woken = pools.wake(&key, "a1").unwrap();
        assert_eq!((woken.from, woken.to), (0, 1));
        assert_eq!(woken.woken_by.as_deref(), Some("a1"));
        assert!(pools.wake(&key, "a2").is_none(), "already starting");
        assert!(pools.wake(&PoolKey::new("fam", "other"), "a1").is_none());
        // A narrower spec brings the count within it.
        pools.track(&key, tracked(2, 2, Some(1)));
        assert_eq!(pools.replicas_for(&key, 2, 2, None), 2);
        pools.forget(&key);
        assert_eq!(
            pools.replicas_for(&key, 0, 3, Some(2)),
            2,
            "the status' count"
        );
    }
}

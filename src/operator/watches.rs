//! What wakes the controllers, beyond their own objects: a Space wakes the Agents that name
//! it ([`agents_naming`]); an Agent wakes the Spaces whose membership it changed
//! ([`MembershipChanges`]), not on its frequent status writes; a worker Deployment wakes its
//! Agent only when it needs repair or its availability changed ([`worker_changes`]), not on
//! the scaler's own replica changes. A Pool wakes the Agents it runs only when whether it can
//! run them changed ([`pool_placement_changes`]); an Agent wakes the Pools it left or joined,
//! or whose manifest it changed ([`PoolChanges`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::runtime::reflector::{ObjectRef, Store as Cache};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, ResourceExt};

use super::build;
use super::dataplane::Scaler;
use crate::crd::{Agent, ModelResource, Pool, Space};
use crate::identity::AgentKey;
use crate::sync::lock;

/// Agents in `space`'s namespace that name it.
pub(super) fn agents_naming(agents: &Cache<Agent>, space: &Space) -> Vec<ObjectRef<Agent>> {
    let ns = space.namespace();
    let name = space.name_any();
    agents
        .state()
        .iter()
        .filter(|a| a.namespace() == ns && a.spec.spaces.contains(&name))
        .map(|a| ObjectRef::from_obj(a.as_ref()))
        .collect()
}

/// Which Spaces an Agent event concerns: only a change of the spaces it names, or of whether
/// it is being deleted, changes membership — its frequent status writes do not.
#[derive(Default)]
pub(super) struct MembershipChanges {
    seen: Mutex<HashMap<String, (Vec<String>, bool)>>,
}

impl MembershipChanges {
    /// The Spaces to reconcile for this version of `agent`: those it named before and names
    /// now (that exist), when that (or its deletion) changed; none otherwise.
    pub(super) fn affected(&self, agent: &Agent, spaces: &Cache<Space>) -> Vec<ObjectRef<Space>> {
        let Some(uid) = agent.uid() else {
            return Vec::new();
        };
        let now = (
            agent.spec.spaces.clone(),
            agent.metadata.deletion_timestamp.is_some(),
        );
        let before = {
            let mut seen = lock(&self.seen);
            match seen.insert(uid, now.clone()) {
                Some(before) if before == now => return Vec::new(),
                before => before,
            }
        };
        let ns = agent.namespace().unwrap_or_default();
        let mut names: Vec<String> = before
            .map(|(spaces, _)| spaces)
            .unwrap_or_default()
            .into_iter()
            .chain(now.0)
            .collect();
        names.sort();
        names.dedup();
        // Spaces that do not exist (yet) derive their members when they are created.
        names
            .into_iter()
            .map(|n| ObjectRef::new(&n).within(&ns))
            .filter(|r| spaces.get(r).is_some())
            .collect()
    }

    /// Forgets Agents that no longer exist.
    pub(super) fn retain(&self, agents: &Cache<Agent>) {
        forget_gone(&self.seen, agents);
    }
}

/// Agents in `model`'s namespace that name a Model (a change of one may change the list of
/// any of them, through fallbacks).
pub(super) fn agents_with_models(
    agents: &Cache<Agent>,
    model: &ModelResource,
) -> Vec<ObjectRef<Agent>> {
    let ns = model.namespace();
    agents
        .state()
        .iter()
        .filter(|a| a.namespace() == ns && a.spec.model.model_ref.is_some())
        .map(|a| ObjectRef::from_obj(a.as_ref()))
        .collect()
}

/// Pools in `model`'s namespace (their members' manifests carry its settings).
pub(super) fn pools_of_namespace(
    pools: &Cache<Pool>,
    model: &ModelResource,
) -> Vec<ObjectRef<Pool>> {
    let ns = model.namespace();
    pools
        .state()
        .iter()
        .filter(|p| p.namespace() == ns)
        .map(|p| ObjectRef::from_obj(p.as_ref()))
        .collect()
}

/// Models in `agent`'s namespace (their status lists their agents; one that stopped naming
/// a Model leaves its list too).
pub(super) fn models_of_namespace(
    models: &Cache<ModelResource>,
    agent: &Agent,
) -> Vec<ObjectRef<ModelResource>> {
    let ns = agent.namespace();
    models
        .state()
        .iter()
        .filter(|m| m.namespace() == ns)
        .map(|m| ObjectRef::from_obj(m.as_ref()))
        .collect()
}

/// The other Models of `model`'s namespace (whose agents may come through its list).
pub(super) fn other_models(
    models: &Cache<ModelResource>,
    model: &ModelResource,
) -> Vec<ObjectRef<ModelResource>> {
    let ns = model.namespace();
    let name = model.name_any();
    models
        .state()
        .iter()
        .filter(|m| m.namespace() == ns && m.name_any() != name)
        .map(|m| ObjectRef::from_obj(m.as_ref()))
        .collect()
}

/// Models made, changed (a new generation) or deleted: not their status writes (a probe's).
pub(super) fn model_spec_changes(
    api: Api<ModelResource>,
    config: watcher::Config,
) -> impl futures::Stream<Item = Result<ModelResource, watcher::Error>> + Send + 'static {
    watcher(api, config)
        .default_backoff()
        .touched_objects()
        .predicate_filter(kube::runtime::predicates::generation, Default::default())
}

/// Agents made, changed (a new generation) or deleted: not their status writes.
pub(super) fn agent_spec_changes(
    api: Api<Agent>,
    config: watcher::Config,
) -> impl futures::Stream<Item = Result<Agent, watcher::Error>> + Send + 'static {
    watcher(api, config)
        .default_backoff()
        .touched_objects()
        .predicate_filter(kube::runtime::predicates::generation, Default::default())
}

/// Agents in `pool`'s namespace that name it.
pub(super) fn agents_in_pool(agents: &Cache<Agent>, pool: &Pool) -> Vec<ObjectRef<Agent>> {
    let ns = pool.namespace();
    let name = pool.name_any();
    agents
        .state()
        .iter()
        .filter(|a| a.namespace() == ns && a.spec.runtime.as_ref().is_some_and(|r| r.pool == name))
        .map(|a| ObjectRef::from_obj(a.as_ref()))
        .collect()
}

/// Which Pools an Agent event concerns: the one it named before and the one it names now,
/// when its spec (its generation), its pool or its deletion changed — not its status writes.
#[derive(Default)]
pub(super) struct PoolChanges {
    seen: Mutex<HashMap<String, PoolSeen>>,
}

/// What [`PoolChanges`] remembers of an Agent: its pool, generation, deletion and the
/// revision it runs (`spec.rollout.rehearse`).
type PoolSeen = (Option<String>, Option<i64>, bool, Option<String>);

impl PoolChanges {
    /// The Pools to reconcile for this version of `agent`.
    pub(super) fn affected(&self, agent: &Agent) -> Vec<ObjectRef<Pool>> {
        let Some(uid) = agent.uid() else {
            return Vec::new();
        };
        let now = (
            agent.spec.runtime.as_ref().map(|r| r.pool.clone()),
            agent.metadata.generation,
            agent.metadata.deletion_timestamp.is_some(),
            // A held change that passed renders the agent anew.
            super::rollout::running_revision(agent),
        );
        let before = {
            let mut seen = lock(&self.seen);
            match seen.insert(uid, now.clone()) {
                Some(before) if before == now => return Vec::new(),
                before => before.and_then(|b| b.0),
            }
        };
        let ns = agent.namespace().unwrap_or_default();
        let mut names: Vec<String> = before.into_iter().chain(now.0).collect();
        names.sort();
        names.dedup();
        names
            .into_iter()
            .map(|n| ObjectRef::new(&n).within(&ns))
            .collect()
    }

    /// Forgets Agents that no longer exist.
    pub(super) fn retain(&self, agents: &Cache<Agent>) {
        forget_gone(&self.seen, agents);
    }
}

/// Forgets, in a map by Agent uid, the Agents that no longer exist.
fn forget_gone<V>(seen: &Mutex<HashMap<String, V>>, agents: &Cache<Agent>) {
    let live: HashSet<String> = agents.state().iter().filter_map(|a| a.uid()).collect();
    lock(seen).retain(|uid, _| live.contains(uid));
}

/// Pool events that matter to its Agents' `WorkerAvailable`: its creation and deletion, and a
/// change of whether a replica is ready or it is scaled to zero — not its frequent load
/// writes.
pub(super) fn pool_placement_changes(
    api: Api<Pool>,
    config: watcher::Config,
) -> impl futures::Stream<Item = Result<Pool, watcher::Error>> + Send + 'static {
    let placement = |p: &Pool| {
        let status = p.status.clone().unwrap_or_default();
        (
            status.ready_replicas.unwrap_or(0) >= 1,
            status.replicas.unwrap_or(0) == 0,
            p.spec.replicas.min == 0,
        )
    };
    let mut seen: HashMap<String, (bool, bool, bool)> = HashMap::new();
    watcher(api, config)
        .default_backoff()
        .filter_map(move |event| {
            let out = match event {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                    let now = placement(&p);
                    let key = p.uid().unwrap_or_else(|| p.name_any());
                    (seen.insert(key, now) != Some(now)).then_some(Ok(p))
                }
                Ok(watcher::Event::Delete(p)) => {
                    seen.remove(&p.uid().unwrap_or_else(|| p.name_any()));
                    Some(Ok(p))
                }
                Ok(watcher::Event::Init | watcher::Event::InitDone) => None,
                Err(e) => Some(Err(e)),
            };
            futures::future::ready(out)
        })
}

/// Worker Deployment events that matter to their Agent: a spec change other than replicas
/// (someone edited it: repair), an availability change (conditions), or a deletion (repair).
/// A scale change (the scaler's own) and a write that changes only metadata — such as the
/// managed-fields time some API servers bump on an unchanged server-side apply — trigger
/// nothing, so a wake costs one API call and an unchanged apply cannot loop.
pub(super) fn worker_changes(
    api: Api<Deployment>,
    config: watcher::Config,
    scaler: Arc<Scaler>,
) -> impl futures::Stream<Item = Result<Deployment, watcher::Error>> + Send + 'static {
    use std::hash::{Hash, Hasher};
    let fingerprint = |d: &Deployment| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        // The spec without replicas (the scaler's to change, and no reason to reconcile), and
        // what the conditions are made of.
        let mut spec = d.spec.clone();
        if let Some(spec) = spec.as_mut() {
            spec.replicas = None;
        }
        serde_json::to_string(&spec)
            .unwrap_or_default()
            .hash(&mut h);
        let status = d.status.clone().unwrap_or_default();
        status.available_replicas.hash(&mut h);
        for c in status.conditions.unwrap_or_default() {
            (c.type_, c.status, c.reason, c.message).hash(&mut h);
        }
        h.finish()
    };
    let mut seen: HashMap<String, u64> = HashMap::new();
    watcher(api, config)
        .default_backoff()
        .filter_map(move |event| {
            let out = match event {
                Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)) => {
                    let key = d.uid().unwrap_or_else(|| d.name_any());
                    let print = fingerprint(&d);
                    let changed = seen.insert(key, print) != Some(print);
                    // Replicas someone else set on a worker the operator scales: repair.
                    let agent = d
                        .labels()
                        .get(build::AGENT_LABEL)
                        .map(|name| AgentKey::new(d.namespace().unwrap_or_default(), name.clone()));
                    let stray = agent
                        .and_then(|a| scaler.expected_replicas(&a))
                        .is_some_and(|n| d.spec.as_ref().and_then(|s| s.replicas) != Some(n));
                    (changed || stray).then_some(Ok(d))
                }
                Ok(watcher::Event::Delete(d)) => {
                    seen.remove(&d.uid().unwrap_or_else(|| d.name_any()));
                    Some(Ok(d))
                }
                Ok(watcher::Event::Init | watcher::Event::InitDone) => None,
                Err(e) => Some(Err(e)),
            };
            futures::future::ready(out)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::tests::{agent_yaml, cache, lobby};

    #[test]
    fn an_agent_wakes_the_pools_it_left_joined_or_changed_in() {
        let changes = PoolChanges::default();
        let names =
            |refs: Vec<ObjectRef<Pool>>| refs.into_iter().map(|r| r.name).collect::<Vec<_>>();
        let mut a = agent_yaml("  runtime: {pool: shared}");
        assert_eq!(names(changes.affected(&a)), ["shared"]);
        assert!(changes.affected(&a).is_empty(), "the same again");
        a.status = Some(crate::crd::AgentStatus {
            inbox_depth: Some(3),
            ..Default::default()
        });
        assert!(changes.affected(&a).is_empty(), "a status write");
        a.metadata.generation = Some(3);
        assert_eq!(
            names(changes.affected(&a)),
            ["shared"],
            "its manifest changed"
        );
        a.spec.runtime = Some(crate::crd::RuntimeSpec {
            pool: "other".into(),
        });
        a.metadata.generation = Some(4);
        assert_eq!(names(changes.affected(&a)), ["other", "shared"], "moved");
        a.spec.runtime = None;
        a.metadata.generation = Some(5);
        assert_eq!(
            names(changes.affected(&a)),
            ["other"],
            "left for its own worker"
        );
        a.metadata.generation = Some(6);
        assert!(
            changes.affected(&a).is_empty(),
            "a dedicated agent's change"
        );
    }
    #[test]
    fn only_membership_changes_of_an_agent_reconcile_spaces() {
        let changes = MembershipChanges::default();
        let mut garden = lobby(true);
        garden.metadata.name = Some("garden".into());
        garden.metadata.uid = Some("garden-uid".into());
        let (spaces, _w) = cache(vec![lobby(true), garden]);
        let names = |refs: Vec<kube::runtime::reflector::ObjectRef<Space>>| {
            refs.into_iter().map(|r| r.name).collect::<Vec<_>>()
        };
        let mut a = agent_yaml("");
        a.spec.spaces = vec!["lobby".into(), "nowhere".into()];
        assert_eq!(
            names(changes.affected(&a, &spaces)),
            ["lobby"],
            "first sight; only existing spaces"
        );
        assert!(changes.affected(&a, &spaces).is_empty(), "the same again");
        a.status = Some(crate::crd::AgentStatus {
            inbox_depth: Some(7),
            ..Default::default()
        });
        assert!(changes.affected(&a, &spaces).is_empty(), "a status write");
        a.spec.spaces = vec!["garden".into()];
        assert_eq!(
            names(changes.affected(&a, &spaces)),
            ["garden", "lobby"],
            "left one, joined another"
        );
        a.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        ));
        assert_eq!(
            names(changes.affected(&a, &spaces)),
            ["garden"],
            "being deleted"
        );
    }
}

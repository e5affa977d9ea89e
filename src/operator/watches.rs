//! What wakes the controllers, beyond their own objects: a Space wakes the Agents that name
//! it ([`agents_naming`]); an Agent wakes the Spaces whose membership it changed
//! ([`MembershipChanges`]), not on its frequent status writes; a worker Deployment wakes its
//! Agent only when it needs repair or its availability changed ([`worker_changes`]), not on
//! the scaler's own replica changes.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::runtime::reflector::{ObjectRef, Store as Cache};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, ResourceExt};

use super::build;
use super::dataplane::Scaler;
use crate::crd::{Agent, Space};
use crate::store::AgentKey;

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
            let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
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
        let live: HashSet<String> = agents.state().iter().filter_map(|a| a.uid()).collect();
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|uid, _| live.contains(uid));
    }
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

//! Space membership, derived from the manifests by one pure function.
//!
//! An Agent declares the spaces it belongs to (`spec.spaces`); a Space lists its human
//! members. [`derive`] maps all Agents and Spaces to the member list of every Space. The
//! operator applies the result from the cluster, `agentfleet dev` from files.

use std::collections::BTreeMap;

use kube::ResourceExt;

use crate::crd::{Agent, MemberKind, ResolvedMember, Space, SubjectKind};
use crate::identity::SpaceKey;

/// Members of every Space: the Agents (of the same namespace, not being deleted) that name it,
/// sorted by name, then its human members in the order the Space lists them.
///
/// Agents naming a Space that does not exist belong to nothing; see [`missing_spaces`].
pub fn derive(agents: &[&Agent], spaces: &[&Space]) -> BTreeMap<SpaceKey, Vec<ResolvedMember>> {
    let mut out: BTreeMap<SpaceKey, Vec<ResolvedMember>> = spaces
        .iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .map(|s| (SpaceKey::of(s), Vec::new()))
        .collect();
    let mut sorted: Vec<&&Agent> = agents
        .iter()
        .filter(|a| a.metadata.deletion_timestamp.is_none())
        .collect();
    sorted.sort_by_key(|a| a.name_any());
    for agent in sorted {
        let ns = agent.namespace().unwrap_or_else(|| "default".to_string());
        for space in &agent.spec.spaces {
            if let Some(members) = out.get_mut(&SpaceKey::new(ns.clone(), space.clone())) {
                if !members.iter().any(|m| m.id == agent.name_any()) {
                    members.push(ResolvedMember {
                        kind: MemberKind::Agent,
                        id: agent.name_any(),
                        name: agent.name_any(),
                    });
                }
            }
        }
    }
    for space in spaces {
        if let Some(members) = out.get_mut(&SpaceKey::of(space)) {
            members.extend(people(space).members);
        }
    }
    out
}

/// The people, groups and ServiceAccounts a Space names, as the gateway knows them.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct People {
    /// People and ServiceAccounts, by their member ids, in the order the Space names them.
    pub members: Vec<ResolvedMember>,
    /// Groups whose every member is a member.
    pub groups: Vec<String>,
    /// Why a member named is none (`members[2]: …`): an id no one can have.
    pub refused: Vec<String>,
}

/// What the Space's `spec.members` name (see [`crate::cluster_users`] for the ids).
pub fn people(space: &Space) -> People {
    let ns = space.namespace().unwrap_or_else(|| "default".to_string());
    let mut out = People::default();
    for (i, m) in space.spec.members.iter().enumerate() {
        let id = match m.kind {
            SubjectKind::Group => {
                if crate::cluster_users::is_group(&m.id) {
                    if !out.groups.contains(&m.id) {
                        out.groups.push(m.id.clone());
                    }
                } else {
                    out.refused
                        .push(format!("members[{i}]: {:?} is not a group name", m.id));
                }
                continue;
            }
            SubjectKind::User => crate::cluster_users::member_id(&m.id),
            SubjectKind::ServiceAccount => crate::cluster_users::service_account_id(&m.id, &ns),
        };
        match id {
            Ok(id) if !out.members.iter().any(|r| r.id == id) => {
                out.members.push(ResolvedMember {
                    kind: MemberKind::Human,
                    name: m.name.clone().unwrap_or_else(|| m.id.clone()),
                    id,
                });
            }
            Ok(id) => out
                .refused
                .push(format!("members[{i}]: {id} is named twice")),
            Err(e) => out.refused.push(format!("members[{i}]: {e}")),
        }
    }
    out
}

/// The name of the space `wanted` names among `spaces` (an agent's spaces as `(name,
/// record)`): by name, or by display name ignoring case. The one space lookup of the tools
/// and the streaming of `send_message`.
pub fn resolve<'a>(
    spaces: &'a [(String, Option<crate::store::SpaceRecord>)],
    wanted: &str,
) -> Option<&'a str> {
    spaces
        .iter()
        .find(|(n, r)| {
            n == wanted
                || r.as_ref()
                    .is_some_and(|r| r.display_name.eq_ignore_ascii_case(wanted))
        })
        .map(|(n, _)| n.as_str())
}

/// What the data plane keeps of a Space with these resolved members.
pub fn record(space: &Space, members: &[ResolvedMember]) -> crate::store::SpaceRecord {
    crate::store::SpaceRecord {
        v: crate::store::V1,
        display_name: space
            .spec
            .display_name
            .clone()
            .unwrap_or_else(|| space.name_any()),
        members: members.iter().map(crate::store::Member::from).collect(),
        groups: people(space).groups,
        max_messages: space.spec.retention.max_messages,
        // Any message fits in a page, whatever a manifest the schema did not check says.
        max_message_bytes: space
            .spec
            .retention
            .max_message_bytes
            .min(crate::store::PAGE_BYTES as u64),
        loop_guard: space.spec.loop_guard.into(),
        context_id: None,
    }
}

/// The Spaces that exist (not being deleted), to look agents' spaces up in.
pub fn existing(spaces: &[&Space]) -> std::collections::HashSet<SpaceKey> {
    spaces
        .iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .map(|s| SpaceKey::of(s))
        .collect()
}

/// The spaces an Agent names that do not exist in its namespace (`existing`: see
/// [`existing`]), in the order it names them.
pub fn missing_spaces(
    agent: &Agent,
    existing: &std::collections::HashSet<SpaceKey>,
) -> Vec<String> {
    let ns = agent.namespace().unwrap_or_else(|| "default".to_string());
    agent
        .spec
        .spaces
        .iter()
        .filter(|name| !existing.contains(&SpaceKey::new(ns.clone(), name.as_str())))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(yaml: &str) -> Agent {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn space(yaml: &str) -> Space {
        serde_yaml::from_str(yaml).unwrap()
    }

    const MODEL: &str = "model: {provider: scripted, name: echo}";

    #[test]
    fn agents_join_spaces_of_their_namespace_and_humans_follow() {
        let b = agent(&format!(
            "{{apiVersion: agentfleet.dev/v1alpha1, kind: Agent, metadata: {{name: bob, namespace: fam}}, spec: {{{MODEL}, spaces: [family]}}}}"
        ));
        let a = agent(&format!(
            "{{apiVersion: agentfleet.dev/v1alpha1, kind: Agent, metadata: {{name: alice, namespace: fam}}, spec: {{{MODEL}, spaces: [family, work]}}}}"
        ));
        let other_ns = agent(&format!(
            "{{apiVersion: agentfleet.dev/v1alpha1, kind: Agent, metadata: {{name: carol, namespace: other}}, spec: {{{MODEL}, spaces: [family]}}}}"
        ));
        let family = space(
            "{apiVersion: agentfleet.dev/v1alpha1, kind: Space, metadata: {name: family, namespace: fam}, spec: {members: [{id: husam, name: Husam}, {id: ahmad}]}}",
        );
        let m = derive(&[&b, &a, &other_ns], &[&family]);
        assert_eq!(m.len(), 1);
        let members = &m[&SpaceKey::new("fam", "family")];
        let ids: Vec<(MemberKind, &str, &str)> = members
            .iter()
            .map(|m| (m.kind, m.id.as_str(), m.name.as_str()))
            .collect();
        assert_eq!(
            ids,
            vec![
                (MemberKind::Agent, "alice", "alice"),
                (MemberKind::Agent, "bob", "bob"),
                (MemberKind::Human, "husam", "Husam"),
                (MemberKind::Human, "ahmad", "ahmad"),
            ]
        );
        let known = existing(&[&family]);
        assert_eq!(missing_spaces(&a, &known), vec!["work".to_string()]);
        assert!(missing_spaces(&b, &known).is_empty());
    }

    #[test]
    fn a_space_names_people_groups_and_service_accounts_as_rbac_does() {
        let ops = space(
            "{apiVersion: agentfleet.dev/v1alpha1, kind: Space, metadata: {name: desk, namespace: ops}, spec: {members: [\
             {id: husam, name: Husam}, \
             {id: 'oidc:alice@example.com', name: Alice}, \
             {id: sre, kind: Group}, \
             {id: 'system:serviceaccounts:ci', kind: Group}, \
             {id: ci-bot, kind: ServiceAccount}, \
             {id: tools/lint, kind: ServiceAccount}, \
             {id: system.serviceaccount.ops.fake}, \
             {id: husam, kind: ServiceAccount, name: 'not a clash: another kind'}, \
             {id: 'oidc.alice@example.com'}]}}",
        );
        let people = people(&ops);
        let ids: Vec<(&str, &str)> = people
            .members
            .iter()
            .map(|m| (m.id.as_str(), m.name.as_str()))
            .collect();
        assert_eq!(
            ids,
            [
                ("husam", "Husam"),
                ("oidc.alice@example.com", "Alice"),
                ("system.serviceaccount.ops.ci-bot", "ci-bot"),
                ("system.serviceaccount.tools.lint", "tools/lint"),
                (
                    "system.serviceaccount.ops.husam",
                    "not a clash: another kind"
                ),
            ]
        );
        assert_eq!(people.groups, ["sre", "system:serviceaccounts:ci"]);
        assert_eq!(people.refused.len(), 2, "{:?}", people.refused);
        assert!(
            people.refused[0].starts_with("members[6]: ") && people.refused[0].contains("pose")
        );
        assert!(people.refused[1].contains("members[8]: oidc.alice@example.com is named twice"));
        let record = record(&ops, &people.members);
        assert_eq!(record.groups, ["sre", "system:serviceaccounts:ci"]);

        // Admitted by a group: a person in it, never a service of the same name.
        use crate::store::MemberKind;
        let sender = |kind, groups: &[&str]| crate::store::Sender {
            id: "zaid@example.com".into(),
            name: "Zaid".into(),
            kind,
            groups: groups.iter().map(|g| g.to_string()).collect(),
        };
        assert!(record.admits(&sender(Some(MemberKind::Human), &["dev", "sre"])));
        assert!(!record.admits(&sender(Some(MemberKind::Human), &["dev"])));
        assert!(!record.admits(&sender(None, &["sre"])));
        assert!(!record.admits(&sender(Some(MemberKind::Agent), &["sre"])));
    }

    #[test]
    fn deleted_objects_are_not_members() {
        let mut a = agent(&format!(
            "{{apiVersion: agentfleet.dev/v1alpha1, kind: Agent, metadata: {{name: alice, namespace: fam}}, spec: {{{MODEL}, spaces: [family]}}}}"
        ));
        let mut family = space(
            "{apiVersion: agentfleet.dev/v1alpha1, kind: Space, metadata: {name: family, namespace: fam}, spec: {}}",
        );
        assert_eq!(
            derive(&[&a], &[&family])[&SpaceKey::new("fam", "family")].len(),
            1
        );
        a.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        assert!(derive(&[&a], &[&family])[&SpaceKey::new("fam", "family")].is_empty());
        family.metadata.deletion_timestamp = a.metadata.deletion_timestamp.clone();
        assert!(derive(&[&a], &[&family]).is_empty());
    }

    #[test]
    fn derivation_is_deterministic_whatever_the_input_order() {
        let agents: Vec<Agent> = (0..20)
            .map(|i| {
                agent(&format!(
                    "{{apiVersion: agentfleet.dev/v1alpha1, kind: Agent, metadata: {{name: a{i:02}, namespace: ns}}, spec: {{{MODEL}, spaces: [s]}}}}"
                ))
            })
            .collect();
        let s = space("{apiVersion: agentfleet.dev/v1alpha1, kind: Space, metadata: {name: s, namespace: ns}, spec: {}}");
        let fwd: Vec<&Agent> = agents.iter().collect();
        let rev: Vec<&Agent> = agents.iter().rev().collect();
        assert_eq!(derive(&fwd, &[&s]), derive(&rev, &[&s]));
    }
}

//! The Space controller against a mocked API server: membership in the data plane and
//! status, the finalizer, the orphan sweep.

use http::Method;
use serde_json::json;

use super::{agent_yaml, condition, expect, harness, lobby};
use crate::identity::SpaceKey;
use crate::operator::space;
use crate::store::{prelude::*, SpaceRecord};
#[tokio::test]
async fn space_membership_lands_in_the_store_and_status() {
    let alice = agent_yaml("");
    let mut h = harness(vec![alice], vec![lobby(true)]);
    let (result, bodies) = h
        .run_space(
            lobby(true),
            vec![
                expect(Method::PATCH, "/apis/agentfleet.dev/v1alpha1/namespaces/default/spaces/lobby/status?&force=true&fieldManager=agentfleet-operator"),
                expect(Method::POST, "/events"),
            ],
        )
        .await;
    result.unwrap();
    let status = &bodies[0]["status"];
    assert_eq!(status["memberCount"], 2);
    assert_eq!(
        status["members"],
        json!([{"kind": "Agent", "id": "echo", "name": "echo"}, {"kind": "Human", "id": "husam", "name": "Husam"}])
    );
    assert_eq!(condition(status, "Ready")["reason"], "MembershipApplied");
    assert_eq!(bodies[1]["reason"], "MembershipApplied");
    assert_eq!(bodies[1]["note"], "members: agent echo, human husam");
    let stored = h
        .store
        .space(&SpaceKey::new("default", "lobby"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.members.len(), 2);
}

/// Issue 42: a Space names Kubernetes users, groups and ServiceAccounts; one no one can be is
/// said in `MembersValid` and a Warning event, and the others still land.
#[tokio::test]
async fn people_groups_and_service_accounts_land_and_a_member_no_one_is_is_said() {
    let mut lobby = lobby(true);
    lobby.spec.members = serde_yaml::from_str(
        "[{id: husam, name: Husam}, {id: 'oidc:alice@example.com'}, {id: sre, kind: Group}, {id: ci-bot, kind: ServiceAccount}, {id: system.serviceaccount.default.fake}]",
    )
    .unwrap();
    let mut h = harness(vec![], vec![lobby.clone()]);
    let (result, bodies) = h
        .run_space(
            lobby,
            vec![
                expect(Method::PATCH, "/spaces/lobby/status?"),
                expect(Method::POST, "/events"),
                expect(Method::POST, "/events"),
            ],
        )
        .await;
    result.unwrap();
    let status = &bodies[0]["status"];
    let ids: Vec<&str> = status["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "husam",
            "oidc.alice@example.com",
            "system.serviceaccount.default.ci-bot"
        ]
    );
    assert_eq!(status["groups"], json!(["sre"]));
    let valid = condition(status, "MembersValid");
    assert_eq!(valid["status"], "False");
    assert_eq!(valid["reason"], "InvalidMember");
    assert!(
        valid["message"]
            .as_str()
            .unwrap()
            .starts_with("members[4]: "),
        "{valid}"
    );
    assert_eq!(condition(status, "Ready")["status"], "True");
    assert_eq!(bodies[1]["reason"], "InvalidMember");
    assert_eq!(bodies[1]["type"], "Warning");
    let stored = h
        .store
        .space(&SpaceKey::new("default", "lobby"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.groups, ["sre"]);
}

#[tokio::test]
async fn new_space_gets_the_finalizer_first() {
    let mut h = harness(vec![], vec![lobby(false)]);
    let (result, bodies) = h
        .run_space(lobby(false), vec![expect(Method::PATCH, "/spaces/lobby?")])
        .await;
    result.unwrap();
    assert!(
        bodies[0].to_string().contains(space::FINALIZER),
        "{}",
        bodies[0]
    );
}

#[tokio::test]
async fn deleted_space_leaves_the_store_and_drops_the_finalizer() {
    let mut h = harness(vec![], vec![]);
    let key = SpaceKey::new("default", "lobby");
    h.store
        .apply_space(
            &key,
            &SpaceRecord {
                v: crate::store::V1,
                display_name: "x".into(),
                members: vec![],
                groups: Vec::new(),
                max_messages: 1,
                max_message_bytes: crate::store::DEFAULT_MAX_MESSAGE_BYTES,
                loop_guard: Default::default(),
                context_id: None,
            },
        )
        .await
        .unwrap();
    let mut deleted = lobby(true);
    deleted.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()),
    );
    let (result, bodies) = h
        .run_space(deleted, vec![expect(Method::PATCH, "/spaces/lobby?")])
        .await;
    result.unwrap();
    let ops = bodies[0].as_array().expect("a JSON patch");
    assert!(
        ops.iter()
            .any(|op| op["op"] == "remove" && op["path"] == "/metadata/finalizers/0"),
        "{}",
        bodies[0]
    );
    assert_eq!(h.store.space(&key).await.unwrap(), None);
}

#[tokio::test]
async fn orphan_sweep_removes_memberships_of_vanished_spaces() {
    let h = harness(vec![], vec![lobby(true)]);
    h.store
        .apply_space(
            &SpaceKey::new("default", "lobby"),
            &SpaceRecord {
                v: crate::store::V1,
                display_name: "x".into(),
                members: vec![],
                groups: Vec::new(),
                max_messages: 1,
                max_message_bytes: crate::store::DEFAULT_MAX_MESSAGE_BYTES,
                loop_guard: Default::default(),
                context_id: None,
            },
        )
        .await
        .unwrap();
    h.store
        .apply_space(
            &SpaceKey::new("default", "gone"),
            &SpaceRecord {
                v: crate::store::V1,
                display_name: "x".into(),
                members: vec![],
                groups: Vec::new(),
                max_messages: 1,
                max_message_bytes: crate::store::DEFAULT_MAX_MESSAGE_BYTES,
                loop_guard: Default::default(),
                context_id: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(space::sweep_orphans(&h.ctx).await.unwrap(), 1);
    assert_eq!(
        h.store.spaces().await.unwrap(),
        vec![SpaceKey::new("default", "lobby")]
    );
}

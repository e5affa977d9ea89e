//! Access decisions against a `tower-test` API server answering `SubjectAccessReview`s.

use std::time::Duration;

use http::{Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{json, Value};
use tower_test::mock::Handle;

use super::*;

type Server = Handle<Request<Body>, Response<Body>>;

fn rbac() -> (Access, Server) {
    let (svc, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (Access::Rbac(kube::Client::new(svc, "default")), handle)
}

fn person(groups: &[&str]) -> Entity {
    Entity {
        kind: EntityKind::Human,
        id: "oidc.alice@example.com".into(),
        name: "oidc:alice@example.com".into(),
        agents: Vec::new(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
    }
}

fn kubernetes() -> TokenHash {
    TokenHash::Kubernetes {
        user: "oidc:alice@example.com".into(),
        token: crate::gateway::auth::testing_bearer("t"),
    }
}

/// Answers the next access review `allowed` (or with an HTTP `code`), returning it.
async fn answer(server: &mut Server, code: u16, allowed: bool) -> Value {
    let (req, send) = tokio::time::timeout(Duration::from_secs(5), server.next_request())
        .await
        .expect("a review within 5 s")
        .expect("the client is alive");
    assert_eq!(
        req.uri().path(),
        "/apis/authorization.k8s.io/v1/subjectaccessreviews"
    );
    let bytes = req.into_body().collect_bytes().await.unwrap();
    let asked: Value = serde_json::from_slice(&bytes).unwrap();
    let body = if code == 200 {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": asked["spec"], "status": {"allowed": allowed}})
    } else {
        json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": code, "message": "nope"})
    };
    send.send_response(
        Response::builder()
            .status(StatusCode::from_u16(code).unwrap())
            .body(Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap(),
    );
    asked
}

#[tokio::test]
async fn rbac_decides_each_operation_on_the_agent_itself() {
    let agent = AgentKey::new("ops", "oncall");
    let cases = [
        (Operation::ReadConsciousness, "get", "consciousness", true),
        (Operation::Restore, "update", "consciousness", false),
        (Operation::ReadCalls, "get", "calls", true),
    ];
    for (op, verb, subresource, allowed) in cases {
        let (access, mut server) = rbac();
        let caller = person(&["oidc:sre"]);
        let agent2 = agent.clone();
        let decided =
            tokio::spawn(async move { access.check(&caller, &kubernetes(), op, &agent2).await });
        let asked = answer(&mut server, 200, allowed).await;
        assert_eq!(
            asked["spec"],
            json!({
                "user": "oidc:alice@example.com",
                "groups": ["oidc:sre"],
                "resourceAttributes": {
                    "group": "agentfleet.dev", "resource": "agents", "subresource": subresource,
                    "verb": verb, "namespace": "ops", "name": "oncall"
                }
            })
        );
        match decided.await.unwrap() {
            Ok(()) => assert!(allowed),
            Err(e) => {
                assert!(!allowed);
                assert_eq!(e.status, StatusCode::FORBIDDEN);
                assert!(
                    e.message.contains(&format!(
                        "may not {verb} agents/{subresource} of \"ops/oncall\""
                    )),
                    "{}",
                    e.message
                );
            }
        }
    }
}

#[tokio::test]
async fn only_a_kubernetes_identity_is_reviewed_and_a_failing_api_server_is_a_503() {
    let agent = AgentKey::new("ops", "oncall");
    let (access, mut server) = rbac();
    let file = TokenHash::File("ab".repeat(32));
    let e = access
        .check(&person(&[]), &file, Operation::ReadConsciousness, &agent)
        .await
        .unwrap_err();
    assert_eq!(e.status, StatusCode::FORBIDDEN);
    assert!(e.message.contains("Kubernetes token"), "{}", e.message);

    let a = agent.clone();
    let decided = tokio::spawn(async move {
        access
            .check(&person(&[]), &kubernetes(), Operation::Restore, &a)
            .await
    });
    answer(&mut server, 403, false).await;
    let e = decided.await.unwrap().unwrap_err();
    assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE);

    // In dev: every person, never a service.
    let dev = Access::Everyone;
    let token = TokenHash::File("cd".repeat(32));
    dev.check(&person(&[]), &token, Operation::Restore, &agent)
        .await
        .unwrap();
    let service = Entity {
        kind: EntityKind::Service,
        ..person(&[])
    };
    let e = dev
        .check(&service, &token, Operation::ReadCalls, &agent)
        .await
        .unwrap_err();
    assert_eq!(e.status, StatusCode::FORBIDDEN);
}

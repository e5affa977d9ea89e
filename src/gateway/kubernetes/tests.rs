//! The reviews of Kubernetes tokens, against a `tower-test` API server: what each answer
//! makes of a token (a table), what is cached, and what an API server that cannot answer is.

use std::sync::Arc;

use http::{Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{json, Value};
use tower_test::mock::Handle;

use super::*;

type Server = Handle<Request<Body>, Response<Body>>;

fn reviewer(audiences: &[&str]) -> (Arc<Reviewer>, Server) {
    let (svc, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(svc, "default");
    let audiences = audiences.iter().map(|a| a.to_string()).collect();
    (
        Arc::new(Reviewer::new(client, audiences, Duration::from_secs(30))),
        handle,
    )
}

/// Answers the next review with `status` (HTTP) and `answer` (the review's `status`), and
/// returns the review asked.
async fn answer(server: &mut Server, code: u16, answer: Value) -> Value {
    let (req, send) = tokio::time::timeout(Duration::from_secs(5), server.next_request())
        .await
        .expect("a review within 5 s")
        .expect("the client is alive");
    assert_eq!(req.method(), http::Method::POST);
    assert_eq!(
        req.uri().path(),
        "/apis/authentication.k8s.io/v1/tokenreviews"
    );
    let bytes = req.into_body().collect_bytes().await.unwrap();
    let asked: Value = serde_json::from_slice(&bytes).unwrap();
    let body = if code == 200 {
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": asked["spec"], "status": answer})
    } else {
        json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": code, "reason": "Forbidden", "message": "tokenreviews.authentication.k8s.io is forbidden"})
    };
    send.send_response(
        Response::builder()
            .status(StatusCode::from_u16(code).unwrap())
            .body(Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap(),
    );
    asked
}

async fn nothing_asked(server: &mut Server) {
    if let Ok(Some((req, _))) =
        tokio::time::timeout(Duration::from_millis(200), server.next_request()).await
    {
        panic!("unexpected request {} {}", req.method(), req.uri());
    }
}

fn sa_answer() -> Value {
    json!({
        "authenticated": true,
        "audiences": ["https://kubernetes.default.svc"],
        "user": {
            "username": "system:serviceaccount:t1:bot",
            "uid": "d2f4960a",
            "groups": ["system:serviceaccounts", "system:serviceaccounts:t1", "system:authenticated", "two words"]
        }
    })
}

#[tokio::test]
async fn a_service_accounts_token_is_a_person_of_its_groups_and_is_asked_once() {
    let (reviewer, mut server) = reviewer(&[]);
    let r = reviewer.clone();
    let first = tokio::spawn(async move { r.review("sa-token").await });
    let asked = answer(&mut server, 200, sa_answer()).await;
    assert_eq!(asked["spec"]["token"], "sa-token");
    assert!(asked["spec"].get("audiences").is_none(), "{asked}");
    let entity = first.await.unwrap().unwrap();
    assert_eq!(entity.kind, EntityKind::Human);
    assert_eq!(entity.id, "system.serviceaccount.t1.bot");
    assert_eq!(entity.name, "system:serviceaccount:t1:bot");
    assert_eq!(
        entity.groups,
        [
            "system:serviceaccounts",
            "system:serviceaccounts:t1",
            "system:authenticated"
        ],
        "a name no group can have is dropped"
    );
    // Cached: the same token is not asked again.
    assert_eq!(reviewer.review("sa-token").await.unwrap(), entity);
    nothing_asked(&mut server).await;
}

#[tokio::test]
async fn what_each_answer_makes_of_a_token() {
    let cases: &[(&[&str], Value, Result<&str, &str>)] = &[
        (
            &[],
            json!({"authenticated": false, "error": "token expired"}),
            Err("unknown, expired or revoked token"),
        ),
        (&[], json!({}), Err("unknown, expired or revoked token")),
        (
            &[],
            json!({"authenticated": true}),
            Err("unknown or revoked token"),
        ),
        (
            &[],
            json!({"authenticated": true, "user": {"username": "oidc:alice@example.com", "groups": ["sre"]}}),
            Ok("oidc.alice@example.com"),
        ),
        (
            &[],
            json!({"authenticated": true, "user": {"username": "system.serviceaccount.t1.bot"}}),
            Err("pose"),
        ),
        (
            &[],
            json!({"authenticated": true, "user": {"username": "https://issuer#1"}}),
            Err("cannot be a member"),
        ),
        (
            &["agentfleet"],
            json!({"authenticated": true, "audiences": ["https://kubernetes.default.svc"], "user": {"username": "alice"}}),
            Err("not for this gateway's audience"),
        ),
        (
            &["agentfleet"],
            json!({"authenticated": true, "audiences": ["agentfleet"], "user": {"username": "alice"}}),
            Ok("alice"),
        ),
    ];
    for (audiences, status, want) in cases {
        let (reviewer, mut server) = reviewer(audiences);
        let r = reviewer.clone();
        let got = tokio::spawn(async move { r.review("t").await });
        let asked = answer(&mut server, 200, status.clone()).await;
        if !audiences.is_empty() {
            assert_eq!(asked["spec"]["audiences"], json!(audiences));
        }
        match (got.await.unwrap(), want) {
            (Ok(entity), Ok(id)) => assert_eq!(entity.id, *id, "{status}"),
            (Err(e), Err(why)) => {
                assert_eq!(e.status, StatusCode::UNAUTHORIZED, "{status}");
                assert!(e.message.contains(why), "{status}: {}", e.message);
            }
            (got, _) => panic!("{status}: {got:?}, wanted {want:?}"),
        }
        // A refusal is kept too: asked again, the API server is not.
        let again = reviewer.review("t").await;
        assert_eq!(again.is_ok(), want.is_ok());
        nothing_asked(&mut server).await;
    }
}

#[tokio::test]
async fn an_api_server_that_cannot_answer_is_a_503_and_nothing_is_kept() {
    let (reviewer, mut server) = reviewer(&[]);
    let r = reviewer.clone();
    let got = tokio::spawn(async move { r.review("t").await });
    answer(&mut server, 403, Value::Null).await;
    let e = got.await.unwrap().unwrap_err();
    assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(!e.message.contains("tokenreviews"), "{}", e.message);
    // Not kept: the next request asks again, and this time it is answered.
    let r = reviewer.clone();
    let got = tokio::spawn(async move { r.review("t").await });
    answer(&mut server, 200, sa_answer()).await;
    assert_eq!(
        got.await.unwrap().unwrap().id,
        "system.serviceaccount.t1.bot"
    );

    // The API server gone: a 503 as well.
    drop(server);
    let e = reviewer.review("other").await.unwrap_err();
    assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn a_token_too_long_to_be_one_is_refused_without_asking() {
    let (reviewer, mut server) = reviewer(&[]);
    let e = reviewer
        .review(&"x".repeat(MAX_TOKEN_BYTES + 1))
        .await
        .unwrap_err();
    assert_eq!(e.status, StatusCode::UNAUTHORIZED);
    nothing_asked(&mut server).await;
}

#[test]
fn the_cache_stays_bounded() {
    let (svc, _handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let reviewer = Reviewer::new(
        kube::Client::new(svc, "default"),
        Vec::new(),
        Duration::from_secs(30),
    );
    for i in 0..MAX_CACHED + 10 {
        reviewer.keep(format!("{i}"), Verdict::Refused("no".into()));
    }
    assert!(reviewer.cache.lock().unwrap().len() <= MAX_CACHED);
}

//! People with Kubernetes tokens at the gateway: reviewed by an API server (a `tower-test`
//! service answering `TokenReview`s), admitted to the spaces that name them or a group of
//! theirs, refused the others; the API server down is a 503 for them while the token file's
//! tokens keep working.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response};
use kube::client::Body;
use serde_json::{json, Value};

use agentfleet::gateway::kubernetes::Reviewer;
use agentfleet::identity::SpaceKey;
use agentfleet::testing::space_record;

use super::fixture::*;

const BOT: &str = "sa-token-of-t1-bot";
const ALICE: &str = "oidc-token-of-alice";

type Answers = Arc<Mutex<HashMap<&'static str, Option<Value>>>>;

/// An API server answering reviews by token: `None` is an API server that fails (500).
/// Counts the reviews asked.
fn api_server(answers: HashMap<&'static str, Option<Value>>) -> (Reviewer, Arc<Mutex<usize>>) {
    let (reviewer, asked, _) = api_server_kept(answers, Duration::from_secs(30));
    (reviewer, asked)
}

/// [`api_server`] whose answers can change, keeping reviews `ttl`.
fn api_server_kept(
    answers: HashMap<&'static str, Option<Value>>,
    ttl: Duration,
) -> (Reviewer, Arc<Mutex<usize>>, Answers) {
    let answers = Arc::new(Mutex::new(answers));
    let held = answers.clone();
    let (svc, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let asked = Arc::new(Mutex::new(0));
    let count = asked.clone();
    tokio::spawn(async move {
        while let Some((req, send)) = handle.next_request().await {
            *count.lock().unwrap() += 1;
            let bytes = req.into_body().collect_bytes().await.unwrap();
            let review: Value = serde_json::from_slice(&bytes).unwrap();
            let token = review["spec"]["token"].as_str().unwrap_or_default();
            let answer = answers.lock().unwrap().get(token).cloned();
            let (code, body) = match answer {
                Some(Some(status)) => (
                    200,
                    json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "status": status}),
                ),
                Some(None) => (
                    500,
                    json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": 500, "message": "etcd is down"}),
                ),
                None => (
                    200,
                    json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "status": {"authenticated": false}}),
                ),
            };
            send.send_response(
                Response::builder()
                    .status(code)
                    .body(Body::from(serde_json::to_vec(&body).unwrap()))
                    .unwrap(),
            );
        }
    });
    let client = kube::Client::new(svc, "default");
    (Reviewer::new(client, Vec::new(), ttl), asked, held)
}

fn person(username: &str, groups: &[&str]) -> Option<Value> {
    Some(json!({"authenticated": true, "user": {"username": username, "groups": groups}}))
}

#[tokio::test]
async fn a_kubernetes_identity_reads_and_posts_where_it_is_named_and_nowhere_else() {
    let (reviewer, asked) = api_server(HashMap::from([
        (
            BOT,
            person(
                "system:serviceaccount:t1:bot",
                &["system:serviceaccounts", "system:authenticated"],
            ),
        ),
        (ALICE, person("oidc:alice@example.com", &["oidc:sre"])),
        ("token-while-etcd-is-down", None),
    ]));
    let f = start_reviewing(reviewer).await;
    // The bot is named by its member id; Alice only through her group.
    let mut desk = space_record("Desk", &["assistant"], &["system.serviceaccount.t1.bot"]);
    desk.groups = vec!["oidc:sre".into()];
    f.store
        .apply_space(&SpaceKey::new("ops", "desk"), &desk)
        .await
        .unwrap();

    let (status, posted) = f.post(BOT, "desk", json!({"text": "deploy done"})).await;
    assert_eq!(status, 201, "{posted}");
    let (status, page) = f.get(Some(BOT), "/v1/spaces/ops/desk/messages").await;
    assert_eq!(status, 200);
    let sender = &page["messages"][0]["sender"];
    assert_eq!(sender["id"], "system.serviceaccount.t1.bot", "{page}");
    let (status, _) = f.post(ALICE, "desk", json!({"text": "thanks"})).await;
    assert_eq!(status, 201, "a member by her group");
    let (status, me) = f.get(Some(ALICE), "/v1/me").await;
    assert_eq!(status, 200);
    assert_eq!(me["id"], "oidc.alice@example.com", "{me}");

    // Not named in family: refused as any outsider is.
    let (status, body) = f.post(BOT, "family", json!({"text": "hi"})).await;
    assert!(matches!(status, 403 | 404), "{status} {body}");
    let (status, _) = f.get(Some(ALICE), "/v1/spaces/ops/family/messages").await;
    assert!(matches!(status, 403 | 404), "{status}");

    // Each token was reviewed once, whatever it did since.
    assert_eq!(*asked.lock().unwrap(), 2);

    // An unknown token: 401 with one sentence.
    let (status, body) = f.post("no-such-token", "desk", json!({"text": "x"})).await;
    assert_eq!(status, 401);
    assert_eq!(body["error"]["code"], "unauthenticated", "{body}");
    assert!(
        !body.to_string().contains("no-such-token"),
        "the token is never said back: {body}"
    );

    // The API server failing: 503 for a Kubernetes token, the token file's still work.
    let (status, body) = f
        .post("token-while-etcd-is-down", "desk", json!({"text": "x"}))
        .await;
    assert_eq!(status, 503, "{body}");
    assert!(!body.to_string().contains("etcd"), "{body}");
    let (status, _) = f.post(HUSAM, "family", json!({"text": "still here"})).await;
    assert_eq!(status, 201);
}

/// A Kubernetes token is reviewed again while its stream is open: once the API server stops
/// knowing it (it expired, its ServiceAccount went), the stream ends with a 401 event.
#[tokio::test]
async fn an_open_stream_ends_when_its_kubernetes_token_no_longer_passes_review() {
    let (reviewer, asked, answers) = api_server_kept(
        HashMap::from([(BOT, person("system:serviceaccount:t1:bot", &[]))]),
        Duration::from_millis(300),
    );
    let f = start_reviewing(reviewer).await;
    let desk = space_record("Desk", &["assistant"], &["system.serviceaccount.t1.bot"]);
    f.store
        .apply_space(&SpaceKey::new("ops", "desk"), &desk)
        .await
        .unwrap();
    let mut stream = f.stream(BOT, "desk", None).await;
    let (status, _) = f.post(BOT, "desk", json!({"text": "still here"})).await;
    assert_eq!(status, 201);
    let (_, m) = stream.next_message().await;
    assert_eq!(m["text"], "still here");
    // Reviewed again while open, and still good.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(*asked.lock().unwrap() >= 2, "reviewed again");

    answers
        .lock()
        .unwrap()
        .insert(BOT, Some(json!({"authenticated": false})));
    let end = stream.next_other().await;
    assert_eq!(end.event, "error", "{end:?}");
    assert!(end.data.contains("unauthenticated"), "{}", end.data);
    stream.assert_ends().await;
}

/// An approver list naming a Kubernetes group (as the API server gives groups, colons and
/// all) lets a person in it answer, and no one else.
#[tokio::test]
async fn a_kubernetes_group_answers_a_call_that_names_it() {
    use agentfleet::identity::AgentKey;
    use agentfleet::store::{CallKind, HumanCall};
    let (reviewer, _) = api_server(HashMap::from([
        (
            BOT,
            person(
                "system:serviceaccount:t1:bot",
                &["system:serviceaccounts:t1"],
            ),
        ),
        (ALICE, person("oidc:alice@example.com", &["oidc:finance"])),
    ]));
    let f = start_reviewing(reviewer).await;
    // The bot is a member of the space, Alice is not: only the list decides.
    f.store
        .apply_space(
            &SpaceKey::new("ops", "engineering"),
            &space_record(
                "Engineering",
                &["oncall"],
                &["system.serviceaccount.t1.bot"],
            ),
        )
        .await
        .unwrap();
    let call = HumanCall::new(
        &AgentKey::new("ops", "oncall"),
        "refund",
        CallKind::Approval,
        "engineering",
        json!({"order": 7}),
        None,
        60_000,
    )
    .unwrap()
    .answered_by(vec!["group:oidc:finance".into()]);
    f.store.register_human_call(&call).await.unwrap();
    let answer = |token: &'static str| {
        let (http, url) = (
            f.http.clone(),
            format!(
                "{}/v1/spaces/ops/engineering/tool-calls/{}",
                f.base, call.id
            ),
        );
        async move {
            let resp = http
                .post(url)
                .bearer_auth(token)
                .json(&json!({"decision": "approve"}))
                .send()
                .await
                .unwrap();
            (resp.status().as_u16(), resp.json::<Value>().await.unwrap())
        }
    };
    let (status, body) = answer(BOT).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.to_string()
            .contains("only group:oidc:finance may answer"),
        "{body}"
    );
    let (status, body) = answer(ALICE).await;
    assert_eq!(status, 202, "{body}");
}

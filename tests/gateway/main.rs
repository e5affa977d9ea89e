//! The gateway over real HTTP on a free port, on a real `redis-server`: the API here, the
//! connection limits in `connections`, access and replay in `trust`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod connections;
mod decisions;
mod fixture;
mod kubernetes;
mod trust;

use std::time::Duration;

use serde_json::{json, Value};

use agentfleet::gateway::Limits;
use agentfleet::identity::AgentKey;
use agentfleet::identity::SpaceKey;
use fixture::*;

#[tokio::test]
async fn members_post_read_and_page() {
    members_post_read_and_page_on(start(Limits::default()).await).await;
}

#[tokio::test]
async fn members_post_read_and_page_on_a_redis_cluster() {
    members_post_read_and_page_on(start_on_cluster(Limits::default()).await).await;
}

async fn members_post_read_and_page_on(f: Fixture) {
    let (status, posted) = f
        .post(HUSAM, "family", json!({"text": "dinner at 8?"}))
        .await;
    assert_eq!(status, 201, "{posted}");
    assert_eq!(posted["delivered"], json!(["assistant"]));
    assert_eq!(posted["duplicate"], json!(false));
    let inbox = f
        .store
        .peek_inbox(&AgentKey::new("ops", "assistant"), 10)
        .await
        .unwrap();
    assert_eq!(inbox.len(), 1);
    assert_eq!(inbox[0].text.as_deref(), Some("dinner at 8?"));
    assert_eq!(inbox[0].sender.as_ref().unwrap().name, "Husam");

    for i in 0..4 {
        f.post(MUHAMMAD, "family", json!({"text": format!("m{i}")}))
            .await;
    }
    let (status, page) = f
        .get(Some(HUSAM), "/v1/spaces/ops/family/messages?limit=3")
        .await;
    assert_eq!(status, 200);
    let texts: Vec<&str> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["m3", "m2", "m1"], "newest first");
    assert_eq!(
        page["messages"][0]["sender"],
        json!({"kind": "human", "id": "muhammad", "name": "Muhammad"})
    );
    let next = page["next"].as_str().unwrap();
    let (_, older) = f
        .get(
            Some(HUSAM),
            &format!("/v1/spaces/ops/family/messages?limit=3&before={next}"),
        )
        .await;
    let texts: Vec<&str> = older["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["m0", "dinner at 8?"]);
    assert!(older.get("next").is_none(), "last page: {older}");
    let first = posted["id"].as_str().unwrap();
    let (_, since) = f
        .get(
            Some(HUSAM),
            &format!("/v1/spaces/ops/family/messages?after={first}&limit=2"),
        )
        .await;
    assert_eq!(
        since["messages"][0]["text"], "m0",
        "oldest first after an id"
    );

    let (status, info) = f.get(Some(MUHAMMAD), "/v1/spaces/ops/family").await;
    assert_eq!(status, 200);
    assert_eq!(info["displayName"], "Family");
    assert_eq!(
        info["members"][0],
        json!({"kind": "agent", "id": "assistant", "name": "assistant"})
    );
    let (_, me) = f.get(Some(MUHAMMAD), "/v1/me").await;
    assert_eq!(
        me,
        json!({"kind": "human", "id": "muhammad", "name": "Muhammad"})
    );
}

#[tokio::test]
async fn a_repeated_idempotency_key_posts_once() {
    let f = start(Limits::default()).await;
    let send = || {
        f.http
            .post(format!("{}/v1/spaces/ops/family/messages", f.base))
            .bearer_auth(HUSAM)
            .header("Idempotency-Key", "k-1")
            .json(&json!({"text": "once"}))
            .send()
    };
    let a = send().await.unwrap();
    assert_eq!(a.status(), 201);
    let a: Value = a.json().await.unwrap();
    let b = send().await.unwrap();
    assert_eq!(b.status(), 200);
    let b: Value = b.json().await.unwrap();
    assert_eq!(a["id"], b["id"]);
    assert_eq!(b["duplicate"], json!(true));
    let (_, page) = f.get(Some(HUSAM), "/v1/spaces/ops/family/messages").await;
    assert_eq!(page["messages"].as_array().unwrap().len(), 1);
    assert_eq!(
        f.store
            .inbox_depth(&AgentKey::new("ops", "assistant"))
            .await
            .unwrap(),
        1
    );
}

#[tokio::test]
async fn refusals_are_json_with_stable_codes() {
    let f = start(Limits::default()).await;
    let code = |v: &Value| v["error"]["code"].as_str().unwrap_or("").to_string();

    let (s, v) = f.get(None, "/v1/spaces/ops/family/messages").await;
    assert_eq!((s, code(&v).as_str()), (401, "unauthenticated"));
    let (s, v) = f.get(Some("wrong"), "/v1/spaces/ops/family/messages").await;
    assert_eq!((s, code(&v).as_str()), (401, "unauthenticated"));
    let resp = f
        .http
        .get(format!("{}/v1/me", f.base))
        .header("Authorization", "Basic abc")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    assert!(resp.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .starts_with("Bearer"));

    // Muhammad is not in engineering: no reading, posting or streaming there.
    let (s, v) = f
        .get(Some(MUHAMMAD), "/v1/spaces/ops/engineering/messages")
        .await;
    assert_eq!((s, code(&v).as_str()), (403, "not_member"));
    let (s, v) = f
        .post(MUHAMMAD, "engineering", json!({"text": "let me in"}))
        .await;
    assert_eq!((s, code(&v).as_str()), (403, "not_member"));
    let (s, _) = f
        .get(Some(MUHAMMAD), "/v1/spaces/ops/engineering/stream")
        .await;
    assert_eq!(s, 403);
    assert_eq!(
        f.store
            .inbox_depth(&AgentKey::new("ops", "reviewer"))
            .await
            .unwrap(),
        0,
        "nothing delivered"
    );
    // A service is nobody's member.
    let (s, _) = f.get(Some(ALERTS), "/v1/spaces/ops/family/messages").await;
    assert_eq!(s, 403);

    let (s, v) = f.get(Some(HUSAM), "/v1/spaces/ops/nowhere/messages").await;
    assert_eq!((s, code(&v).as_str()), (404, "not_found"));
    let (s, v) = f.get(Some(HUSAM), "/v1/nothing").await;
    assert_eq!((s, code(&v).as_str()), (404, "not_found"));

    let (s, v) = f.post(HUSAM, "family", json!({"text": "  "})).await;
    assert_eq!((s, code(&v).as_str()), (400, "invalid_request"));
    let (s, v) = f.post(HUSAM, "family", json!({"txt": "typo"})).await;
    assert_eq!((s, code(&v).as_str()), (400, "invalid_request"));
    assert!(
        v["error"]["message"].as_str().unwrap().contains("txt"),
        "{v}"
    );
    let (s, v) = f
        .post(
            HUSAM,
            "family",
            json!({"text": "hi", "mention": "reviewer"}),
        )
        .await;
    assert_eq!((s, code(&v).as_str()), (400, "invalid_request"), "{v}");
    let resp = f
        .http
        .post(format!("{}/v1/spaces/ops/family/messages", f.base))
        .bearer_auth(HUSAM)
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let (s, v) = f
        .get(Some(HUSAM), "/v1/spaces/ops/family/messages?limit=0")
        .await;
    assert_eq!((s, code(&v).as_str()), (400, "invalid_request"));
    let (s, _) = f
        .get(
            Some(HUSAM),
            "/v1/spaces/ops/family/messages?before=yesterday",
        )
        .await;
    assert_eq!(s, 400);
    let (s, _) = f
        .get(Some(HUSAM), "/v1/spaces/ops/family/messages?limit=many")
        .await;
    assert_eq!(s, 400);
    let resp = f
        .http
        .delete(format!("{}/v1/me", f.base))
        .bearer_auth(HUSAM)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 405);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(code(&v), "method_not_allowed");

    let (_, page) = f.get(Some(HUSAM), "/v1/spaces/ops/family/messages").await;
    assert_eq!(page["messages"], json!([]), "nothing refused was written");
}

#[tokio::test]
async fn oversized_bodies_and_floods_are_refused() {
    let f = start(Limits {
        max_body_bytes: 1024,
        rate_limit: 1.0,
        rate_burst: 5,
        ..Limits::default()
    })
    .await;
    let (s, v) = f
        .post(HUSAM, "family", json!({"text": "x".repeat(2000)}))
        .await;
    assert_eq!(
        (s, v["error"]["code"].as_str().unwrap()),
        (413, "payload_too_large")
    );
    let mut statuses = Vec::new();
    let mut retry_after = None;
    for _ in 0..6 {
        let resp = f
            .http
            .get(format!("{}/v1/me", f.base))
            .bearer_auth(HUSAM)
            .send()
            .await
            .unwrap();
        statuses.push(resp.status().as_u16());
        if resp.status() == 429 {
            retry_after = resp.headers().get("retry-after").cloned();
            let v: Value = resp.json().await.unwrap();
            assert_eq!(v["error"]["code"], "rate_limited");
        }
    }
    // The 413 took one of the burst of 5.
    assert_eq!(statuses, [200, 200, 200, 200, 429, 429]);
    assert_eq!(retry_after.unwrap().to_str().unwrap(), "1");
    let (s, _) = f.get(Some(MUHAMMAD), "/v1/me").await;
    assert_eq!(s, 200, "limits are per token");
    let (_, page) = f
        .get(Some(MUHAMMAD), "/v1/spaces/ops/family/messages")
        .await;
    assert_eq!(
        page["messages"],
        json!([]),
        "the oversized post wrote nothing"
    );
}

#[tokio::test]
async fn the_stream_carries_messages_deltas_activity_and_resumes() {
    the_stream_carries_messages_deltas_activity_and_resumes_on(start(Limits::default()).await)
        .await;
}

#[tokio::test]
async fn the_stream_carries_messages_deltas_activity_and_resumes_on_a_redis_cluster() {
    the_stream_carries_messages_deltas_activity_and_resumes_on(
        start_on_cluster(Limits::default()).await,
    )
    .await;
}

async fn the_stream_carries_messages_deltas_activity_and_resumes_on(f: Fixture) {
    let mut sse = f.stream(HUSAM, "family", None).await;
    let (_, first) = f.post(HUSAM, "family", json!({"text": "one"})).await;
    let (id, m) = sse.next_message().await;
    assert_eq!(id, first["id"].as_str().unwrap());
    assert_eq!(m["text"], "one");

    // What a worker publishes while it writes.
    let space = SpaceKey::new("ops", "family");
    let agent = agentfleet::store::Sender {
        groups: Vec::new(),
        id: "assistant".into(),
        name: "assistant".into(),
        kind: Some(agentfleet::store::MemberKind::Agent),
    };
    f.store
        .publish_live(
            &space,
            &agentfleet::store::LiveEvent::Activity {
                sender: agent.clone(),
                activity: "thinking".into(),
                tool: None,
                detail: None,
            },
        )
        .await
        .unwrap();
    f.store
        .publish_live(
            &space,
            &agentfleet::store::LiveEvent::Delta {
                stream_id: "s1".into(),
                sender: agent,
                delta: "Hel".into(),
            },
        )
        .await
        .unwrap();
    let e = sse.next().await;
    assert_eq!(e.event, "activity");
    assert_eq!(e.id, None, "live-only events carry no id");
    let v: Value = serde_json::from_str(&e.data).unwrap();
    assert_eq!(
        (v["activity"].as_str(), v["sender"]["kind"].as_str()),
        (Some("thinking"), Some("agent"))
    );
    let e = sse.next().await;
    assert_eq!(e.event, "delta");
    let v: Value = serde_json::from_str(&e.data).unwrap();
    assert_eq!(
        (v["delta"].as_str(), v["streamId"].as_str()),
        (Some("Hel"), Some("s1"))
    );
    drop(sse);

    // Posted while disconnected: a resume replays exactly those, then goes live.
    let mut missed = Vec::new();
    for t in ["two", "three"] {
        let (_, p) = f.post(MUHAMMAD, "family", json!({"text": t})).await;
        missed.push(p["id"].as_str().unwrap().to_string());
    }
    let mut sse = f
        .stream(HUSAM, "family", Some(first["id"].as_str().unwrap()))
        .await;
    assert_eq!(sse.next_message().await.0, missed[0]);
    assert_eq!(sse.next_message().await.0, missed[1]);
    let (_, four) = f.post(HUSAM, "family", json!({"text": "four"})).await;
    let (id, m) = sse.next_message().await;
    assert_eq!(
        (id.as_str(), m["text"].as_str()),
        (four["id"].as_str().unwrap(), Some("four"))
    );

    let (s, v) = f
        .get(Some(HUSAM), "/v1/spaces/ops/family/stream?after=garbage")
        .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (400, Some("invalid_request"))
    );
}

#[tokio::test]
async fn many_clients_share_one_subscription() {
    // One caller's 50 streams: over the default of 32 a caller may hold, so allowed here.
    let f = start(Limits {
        rate_limit: 0.0,
        max_streams_per_caller: 50,
        ..Limits::default()
    })
    .await;
    let mut clients = Vec::new();
    for _ in 0..50 {
        clients.push(f.stream(HUSAM, "family", None).await);
    }
    let (_, p) = f.post(MUHAMMAD, "family", json!({"text": "to all"})).await;
    for c in &mut clients {
        assert_eq!(c.next_message().await.0, p["id"].as_str().unwrap());
    }
    let metrics = f
        .http
        .get(format!("{}/metrics", f.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("agentfleet_gateway_sse_clients 50"),
        "{metrics}"
    );
    assert!(metrics.contains("agentfleet_gateway_fanout_latency_seconds_count 50"));
    assert!(metrics.contains(
        "agentfleet_gateway_requests_total{method=\"POST\",route=\"/v1/spaces/{namespace}/{space}/messages\",status=\"201\"} 1"
    ), "{metrics}");
    drop(clients);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let metrics = f
        .http
        .get(format!("{}/metrics", f.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("agentfleet_gateway_sse_clients 0"),
        "{metrics}"
    );
}

#[tokio::test]
async fn services_trigger_the_agents_they_are_granted() {
    let f = start(Limits::default()).await;
    let trigger = |token: &'static str, agent: &'static str, body: Value| {
        let f = &f;
        async move {
            let resp = f
                .http
                .post(format!("{}/v1/agents/ops/{agent}/events", f.base))
                .bearer_auth(token)
                .header("Idempotency-Key", "alert-7")
                .json(&body)
                .send()
                .await
                .unwrap();
            (resp.status().as_u16(), resp.json::<Value>().await.unwrap())
        }
    };
    let (s, v) = trigger(
        ALERTS,
        "oncall",
        json!({"text": "disk full", "data": {"host": "db1"}}),
    )
    .await;
    assert_eq!(s, 202, "{v}");
    assert_eq!(
        (
            v["id"].as_str(),
            v["duplicate"].as_bool(),
            v["woke"].as_bool()
        ),
        (Some("alert-7"), Some(false), Some(true))
    );
    let inbox = f
        .store
        .peek_inbox(&AgentKey::new("ops", "oncall"), 10)
        .await
        .unwrap();
    assert_eq!(inbox.len(), 1);
    assert_eq!(inbox[0].kind, agentfleet::store::EventKind::Service);
    assert_eq!(inbox[0].data, Some(json!({"host": "db1"})));
    assert_eq!(inbox[0].sender.as_ref().unwrap().name, "Alertmanager");

    let (s, v) = trigger(ALERTS, "oncall", json!({"text": "disk full"})).await;
    assert_eq!(
        (s, v["duplicate"].as_bool()),
        (202, Some(true)),
        "a retry is dropped"
    );
    let (s, v) = trigger(ALERTS, "reviewer", json!({"text": "x"})).await;
    assert_eq!((s, v["error"]["code"].as_str()), (403, Some("forbidden")));
    let (s, v) = trigger(HUSAM, "oncall", json!({"text": "x"})).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (403, Some("forbidden")),
        "humans post in spaces"
    );
    let (s, v) = trigger(ALERTS, "ghost", json!({"text": "x"})).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (404, Some("not_found")),
        "granted but not an agent"
    );
    let (s, _) = trigger(ALERTS, "oncall", json!({})).await;
    assert_eq!(s, 400);
    assert_eq!(
        f.store
            .inbox_depth(&AgentKey::new("ops", "oncall"))
            .await
            .unwrap(),
        1
    );
}

/// Opening the gateway's address leads to the console (issue 43: a new user typed the bare
/// address and got a 404).
#[tokio::test]
async fn the_gateways_root_leads_to_the_console() {
    let f = start(Limits::default()).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    for (path, status) in [("/", 307), ("/console", 308)] {
        let resp = http.get(format!("{}{path}", f.base)).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), status, "{path}");
        assert_eq!(resp.headers()["location"], "/console/", "{path}");
    }
    let (status, _) = f.get(None, "/nothing-here").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn the_openapi_document_matches_the_routes() {
    let f = start(Limits::default()).await;
    let (s, doc) = f.get(None, "/openapi.json").await;
    assert_eq!(s, 200);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    let paths = doc["paths"].as_object().unwrap();
    let mut documented = Vec::new();
    for (path, ops) in paths {
        for method in ops.as_object().unwrap().keys() {
            documented.push(format!("{} {path}", method.to_uppercase()));
        }
    }
    documented.sort();
    assert_eq!(
        documented,
        [
            "GET /healthz",
            "GET /readyz",
            "GET /v1/agents",
            "GET /v1/agents/{namespace}/{agent}",
            "GET /v1/agents/{namespace}/{agent}/calls",
            "GET /v1/agents/{namespace}/{agent}/consciousness",
            "GET /v1/agents/{namespace}/{agent}/cycles",
            "GET /v1/agents/{namespace}/{agent}/cycles/{seq}",
            "GET /v1/agents/{namespace}/{agent}/rehearsals",
            "GET /v1/agents/{namespace}/{agent}/rehearsals/{name}",
            "GET /v1/calls",
            "GET /v1/me",
            "GET /v1/spaces",
            "GET /v1/spaces/{namespace}/{space}",
            "GET /v1/spaces/{namespace}/{space}/messages",
            "GET /v1/spaces/{namespace}/{space}/stream",
            "POST /v1/agents/{namespace}/{agent}/consciousness/restore",
            "POST /v1/agents/{namespace}/{agent}/events",
            "POST /v1/agents/{namespace}/{agent}/rehearsals",
            "POST /v1/spaces/{namespace}/{space}/messages",
            "POST /v1/spaces/{namespace}/{space}/tool-calls/{callId}",
            "POST /v1/tool-results/{callId}",
        ]
    );
    // Every documented operation is served (not the 404/405 fallbacks), and answers one of
    // the statuses it documents.
    for op in &documented {
        let (method, path) = op.split_once(' ').unwrap();
        let url = format!(
            "{}{}",
            f.base,
            path.replace("{namespace}", "ops")
                .replace("{space}", "family")
                .replace("{agent}", "oncall")
                .replace("{callId}", "ops.oncall.0123456789abcdef0123456789abcdef")
        );
        let resp = f
            .http
            .request(method.parse().unwrap(), url)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16().to_string();
        let responses = &paths[path][method.to_lowercase()]["responses"];
        assert!(
            responses.get(&status).is_some(),
            "{op} answered {status}, not documented: {responses}"
        );
    }
    for schema in [
        "Message",
        "PostMessage",
        "Posted",
        "MessagePage",
        "ErrorBody",
        "TriggerEvent",
        "DeltaEvent",
        "ActivityEvent",
        "ToolResult",
        "ToolResultAccepted",
        "CallAnswer",
        "CallAnswered",
    ] {
        assert!(
            doc["components"]["schemas"].get(schema).is_some(),
            "schema {schema}"
        );
    }
    let (s, _) = f.get(None, "/readyz").await;
    assert_eq!(s, 200);
}

/// A message longer than its space takes is refused before anything is written, from a
/// person (413, one sentence) and from an A2A caller (the spec's invalid-params error); a page
/// of messages stops before 1 MiB of them and says where to go on. Issue 41: before, any text
/// up to the body limit was posted (a gateway given a larger `--max-body-bytes` took megabytes)
/// and a page held `limit` messages whatever their size.
#[tokio::test]
async fn long_messages_are_refused_and_pages_stop_at_their_bytes() {
    let f = start(Limits {
        max_body_bytes: 4 << 20,
        ..Limits::default()
    })
    .await;
    let assistant = AgentKey::new("ops", "assistant");
    let (s, v) = f
        .post(HUSAM, "family", json!({"text": "x".repeat(100 * 1024)}))
        .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (413, Some("message_too_large")),
        "{v}"
    );
    let said = v["error"]["message"].as_str().unwrap();
    assert!(
        said.contains("102400 bytes") && said.contains("65536 bytes"),
        "{said}"
    );
    assert!(f.store.peek_inbox(&assistant, 10).await.unwrap().is_empty());

    // Over A2A, the same rule: the spec's invalid-params error, nothing posted.
    f.store
        .apply_a2a(
            &assistant,
            Some(&agentfleet::store::A2aRecord {
                v: agentfleet::store::V1,
                description: "Helps.".into(),
                skills: vec![agentfleet::store::A2aSkill {
                    id: "help".into(),
                    name: "help".into(),
                    description: "Helps.".into(),
                    tags: vec![],
                    examples: vec![],
                }],
                callers: vec!["human:husam".into()],
                version: "1".into(),
                max_chain_depth: 8,
                conversation_seconds: agentfleet::store::CONVERSATION_SECONDS,
            }),
        )
        .await
        .unwrap();
    let rpc = |text: String| {
        f.http
            .post(format!("{}/a2a/ops/assistant", f.base))
            .bearer_auth(HUSAM)
            .header("A2A-Version", "1.0")
            .json(
                &json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                "message": {"messageId": format!("m-{}", text.len()), "role": "ROLE_USER",
                    "parts": [{"text": text}]},
                "configuration": {"returnImmediately": true}}}),
            )
            .send()
    };
    let answer: Value = rpc("y".repeat(100 * 1024))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("more than the 65536 bytes"),
        "{answer}"
    );
    assert!(f.store.peek_inbox(&assistant, 10).await.unwrap().is_empty());
    let answer: Value = rpc("short".into()).await.unwrap().json().await.unwrap();
    assert!(answer["result"]["task"]["id"].is_string(), "{answer}");

    // 20 messages of 60 KiB: each fits, together more than a page.
    for i in 0..20 {
        let (s, v) = f
            .post(
                MUHAMMAD,
                "family",
                json!({"text": format!("{i:02}{}", "z".repeat(60 * 1024))}),
            )
            .await;
        assert_eq!(s, 201, "{v}");
    }
    let mut read = Vec::new();
    let mut next: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &next {
            None => "/v1/spaces/ops/family/messages?limit=500".to_string(),
            Some(n) => format!("/v1/spaces/ops/family/messages?limit=500&before={n}"),
        };
        let (s, page) = f.get(Some(HUSAM), &path).await;
        assert_eq!(s, 200);
        pages += 1;
        let texts: Vec<String> = page["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["text"].as_str().unwrap().to_string())
            .collect();
        let bytes: usize = texts.iter().map(String::len).sum();
        assert!(
            bytes <= 1 << 20,
            "page {pages}: {} messages, {bytes} bytes of text",
            texts.len()
        );
        read.extend(
            texts
                .into_iter()
                .filter(|t| t.len() > 1024)
                .map(|t| t[..2].to_string()),
        );
        match page["next"].as_str() {
            Some(n) => next = Some(n.to_string()),
            None => break,
        }
    }
    let expected: Vec<String> = (0..20).rev().map(|i| format!("{i:02}")).collect();
    assert_eq!(read, expected, "every message once, newest first");
    assert_eq!(pages, 2);
}

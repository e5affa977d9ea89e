//! A rehearsal on an agent's own recorded cycles (issue 45), against the real servers its
//! tools call: an MCP server and an HTTP tool that count what reaches them. The agent's
//! cycles run in a worker first; then candidates run those cycles again, and nothing of
//! theirs reaches a tool server or changes the agent.

use std::sync::atomic::{AtomicUsize, Ordering};

use agentfleet::testing::last_turn;
use agentfleet::worker::rehearsal::{Criteria, Rehearsal};

use super::*;

/// A model that looks at the disk when asked about it (and at the weather in `city`),
/// says so, says hello to anything else, and skips thanks.
fn respond(request: &Value, city: &str) -> MockTurn {
    let last = last_turn(request);
    if last.role == "tool" {
        return if last.called == "send_message" {
            MockTurn::text("Done.")
        } else {
            MockTurn::tools(&[("send_message", json!({"text": "The disk is at 91%."}))])
        };
    }
    if last.content.contains("disk") {
        MockTurn::tools(&[
            ("tracker__echo", json!({"text": "disk"})),
            ("weather", json!({"city": city})),
        ])
    } else if last.content.contains("Thanks") {
        MockTurn::tools(&[("skip", json!({"reason": "nothing was asked"}))])
    } else {
        MockTurn::tools(&[("send_message", json!({"text": "Hello Dana."}))])
    }
}

/// An HTTP tool's service that counts its requests.
async fn weather_service() -> (String, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let app = axum::Router::new().route(
        "/weather",
        axum::routing::post(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            async { axum::Json(json!({"celsius": 3})) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://127.0.0.1:{port}"), hits)
}

fn rehearsed_manifest(mcp: &str, weather: &str, model: &str) -> Agent {
    serde_yaml::from_str(&format!(
        r#"
apiVersion: agentfleet.dev/v1alpha1
kind: Agent
metadata: {{name: sre, namespace: {NS}}}
spec:
  model: {{provider: openai, name: mock, baseUrl: "{model}"}}
  instructions: You keep the services up.
  spaces: [oncall]
  cycle: {{maxSteps: 3}}
  tools:
    http:
      - name: weather
        description: The weather in a city.
        url: "{weather}/weather"
        method: POST
        inputSchema: {{type: object, properties: {{city: {{type: string}}}}}}
    mcp:
      - name: tracker
        url: "{mcp}"
        tools: [echo]
"#
    ))
    .unwrap()
}

/// The candidate `agent` with its model at `base_url`, rehearsed on the last 10 cycles.
fn rehearsal(agent: &Agent, base_url: &str) -> Rehearsal {
    let mut candidate = agent.clone();
    candidate.spec.model.base_url = Some(base_url.to_string());
    Rehearsal {
        key: agent_key(),
        model: Arc::new(OpenAi::new(&candidate.spec.model, Default::default()).unwrap()),
        candidate,
        cycles: 10,
        criteria: Criteria::default(),
    }
}

#[tokio::test]
async fn a_rehearsal_replays_the_agents_cycles_and_reaches_no_tool_server() {
    let redis = RedisServer::start().unwrap();
    let store = Arc::new(RedisStore::new(&redis.url()).unwrap());
    let key = agent_key();
    store
        .apply_space(
            &SpaceKey::new(NS, "oncall"),
            &space_record("Oncall", &["sre"], &["Dana"]),
        )
        .await
        .unwrap();
    let server = McpTestServer::start(Era::Current, tracker_tools()).await;
    let (weather, hits) = weather_service().await;
    let live = MockModel::responding(|r| respond(r, "Oslo")).await.unwrap();
    let agent = rehearsed_manifest(&server.url, &weather, &live.base_url);

    // The agent lives three cycles: a look at the disk, a thank-you it skips, a hello.
    let external = external_tools(&store, &agent, no_secrets());
    let sre = agentlet_with(&store, agent.clone(), external);
    let worker = Worker::start(sre);
    until(
        "the tools to be ready",
        Duration::from_secs(30),
        async || {
            let tools = reported(&store, &key).await;
            let ready = |name: &str| tools.iter().any(|t| t.name == name && t.ready);
            (ready("tracker__echo") && ready("weather")).then_some(())
        },
    )
    .await;
    let records = async || store.cycle_heads(&key, None, 10).await.unwrap().len();
    for (text, n) in [
        ("How full is the disk?", 1),
        ("Thanks, all good.", 2),
        ("Hello again.", 3),
    ] {
        ask(&store, text).await;
        until("the cycle's record", Duration::from_secs(20), async || {
            (records().await == n).then_some(())
        })
        .await;
    }
    worker.stop().await;
    let calls = server.world.calls.lock().unwrap().len();
    let lists = server.lists();
    assert_eq!((calls, hits.load(Ordering::SeqCst)), (1, 1));
    let before = store.consciousness(&key).await.unwrap();
    let depth = store.inbox_depth(&key).await.unwrap();

    // A candidate that decides as the agent did passes; its calls got the recorded results.
    let same = MockModel::responding(|r| respond(r, "Oslo")).await.unwrap();
    let report = rehearsal(&agent, &same.base_url)
        .run(store.as_ref(), |_| {})
        .await
        .unwrap();
    let s = &report.summary;
    assert!(s.passed, "{}", s.verdict);
    assert_eq!(
        (s.rehearsed, s.compared, s.replayed, s.not_replayed),
        (3, 3, 2, 0)
    );
    let outcomes: Vec<(&str, &str)> = report
        .cycles
        .iter()
        .map(|c| {
            (
                c.recorded.outcome.as_str(),
                c.candidate.as_ref().unwrap().outcome.as_str(),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            ("replied", "replied"),
            ("skipped", "skipped"),
            ("replied", "replied")
        ]
    );
    assert_eq!(
        report.cycles[0].candidate.as_ref().unwrap().calls,
        [
            r#"tracker__echo {"text":"disk"}"#,
            r#"weather {"city":"Oslo"}"#
        ]
    );
    // The candidate got the recorded results, as the agent did.
    let results: Vec<Value> = same
        .requests()
        .iter()
        .flat_map(agentfleet::testing::conversation)
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].clone())
        .collect();
    let got = |part: &str| results.iter().any(|r| r.as_str().unwrap().contains(part));
    assert!(
        got(r#"{"text":"echo: disk"}"#) && got(r#""body":{"celsius":3}"#),
        "{results:?}"
    );

    // One that looks at the weather elsewhere fails on tool calls: its call was answered
    // "not replayed", and said so.
    let other = MockModel::responding(|r| respond(r, "Bergen"))
        .await
        .unwrap();
    let report = rehearsal(&agent, &other.base_url)
        .run(store.as_ref(), |_| {})
        .await
        .unwrap();
    let s = &report.summary;
    assert!(!s.passed);
    assert_eq!((s.replayed, s.not_replayed), (1, 1));
    assert!(
        s.verdict
            .starts_with("the candidate made the recorded tool calls in 2 of 3 cycles (67%)"),
        "{}",
        s.verdict
    );
    assert_eq!(report.cycles[0].tools_agree, Some(false));
    assert_eq!(report.cycles[0].reply_agrees, Some(true));

    // Nothing reached a tool server, and nothing of the agent changed.
    assert_eq!(server.world.calls.lock().unwrap().len(), calls);
    assert_eq!(server.lists(), lists);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    assert_eq!(store.consciousness(&key).await.unwrap(), before);
    assert_eq!(store.inbox_depth(&key).await.unwrap(), depth);
    assert_eq!(records().await, 3);
    assert_eq!(
        live.request_count(),
        6,
        "the agent's own model was not asked again"
    );
}

//! MCP tools against a real MCP server speaking Streamable HTTP (rmcp's server side, on a
//! loopback port the test picks): listing under the prefix and the allowlist, a call's result
//! in a worker cycle, a server down at start that comes up later (and one that goes away),
//! `tools/list_changed`, `isError`, `timeoutSeconds`, and headers from a Secret that reach the
//! server and nothing else.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failing loudly is the point

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentfleet::crd::{Agent, McpServerSpec, ToolStatus};
use agentfleet::identity::SpaceKey;
use agentfleet::model::openai::OpenAi;
use agentfleet::store::MemberKind;
use agentfleet::store::{prelude::*, NewMessage, RedisStore, Sender};
use agentfleet::telemetry::WorkerMetrics;
use agentfleet::testing::{free_port, space_record, MockModel, MockTurn, RedisServer};
use agentfleet::worker::cycle::Agentlet;
use agentfleet::worker::tools::mcp::McpServer;
use agentfleet::worker::tools::secrets::Secrets;
use agentfleet::worker::tools::{self, External, ExternalCall, ExternalContext, Outcome};
use agentfleet::worker::{run_agent, Health};
use serde_json::{json, Value};
use tokio::sync::watch;

const NS: &str = "ops";
const SECRET: &str = "Bearer s3cr3t-t0k3n-4711";

mod hostile;
mod rehearsal;
mod server;

use agentfleet::identity::AgentKey;
use server::{tool, tracker_tools, Era, McpTestServer};

// ---------------------------------------------------------------------------------------
// Helpers.

fn spec(url: &str, extra: &str) -> McpServerSpec {
    serde_yaml::from_str(&format!("{{name: tracker, url: '{url}'{extra}}}")).unwrap()
}

fn agent_key() -> AgentKey {
    AgentKey::new(NS, "sre")
}

fn no_secrets() -> Secrets {
    Secrets::from_map(BTreeMap::new())
}

fn with_secret() -> Secrets {
    Secrets::from_map(BTreeMap::from([(
        "tracker-auth".to_string(),
        BTreeMap::from([("Authorization".to_string(), SECRET.to_string())]),
    )]))
}

async fn until<T>(what: &str, limit: Duration, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `server` can tell its client that its tools changed: a current client's
/// `subscriptions/listen` stream is open, or an older client's session is known.
async fn until_known(server: &McpTestServer, era: Era) {
    until(
        "the server to know its client",
        Duration::from_secs(10),
        async || {
            let known = match era {
                Era::Current => !server.world.sinks.lock().unwrap().is_empty(),
                Era::Legacy => !server.world.peers.lock().unwrap().is_empty(),
            };
            known.then_some(())
        },
    )
    .await;
}

fn names(source: &dyn External) -> Vec<String> {
    source.specs().into_iter().map(|s| s.name).collect()
}

async fn until_offers(source: &dyn External, name: &str) {
    until_offers_within(source, name, Duration::from_secs(20)).await
}

async fn until_offers_within(source: &dyn External, name: &str, limit: Duration) {
    until(&format!("{name} to be offered"), limit, async || {
        names(source).iter().any(|n| n == name).then_some(())
    })
    .await;
}

async fn call(source: &dyn External, name: &str, arguments: Value) -> (Value, bool) {
    call_keyed(source, name, arguments, "k1").await
}

async fn call_keyed(
    source: &dyn External,
    name: &str,
    arguments: Value,
    idempotency_key: &str,
) -> (Value, bool) {
    let key = agent_key();
    let args = arguments.to_string();
    let Outcome { content, ok } = source
        .call(&ExternalCall {
            agent: &key,
            name,
            arguments: &args,
            idempotency_key,
            space: None,
            depth: 1,
        })
        .await;
    (serde_json::from_str(&content).unwrap(), ok)
}

fn status_of<'a>(status: &'a [ToolStatus], name: &str) -> &'a ToolStatus {
    status
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no status for {name}: {status:?}"))
}

// ---------------------------------------------------------------------------------------
// Listing.

#[tokio::test]
async fn tools_are_listed_under_the_prefix_and_cut_to_the_allowlist() {
    for era in [Era::Current, Era::Legacy] {
        let server = McpTestServer::start(era, tracker_tools()).await;
        let source = McpServer::start(
            &agent_key(),
            &spec(
                &server.url,
                ", tools: [echo, fail, count, slow, whoami, merge]",
            ),
            &no_secrets(),
        );
        until_offers(&source, "tracker__whoami").await;
        assert_eq!(
            names(&source),
            [
                "tracker__count",
                "tracker__echo",
                "tracker__fail",
                "tracker__slow",
                "tracker__whoami"
            ],
            "{era:?}: every page followed, in name order, nothing outside the allowlist"
        );
        let echo = source
            .specs()
            .into_iter()
            .find(|s| s.name == "tracker__echo")
            .unwrap();
        assert_eq!(echo.description, "Echo the text back.");
        assert_eq!(echo.parameters["properties"]["text"]["type"], "string");

        let status = source.status();
        let echo = status_of(&status, "tracker__echo");
        assert!(echo.ready && echo.last_error.is_none(), "{echo:?}");
        assert_eq!(echo.source, "mcp:tracker");
        let merge = status_of(&status, "tracker__merge");
        assert!(!merge.ready);
        assert_eq!(
            merge.last_error.as_deref(),
            Some("MCP server tracker offers no tool \"merge\"")
        );
        assert!(!status.iter().any(|s| s.name.contains("delete_everything")));

        let (v, ok) = call(&source, "tracker__delete_everything", json!({})).await;
        assert!(!ok && v["error"].as_str().unwrap().contains("offers no tool"));
        let (v, ok) = call(&source, "tracker__count", json!({})).await;
        assert_eq!((v, ok), (json!({"open": 3, "closed": 7}), true));
        server.stop().await;
    }
}

#[tokio::test]
async fn a_tool_added_at_runtime_appears() {
    for era in [Era::Current, Era::Legacy] {
        let server = McpTestServer::start(era, vec![tool("echo", "Echo.")]).await;
        let source = McpServer::start(&agent_key(), &spec(&server.url, ""), &no_secrets());
        until_offers(&source, "tracker__echo").await;
        // Give a current client's subscriptions/listen stream time to open.
        until_known(&server, era).await;
        server.add_tool(tool("count", "Count tickets.")).await;
        // Told, not found by the periodic relisting: that comes only after RELIST (30 s).
        until_offers_within(&source, "tracker__count", Duration::from_secs(15)).await;
        assert_eq!(names(&source), ["tracker__count", "tracker__echo"]);
        server.stop().await;
    }
}

// ---------------------------------------------------------------------------------------
// Calls.

#[tokio::test]
async fn an_is_error_result_is_a_failed_call_the_model_reads() {
    let server = McpTestServer::start(Era::Current, tracker_tools()).await;
    let source = McpServer::start(&agent_key(), &spec(&server.url, ""), &no_secrets());
    until_offers(&source, "tracker__fail").await;
    let (v, ok) = call(&source, "tracker__fail", json!({})).await;
    assert!(!ok);
    assert_eq!(v, json!({"error": "the ticket system is read-only today"}));
    let (v, ok) = call(&source, "tracker__echo", json!({"text": "still here"})).await;
    assert_eq!((v, ok), (json!({"text": "echo: still here"}), true));
    let key = agent_key();
    let bad = source
        .call(&ExternalCall {
            agent: &key,
            name: "tracker__echo",
            arguments: "{not json",
            idempotency_key: "k2",
            space: None,
            depth: 1,
        })
        .await;
    assert!(
        !bad.ok && bad.content.contains("not valid JSON"),
        "{}",
        bad.content
    );
}

#[tokio::test]
async fn a_call_carries_its_idempotency_key_in_a_header_and_its_meta() {
    for era in [Era::Current, Era::Legacy] {
        let server = McpTestServer::start(era, tracker_tools()).await;
        let source = McpServer::start(
            &agent_key(),
            &spec(&server.url, ", idempotent: true"),
            &no_secrets(),
        );
        until_offers(&source, "tracker__echo").await;
        assert!(source.idempotent("tracker__echo"), "from the spec");
        assert!(
            server.world.idempotency_headers.lock().unwrap().is_empty(),
            "{era:?}: listing carries no key"
        );
        let key = "ops/sre:batch-7:2:0";
        for _ in 0..2 {
            let (v, ok) = call_keyed(&source, "tracker__echo", json!({"text": "x"}), key).await;
            assert_eq!((v, ok), (json!({"text": "echo: x"}), true));
        }
        assert_eq!(
            *server.world.idempotency_headers.lock().unwrap(),
            [key, key],
            "{era:?}: every try of one call, the same key"
        );
        assert_eq!(
            *server.world.idempotency_meta.lock().unwrap(),
            [Some(key.to_string()), Some(key.to_string())]
        );
        server.stop().await;
    }
    let server = McpTestServer::start(Era::Current, tracker_tools()).await;
    let source = McpServer::start(&agent_key(), &spec(&server.url, ""), &no_secrets());
    until_offers(&source, "tracker__echo").await;
    assert!(!source.idempotent("tracker__echo"), "not unless declared");
}

#[tokio::test]
async fn a_call_longer_than_timeout_seconds_is_an_error_and_the_server_stays() {
    let server = McpTestServer::start(Era::Current, tracker_tools()).await;
    let source = McpServer::start(
        &agent_key(),
        &spec(&server.url, ", timeoutSeconds: 1"),
        &no_secrets(),
    );
    until_offers(&source, "tracker__slow").await;
    let (v, ok) = call(&source, "tracker__slow", json!({})).await;
    assert!(!ok);
    assert_eq!(
        v["error"],
        "MCP tool tracker__slow did not answer within 1s (timeoutSeconds)"
    );
    assert!(
        source.status().iter().all(|s| s.ready),
        "a slow tool does not take the server down"
    );
    let (v, ok) = call(&source, "tracker__echo", json!({"text": "after"})).await;
    assert_eq!((v, ok), (json!({"text": "echo: after"}), true));
}

// ---------------------------------------------------------------------------------------
// Unreachable servers.

#[tokio::test]
async fn a_server_down_at_start_comes_up_later_and_may_go_away_again() {
    let port = free_port().unwrap();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let source = McpServer::start(&agent_key(), &spec(&url, ""), &no_secrets());

    let down = until(
        "the server to be reported unreachable",
        Duration::from_secs(10),
        async || {
            let s = source.status();
            (s.len() == 1
                && s[0]
                    .last_error
                    .as_deref()
                    .is_some_and(|e| e.contains("unreachable")))
            .then(|| s[0].clone())
        },
    )
    .await;
    assert_eq!(down.name, "tracker__*");
    assert_eq!(down.source, "mcp:tracker");
    assert!(!down.ready);
    let why = down.last_error.unwrap();
    assert!(
        why.starts_with("MCP server tracker is unavailable: unreachable at"),
        "{why}"
    );
    // Why, as the OS says it, and no type names of the SDK's transport.
    assert!(why.contains("Connection refused"), "{why}");
    assert!(!why.contains("::"), "{why}");
    assert!(source.specs().is_empty(), "nothing offered while down");
    let (v, ok) = call(&source, "tracker__echo", json!({"text": "hi"})).await;
    assert!(!ok);
    assert_eq!(v["error"], why, "a call while down says why");

    let server = McpTestServer::start_on(port, Era::Current, tracker_tools()).await;
    until_offers(&source, "tracker__echo").await;
    assert!(
        source.status().iter().all(|s| s.ready),
        "{:?}",
        source.status()
    );
    let (v, ok) = call(&source, "tracker__echo", json!({"text": "hi"})).await;
    assert_eq!((v, ok), (json!({"text": "echo: hi"}), true));

    // It goes away: its tools go with it, and come back with it.
    let world = server.world.clone();
    server.stop().await;
    until("the tools to go", Duration::from_secs(20), async || {
        source.specs().is_empty().then_some(())
    })
    .await;
    let s = source.status();
    assert!(s.len() == 1 && !s[0].ready, "{s:?}");
    let why = s[0].last_error.clone().unwrap();
    assert!(
        why.starts_with("MCP server tracker is unavailable"),
        "{why}"
    );
    assert!(
        source.owns("tracker__echo"),
        "its tools stay its own while down"
    );
    assert!(!source.owns("tracker__nonsense"));
    let (v, ok) = call(&source, "tracker__echo", json!({"text": "hi"})).await;
    assert!(!ok);
    assert_eq!(v["error"], why, "a call of a dead server's tool says why");
    let again = McpTestServer::serve(port, world).await;
    until_offers(&source, "tracker__echo").await;
    again.stop().await;
}

#[tokio::test]
async fn a_missing_secret_makes_the_tools_unavailable_with_that_reason() {
    let server = McpTestServer::start(Era::Current, tracker_tools()).await;
    let source = McpServer::start(
        &agent_key(),
        &spec(&server.url, ", headersFrom: {secretName: tracker-auth}"),
        &no_secrets(),
    );
    let why = until("the reason", Duration::from_secs(10), async || {
        source.status()[0]
            .last_error
            .clone()
            .filter(|e| e.contains("Secret"))
    })
    .await;
    assert_eq!(
        why,
        "MCP server tracker is unavailable: Secret \"tracker-auth\" is not available to the worker"
    );
    assert!(source.specs().is_empty());
    assert!(
        server.world.authorization.lock().unwrap().is_empty(),
        "no request without its credentials"
    );
}

// ---------------------------------------------------------------------------------------
// Secrets.

/// A server that echoes the Secret in what it says of its tools (a description, its input
/// schema) does not show it to the model: the listing is masked like results.
#[tokio::test]
async fn a_tool_listing_that_echoes_the_secret_is_masked() {
    let mut tools = tracker_tools();
    let mut leaky = server::tool("leaky", &format!("Knows your token: {SECRET}"));
    let schema = json!({"type": "object", "properties": {"text": {"type": "string", "description": format!("default {SECRET}")}}});
    leaky.input_schema = std::sync::Arc::new(schema.as_object().cloned().unwrap());
    tools.push(leaky);
    let server = McpTestServer::start(Era::Current, tools).await;
    let source = McpServer::start(
        &agent_key(),
        &spec(&server.url, ", headersFrom: {secretName: tracker-auth}"),
        &with_secret(),
    );
    until_offers(&source, "tracker__leaky").await;
    let leaky = source
        .specs()
        .into_iter()
        .find(|s| s.name == "tracker__leaky")
        .unwrap();
    assert_eq!(leaky.description, "Knows your token: ***");
    assert_eq!(
        leaky.parameters["properties"]["text"]["description"],
        "default ***"
    );
    let offered = serde_json::to_string(&source.specs()).unwrap();
    assert!(!offered.contains("s3cr3t"), "{offered}");
}

#[tokio::test]
async fn headers_from_a_secret_reach_the_server_and_appear_nowhere_else() {
    let (logs, _guard) = agentfleet::testing::CapturedLogs::capture(tracing::Level::TRACE);

    let server = McpTestServer::start(Era::Current, tracker_tools()).await;
    let source = McpServer::start(
        &agent_key(),
        &spec(&server.url, ", headersFrom: {secretName: tracker-auth}"),
        &with_secret(),
    );
    until_offers(&source, "tracker__whoami").await;
    let seen = server.world.authorization.lock().unwrap().clone();
    assert!(
        !seen.is_empty() && seen.iter().all(|a| a.as_deref() == Some(SECRET)),
        "every request carries the header: {seen:?}"
    );
    // Connecting and listing sent the header many times: not one log line holds it, at
    // any level (rmcp, reqwest and hyper included).
    let before_calls = logs.text();
    assert!(
        before_calls.contains("MCP tools listed"),
        "captured: {before_calls}"
    );
    assert!(!before_calls.contains("s3cr3t"), "{before_calls}");

    // The server echoes the credentials back: the model sees them masked.
    let (v, ok) = call(&source, "tracker__whoami", json!({})).await;
    assert_eq!((v, ok), (json!({"text": "you sent ***"}), true));
    let (v, _) = call(&source, "tracker__echo", json!({"text": SECRET})).await;
    assert_eq!(v, json!({"text": "echo: ***"}));

    // Down, with the server's address in the reason: still nothing of the Secret.
    server.stop().await;
    until("the tools to go", Duration::from_secs(20), async || {
        source.specs().is_empty().then_some(())
    })
    .await;
    let status = serde_json::to_string(&source.status()).unwrap();
    assert!(!status.contains("s3cr3t"), "{status}");
    // rmcp logs whole messages at DEBUG and TRACE, and these held what the server echoed;
    // at the levels a pod logs, nothing.
    let logged = logs.text();
    let shown: Vec<&str> = logged
        .lines()
        .filter(|l| {
            [" INFO ", " WARN ", " ERROR "]
                .iter()
                .any(|lvl| l.contains(lvl))
        })
        .collect();
    assert!(
        shown.iter().any(|l| l.contains("MCP tools unavailable")),
        "{logged}"
    );
    assert!(!shown.iter().any(|l| l.contains("s3cr3t")), "{shown:#?}");
}

// ---------------------------------------------------------------------------------------
// In a worker: what the model is offered and sees, and what the data plane is told.

fn manifest(url: &str, base_url: &str) -> Agent {
    serde_yaml::from_str(&format!(
        r#"
apiVersion: agentfleet.dev/v1alpha1
kind: Agent
metadata: {{name: sre, namespace: {NS}}}
spec:
  model: {{provider: openai, name: mock, baseUrl: "{base_url}"}}
  instructions: You keep the services up.
  spaces: [oncall]
  # A call and an answer: the answer is the last step, so it ends without the nudge.
  cycle: {{maxSteps: 2}}
  tools:
    mcp:
      - name: tracker
        url: "{url}"
        tools: [echo, whoami]
        headersFrom: {{secretName: tracker-auth}}
"#
    ))
    .unwrap()
}

struct Worker {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Worker {
    fn start(agentlet: Arc<Agentlet>) -> Self {
        let (stop, rx) = watch::channel(false);
        let health = Arc::new(Health::default());
        let task = tokio::spawn(run_agent(
            agentlet,
            "w1".into(),
            Duration::from_secs(5),
            health,
            rx,
        ));
        Self { stop, task }
    }

    async fn stop(self) {
        let _ = self.stop.send(true);
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .unwrap()
            .unwrap();
    }
}

/// The agent of `agent`, with its external tools as the worker builds them.
fn agentlet(store: &Arc<RedisStore>, agent: Agent) -> Arc<Agentlet> {
    let external = external_tools(store, &agent, with_secret());
    assert_eq!(external.len(), 1, "one source per MCP server");
    agentlet_with(store, agent, external)
}

/// The tools outside the worker of `agent`, as the worker builds them with `secrets`.
fn external_tools(
    store: &Arc<RedisStore>,
    agent: &Agent,
    secrets: Secrets,
) -> Vec<Arc<dyn External>> {
    let store_dyn: Arc<dyn Store> = store.clone();
    tools::external(
        &agent_key(),
        &agent.spec.tools,
        &ExternalContext {
            store: store_dyn,
            secrets,
            callback_url: None,
        },
    )
}

/// The agent of `agent` (its model OpenAI-compatible), with `external` tools.
fn agentlet_with(
    store: &Arc<RedisStore>,
    agent: Agent,
    external: Vec<Arc<dyn External>>,
) -> Arc<Agentlet> {
    let model = OpenAi::new(&agent.spec.model, Default::default()).unwrap();
    Arc::new(
        Agentlet::new(
            agent,
            agent_key(),
            store.clone(),
            Arc::new(model),
            WorkerMetrics::new().unwrap(),
        )
        .with_external(external),
    )
}

/// The tools the model was offered in `request`.
fn offered(request: &Value) -> Vec<&str> {
    request["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect()
}

async fn reported(store: &RedisStore, key: &AgentKey) -> Vec<ToolStatus> {
    let seen = store.observe(std::slice::from_ref(key)).await.unwrap();
    seen.into_iter()
        .next()
        .and_then(|o| o.tools)
        .map(|tools| tools.iter().map(ToolStatus::from).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn in_a_worker_the_tools_come_and_go_and_the_model_sees_each_result() {
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
    let mock = MockModel::start(vec![
        MockTurn::tools(&[("tracker__echo", json!({"text": "disk at 91%"}))]),
        MockTurn::text("Noted."),
        MockTurn::tools(&[("tracker__echo", json!({"text": "still there?"}))]),
        MockTurn::text("The tracker is down."),
    ])
    .await
    .unwrap();
    // The server is down when the worker starts.
    let port = free_port().unwrap();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let agent = manifest(&url, &mock.base_url);
    let sre = agentlet(&store, agent);
    let worker = Worker::start(sre.clone());

    // The data plane hears it is not ready…
    let down = until(
        "not ready to be reported",
        Duration::from_secs(20),
        async || {
            let tools = reported(&store, &key).await;
            tools.iter().find(|t| t.name == "tracker__*").cloned()
        },
    )
    .await;
    assert!(!down.ready && down.last_error.is_some(), "{down:?}");
    assert!(
        reported(&store, &key)
            .await
            .iter()
            .any(|t| t.name == "send_message" && t.ready),
        "the built-ins are there all along"
    );

    // …and, once the server is up, ready, without restarting the worker.
    let server = McpTestServer::start_on(port, Era::Current, tracker_tools()).await;
    until(
        "ready to be reported",
        Duration::from_secs(30),
        async || {
            let tools = reported(&store, &key).await;
            let echo = tools.iter().find(|t| t.name == "tracker__echo")?;
            (echo.ready && !tools.iter().any(|t| t.name == "tracker__*")).then_some(())
        },
    )
    .await;

    ask(&store, "How full is the disk?").await;
    until("the cycle to commit", Duration::from_secs(20), async || {
        (store.consciousness(&key).await.unwrap().cycle == 1).then_some(())
    })
    .await;

    // The server dies: the data plane hears it, and a call of its tool is an error result.
    let world = server.world.clone();
    server.stop().await;
    let down = until(
        "not ready to be reported again",
        Duration::from_secs(30),
        async || {
            let tools = reported(&store, &key).await;
            tools.iter().find(|t| t.name == "tracker__*").cloned()
        },
    )
    .await;
    assert!(!down.ready, "{down:?}");
    let why = down.last_error.unwrap();
    assert!(
        why.starts_with("MCP server tracker is unavailable"),
        "{why}"
    );
    ask(&store, "Is the tracker still there?").await;
    until("the second cycle", Duration::from_secs(20), async || {
        (store.consciousness(&key).await.unwrap().cycle == 2).then_some(())
    })
    .await;
    worker.stop().await;

    let requests = mock.requests();
    assert_eq!(requests.len(), 4, "a tool step and a final step, twice");
    let offered = offered(&requests[0]);
    assert!(
        offered.ends_with(&["tracker__echo", "tracker__whoami"]),
        "after the built-ins: {offered:?}"
    );
    let echo = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "tracker__echo")
        .unwrap();
    assert_eq!(echo["function"]["description"], "Echo the text back.");
    let result = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap();
    assert_eq!(
        result["content"],
        json!({"text": "echo: disk at 91%"}).to_string()
    );
    let consciousness = store.consciousness(&key).await.unwrap();
    assert!(
        consciousness
            .messages
            .iter()
            .any(|m| m.contains("echo: disk at 91%")),
        "the result is remembered"
    );
    let failed = requests[3]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rfind(|m| m["role"] == "tool")
        .unwrap();
    let failed: Value = serde_json::from_str(failed["content"].as_str().unwrap()).unwrap();
    assert_eq!(failed, json!({"error": why}), "the model is told why");
    assert_eq!(
        world.idempotency_meta.lock().unwrap().len(),
        1,
        "nothing reached the server the second time"
    );
    let calls = |outcome: &str| {
        sre.metrics
            .tool_calls
            .with_label_values(&[NS, "sre", "tracker__echo", outcome])
            .get()
    };
    assert_eq!(
        (calls("ok"), calls("error")),
        (1, 1),
        "counted under the tool's name, down or not"
    );
    let everything = format!(
        "{requests:?}{:?}{:?}",
        consciousness.messages,
        reported(&store, &key).await
    );
    assert!(
        !everything.contains("s3cr3t"),
        "no secret reaches the model or the status"
    );
}

/// Dana asks in the oncall space.
async fn ask(store: &RedisStore, text: &str) {
    store
        .post_message(
            &SpaceKey::new(NS, "oncall"),
            &NewMessage {
                sender: Sender {
                    groups: Vec::new(),
                    id: "dana".into(),
                    name: "Dana".into(),
                    kind: Some(MemberKind::Human),
                },
                text: text.into(),
                mention: None,
                idempotency_key: None,
                urgent: false,
                depth: 0,
            },
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn a_worker_starting_with_work_waiting_offers_the_tools_at_once() {
    let redis = RedisServer::start().unwrap();
    let store = Arc::new(RedisStore::new(&redis.url()).unwrap());
    store
        .apply_space(
            &SpaceKey::new(NS, "oncall"),
            &space_record("Oncall", &["sre"], &["Dana"]),
        )
        .await
        .unwrap();
    let mock = MockModel::start(vec![
        MockTurn::tools(&[("send_message", json!({"space": "oncall", "text": "On it."}))]),
        MockTurn::text("Said."),
    ])
    .await
    .unwrap();
    let server = McpTestServer::start(Era::Current, tracker_tools()).await;
    // The message is waiting before the worker starts: its first cycle runs at once.
    ask(&store, "Anything open?").await;
    let worker = Worker::start(agentlet(&store, manifest(&server.url, &mock.base_url)));
    until("the cycle to commit", Duration::from_secs(20), async || {
        (store.consciousness(&agent_key()).await.unwrap().cycle == 1).then_some(())
    })
    .await;
    worker.stop().await;
    let requests = mock.requests();
    let offered = offered(&requests[0]);
    assert!(
        offered.ends_with(&["tracker__echo", "tracker__whoami"]),
        "the session waited for the server's first listing: {offered:?}"
    );
    server.stop().await;
}

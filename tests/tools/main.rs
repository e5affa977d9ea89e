//! HTTP tools against real HTTP servers started here: sync calls (URL placeholders, query and
//! body, headers from a Secret, `Idempotency-Key`), every failure as a result, secrets masked,
//! and an async call whose result comes back through the real gateway over a real
//! `redis-server` as one inbox line that wakes the agent.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failing loudly is the point

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::sync::watch;

use agentfleet::crd::{Agent, HttpToolSpec};
use agentfleet::gateway::auth::Tokens;
use agentfleet::gateway::{self, Gateway, Limits};
use agentfleet::identity::AgentKey;
use agentfleet::identity::SpaceKey;
use agentfleet::model::openai::OpenAi;
use agentfleet::store::MemberKind;
use agentfleet::store::{
    prelude::*, LiveEvent, MemoryStore, NewCall, NewMessage, RedisStore, Sender,
};
use agentfleet::telemetry::WorkerMetrics;
use agentfleet::testing::{free_port, space_record, MockModel, MockTurn, RedisServer};
use agentfleet::worker::cycle::Agentlet;
use agentfleet::worker::tools::http::{HttpTools, CALLBACK_HEADER, CALLBACK_TOKEN_HEADER};
use agentfleet::worker::tools::secrets::Secrets;
use agentfleet::worker::tools::{self, External, ExternalCall, ExternalContext};
use agentfleet::worker::{run_agent, Health};

mod hostile;

/// The value of the tracker Secret: it must never be seen anywhere but in the request.
const SECRET: &str = "Bearer s3cr3t-tracker-token";

/// A request the tool server received.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    uri: String,
    headers: BTreeMap<String, String>,
    body: String,
}

/// A tool service on a free loopback port: `/slow` never answers, `/fail` answers 500 echoing
/// the `Authorization` header, `/big` answers 10,000 bytes, `/broken` answers invalid JSON
/// said to be JSON, `/async` accepts with 202, `/shout` and `/encoded` echo the
/// `Authorization` header upper-cased and encoded (base64, hex), and
/// anything else echoes the request as JSON. Every request is recorded.
struct ToolServer {
    base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ToolServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve_tool(State(seen): State<Arc<Mutex<Vec<Seen>>>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    // A header sent twice shows as its values joined by ", ".
    let mut headers: BTreeMap<String, String> = BTreeMap::new();
    for (n, v) in &parts.headers {
        let v = v.to_str().unwrap_or_default();
        headers
            .entry(n.to_string())
            .and_modify(|all| *all = format!("{all}, {v}"))
            .or_insert_with(|| v.to_string());
    }
    let auth = headers.get("authorization").cloned().unwrap_or_default();
    seen.lock().unwrap().push(Seen {
        method: parts.method.to_string(),
        uri: parts.uri.to_string(),
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    });
    match parts.uri.path() {
        "/slow" => std::future::pending().await,
        "/fail" => (
            StatusCode::INTERNAL_SERVER_ERROR,
            axum::Json(json!({"error": "boom", "auth": auth})),
        )
            .into_response(),
        "/big" => Body::from("x".repeat(10_000)).into_response(),
        "/broken" => (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            "{\"state\": \"open\",",
        )
            .into_response(),
        "/async" => (StatusCode::ACCEPTED, axum::Json(json!({"queued": true}))).into_response(),
        // What a careless service does with credentials: says them back in other forms.
        "/shout" => axum::Json(json!({"you sent": auth.to_uppercase()})).into_response(),
        "/encoded" => {
            use base64::Engine;
            let b64 = base64::engine::general_purpose::STANDARD;
            axum::Json(json!({
                "token": b64.encode(format!("{{\"authorization\":\"{auth}\"}}")),
                "raw": b64.encode(&auth),
                "hex": auth.bytes().map(|b| format!("{b:02X}")).collect::<String>(),
            }))
            .into_response()
        }
        _ => axum::Json(json!({
            "method": parts.method.as_str(),
            "uri": parts.uri.to_string(),
            "auth": auth,
            "body": serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null),
        }))
        .into_response(),
    }
}

async fn tool_server() -> ToolServer {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let app = axum::Router::new()
        .fallback(serve_tool)
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    ToolServer {
        base: format!("http://{addr}"),
        seen,
        task,
    }
}

impl ToolServer {
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn secrets() -> Secrets {
    Secrets::from_map(BTreeMap::from([(
        "tracker".to_string(),
        BTreeMap::from([("Authorization".to_string(), SECRET.to_string())]),
    )]))
}

fn specs(yaml: &str) -> Vec<HttpToolSpec> {
    serde_yaml::from_str(yaml).unwrap()
}

fn http_tools(specs: &[HttpToolSpec], secrets: Secrets) -> HttpTools {
    let context = ExternalContext {
        store: Arc::new(MemoryStore::new()),
        secrets,
        callback_url: None,
    };
    HttpTools::new(&AgentKey::new("ops", "bot"), specs, &context)
}

/// Calls `name` with `arguments` (JSON text): the result as JSON, and whether it is ok.
async fn call(tools: &dyn External, name: &str, arguments: &str) -> (Value, bool) {
    let outcome = tools
        .call(&ExternalCall {
            agent: &AgentKey::new("ops", "bot"),
            name,
            arguments,
            idempotency_key: "ops/bot:batch:1:0",
            space: None,
            depth: 1,
        })
        .await;
    (serde_json::from_str(&outcome.content).unwrap(), outcome.ok)
}

#[tokio::test]
async fn a_sync_call_fills_the_url_and_sends_query_body_headers_and_its_key() {
    let server = tool_server().await;
    let base = &server.base;
    let tools = http_tools(
        &specs(&format!(
            r#"
- name: get_ticket
  description: Reads a ticket.
  url: "{base}/teams/{{team}}/tickets/{{id}}"
  method: GET
  inputSchema:
    type: object
    properties: {{team: {{type: string}}, id: {{type: integer}}, q: {{type: string}}}}
    required: [team, id]
  headers: {{X-Team: sre}}
  headersFrom: {{secretName: tracker}}
- name: create_ticket
  description: Opens a ticket.
  url: "{base}/tickets"
  method: POST
  headersFrom: {{secretName: tracker}}
- name: patch_ticket
  description: Changes a ticket.
  url: "{base}/tickets/1"
  method: PATCH
  headers: {{Content-Type: application/merge-patch+json, X-Agentfleet-Callback: "http://elsewhere"}}
"#
        )),
        secrets(),
    );
    assert_eq!(
        tools.specs().iter().map(|s| &s.name).collect::<Vec<_>>(),
        ["get_ticket", "create_ticket", "patch_ticket"]
    );
    assert!(
        tools.idempotent("get_ticket"),
        "GET is idempotent by default"
    );
    assert!(!tools.idempotent("create_ticket"), "POST is not");
    assert!(tools.status().iter().all(|s| s.ready && s.source == "http"));

    let (result, ok) = call(
        &tools,
        "get_ticket",
        r#"{"team": "ops/sre team", "id": 42, "q": "disk full & more"}"#,
    )
    .await;
    assert!(ok, "{result}");
    assert_eq!(result["status"], 200);
    assert_eq!(result["truncated"], false);
    assert_eq!(
        result["body"]["uri"],
        "/teams/ops%2Fsre%20team/tickets/42?q=disk+full+%26+more"
    );
    assert_eq!(
        result["body"]["auth"], "***",
        "the service echoed the Secret: masked"
    );
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "GET");
    assert_eq!(seen[0].headers["x-team"], "sre");
    assert_eq!(seen[0].headers["authorization"], SECRET);
    assert_eq!(seen[0].headers["idempotency-key"], "ops/bot:batch:1:0");
    assert_eq!(seen[0].body, "");

    let (result, ok) = call(&tools, "create_ticket", r#"{"title": "disk full"}"#).await;
    assert!(ok, "{result}");
    let seen = server.seen();
    assert_eq!(seen[1].method, "POST");
    assert_eq!(seen[1].uri, "/tickets");
    assert_eq!(seen[1].headers["content-type"], "application/json");
    assert_eq!(
        serde_json::from_str::<Value>(&seen[1].body).unwrap(),
        json!({"title": "disk full"})
    );
    assert_eq!(seen[1].headers["idempotency-key"], "ops/bot:batch:1:0");
    assert_eq!(result["body"]["body"], json!({"title": "disk full"}));

    // The tool's own Content-Type is sent once; a callback header is never the tool's.
    let (result, ok) = call(&tools, "patch_ticket", r#"{"state": "closed"}"#).await;
    assert!(ok, "{result}");
    let seen = server.seen();
    assert_eq!(
        seen[2].headers["content-type"],
        "application/merge-patch+json"
    );
    assert!(
        !seen[2].headers.contains_key("x-agentfleet-callback"),
        "{:?}",
        seen[2].headers
    );
}

#[tokio::test]
async fn headers_come_from_a_mounted_secret_and_a_missing_one_makes_the_tool_unready() {
    let server = tool_server().await;
    let dir = std::env::temp_dir().join(format!("agentfleet-tools-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("tracker")).unwrap();
    std::fs::write(dir.join("tracker/Authorization"), format!("{SECRET}\n")).unwrap();
    let base = &server.base;
    let tools = http_tools(
        &specs(&format!(
            r#"
- {{name: mounted, description: d, url: "{base}/m", method: GET, headersFrom: {{secretName: tracker}}}}
- {{name: orphan, description: d, url: "{base}/o", method: GET, headersFrom: {{secretName: missing}}}}
"#
        )),
        Secrets::Dir(dir.clone()),
    );
    let (result, ok) = call(&tools, "mounted", "{}").await;
    assert!(ok, "{result}");
    assert_eq!(server.seen()[0].headers["authorization"], SECRET);
    assert_eq!(result["body"]["auth"], "***");

    let status = tools.status();
    assert!(status[0].ready);
    assert!(!status[1].ready);
    let why = status[1].last_error.as_deref().unwrap();
    assert!(why.contains("\"missing\""), "{why}");
    let (result, ok) = call(&tools, "orphan", "{}").await;
    assert!(!ok);
    assert!(
        result["error"]
            .as_str()
            .unwrap()
            .starts_with("the tool is not ready: Secret \"missing\""),
        "{result}"
    );
    assert_eq!(server.seen().len(), 1, "an unready tool sends nothing");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_visible_tool_shows_its_arguments_and_result_in_the_space_secrets_masked() {
    let server = tool_server().await;
    let base = &server.base;
    let store = Arc::new(MemoryStore::new());
    let tools = HttpTools::new(
        &AgentKey::new("ops", "bot"),
        &specs(&format!(
            r#"
- {{name: quiet, description: d, method: POST, url: "{base}/q", headersFrom: {{secretName: tracker}}}}
- {{name: shown, description: d, method: POST, url: "{base}/s", visible: true, headersFrom: {{secretName: tracker}}}}
"#
        )),
        &ExternalContext {
            store: store.clone(),
            secrets: secrets(),
            callback_url: None,
        },
    );
    let mut live = store
        .subscribe_live(&SpaceKey::new("ops", "ops"))
        .await
        .unwrap();
    for name in ["quiet", "shown"] {
        let outcome = tools
            .call(&ExternalCall {
                agent: &AgentKey::new("ops", "bot"),
                name,
                arguments: &json!({"note": SECRET}).to_string(),
                idempotency_key: "k",
                space: Some("ops"),
                depth: 1,
            })
            .await;
        assert!(outcome.ok, "{}", outcome.content);
    }
    // The first event is the visible tool's: the quiet one showed nothing.
    let event = tokio::time::timeout(Duration::from_secs(10), live.next())
        .await
        .unwrap()
        .unwrap();
    let LiveEvent::Activity {
        activity,
        tool,
        detail,
        ..
    } = event
    else {
        panic!("{event:?}")
    };
    assert_eq!(
        (activity.as_str(), tool.as_deref()),
        ("tool_result", Some("shown"))
    );
    let detail: Value = serde_json::from_str(&detail.unwrap()).unwrap();
    assert_eq!(detail["arguments"], json!({"note": "***"}));
    assert_eq!(detail["result"]["status"], 200);
    assert_eq!(detail["result"]["body"]["uri"], "/s");
    assert!(!detail.to_string().contains("s3cr3t"), "{detail}");
}

#[tokio::test]
async fn failures_are_error_results_and_no_secret_is_ever_shown() {
    let (logs, _logging) = agentfleet::testing::CapturedLogs::capture(tracing::Level::DEBUG);

    let server = tool_server().await;
    let base = &server.base;
    let closed = format!("http://127.0.0.1:{}", free_port().unwrap());
    let tools = http_tools(
        &specs(&format!(
            r#"
- {{name: slow, description: d, method: POST, url: "{base}/slow", timeoutSeconds: 1, headersFrom: {{secretName: tracker}}}}
- {{name: fail, description: d, method: POST, url: "{base}/fail", headersFrom: {{secretName: tracker}}}}
- {{name: big, description: d, url: "{base}/big", method: GET, maxResponseBytes: 100}}
- {{name: broken, description: d, url: "{base}/broken"}}
- {{name: refused, description: d, url: "{closed}/x?key={{key}}", method: GET}}
- name: strict
  description: d
  url: "{base}/strict"
  method: POST
  inputSchema: {{type: object, properties: {{n: {{type: integer, minimum: 1}}}}, required: [n], additionalProperties: false}}
"#
        )),
        secrets(),
    );
    let mut shown = Vec::new();

    let (result, ok) = call(&tools, "slow", "{}").await;
    assert!(!ok);
    assert_eq!(
        result["error"],
        "no answer within 1s (the service may have acted on the call)"
    );
    shown.push(result);

    let (result, ok) = call(&tools, "fail", "{}").await;
    assert!(!ok);
    assert_eq!(result["status"], 500);
    assert_eq!(
        result["error"],
        "the service answered HTTP 500 Internal Server Error"
    );
    assert_eq!(result["body"], json!({"error": "boom", "auth": "***"}));
    shown.push(result);

    let (result, ok) = call(&tools, "big", "{}").await;
    assert!(ok, "a cut body is still the answer: {result}");
    assert_eq!(result["truncated"], true);
    assert_eq!(result["size"], 10_000);
    assert_eq!(result["body"], "x".repeat(100));
    assert!(result["note"]
        .as_str()
        .unwrap()
        .contains("10000 bytes; only the first 100"));

    let (result, ok) = call(&tools, "broken", "{}").await;
    assert!(!ok, "{result}");
    assert_eq!(result["status"], 200);
    assert_eq!(
        result["error"],
        "the service's answer says it is JSON but is not valid JSON"
    );
    assert_eq!(result["body"], "{\"state\": \"open\",");

    // The secret as an argument, percent-encoded into the URL: masked in the error too.
    let (result, ok) = call(&tools, "refused", &json!({ "key": SECRET }).to_string()).await;
    assert!(!ok);
    assert!(
        result["error"]
            .as_str()
            .unwrap()
            .starts_with("the request failed: "),
        "{result}"
    );
    shown.push(result);

    let before = server.seen().len();
    for bad in [r#"{"n": 0}"#, r#"{"n": "1"}"#, r#"{"n": 1, "x": 2}"#, "{}"] {
        let (result, ok) = call(&tools, "strict", bad).await;
        assert!(!ok, "{bad}");
        assert!(
            result["error"].as_str().unwrap().starts_with(
                "the arguments do not match the tool's inputSchema (nothing was sent): "
            ),
            "{bad}: {result}"
        );
    }
    let (result, ok) = call(&tools, "strict", "{not json").await;
    assert!(!ok);
    assert!(result["error"]
        .as_str()
        .unwrap()
        .starts_with("the arguments are not JSON"));
    assert_eq!(
        server.seen().len(),
        before,
        "invalid arguments send nothing"
    );
    let (result, ok) = call(&tools, "strict", r#"{"n": 3}"#).await;
    assert!(ok, "{result}");
    assert_eq!(server.seen().len(), before + 1);

    let logs = logs.text();
    assert!(
        logs.contains("HTTP tool call failed"),
        "failures are logged: {logs}"
    );
    let status = serde_json::to_string(&tools.status()).unwrap();
    for text in shown.iter().map(Value::to_string).chain([logs, status]) {
        assert!(!text.contains("s3cr3t"), "a secret shows: {text}");
        assert!(!text.contains("s3cr3t-tracker-token"), "{text}");
    }
}

/// A service that reads the request, answers `status` promising a 100-byte body, sends a few
/// bytes of it and hangs up: the request surely reached it.
async fn breaking_server(status: &'static str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut buf = vec![0u8; 64 * 1024];
            let _ = socket.read(&mut buf).await;
            let head = format!("HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"q");
            let _ = socket.write_all(head.as_bytes()).await;
            drop(socket);
        }
    });
    base
}

#[tokio::test]
async fn an_exchange_that_breaks_after_the_request_went_out_may_have_acted() {
    let accepting = breaking_server("202 Accepted").await;
    let failing = breaking_server("200 OK").await;
    let closed = format!("http://127.0.0.1:{}", free_port().unwrap());
    let store = Arc::new(MemoryStore::new());
    let context = ExternalContext {
        store: store.clone(),
        secrets: secrets(),
        callback_url: Some("http://gateway.example".into()),
    };
    let tools = HttpTools::new(
        &AgentKey::new("ops", "bot"),
        &specs(&format!(
            r#"
- {{name: start_job, description: d, method: POST, mode: async, url: "{accepting}/jobs"}}
- {{name: start_elsewhere, description: d, method: POST, mode: async, url: "{closed}/jobs"}}
- {{name: update, description: d, method: POST, url: "{failing}/things"}}
"#
        )),
        &context,
    );
    // Accepted (2xx), then the body broke off: pending, and the result is still taken.
    let (result, ok) = call(&tools, "start_job", "{}").await;
    assert!(ok, "{result}");
    assert_eq!(result["status"], "pending");
    let id = agentfleet::store::CallId::parse(result["callId"].as_str().unwrap()).unwrap();
    assert!(store.call(&id).await.unwrap().is_some(), "still registered");
    // Nothing reached the service: not started, and forgotten.
    let (result, ok) = call(&tools, "start_elsewhere", "{}").await;
    assert!(!ok);
    assert!(
        result["error"]
            .as_str()
            .unwrap()
            .contains("the call was not started"),
        "{result}"
    );
    // A sync call whose answer broke off: the service may have acted, and the model is told.
    let (result, ok) = call(&tools, "update", "{}").await;
    assert!(!ok);
    assert!(
        result["error"]
            .as_str()
            .unwrap()
            .contains("the service may have acted on the call"),
        "{result}"
    );
}

// ---- Async: the result comes back through the gateway -------------------------------------

const NS: &str = "ops";

/// A worker for `agent` running until `stop`.
struct Running {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    async fn stop(self) {
        let _ = self.stop.send(true);
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .unwrap()
            .unwrap();
    }
}

fn start_worker(agentlet: Arc<Agentlet>) -> Running {
    let (stop, rx) = watch::channel(false);
    let task = tokio::spawn(run_agent(
        agentlet,
        "worker-1".into(),
        Duration::from_secs(5),
        Arc::new(Health::default()),
        rx,
    ));
    Running { stop, task }
}

async fn until<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Posts `body` to `url` with `token`: the status and the JSON answer.
async fn post_result(
    http: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    body: String,
) -> (u16, Value) {
    let mut request = http
        .post(url)
        .header("content-type", "application/json")
        .body(body);
    if let Some(t) = token {
        request = request.bearer_auth(t);
    }
    let answer = request.send().await.unwrap();
    (answer.status().as_u16(), answer.json().await.unwrap())
}

/// A gateway on a free port over `store`: its base URL, and what keeps it running.
async fn start_gateway(
    store: Arc<RedisStore>,
) -> (String, watch::Sender<bool>, tokio::task::JoinHandle<()>) {
    let registry = prometheus::Registry::new();
    let (stop, rx) = watch::channel(false);
    let gw = Gateway::new(
        store,
        Tokens::from_plain([]),
        Limits::default(),
        &registry,
        rx,
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let _ = gateway::serve(listener, gw, registry).await;
    });
    (base, stop, task)
}

/// The agent of `agent`, its tools as the worker builds them, async results posted to the
/// gateway at `gateway_base`.
fn async_agentlet(store: &Arc<RedisStore>, agent: &Agent, gateway_base: &str) -> Arc<Agentlet> {
    let key = AgentKey::new(
        agent.metadata.namespace.clone().unwrap(),
        agent.metadata.name.clone().unwrap(),
    );
    let external = tools::external(
        &key,
        &agent.spec.tools,
        &ExternalContext {
            store: store.clone(),
            secrets: secrets(),
            callback_url: Some(format!("{gateway_base}/")),
        },
    );
    Arc::new(
        Agentlet::new(
            agent.clone(),
            key,
            store.clone(),
            Arc::new(
                OpenAi::new(&agent.spec.model, Default::default())
                    .unwrap()
                    .with_backoff(Duration::from_millis(10)),
            ),
            WorkerMetrics::new().unwrap(),
        )
        .with_external(external),
    )
}

/// Husam's message `text` in `ops/ops`.
async fn husam_says(store: &RedisStore, text: &str) {
    store
        .post_message(
            &SpaceKey::new(NS, "ops"),
            &NewMessage {
                sender: Sender {
                    groups: Vec::new(),
                    id: "husam".into(),
                    name: "Husam".into(),
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
async fn an_async_result_comes_back_through_the_gateway_and_wakes_the_agent() {
    agentfleet::install_crypto_provider();
    let redis = RedisServer::start().unwrap();
    let store = Arc::new(RedisStore::new(&redis.url()).unwrap());
    let server = tool_server().await;

    // The gateway, on a free port, over the same data plane.
    let (gateway_base, _gateway_stop, _gateway) = start_gateway(store.clone()).await;

    let model = MockModel::start(vec![
        MockTurn::tools(&[("create_ticket", json!({"title": "disk full"}))]),
        MockTurn::text("The ticket is being created."),
        MockTurn::text("Ticket T-1 is open."),
    ])
    .await
    .unwrap();
    let agent: Agent = serde_yaml::from_str(&format!(
        r#"
apiVersion: agentfleet.dev/v1alpha1
kind: Agent
metadata: {{name: bot, namespace: {NS}}}
spec:
  model: {{provider: openai, name: mock, baseUrl: "{}"}}
  instructions: You open tickets.
  spaces: [ops]
  # A call and an answer: the answer is the last step, so it ends without the nudge.
  cycle: {{maxSteps: 2}}
  tools:
    http:
      - name: create_ticket
        description: Opens a ticket; the result comes later.
        url: "{}/async"
        method: POST
        mode: async
        headersFrom: {{secretName: tracker}}
"#,
        model.base_url, server.base
    ))
    .unwrap();
    let key = AgentKey::new(NS, "bot");
    store
        .apply_space(
            &SpaceKey::new(NS, "ops"),
            &space_record("Ops", &["bot"], &["Husam"]),
        )
        .await
        .unwrap();
    let agentlet = async_agentlet(&store, &agent, &gateway_base);

    // The agent calls the async tool, gets "pending" at once, and finishes its cycle.
    let worker = start_worker(agentlet.clone());
    husam_says(&store, "Open a ticket for the full disk.").await;
    until("the first cycle to commit", async || {
        (store.consciousness(&key).await.unwrap().cycle == 1).then_some(())
    })
    .await;
    worker.stop().await;

    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    let started = &seen[0];
    assert_eq!(started.uri, "/async");
    assert_eq!(started.headers["authorization"], SECRET);
    let callback = started.headers[CALLBACK_HEADER].clone();
    let token = started.headers[CALLBACK_TOKEN_HEADER].clone();
    let call_id = callback
        .strip_prefix(&format!("{gateway_base}/v1/tool-results/"))
        .unwrap_or_else(|| panic!("{callback}"))
        .to_string();
    assert!(call_id.starts_with("ops.bot."), "{call_id}");
    let requests = model.requests();
    let pending = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap();
    let pending: Value = serde_json::from_str(pending["content"].as_str().unwrap()).unwrap();
    assert_eq!(pending["status"], "pending");
    assert_eq!(pending["callId"], call_id.as_str());

    // Refusals write nothing.
    let http = reqwest::Client::new();
    // The service echoes the credential it was sent (a careless service): masked before the
    // model reads it.
    let good = json!({"result": {"ticket": "T-1", "echo": SECRET}}).to_string();
    let other = format!("{NS}.bot.{}", "0".repeat(32));
    let expired = NewCall::new(&key, "create_ticket", 0).unwrap();
    store.register_call(&expired).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let big = json!({"result": "x".repeat(70_000)}).to_string();
    let url = |id: &str| format!("{gateway_base}/v1/tool-results/{id}");
    for (what, id, token, body, status, code) in [
        ("no token", &call_id, None, &good, 401, "unauthenticated"),
        (
            "a wrong token",
            &call_id,
            Some("nope"),
            &good,
            401,
            "unauthenticated",
        ),
        (
            "another call's token",
            &call_id,
            Some(expired.token.as_str()),
            &good,
            401,
            "unauthenticated",
        ),
        (
            "an unknown call",
            &other,
            Some(token.as_str()),
            &good,
            404,
            "not_found",
        ),
        (
            "not a call id",
            &"x".to_string(),
            Some(token.as_str()),
            &good,
            404,
            "not_found",
        ),
        (
            "not JSON",
            &call_id,
            Some(token.as_str()),
            &"{".to_string(),
            400,
            "invalid_request",
        ),
        (
            "neither result nor error",
            &call_id,
            Some(token.as_str()),
            &"{}".to_string(),
            400,
            "invalid_request",
        ),
        (
            "too large",
            &call_id,
            Some(token.as_str()),
            &big,
            413,
            "payload_too_large",
        ),
        (
            "too late",
            &expired.id.to_string(),
            Some(expired.token.as_str()),
            &good,
            410,
            "expired",
        ),
    ] {
        let (s, answer) = post_result(&http, &url(id), token, body.clone()).await;
        assert_eq!(
            (s, answer["error"]["code"].as_str()),
            (status, Some(code)),
            "{what}: {answer}"
        );
        assert_eq!(
            store.inbox_depth(&key).await.unwrap(),
            0,
            "{what} wrote nothing"
        );
    }

    // The result: accepted once, into the inbox, waking the agent (no worker holds it).
    let mut wakes = store
        .subscribe_wakes(&agentfleet::store::WakeScope::All)
        .await
        .unwrap();
    let (s, answer) = post_result(&http, &url(&call_id), Some(&token), good.clone()).await;
    assert_eq!(s, 202, "{answer}");
    assert_eq!(answer, json!({"callId": call_id, "woke": true}));
    let woken = tokio::time::timeout(Duration::from_secs(10), wakes.next())
        .await
        .unwrap();
    assert_eq!(woken, Some(key.clone()));
    assert_eq!(store.inbox_depth(&key).await.unwrap(), 1);
    let (s, answer) = post_result(&http, &url(&call_id), Some(&token), good).await;
    assert_eq!(
        (s, answer["error"]["code"].as_str()),
        (409, Some("duplicate"))
    );
    assert_eq!(
        store.inbox_depth(&key).await.unwrap(),
        1,
        "a duplicate writes nothing"
    );

    // The woken agent sees the result as one inbox line naming the tool and the call.
    let worker = start_worker(agentlet.clone());
    until("the second cycle to commit", async || {
        (store.consciousness(&key).await.unwrap().cycle == 2).then_some(())
    })
    .await;
    worker.stop().await;
    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    let inbox = agentfleet::testing::conversation(&requests[2])
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap()
        .to_string();
    assert_eq!(inbox.lines().count(), 1, "{inbox}");
    assert!(
        inbox.starts_with(&format!(
            "(tool result) create_ticket: \"call {call_id} finished\" "
        )),
        "{inbox}"
    );
    let data: Value = serde_json::from_str(inbox.split_once("finished\" ").unwrap().1).unwrap();
    assert_eq!(
        data,
        json!({"callId": call_id, "tool": "create_ticket", "result": {"ticket": "T-1", "echo": "***"}})
    );
    assert_eq!(server.seen().len(), 1, "the tool was called once");
    let calls = |outcome: &str| {
        agentlet
            .metrics
            .tool_calls
            .with_label_values(&[NS, "bot", "create_ticket", outcome])
            .get()
    };
    assert_eq!(
        (calls("ok"), calls("error")),
        (1, 0),
        "one call, counted once"
    );
    for r in &requests {
        assert!(
            !r.to_string().contains("s3cr3t"),
            "the model never sees the Secret"
        );
    }
}

/// Issue 43: a cycle's record holds the call's arguments and result as the model saw them,
/// with the tools' secrets masked, on a real Redis: a model that writes the credential into
/// its thought and arguments, and a service that echoes it, leave it in no record.
#[tokio::test]
async fn a_cycle_record_on_redis_masks_what_the_tools_secrets_are() {
    agentfleet::install_crypto_provider();
    let redis = RedisServer::start().unwrap();
    let store = Arc::new(RedisStore::new(&redis.url()).unwrap());
    let server = tool_server().await;
    let (gateway_base, _gateway_stop, _gateway) = start_gateway(store.clone()).await;
    let thinking = MockTurn::Reply {
        text: Some(format!("I will send {SECRET} along.")),
        tool_calls: vec![("lookup".into(), json!({"note": SECRET}).to_string())],
        usage: (10, 5),
    };
    let model = MockModel::start(vec![thinking, MockTurn::text("Looked up.")])
        .await
        .unwrap();
    let agent: Agent = serde_yaml::from_str(&format!(
        r#"
apiVersion: agentfleet.dev/v1alpha1
kind: Agent
metadata: {{name: bot, namespace: {NS}}}
spec:
  model: {{provider: openai, name: mock, baseUrl: "{}"}}
  spaces: [ops]
  cycle: {{maxSteps: 2}}
  tools:
    http:
      - {{name: lookup, description: d, method: POST, url: "{}/echo", headersFrom: {{secretName: tracker}}}}
"#,
        model.base_url, server.base
    ))
    .unwrap();
    let key = AgentKey::new(NS, "bot");
    store
        .apply_space(
            &SpaceKey::new(NS, "ops"),
            &space_record("Ops", &["bot"], &["Husam"]),
        )
        .await
        .unwrap();
    let worker = start_worker(async_agentlet(&store, &agent, &gateway_base));
    husam_says(&store, "Look it up.").await;
    let heads = until("the cycle's record", async || {
        let heads = store.cycle_heads(&key, None, 10).await.unwrap();
        (!heads.is_empty()).then_some(heads)
    })
    .await;
    worker.stop().await;
    assert_eq!(server.seen()[0].headers["authorization"], SECRET);
    let json = store
        .cycle_record(&key, heads[0].seq)
        .await
        .unwrap()
        .unwrap();
    let record: Value = serde_json::from_str(&json).unwrap();
    let step = &record["steps"][0];
    assert_eq!(step["calls"][0]["tool"], "lookup");
    assert!(step["calls"][0]["arguments"]
        .as_str()
        .unwrap()
        .contains("***"));
    assert!(step["calls"][0]["result"].as_str().unwrap().contains("***"));
    assert!(step["text"].as_str().unwrap().contains("***"));
    assert!(!json.contains("s3cr3t"), "{json}");
}

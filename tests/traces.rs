//! Traces and log lines of a real `agentfleet worker` process: a real `redis-server`, the mock
//! OpenAI-compatible model, and an OTLP/HTTP receiver started here (`POST /v1/traces`,
//! `application/x-protobuf`, decoded as `ExportTraceServiceRequest`: the collector's side of
//! the protocol). The worker runs one cycle with a tool call and is stopped by SIGTERM: what it
//! had not exported yet must arrive before it exits.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failing loudly is the point

use std::io::BufRead as _;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentfleet::identity::SpaceKey;
use agentfleet::store::MemberKind;
use agentfleet::store::{prelude::*, NewMessage, ReadQuery, RedisStore, Sender};
use agentfleet::testing::{free_port, space_record, MockModel, MockTurn, RedisServer};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_agentfleet");
/// What the human says and what the agent posts: neither may reach a span.
const ASKED: &str = "Disk on db-1 is full, private-words-of-husam";
const ANSWER: &str = "Cleaning db-1 now, private-words-of-sre";

/// An OTLP/HTTP trace receiver on a free loopback port: every request it got, decoded.
struct Receiver {
    endpoint: String,
    requests: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    async fn start() -> Receiver {
        let requests: Arc<Mutex<Vec<ExportTraceServiceRequest>>> = Arc::default();
        let seen = requests.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(
                move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                    let seen = seen.clone();
                    async move {
                        assert_eq!(
                            headers.get("content-type").unwrap(),
                            "application/x-protobuf"
                        );
                        let request = ExportTraceServiceRequest::decode(body).unwrap();
                        seen.lock().unwrap().push(request);
                        // An empty ExportTraceServiceResponse: everything accepted.
                        (
                            [(axum::http::header::CONTENT_TYPE, "application/x-protobuf")],
                            Vec::<u8>::new(),
                        )
                    }
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Receiver {
            endpoint: format!("http://127.0.0.1:{port}"),
            requests,
            task,
        }
    }

    fn requests(&self) -> Vec<ExportTraceServiceRequest> {
        self.requests.lock().unwrap().clone()
    }

    fn spans(&self) -> Vec<Span> {
        self.requests()
            .into_iter()
            .flat_map(|r| r.resource_spans)
            .flat_map(|r| r.scope_spans)
            .flat_map(|s| s.spans)
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A worker process whose stderr is read line by line as it comes.
struct Worker {
    child: Child,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Worker {
    fn spawn(manifest: &std::path::Path, redis_url: &str, env: &[(&str, &str)]) -> Worker {
        let mut command = agentfleet::testing::worker_command(BIN, manifest, redis_url).unwrap();
        command
            .env("RUST_LOG", "info,agentfleet=debug")
            .stderr(Stdio::piped());
        for name in [
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_SDK_DISABLED",
            "OTEL_TRACES_EXPORTER",
            "OTEL_SERVICE_NAME",
            "OTEL_RESOURCE_ATTRIBUTES",
            "AGENTFLEET_LOG_FORMAT",
        ] {
            command.env_remove(name);
        }
        command.envs(env.iter().copied());
        let mut child = command.spawn().unwrap();
        let pipe = child.stderr.take().unwrap();
        let stderr: Arc<Mutex<Vec<String>>> = Arc::default();
        let lines = stderr.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(pipe).lines() {
                let Ok(line) = line else { return };
                lines.lock().unwrap().push(line);
            }
        });
        Worker { child, stderr }
    }

    /// SIGTERM, as the kubelet stops a pod; waits for the exit (its stderr read to the end).
    fn terminate(mut self) -> (std::process::ExitStatus, Vec<String>) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
        let start = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the worker did not stop on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        // The reader thread ends at the pipe's end.
        std::thread::sleep(Duration::from_millis(100));
        let lines = self.stderr.lock().unwrap().clone();
        (status, lines)
    }
}

struct Rig {
    _redis: RedisServer,
    redis_url: String,
    store: RedisStore,
    manifest: std::path::PathBuf,
    _model: MockModel,
}

impl Rig {
    /// An `sre` agent in the `ops` space of namespace `ops`, whose model answers a message
    /// with one `send_message` call, then ends the cycle with text; its window is so small
    /// that the commit compacts (one more model call, for the summary).
    async fn start(name: &str) -> Rig {
        let redis = RedisServer::start().unwrap();
        let redis_url = redis.url();
        let store = RedisStore::new(&redis_url).unwrap();
        store
            .apply_space(
                &SpaceKey::new("ops", "ops"),
                &space_record("Ops", &["sre"], &["husam"]),
            )
            .await
            .unwrap();
        let model = MockModel::start(vec![
            MockTurn::Reply {
                text: None,
                tool_calls: vec![("send_message".into(), json!({"text": ANSWER}).to_string())],
                usage: (321, 45),
            },
            MockTurn::Reply {
                text: Some("Done here.".into()),
                tool_calls: Vec::new(),
                usage: (400, 7),
            },
            // Compaction's summary: the window is small.
            MockTurn::Reply {
                text: Some("Husam reported a full disk.".into()),
                tool_calls: Vec::new(),
                usage: (250, 9),
            },
        ])
        .await
        .unwrap();
        let dir =
            std::env::temp_dir().join(format!("agentfleet-traces-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let manifest = dir.join("sre.yaml");
        std::fs::write(
            &manifest,
            format!(
                "apiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {{name: sre, namespace: ops}}\nspec:\n  model: {{provider: openai, name: mock-large, baseUrl: \"{}\"}}\n  spaces: [ops]\n  consciousness: {{windowTokens: 60, keepRecentMessages: 2}}\n",
                model.base_url
            ),
        )
        .unwrap();
        Rig {
            _redis: redis,
            redis_url,
            store,
            manifest,
            _model: model,
        }
    }

    async fn ask(&self) {
        self.store
            .post_message(
                &SpaceKey::new("ops", "ops"),
                &NewMessage {
                    sender: Sender {
                        groups: Vec::new(),
                        id: "husam".into(),
                        name: "Husam".into(),
                        kind: Some(MemberKind::Human),
                    },
                    text: ASKED.into(),
                    mention: None,
                    idempotency_key: None,
                    urgent: false,
                    depth: 0,
                },
            )
            .await
            .unwrap();
    }

    /// Waits until the agent has answered and its cycle is committed.
    async fn until_answered(&self) {
        let start = Instant::now();
        loop {
            let said = self
                .store
                .read_messages(
                    &SpaceKey::new("ops", "ops"),
                    &ReadQuery {
                        limit: 100,
                        ..Default::default()
                    },
                )
                .await
                .unwrap();
            let answered = said.iter().any(|m| m.text == ANSWER);
            let committed = self
                .store
                .consciousness(&agentfleet::identity::AgentKey::new("ops", "sre"))
                .await
                .unwrap()
                .cycle
                >= 1;
            if answered && committed {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the agent did not answer"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn value(v: &AnyValue) -> Value {
    match v.value.as_ref() {
        Some(any_value::Value::StringValue(s)) => json!(s),
        Some(any_value::Value::IntValue(i)) => json!(i),
        Some(any_value::Value::DoubleValue(d)) => json!(d),
        Some(any_value::Value::BoolValue(b)) => json!(b),
        Some(any_value::Value::ArrayValue(a)) => Value::Array(a.values.iter().map(value).collect()),
        other => json!(format!("{other:?}")),
    }
}

fn attributes(attributes: &[KeyValue]) -> serde_json::Map<String, Value> {
    attributes
        .iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value.as_ref().map(value).unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cycle_is_traced_over_otlp_and_flushed_on_sigterm() {
    let receiver = Receiver::start().await;
    let rig = Rig::start("on").await;
    rig.ask().await;
    let worker = Worker::spawn(
        &rig.manifest,
        &rig.redis_url,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint.as_str()),
            ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test"),
            ("AGENTFLEET_LOG_FORMAT", "json"),
        ],
    );
    rig.until_answered().await;
    // The batch processor would wait 5 s; the spans must come with the exit.
    let (status, stderr) = worker.terminate();
    assert!(status.success(), "{status}: {stderr:?}");

    let requests = receiver.requests();
    assert!(!requests.is_empty(), "nothing exported: {stderr:?}");
    let resource = attributes(
        &requests[0].resource_spans[0]
            .resource
            .as_ref()
            .unwrap()
            .attributes,
    );
    assert_eq!(resource["service.name"], "agentfleet-worker");
    assert_eq!(resource["deployment.environment"], "test");
    assert_eq!(resource["service.version"], env!("CARGO_PKG_VERSION"));

    let spans = receiver.spans();
    let named = |name: &str| -> Vec<&Span> { spans.iter().filter(|s| s.name == name).collect() };
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    eprintln!(
        "{} spans in {} requests: {names:?}",
        spans.len(),
        requests.len()
    );

    // The cycle.
    let cycles = named("cycle");
    assert_eq!(cycles.len(), 1, "{names:?}");
    let cycle = cycles[0];
    let a = attributes(&cycle.attributes);
    assert_eq!(a["agentfleet.namespace"], "ops");
    assert_eq!(a["agentfleet.agent"], "sre");
    assert_eq!(a["agentfleet.cycle"], 1);
    assert_eq!(a["agentfleet.events"], 1);
    assert_eq!(a["agentfleet.outcome"], "completed");
    assert!(
        cycle.parent_span_id.is_empty(),
        "the cycle is a trace's root"
    );

    // Three model calls: the tool call, the text that ends the cycle, and the summary.
    let chats = named("chat mock-large");
    assert_eq!(chats.len(), 3, "{names:?}");
    let (mut steps, summaries): (Vec<_>, Vec<_>) = chats
        .into_iter()
        .map(|s| (s, attributes(&s.attributes)))
        .partition(|(_, a)| a.contains_key("agentfleet.step"));
    assert_eq!(summaries.len(), 1);
    let (summary, a) = &summaries[0];
    assert_eq!(a["agentfleet.purpose"], "compaction");
    assert_eq!(a["gen_ai.operation.name"], "chat");
    assert_eq!(a["gen_ai.usage.input_tokens"], 250);
    assert_eq!(a["gen_ai.usage.output_tokens"], 9);
    assert_eq!(summary.parent_span_id, cycle.span_id);
    steps.sort_by_key(|(_, a)| a["agentfleet.step"].as_i64());
    for (span, a) in &steps {
        assert_eq!(span.parent_span_id, cycle.span_id, "a step is in its cycle");
        assert_eq!(span.trace_id, cycle.trace_id);
        assert_eq!(a["gen_ai.operation.name"], "chat");
        assert_eq!(a["gen_ai.provider.name"], "openai");
        assert_eq!(a["gen_ai.system"], "openai");
        assert_eq!(a["gen_ai.request.model"], "mock-large");
        assert!(
            a["agentfleet.time_to_first_chunk_ms"].as_i64().unwrap() >= 0,
            "{a:?}"
        );
        assert!(span.end_time_unix_nano >= span.start_time_unix_nano);
    }
    let (_, first) = &steps[0];
    assert_eq!(first["agentfleet.step"], 0);
    assert_eq!(first["gen_ai.usage.input_tokens"], 321);
    assert_eq!(first["gen_ai.usage.output_tokens"], 45);
    assert_eq!(
        first["gen_ai.response.finish_reasons"],
        json!(["tool_calls"])
    );
    assert_eq!(first["agentfleet.tool_calls"], 1);
    let (_, second) = &steps[1];
    assert_eq!(second["agentfleet.step"], 1);
    assert_eq!(second["gen_ai.usage.input_tokens"], 400);
    assert_eq!(second["gen_ai.usage.output_tokens"], 7);
    assert_eq!(second["gen_ai.response.finish_reasons"], json!(["stop"]));

    // The tool call, in the cycle, between the two steps.
    let tools = named("execute_tool send_message");
    assert_eq!(tools.len(), 1, "{names:?}");
    let tool = tools[0];
    let a = attributes(&tool.attributes);
    assert_eq!(a["gen_ai.operation.name"], "execute_tool");
    assert_eq!(a["gen_ai.tool.name"], "send_message");
    assert_eq!(a["gen_ai.tool.call.id"], "call_mock_0");
    assert_eq!(a["agentfleet.tool.outcome"], "ok");
    assert_eq!(a["agentfleet.step"], 0);
    assert_eq!(tool.parent_span_id, cycle.span_id);
    assert_eq!(tool.trace_id, cycle.trace_id);
    assert!(tool.start_time_unix_nano >= steps[0].0.end_time_unix_nano);
    assert!(tool.end_time_unix_nano <= steps[1].0.start_time_unix_nano);

    // Names, counts and ids only: no text of the conversation, no log line as an event.
    let exported = format!("{requests:?}");
    for private in [ASKED, ANSWER, "private-words", "Done here.", "full disk"] {
        assert!(!exported.contains(private), "{private} in the spans");
    }
    assert!(spans.iter().all(|s| s.events.is_empty()));

    // The worker's log lines: JSON only, no colour codes, and each line of the cycle says
    // its namespace, agent and cycle.
    assert!(!stderr.iter().any(|l| l.contains('\x1b')), "{stderr:?}");
    let lines: Vec<Value> = stderr
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(lines
        .iter()
        .any(|l| l["message"] == "exporting traces over OTLP"));
    let in_cycle: Vec<&Value> = lines
        .iter()
        .filter(|l| l["spans"].get(0) == Some(&json!("cycle")))
        .collect();
    assert!(!in_cycle.is_empty(), "{stderr:?}");
    for line in &in_cycle {
        assert_eq!(line["namespace"], "ops", "{line}");
        assert_eq!(line["agent"], "sre", "{line}");
        assert_eq!(line["cycle"], 1, "{line}");
    }
    assert!(
        in_cycle.iter().any(|l| l["message"] == "tool call"
            && l["tool"] == "send_message"
            && l["spans"] == json!(["cycle"])),
        "{in_cycle:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn without_an_endpoint_nothing_is_exported_and_text_logs_carry_no_colours() {
    let receiver = Receiver::start().await;
    let rig = Rig::start("off").await;
    rig.ask().await;
    // Everything of OpenTelemetry but an endpoint.
    let worker = Worker::spawn(
        &rig.manifest,
        &rig.redis_url,
        &[
            ("OTEL_SERVICE_NAME", "fleet"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer x"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ],
    );
    rig.until_answered().await;
    let (status, stderr) = worker.terminate();
    assert!(status.success(), "{status}: {stderr:?}");
    assert!(receiver.requests().is_empty());
    let text = stderr.join("\n");
    assert!(
        text.contains("traces are off (no OTEL_EXPORTER_OTLP_ENDPOINT)"),
        "{text}"
    );
    assert!(!text.contains("exporting traces"), "{text}");
    assert!(
        !text.contains('\x1b'),
        "no colour codes off a terminal: {text}"
    );
    assert!(
        text.contains("cycle{namespace=ops agent=sre events=1 cycle=1}"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_collector_costs_one_warning_and_nothing_else() {
    let rig = Rig::start("down").await;
    rig.ask().await;
    let nobody = format!("http://127.0.0.1:{}", free_port().unwrap());
    let worker = Worker::spawn(
        &rig.manifest,
        &rig.redis_url,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", nobody.as_str()),
            // Export every 100 ms, so the failure shows before the exit.
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    rig.until_answered().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    let (status, stderr) = worker.terminate();
    assert!(status.success(), "{status}: {stderr:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the exit waited {:?}",
        started.elapsed()
    );
    let warnings = stderr
        .iter()
        .filter(|l| l.contains("cannot export traces"))
        .count();
    assert_eq!(warnings, 1, "{stderr:#?}");
}

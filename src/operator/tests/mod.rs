//! Reconcile tests against a mocked Kubernetes API (`tower-test`): each test scripts the
//! requests the reconcile must make, in order, and what the API server answers. The harness
//! and fixtures are here; the tests, by controller, in `agents.rs` and `spaces.rs`.

mod agents;
mod archive;
mod models;
mod pools;
mod spaces;
mod tools;

use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use kube::runtime::controller::Action;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use kube::Client;
use serde_json::{json, Value};

use super::build::{RedisUrlSource, WorkerArchive, WorkerDefaults};
use super::context::{Config, Context, Error};
use super::dataplane::Tuning;
use super::{agent, space};
use crate::crd::{Agent, AgentPhase, Space};
use crate::store::{MemoryStore, Store};
use crate::telemetry::OperatorMetrics;

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

/// One expected request: method, a substring of the path and query, and the answer (status,
/// body). `None` as the body echoes the request body back.
struct Expect {
    method: Method,
    path: &'static str,
    status: StatusCode,
    body: Option<Value>,
}

fn expect(method: Method, path: &'static str) -> Expect {
    Expect {
        method,
        path,
        status: StatusCode::OK,
        body: None,
    }
}

fn answering(mut e: Expect, status: StatusCode, body: Value) -> Expect {
    e.status = status;
    e.body = Some(body);
    e
}

/// The requests of a reconcile that applies the echo agent's children, publishes `events`
/// events and writes its status.
fn applied_then(events: usize) -> Vec<Expect> {
    let mut script = vec![
        expect(Method::PATCH, "/configmaps/echo-agent"),
        expect(Method::PATCH, "/deployments/echo-worker"),
    ];
    script.extend((0..events).map(|_| expect(Method::POST, "/events")));
    script.push(expect(Method::PATCH, "/agents/echo/status"));
    script
}

fn not_found(kind: &str, name: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": format!("{kind} \"{name}\" not found"), "reason": "NotFound", "code": 404})
}

/// Serves the expected requests in order, then checks that no other request comes. Returns
/// the request bodies.
async fn serve(mut handle: Handle, script: Vec<Expect>, base: Value) -> Vec<Value> {
    let mut bodies = Vec::new();
    for e in script {
        let (req, send) = tokio::time::timeout(Duration::from_secs(5), handle.next_request())
            .await
            .unwrap_or_else(|_| panic!("no request came; expected {} {}", e.method, e.path))
            .expect("client dropped before the expected request");
        let uri = req.uri().to_string();
        assert_eq!(req.method(), e.method, "request {uri}");
        assert!(
            uri.contains(e.path),
            "expected a request to {}, got {} {uri}",
            e.path,
            req.method()
        );
        let bytes = req.into_body().collect_bytes().await.unwrap();
        let body: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        // Echo the applied object; for a status apply or a JSON patch, answer with the object
        // under test updated by it, as the API server would.
        let answer = e.body.clone().unwrap_or_else(|| match &body {
            Value::Object(m) if m.contains_key("metadata") => body.clone(),
            Value::Object(m) => {
                let mut merged = base.clone();
                for (k, v) in m {
                    merged[k] = v.clone();
                }
                merged
            }
            _ => base.clone(),
        });
        bodies.push(body);
        send.send_response(
            Response::builder()
                .status(e.status)
                .body(Body::from(serde_json::to_vec(&answer).unwrap()))
                .unwrap(),
        );
    }
    if let Ok(Some((req, _))) =
        tokio::time::timeout(Duration::from_millis(200), handle.next_request()).await
    {
        panic!("unexpected request {} {}", req.method(), req.uri());
    }
    bodies
}

pub(super) fn cache<K>(objects: Vec<K>) -> (kube::runtime::reflector::Store<K>, Writer<K>)
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    let mut writer = Writer::<K>::new(());
    writer.apply_watcher_event(&watcher::Event::Init);
    for o in objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(o));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    (writer.as_reader(), writer)
}

pub(super) struct Harness {
    pub(super) ctx: Arc<Context>,
    handle: Option<Handle>,
    store: Arc<MemoryStore>,
    _writers: (
        Writer<Agent>,
        Writer<Space>,
        Writer<crate::crd::ModelResource>,
    ),
}

/// A context over the given objects, its API client answered by the returned handle. The
/// caches are synced (and the gate open) only when `synced`.
pub(super) fn context(agents: Vec<Agent>, spaces: Vec<Space>, synced: bool) -> Harness {
    context_on(agents, spaces, synced, None, None, Vec::new())
}

/// [`context`] on `data_plane` instead of the harness' memory store, and with `archive` (as
/// `--archive` gives it) when given.
fn context_on(
    agents: Vec<Agent>,
    spaces: Vec<Space>,
    synced: bool,
    data_plane: Option<Arc<dyn Store>>,
    archive: Option<crate::archive::Archive>,
    models: Vec<crate::crd::ModelResource>,
) -> Harness {
    let (svc, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let (agents, aw) = cache(agents);
    let (spaces, sw) = cache(spaces);
    let (models, mw) = cache(models);
    let store = Arc::new(MemoryStore::new());
    let ctx = Context::new(
        Client::new(svc, "default"),
        data_plane.unwrap_or_else(|| store.clone()),
        OperatorMetrics::new().unwrap(),
        Config {
            worker: WorkerDefaults {
                image: "agentfleet:test".into(),
                image_pull_policy: None,
                redis: RedisUrlSource::Value("redis://redis:6379".into()),
                redis_env: Vec::new(),
                callback_url: Some("http://gateway.agentfleet.svc:80".into()),
                log_format: crate::telemetry::LogFormat::Json,
                otlp_endpoint: None,
                archive: archive.as_ref().map(|a| WorkerArchive::new(&a.url(), a)),
            },
            instance: Some("test".into()),
            tuning: Tuning::default(),
            archive,
        },
        agents,
        spaces,
        models,
    );
    if synced {
        ctx.mark_caches_synced();
    }
    Harness {
        ctx: Arc::new(ctx),
        handle: Some(handle),
        store,
        _writers: (aw, sw, mw),
    }
}

fn harness(agents: Vec<Agent>, spaces: Vec<Space>) -> Harness {
    context(agents, spaces, true)
}

impl Harness {
    /// Runs the reconcile (without the finalizer).
    async fn run_agent(
        &mut self,
        agent: Agent,
        script: Vec<Expect>,
    ) -> (Result<Action, Error>, Vec<Value>) {
        self.run_with(agent, script, agent::reconcile).await
    }

    /// Runs the controller's entry point (finalizer included).
    async fn run_finalized(
        &mut self,
        agent: Agent,
        script: Vec<Expect>,
    ) -> (Result<Action, Error>, Vec<Value>) {
        self.run_with(agent, script, agent::run).await
    }

    async fn run_with<F, Fut>(
        &mut self,
        agent: Agent,
        script: Vec<Expect>,
        f: F,
    ) -> (Result<Action, Error>, Vec<Value>)
    where
        F: FnOnce(Arc<Agent>, Arc<Context>) -> Fut,
        Fut: std::future::Future<Output = Result<Action, Error>>,
    {
        let handle = self.handle.take().unwrap();
        let verifier = tokio::spawn(serve(handle, script, serde_json::to_value(&agent).unwrap()));
        let result = f(Arc::new(agent), self.ctx.clone()).await;
        (result, verifier.await.unwrap())
    }

    async fn run_model(
        &mut self,
        model: crate::crd::ModelResource,
        script: Vec<Expect>,
    ) -> (Result<Action, Error>, Vec<Value>) {
        let handle = self.handle.take().unwrap();
        let verifier = tokio::spawn(serve(handle, script, serde_json::to_value(&model).unwrap()));
        let result = super::model::reconcile(Arc::new(model), self.ctx.clone()).await;
        (result, verifier.await.unwrap())
    }

    async fn run_space(
        &mut self,
        space: Space,
        script: Vec<Expect>,
    ) -> (Result<Action, Error>, Vec<Value>) {
        let handle = self.handle.take().unwrap();
        let verifier = tokio::spawn(serve(handle, script, serde_json::to_value(&space).unwrap()));
        let result = space::reconcile(Arc::new(space), self.ctx.clone()).await;
        (result, verifier.await.unwrap())
    }
}

/// The phase the data-plane loop would write for the echo agent, as the reconcile left it.
fn tracked_phase(h: &Harness) -> Option<AgentPhase> {
    h.ctx.scaler.phase_of(
        &crate::identity::AgentKey::new("default", "echo"),
        &Default::default(),
    )
}

pub(super) fn agent_yaml(extra_spec: &str) -> Agent {
    serde_yaml::from_str(&format!(
        r#"
apiVersion: agentfleet.dev/v1alpha1
kind: Agent
metadata: {{name: echo, namespace: default, uid: 11111111-2222-3333-4444-555555555555, generation: 2}}
spec:
  model: {{provider: scripted, name: echo}}
  spaces: [lobby]
{extra_spec}
"#
    ))
    .unwrap()
}

pub(super) fn lobby(finalized: bool) -> Space {
    let mut s: Space = serde_yaml::from_str(
        r#"
apiVersion: agentfleet.dev/v1alpha1
kind: Space
metadata: {name: lobby, namespace: default, uid: 99999999-2222-3333-4444-555555555555, generation: 1}
spec:
  displayName: Lobby
  members: [{id: husam, name: Husam}]
"#,
    )
    .unwrap();
    if finalized {
        s.metadata.finalizers = Some(vec![space::FINALIZER.to_string()]);
    }
    s
}

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == type_)
        .unwrap_or_else(|| panic!("no {type_} condition in {status}"))
}

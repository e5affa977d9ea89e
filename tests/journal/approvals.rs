//! Calls that wait for a human, with real worker processes: killed while paused, at the
//! decision and during the approved call; stopped by the scaler while paused and woken by
//! the decision; asked in the space's live stream as a `tool_request`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentfleet::store::{prelude::*, RedisStore};
use agentfleet::testing::MockTurn;
use serde_json::json;

use super::{wait_for, Rig};
use agentfleet::identity::AgentKey;

fn restart() -> MockTurn {
    MockTurn::tools(&[("restart_service", json!({"service": "db-1"}))])
}

/// The call the agent waits on a human for, once it is asked.
async fn asked(rig: &Rig) -> agentfleet::store::RegisteredCall {
    let agent = AgentKey::new("ops", "sre");
    let start = Instant::now();
    loop {
        let waiting = rig.store.human_calls(&agent).await.unwrap();
        if let Some(call) = waiting.into_iter().next() {
            return call;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "never asked");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn decide(
    rig: &Rig,
    call: &agentfleet::store::RegisteredCall,
    answer: agentfleet::store::Answer,
) {
    use agentfleet::store::{CallResult, Completion, Verdict};
    let decision = CallResult::Decision(Verdict {
        answer,
        by: "Dana".into(),
        reason: Some("go".into()),
    });
    let done = rig
        .store
        .complete_call(&call.id, None, &decision)
        .await
        .unwrap();
    assert!(matches!(done, Completion::Accepted(_)), "{done:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_survives_kill_9_and_the_call_is_made_once() {
    let rig = Rig::start("approval", vec![restart()]).await;
    let mut first = rig.worker();
    rig.post("restart db-1 please");
    let call = asked(&rig).await;
    assert_eq!(call.record.tool, "restart_service");
    // Paused: nothing made, nothing committed, the space told.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(rig.tools.seen().is_empty());
    assert_eq!(rig.model.request_count(), 1);
    first.kill_9();

    // Decided while no worker runs; the next worker resumes the same cycle.
    decide(&rig, &call, agentfleet::store::Answer::Approve).await;
    rig.model.push(MockTurn::text("Restarted db-1."));
    let _second = rig.worker();
    rig.until_committed().await;
    let seen = rig.tools.seen();
    assert_eq!(seen.len(), 1, "made once: {seen:?}");
    assert!(seen[0].body.contains("db-1"), "{seen:?}");
    assert_eq!(
        rig.model.request_count(),
        2,
        "asked once, then only the next step"
    );
    assert!(
        rig.tool_results(1).iter().any(|r| r.contains("T-1")),
        "{:?}",
        rig.tool_results(1)
    );
    assert!(rig
        .store
        .human_calls(&AgentKey::new("ops", "sre"))
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_denied_call_is_never_made() {
    let rig = Rig::start("denied", vec![restart()]).await;
    let _worker = rig.worker();
    rig.post("restart db-1 please");
    let call = asked(&rig).await;
    rig.model.push(MockTurn::text("Not restarting."));
    decide(&rig, &call, agentfleet::store::Answer::Deny).await;
    rig.until_committed().await;
    assert!(rig.tools.seen().is_empty());
    let told = rig.tool_results(1);
    assert!(
        told.iter()
            .any(|r| r.contains("Dana denied the call of restart_service: go")),
        "{told:?}"
    );
}

/// The gateway of the rig's Redis, in this process, with one token: Dana, a member of the
/// space the agent asks in. Its base URL and Dana's token.
async fn gateway(rig: &Rig) -> (String, &'static str, tokio::sync::watch::Sender<bool>) {
    use agentfleet::gateway::auth::{Entity, EntityKind, Tokens};
    use agentfleet::gateway::{self, Gateway, Limits};
    const DANA: &str = "af_dana-approves-things";
    let store: Arc<dyn Store> = Arc::new(RedisStore::new(&rig.url).unwrap());
    let tokens = Tokens::from_plain([(
        DANA.to_string(),
        Entity {
            kind: EntityKind::Human,
            id: "dana".into(),
            name: "Dana".into(),
            agents: vec![],
            groups: Vec::new(),
        },
    )]);
    let registry = prometheus::Registry::new();
    let (tx, rx) = tokio::sync::watch::channel(false);
    let gw = Gateway::new(store, tokens, Limits::default(), &registry, rx).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(gateway::serve(listener, gw, registry));
    (base, DANA, tx)
}

#[tokio::test(flavor = "multi_thread")]
async fn approved_through_the_gateway_and_killed_during_the_call_it_is_not_made_twice() {
    agentfleet::install_crypto_provider();
    let rig = Rig::start("gateway", vec![restart()]).await;
    let (base, dana, _gateway) = gateway(&rig).await;
    let mut first = rig.worker();
    let http = reqwest::Client::new();
    let stream = http
        .get(format!("{base}/v1/spaces/ops/oncall/stream"))
        .bearer_auth(dana)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    rig.post("restart db-1 please");
    let call = asked(&rig).await;
    // The space's clients were shown the request, with what to answer.
    let request = agentfleet::testing::SseReader::new(stream)
        .next("tool_request", Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(request["callId"], call.id.as_str());
    assert_eq!(request["tool"], "restart_service");
    assert_eq!(request["kind"], "approval");
    assert_eq!(request["arguments"], json!({"service": "db-1"}));
    assert_eq!(request["sender"]["id"], "sre");
    // The tool server holds the approved call: the worker is killed during it.
    rig.tools.hold(true);
    let approve = |decision: &'static str| {
        http.post(format!(
            "{base}/v1/spaces/ops/oncall/tool-calls/{}",
            call.id
        ))
        .bearer_auth(dana)
        .json(&json!({"decision": decision, "reason": "change window"}))
        .send()
    };
    let answered = approve("approve").await.unwrap();
    assert_eq!(answered.status(), 202);
    assert_eq!(
        approve("deny").await.unwrap().status(),
        409,
        "answered once"
    );
    wait_for("the approved call to reach the tool server", || {
        rig.tools.seen().len() == 1
    });
    first.kill_9();
    rig.tools.hold(false);

    // The next worker resumes the same cycle: the call was marked before it ran, its outcome
    // is unknown, and a POST is not made again; the model is told.
    rig.model
        .push(MockTurn::text("I could not tell whether db-1 restarted."));
    let _second = rig.worker();
    rig.until_committed().await;
    assert_eq!(
        rig.tools.seen().len(),
        1,
        "made once: {:?}",
        rig.tools.seen()
    );
    let told = rig.tool_results(1);
    assert!(
        told.iter()
            .any(|r| r.contains("unknown") && r.contains("not repeated")),
        "{told:?}"
    );
    // The audit trail: who decided what and why, in the space's log.
    let log = rig.space_log();
    assert!(
        log.contains(&format!(
            "Dana approved restart_service (call {}): change window",
            call.id
        )),
        "{log}"
    );
}

/// The worker Deployment of one agent as processes: replicas 1 starts `agentfleet worker`,
/// replicas 0 stops it with SIGTERM (as the kubelet does). Records each replica count set.
struct Processes {
    manifest: std::path::PathBuf,
    redis_url: String,
    worker: std::sync::Mutex<Option<super::Worker>>,
    set: std::sync::Mutex<Vec<i32>>,
}

impl Processes {
    fn set(&self) -> Vec<i32> {
        self.set.lock().unwrap().clone()
    }

    fn running(&self) -> bool {
        self.worker.lock().unwrap().is_some()
    }
}

#[async_trait::async_trait]
impl agentfleet::operator::dataplane::cluster::Cluster for Processes {
    async fn set_replicas(&self, _agent: &AgentKey, replicas: i32) -> Result<(), kube::Error> {
        self.set.lock().unwrap().push(replicas);
        let stopping = {
            let mut worker = self.worker.lock().unwrap();
            if replicas >= 1 {
                worker.get_or_insert_with(|| super::Worker::spawn(&self.manifest, &self.redis_url));
                None
            } else {
                worker.take()
            }
        };
        if let Some(w) = stopping {
            let status = tokio::task::block_in_place(|| w.terminate());
            assert!(status.success(), "the worker failed on SIGTERM: {status}");
        }
        Ok(())
    }

    async fn set_pool_replicas(
        &self,
        pool: &agentfleet::operator::dataplane::pools::PoolKey,
        _replicas: i32,
    ) -> Result<(), kube::Error> {
        panic!("this test has no pools, yet {pool} was scaled");
    }

    async fn write_status(
        &self,
        _agent: &AgentKey,
        _status: &agentfleet::crd::AgentStatus,
    ) -> Result<(), kube::Error> {
        Ok(())
    }

    async fn publish(
        &self,
        _object: &k8s_openapi::api::core::v1::ObjectReference,
        _notice: agentfleet::operator::dataplane::cluster::Notice,
    ) {
    }
}

async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The operator's data-plane loop scaling the rig's agent as [`Processes`], from zero, with
/// `idleSeconds: idle_seconds`.
struct Operated {
    cluster: Arc<Processes>,
    stop: tokio::sync::watch::Sender<bool>,
    running: tokio::task::JoinHandle<()>,
}

impl Operated {
    fn start(rig: &Rig, idle_seconds: u32) -> Operated {
        use agentfleet::operator::dataplane::{Deps, Scaler, Tracked, Tuning};
        let manifest: agentfleet::crd::Agent =
            serde_yaml::from_str(&std::fs::read_to_string(&rig.manifest).unwrap()).unwrap();
        let mut spec = manifest.spec;
        spec.scaling.idle_seconds = idle_seconds;
        let cluster = Arc::new(Processes {
            manifest: rig.manifest.clone(),
            redis_url: rig.url.clone(),
            worker: Default::default(),
            set: Default::default(),
        });
        let scaler = Arc::new(Scaler::new(Tuning {
            sweep: Duration::from_millis(100),
            status_interval: Duration::from_millis(100),
            cleanup_timeout: Duration::from_secs(60),
        }));
        scaler.track(
            &AgentKey::new("ops", "sre"),
            Tracked {
                object: k8s_openapi::api::core::v1::ObjectReference {
                    name: Some("sre".into()),
                    namespace: Some("ops".into()),
                    ..Default::default()
                },
                spec: &spec,
                failed: false,
                replicas: Some(0),
                available: 0,
                status: &Default::default(),
                generation: Some(1),
            },
        );
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let store: Arc<dyn Store> = Arc::new(RedisStore::new(&rig.url).unwrap());
        let running = tokio::spawn(scaler.run(
            Deps {
                store,
                cluster: cluster.clone(),
                metrics: agentfleet::telemetry::OperatorMetrics::new().unwrap(),
            },
            stopped,
        ));
        Operated {
            cluster,
            stop,
            running,
        }
    }

    async fn stop(self) {
        self.stop.send_replace(true);
        self.running.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn scaled_to_zero_while_paused_it_is_woken_and_resumed_by_the_decision() {
    agentfleet::install_crypto_provider();
    let rig = Rig::start("zero", vec![restart()]).await;
    let (base, dana, _gateway) = gateway(&rig).await;
    let agent = AgentKey::new("ops", "sre");
    let operated = Operated::start(&rig, 1);
    let cluster = &operated.cluster;

    // The message wakes the agent; it asks, pauses, and after idleSeconds its worker stops.
    rig.model.push(MockTurn::text("Restarted db-1."));
    rig.post("restart db-1 please");
    let call = asked(&rig).await;
    until("the paused worker scaled to zero", || {
        cluster.set() == [1, 0] && !cluster.running()
    })
    .await;
    // What arrives meanwhile waits for the answer: it wakes nothing.
    rig.post("db-2 looks slow too");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(cluster.set(), [1, 0], "only the answer wakes it");
    assert!(rig.tools.seen().is_empty());
    assert_eq!(rig.model.request_count(), 1);
    assert_eq!(rig.store.human_calls(&agent).await.unwrap().len(), 1);

    // The decision wakes it from zero; the same cycle resumes and the call is made once.
    let answered = reqwest::Client::new()
        .post(format!(
            "{base}/v1/spaces/ops/oncall/tool-calls/{}",
            call.id
        ))
        .bearer_auth(dana)
        .json(&json!({"decision": "approve"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), 202);
    rig.until_committed().await;
    assert_eq!(cluster.set()[..3], [1, 0, 1], "woken by the decision");
    let seen = rig.tools.seen();
    assert_eq!(seen.len(), 1, "made once: {seen:?}");
    assert_eq!(
        rig.model.request_count(),
        2,
        "asked once, then the next step"
    );
    let resumed = rig.model.requests()[1].to_string();
    assert!(
        resumed.contains("db-2 looks slow too"),
        "what came meanwhile is read when it resumes: {resumed}"
    );
    assert!(rig.store.human_calls(&agent).await.unwrap().is_empty());
    // Idle again: back to zero.
    until("back to zero", || cluster.set() == [1, 0, 1, 0]).await;
    operated.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn nobody_answers_in_time_the_operator_wakes_it_to_tell_the_model() {
    let rig = Rig::start_with("timeout", vec![restart()], 3).await;
    let operated = Operated::start(&rig, 1);
    let cluster = &operated.cluster;
    rig.model
        .push(MockTurn::text("Nobody approved; not restarting."));
    rig.post("restart db-1 please");
    let call = asked(&rig).await;
    until("the paused worker scaled to zero", || {
        cluster.set() == [1, 0] && !cluster.running()
    })
    .await;
    // Its time runs out with nobody there: the operator brings a worker back for it.
    rig.until_committed().await;
    assert_eq!(cluster.set()[..3], [1, 0, 1]);
    assert!(rig.tools.seen().is_empty(), "never made");
    let told = rig.tool_results(1);
    assert!(
        told.iter()
            .any(|r| r.contains("timed out") && r.contains(call.id.as_str())),
        "{told:?}"
    );
    // A late answer is refused: the call expired.
    let late = agentfleet::store::CallResult::Decision(agentfleet::store::Verdict {
        answer: agentfleet::store::Answer::Approve,
        by: "Dana".into(),
        reason: None,
    });
    let refused = rig
        .store
        .complete_call(&call.id, None, &late)
        .await
        .unwrap();
    assert!(
        !matches!(refused, agentfleet::store::Completion::Accepted(_)),
        "{refused:?}"
    );
    operated.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_right_after_the_decision_nothing_is_asked_or_made_twice() {
    // However soon after the decision the worker dies — before it read the answer, while the
    // call runs, or after the model's next answer but before the commit — the next one neither
    // asks again nor makes the call a second time. (The model's next step may be asked again:
    // it has no effect until the cycle commits.)
    for delay_ms in [0, 5, 15, 40] {
        let rig = Rig::start(&format!("decided-{delay_ms}"), vec![restart()]).await;
        let mut first = rig.worker();
        rig.post("restart db-1 please");
        let call = asked(&rig).await;
        rig.model.push(MockTurn::text("Done."));
        rig.model.push(MockTurn::text("Done."));
        decide(&rig, &call, agentfleet::store::Answer::Approve).await;
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        first.kill_9();
        let _second = rig.worker();
        rig.until_committed().await;
        let seen = rig.tools.seen();
        assert!(seen.len() <= 1, "{delay_ms} ms: made twice: {seen:?}");
        let requests = rig.model.request_count();
        for n in 1..requests {
            assert!(
                !rig.tool_results(n).is_empty(),
                "{delay_ms} ms: request {n} re-decided the first step"
            );
        }
        let told = rig.tool_results(requests - 1);
        let expected = if seen.is_empty() {
            // Killed after the call was marked, before it left: not repeated, and said so.
            told.iter().any(|r| r.contains("not repeated"))
        } else {
            told.iter()
                .any(|r| r.contains("T-1") || r.contains("not repeated"))
        };
        assert!(expected, "{delay_ms} ms: {told:?}");
        let log = rig.space_log();
        assert_eq!(
            log.matches("wants to call restart_service").count(),
            1,
            "{delay_ms} ms: asked once: {log}"
        );
        assert!(rig
            .store
            .human_calls(&AgentKey::new("ops", "sre"))
            .await
            .unwrap()
            .is_empty());
    }
}

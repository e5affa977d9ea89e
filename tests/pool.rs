//! `agentfleet pool` as it runs in a pod: real `agentfleet pool` processes on a real Redis, an
//! in-test model server that takes its time, and a replica killed with SIGKILL mid-cycle.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failing loudly is the point

use std::process::Command;
use std::time::{Duration, Instant};

use agentfleet::identity::SpaceKey;
use agentfleet::store::{prelude::*, ReadQuery, RedisStore};
use agentfleet::testing::{human_message, space_record, Kill, MockModel, MockTurn, RedisServer};
use serde_json::{json, Value};

const NS: &str = "fam";

/// Writes `n` Agents (`a000`…), each alone with Ann in its own Space, thinking with the model
/// at `base_url`.
fn fleet(n: usize, base_url: &str) -> std::path::PathBuf {
    static DIRS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "agentfleet-pool-{}-{n}-{}",
        std::process::id(),
        DIRS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut text = String::new();
    for i in 0..n {
        text.push_str(&format!(
            "---\napiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {{name: a{i:03}, namespace: {NS}}}\nspec:\n  model: {{provider: openai, name: mock, baseUrl: \"{base_url}\"}}\n  spaces: [s{i:03}]\n"
        ));
    }
    std::fs::write(dir.join("fleet.yaml"), text).unwrap();
    dir
}

/// The binary under test: this build's, or `AGENTFLEET_TEST_BIN` (an older build, to see a
/// regression test fail on it).
fn bin() -> String {
    std::env::var("AGENTFLEET_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_agentfleet").into())
}

/// Starts `agentfleet pool` as replica `identity`; returns it once it hears wake signals.
fn replica(dir: &std::path::Path, url: &str, identity: &str) -> Kill {
    let mut pool = Command::new(bin());
    pool.args(["pool", "--namespace", NS, "--name", "p", "--agents"])
        .arg(dir)
        .args([
            "--sweep-seconds",
            "1",
            "--cycles-at-once",
            "200",
            "--reload-seconds",
            "1",
        ]);
    listening(pool, url, identity)
}

/// Starts `agentfleet worker` for the agent of `manifest` as `identity`, once it hears its
/// wake signal.
fn worker(manifest: &std::path::Path, url: &str, identity: &str) -> Kill {
    let mut worker = Command::new(env!("CARGO_BIN_EXE_agentfleet"));
    worker.args(["worker", "--agent"]).arg(manifest);
    listening(worker, url, identity)
}

/// Starts `command` (a process that runs agents) on Redis `url` as `identity`; returns it once
/// it hears wake signals.
fn listening(mut command: Command, url: &str, identity: &str) -> Kill {
    command.args([
        "--redis",
        url,
        "--metrics-addr",
        "127.0.0.1:0",
        "--identity",
        identity,
        "--lease-seconds",
        "2",
    ]);
    agentfleet::testing::spawn_listening(&mut command, Duration::from_secs(30)).unwrap()
}

/// Stops a process as Kubernetes does (SIGTERM: the cycle under way finishes first).
fn terminate(mut process: Kill) {
    let pid = i32::try_from(process.0.id()).unwrap();
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let status = process.0.wait().unwrap();
    assert!(status.success(), "stopped with {status}");
}

/// A model that answers each message with `send_message` (after `delay`), then says "done".
async fn answering_model(delay: Duration) -> MockModel {
    MockModel::responding(move |req| {
        if conversation_last_role(req) == "tool" {
            MockTurn::text("done")
        } else {
            let send = MockTurn::tools(&[("send_message", json!({"text": "answered"}))]);
            if delay.is_zero() {
                send
            } else {
                MockTurn::Slow(delay, Box::new(send))
            }
        }
    })
    .await
    .unwrap()
}

fn conversation_last_role(request: &Value) -> String {
    agentfleet::testing::conversation(request)
        .last()
        .and_then(|m| m["role"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// Ann's message in `space`.
async fn ask(store: &RedisStore, space: &str, text: &str) {
    store
        .post_message(&SpaceKey::new(NS, space), &human_message("Ann", text))
        .await
        .unwrap();
}

/// The messages of `space`, oldest first (at most 50).
async fn messages(store: &RedisStore, space: &str) -> Vec<agentfleet::store::SpaceMessage> {
    store
        .read_messages(
            &SpaceKey::new(NS, space),
            &ReadQuery {
                limit: 50,
                before: None,
                after: None,
                ..Default::default()
            },
        )
        .await
        .unwrap()
}

async fn replies(store: &RedisStore, space: &str) -> usize {
    messages(store, space)
        .await
        .iter()
        .filter(|m| m.sender.id != "ann")
        .count()
}

/// Two replicas serve 200 agents; one is killed with SIGKILL while cycles are under way in
/// both. Every agent answers exactly once: the survivor takes the dead replica's agents once
/// their leases run out, resuming each cycle from its journal.
#[tokio::test(flavor = "multi_thread")]
async fn a_replica_killed_mid_cycle_hands_its_agents_over_and_nothing_is_answered_twice() {
    let redis = RedisServer::start().unwrap();
    let client = redis::Client::open(redis.url().as_str()).unwrap();
    let conn = client.get_multiplexed_async_connection().await.unwrap();
    a_replica_killed_mid_cycle(&redis.url(), conn).await;
}

/// The same on a real Redis Cluster (three primaries, three replicas): wake signals on each
/// agent's own sharded channel, leases on each agent's slot.
#[tokio::test(flavor = "multi_thread")]
async fn a_replica_killed_mid_cycle_on_a_redis_cluster_hands_its_agents_over() {
    let cluster = agentfleet::testing::RedisCluster::start().unwrap();
    let client = redis::cluster::ClusterClient::new(vec![cluster.url()]).unwrap();
    let conn = client.get_async_connection().await.unwrap();
    a_replica_killed_mid_cycle(&cluster.url(), conn).await;
}

async fn a_replica_killed_mid_cycle(url: &str, mut conn: impl redis::aio::ConnectionLike) {
    const AGENTS: usize = 200;
    let store = RedisStore::new(url).unwrap();
    // The model takes its time over each message, so that the kill finds cycles under way.
    let mock = answering_model(Duration::from_millis(1500)).await;
    let dir = fleet(AGENTS, &mock.base_url);
    for i in 0..AGENTS {
        let agent = format!("a{i:03}");
        let space = SpaceKey::new(NS, format!("s{i:03}"));
        store
            .apply_space(
                &space,
                &space_record(&format!("S{i:03}"), &[&agent], &["Ann"]),
            )
            .await
            .unwrap();
        // On a cluster a listener hears registered agents' channels (the operator registers).
        store
            .register_agent(&agentfleet::identity::AgentKey::new(NS, agent))
            .await
            .unwrap();
    }
    let mut first = replica(&dir, url, "p-0");
    let _second = replica(&dir, url, "p-1");

    for i in 0..AGENTS {
        ask(&store, &format!("s{i:03}"), &format!("question {i}")).await;
    }
    // Both replicas are thinking (each holds leases): then the first is killed.
    let started = Instant::now();
    let held = loop {
        let mut held = [0usize; 2];
        for i in 0..AGENTS {
            let lease: Option<String> = redis::cmd("GET")
                .arg(format!("agentfleet:{{agent:{NS}/a{i:03}}}:lease"))
                .query_async(&mut conn)
                .await
                .unwrap();
            match lease.as_deref().and_then(|l| l.split('|').next()) {
                Some("p-0") => held[0] += 1,
                Some("p-1") => held[1] += 1,
                _ => {}
            }
        }
        if held[0] > 0 && held[1] > 0 {
            break held;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "both replicas never thought at once: {held:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let killed = Instant::now();
    first.0.kill().unwrap();
    let _ = first.0.wait();

    // Every agent answers, once.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let mut answered = 0;
        for i in 0..AGENTS {
            let n = replies(&store, &format!("s{i:03}")).await;
            assert!(n <= 1, "s{i:03} answered {n} times");
            answered += n;
        }
        if answered == AGENTS {
            break;
        }
        assert!(Instant::now() < deadline, "{answered} of {AGENTS} answered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "leases at the kill {held:?}; every agent answered {:?} after the kill (leases of 2 s, model 1.5 s)",
        killed.elapsed()
    );
    // Each cycle then commits (the reply is posted mid-cycle): nothing is left in flight.
    for i in 0..AGENTS {
        let agent = agentfleet::identity::AgentKey::new(NS, format!("a{i:03}"));
        while store.inflight(&agent).await.unwrap() > 0 {
            assert!(Instant::now() < deadline, "{agent} never committed");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // A little later, still once each (no late duplicate from a resumed journal).
    tokio::time::sleep(Duration::from_secs(2)).await;
    for i in 0..AGENTS {
        assert_eq!(replies(&store, &format!("s{i:03}")).await, 1);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The directory changes in place (as a mounted ConfigMap does): an Agent added is served, an
/// Agent removed is not, without a restart.
#[tokio::test(flavor = "multi_thread")]
async fn the_pool_follows_its_directory() {
    let redis = RedisServer::start().unwrap();
    let url = redis.url();
    let store = RedisStore::new(&url).unwrap();
    let mock = answering_model(Duration::ZERO).await;
    let dir = fleet(1, &mock.base_url);
    for i in 0..2 {
        let agent = format!("a{i:03}");
        store
            .apply_space(
                &SpaceKey::new(NS, format!("s{i:03}")),
                &space_record(&format!("S{i:03}"), &[&agent], &["Ann"]),
            )
            .await
            .unwrap();
    }
    let _pool = replica(&dir, &url, "p-0");
    let until_answered = async |space: &str, n: usize| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while replies(&store, space).await < n {
            assert!(Instant::now() < deadline, "{space} not answered");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    ask(&store, "s000", "hello").await;
    until_answered("s000", 1).await;
    // a001 joins the directory (written beside, then moved in, as the kubelet swaps files).
    let fleet2 = fleet(2, &mock.base_url);
    std::fs::rename(fleet2.join("fleet.yaml"), dir.join("fleet.yaml")).unwrap();
    ask(&store, "s001", "hello").await;
    until_answered("s001", 1).await;
    // a000 leaves it: its events wait in its inbox.
    let only_second = std::fs::read_to_string(dir.join("fleet.yaml"))
        .unwrap()
        .split("---\n")
        .filter(|d| d.contains("a001"))
        .map(|d| format!("---\n{d}"))
        .collect::<String>();
    std::fs::write(dir.join("next.tmp"), only_second).unwrap();
    std::fs::rename(dir.join("next.tmp"), dir.join("fleet.yaml")).unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    ask(&store, "s000", "hello").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(replies(&store, "s000").await, 1, "not served any more");
    let a000 = agentfleet::identity::AgentKey::new(NS, "a000");
    assert_eq!(store.inbox_depth(&a000).await.unwrap(), 1);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&fleet2);
}

/// An agent moves from its own worker into a pool and back (as the operator does it: the old
/// process is stopped, the new one started): every message is answered once, the agent keeps
/// its memory, and the data plane names the process that ran it last.
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_moves_between_its_own_worker_and_a_pool_and_forgets_nothing() {
    let redis = RedisServer::start().unwrap();
    let url = redis.url();
    let store = RedisStore::new(&url).unwrap();
    let mock = answering_model(Duration::ZERO).await;
    let dir = fleet(1, &mock.base_url);
    store
        .apply_space(
            &SpaceKey::new(NS, "s000"),
            &space_record("S000", &["a000"], &["Ann"]),
        )
        .await
        .unwrap();
    let a000 = agentfleet::identity::AgentKey::new(NS, "a000");
    let manifest = dir.join("fleet.yaml");
    let answered = async |n: usize| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while replies(&store, "s000").await < n {
            assert!(Instant::now() < deadline, "message {n} not answered");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let host = async || {
        store.observe(std::slice::from_ref(&a000)).await.unwrap()[0]
            .host
            .clone()
    };
    let steps: [(&str, &str); 3] = [
        ("worker", "a000-worker-0"),
        ("pool", "p-0"),
        ("worker", "a000-worker-1"),
    ];
    for (i, (kind, identity)) in steps.into_iter().enumerate() {
        let process = if kind == "worker" {
            worker(&manifest, &url, identity)
        } else {
            replica(&dir, &url, identity)
        };
        ask(&store, "s000", &format!("message number {i}")).await;
        answered(i + 1).await;
        assert_eq!(host().await.as_deref(), Some(identity));
        terminate(process);
    }
    assert_eq!(replies(&store, "s000").await, 3, "each answered once");
    let seen = store.observe(std::slice::from_ref(&a000)).await.unwrap();
    assert_eq!(seen[0].cycles, 3);
    // The last cycle's model request holds the two before it: nothing was forgotten.
    let last = mock
        .requests()
        .into_iter()
        .rev()
        .find(|r| conversation_last_role(r) == "user")
        .unwrap()
        .to_string();
    for i in 0..3 {
        assert!(last.contains(&format!("message number {i}")), "{last}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// An agent taken out of a pool while its cycle keeps failing (its model is down) is let go:
/// its session ends at the next retry instead of holding the lease, and the worker it moved
/// to answers the message, which was not lost.
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_that_leaves_a_pool_mid_retry_is_let_go() {
    let redis = RedisServer::start().unwrap();
    let url = redis.url();
    let store = RedisStore::new(&url).unwrap();
    // A model nobody listens on: every call fails to connect, and is retried.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let down_url = format!("http://{}/v1", closed.local_addr().unwrap());
    drop(closed);
    let up = answering_model(Duration::ZERO).await;
    let pooled = fleet(1, &down_url);
    let own = fleet(1, &up.base_url);
    store
        .apply_space(
            &SpaceKey::new(NS, "s000"),
            &space_record("S000", &["a000"], &["Ann"]),
        )
        .await
        .unwrap();
    let _pool = replica(&pooled, &url, "p-0");
    ask(&store, "s000", "hello").await;
    let a000 = agentfleet::identity::AgentKey::new(NS, "a000");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !store.observe(std::slice::from_ref(&a000)).await.unwrap()[0].worker {
        assert!(Instant::now() < deadline, "the pool never took the agent");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Out of the pool (its directory empties, as its ConfigMap would), into its own worker.
    std::fs::write(pooled.join("empty.tmp"), "").unwrap();
    std::fs::rename(pooled.join("empty.tmp"), pooled.join("fleet.yaml")).unwrap();
    let _worker = worker(&own.join("fleet.yaml"), &url, "a000-worker");
    let deadline = Instant::now() + Duration::from_secs(30);
    while up.request_count() == 0 {
        assert!(
            Instant::now() < deadline,
            "the pool kept the agent; its worker never thought"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answered = messages(&store, "s000")
            .await
            .iter()
            .filter(|m| m.sender.id == "a000" && m.text == "answered")
            .count();
        if answered == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "answered {answered} times");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        store.observe(std::slice::from_ref(&a000)).await.unwrap()[0]
            .host
            .as_deref(),
        Some("a000-worker")
    );
    let _ = std::fs::remove_dir_all(&pooled);
    let _ = std::fs::remove_dir_all(&own);
}

/// With no sweep to catch up, every message of a quick conversation (the next one posted as
/// soon as the reply appears, while the cycle is still closing) is answered: no wake signal
/// is lost between a session's last look and its lease going.
#[tokio::test(flavor = "multi_thread")]
async fn back_to_back_messages_need_no_sweep() {
    use agentfleet::worker::pool::{Pool, PoolConfig};
    use futures::StreamExt;
    let redis = RedisServer::start().unwrap();
    let store = std::sync::Arc::new(RedisStore::new(&redis.url()).unwrap());
    store
        .apply_space(
            &SpaceKey::new(NS, "family"),
            &space_record("Family", &["assistant"], &["Ann"]),
        )
        .await
        .unwrap();
    // A model over HTTP, as in production: the reply is posted mid-cycle, so the next message
    // arrives while the cycle closes.
    let mock = answering_model(Duration::ZERO).await;
    let agent: agentfleet::crd::Agent = serde_yaml::from_str(&format!(
        "apiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {{name: assistant, namespace: {NS}}}\nspec:\n  model: {{provider: openai, name: mock, baseUrl: \"{}\"}}\n  spaces: [family]\n",
        mock.base_url
    ))
    .unwrap();
    let agent_model = agent.spec.model.clone();
    let metrics = agentfleet::telemetry::WorkerMetrics::new().unwrap();
    let key = agentfleet::identity::AgentKey::new(NS, "assistant");
    let agentlet = std::sync::Arc::new(agentfleet::worker::cycle::Agentlet::new(
        agent,
        key.clone(),
        store.clone(),
        std::sync::Arc::new(
            agentfleet::model::openai::OpenAi::new(&agent_model, Default::default())
                .unwrap()
                .with_backoff(Duration::from_millis(10)),
        ),
        metrics.clone(),
    ));
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let pool = Pool::new(
        PoolConfig {
            sweep_every: Duration::from_secs(3600),
            ..PoolConfig::dedicated(&key, "w".into(), Duration::from_secs(15))
        },
        store.clone(),
        metrics,
        std::sync::Arc::new(agentfleet::worker::Health::default()),
        None,
        shutdown,
    );
    pool.add_agentlet(agentlet);
    let running = tokio::spawn({
        let pool = pool.clone();
        async move { pool.run(Duration::from_secs(5)).await }
    });
    let family = SpaceKey::new(NS, "family");
    let mut live = store.subscribe_live(&family).await.unwrap();
    for i in 0..300 {
        ask(&store, "family", &format!("ping {i}")).await;
        loop {
            let event = tokio::time::timeout(Duration::from_secs(10), live.next())
                .await
                .unwrap_or_else(|_| panic!("message {i} never answered"))
                .unwrap();
            if matches!(&event, agentfleet::store::LiveEvent::Message { message } if message.sender.id == "assistant")
            {
                break;
            }
        }
    }
    let _ = stop.send(true);
    running.await.unwrap();
}

/// One agent flooded with messages beside quiet ones, in a pool of one cycle at a time: each
/// quiet agent is answered while the flooded one still has work waiting (it takes its turn
/// like the others), and the wait for the slot is measured.
#[tokio::test(flavor = "multi_thread")]
async fn a_flooded_agent_does_not_starve_the_quiet_ones() {
    use agentfleet::worker::pool::{Pool, PoolConfig};
    const QUIET: usize = 5;
    let redis = RedisServer::start().unwrap();
    let store = std::sync::Arc::new(RedisStore::new(&redis.url()).unwrap());
    let mock = answering_model(Duration::from_millis(150)).await;
    let dir = fleet(QUIET + 1, &mock.base_url);
    for i in 0..=QUIET {
        store
            .apply_space(
                &SpaceKey::new(NS, format!("s{i:03}")),
                &space_record(&format!("S{i:03}"), &[&format!("a{i:03}")], &["Ann"]),
            )
            .await
            .unwrap();
    }
    let agents = agentfleet::manifests::load_dir(&dir, NS).unwrap().agents;
    let metrics = agentfleet::telemetry::WorkerMetrics::new().unwrap();
    let host = agentfleet::worker::host::Host {
        store: store.clone(),
        metrics: metrics.clone(),
        api_key: None,
        secrets: Default::default(),
        callback_url: None,
        archive: None,
        lists: Default::default(),
    };
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let pool = Pool::new(
        PoolConfig {
            name: "fair".into(),
            scope: agentfleet::store::WakeScope::Namespace(NS.into()),
            holder: "fair-0".into(),
            lease_ttl: Duration::from_secs(15),
            cycles_at_once: 1,
            warm_agents: 16,
            sweep_every: Duration::from_secs(5),
        },
        store.clone(),
        metrics.clone(),
        std::sync::Arc::new(agentfleet::worker::Health::default()),
        Some(std::sync::Arc::new(
            move |agent: &agentfleet::crd::Agent| host.agentlet(agent),
        )),
        shutdown,
    );
    pool.set_manifests(agents);
    let running = tokio::spawn({
        let pool = pool.clone();
        async move { pool.run(Duration::from_secs(5)).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    // a000 is flooded: a message every 20 ms for as long as the test runs.
    let flood = tokio::spawn({
        let store = store.clone();
        async move {
            for n in 0.. {
                ask(&store, "s000", &format!("flood {n}")).await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    for i in 1..=QUIET {
        ask(&store, &format!("s{i:03}"), "a quiet question").await;
    }
    let flooded = agentfleet::identity::AgentKey::new(NS, "a000");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut answered = [false; QUIET];
    while answered.iter().any(|a| !a) {
        assert!(
            Instant::now() < deadline,
            "quiet agents starved: {answered:?}"
        );
        for (i, done) in answered.iter_mut().enumerate() {
            if !*done && replies(&store, &format!("s{:03}", i + 1)).await == 1 {
                *done = true;
                // The flood goes on: the quiet one did not wait for it to end.
                let busy = store.inbox_depth(&flooded).await.unwrap()
                    + store.inflight(&flooded).await.unwrap();
                assert!(
                    busy > 0,
                    "a{:03} answered only once the flood was done",
                    i + 1
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    flood.abort();
    let waited = metrics
        .pool
        .slot_wait
        .with_label_values(&[NS, "fair"])
        .get_sample_count();
    assert!(
        waited > QUIET as u64,
        "every look waited for the slot: {waited}"
    );
    let _ = stop.send(true);
    running.await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Writes Agents `a000`… thinking with the models at `base_urls` (one each, `extra` added to
/// each `model`), each alone with Ann in its own Space, and applies their Spaces.
async fn agents_of(store: &RedisStore, base_urls: &[(&str, &str)]) -> std::path::PathBuf {
    let dir = fleet(0, "");
    let mut text = String::new();
    for (i, (base_url, extra)) in base_urls.iter().enumerate() {
        text.push_str(&format!(
            "---\napiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {{name: a{i:03}, namespace: {NS}}}\nspec:\n  model: {{provider: openai, name: mock, baseUrl: \"{base_url}\"{extra}}}\n  spaces: [s{i:03}]\n"
        ));
        store
            .apply_space(
                &SpaceKey::new(NS, format!("s{i:03}")),
                &space_record(&format!("S{i:03}"), &[&format!("a{i:03}")], &["Ann"]),
            )
            .await
            .unwrap();
    }
    std::fs::write(dir.join("fleet.yaml"), text).unwrap();
    dir
}

/// `agentfleet pool` over `dir` with one cycle at a time.
fn one_slot_pool(dir: &std::path::Path, url: &str) -> Kill {
    let mut pool = Command::new(bin());
    pool.args(["pool", "--namespace", NS, "--name", "p", "--agents"])
        .arg(dir)
        .args(["--sweep-seconds", "1", "--cycles-at-once", "1"]);
    listening(pool, url, "p-0")
}

/// An agent whose model streams one byte a second and never finishes, beside a quick one, in
/// a pool of one cycle at a time: the quick one is answered while the slow one still waits on
/// its model (which has the slot only while it works). An older build held the slot for the
/// whole cycle: the quick agent was never answered.
#[tokio::test(flavor = "multi_thread")]
async fn a_slow_model_does_not_hold_back_the_other_agents_of_its_pool() {
    let redis = RedisServer::start().unwrap();
    let store = RedisStore::new(&redis.url()).unwrap();
    let slow = MockModel::responding(|_| MockTurn::Trickle(Duration::from_secs(1)))
        .await
        .unwrap();
    let quick = answering_model(Duration::ZERO).await;
    let dir = agents_of(&store, &[(&slow.base_url, ""), (&quick.base_url, "")]).await;
    let _pool = one_slot_pool(&dir, &redis.url());

    ask(&store, "s000", "take your time").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while slow.request_count() == 0 {
        assert!(Instant::now() < deadline, "the slow agent never woke");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let asked = Instant::now();
    ask(&store, "s001", "a quick question").await;
    while replies(&store, "s001").await == 0 {
        assert!(
            asked.elapsed() < Duration::from_secs(15),
            "the quick agent waited behind the slow model for {:?}",
            asked.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(replies(&store, "s000").await, 0, "the slow one still waits");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A model call that never ends fails by the Agent's `spec.model.timeoutSeconds`: the failure
/// is said in the space and in the model's health (`TimedOut`), and the cycle is retried.
#[tokio::test(flavor = "multi_thread")]
async fn a_model_call_that_never_ends_fails_by_its_deadline() {
    let redis = RedisServer::start().unwrap();
    let store = RedisStore::new(&redis.url()).unwrap();
    let slow = MockModel::responding(|_| MockTurn::Trickle(Duration::from_millis(500)))
        .await
        .unwrap();
    let dir = agents_of(&store, &[(&slow.base_url, ", timeoutSeconds: 2")]).await;
    let mut live = store
        .subscribe_live(&SpaceKey::new(NS, "s000"))
        .await
        .unwrap();
    let _pool = one_slot_pool(&dir, &redis.url());
    let asked = Instant::now();
    ask(&store, "s000", "take your time").await;
    let detail = loop {
        let event =
            tokio::time::timeout(Duration::from_secs(20), futures::StreamExt::next(&mut live))
                .await
                .expect("no error activity within 20 s")
                .unwrap();
        if let agentfleet::store::LiveEvent::Activity {
            activity, detail, ..
        } = event
        {
            if activity == "error" {
                break detail.unwrap_or_default();
            }
        }
    };
    let took = asked.elapsed();
    assert!(
        detail.starts_with("the model did not answer in time: no whole answer within 2 s (spec.model.timeoutSeconds); retrying in"),
        "{detail}"
    );
    assert!(took < Duration::from_secs(10), "failed only after {took:?}");
    // The health is recorded just after the activity is said.
    let agent = agentfleet::identity::AgentKey::new(NS, "a000");
    let deadline = Instant::now() + Duration::from_secs(10);
    let health = loop {
        let seen = store.observe(std::slice::from_ref(&agent)).await.unwrap();
        if let Some(health) = seen[0].model.clone() {
            break health;
        }
        assert!(
            Instant::now() < deadline,
            "the model's health is not reported"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(!health.available);
    assert_eq!(health.reason, "TimedOut");
    // Retried with backoff: the model is called again.
    let deadline = Instant::now() + Duration::from_secs(20);
    while slow.request_count() < 2 {
        assert!(Instant::now() < deadline, "the cycle was not retried");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

//! Chaos with real components (issue 26): a steady load of posts to three agents, each a real
//! `agentfleet worker` process whose model calls an HTTP tool and an MCP tool for every job
//! before answering it, while in turn a worker is killed -9, Redis is killed -9 and started
//! again from its append-only file, an MCP server disappears and returns, and (on a Redis
//! Cluster, writes acknowledged once a replica has them) the primary of an agent's slot fails
//! over. Counted and printed: posts acknowledged, answered, answered twice, lost, and tool
//! effects repeated. For acknowledged work the goal, asserted, is 0 lost and 0 repeated.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failing loudly is the point

// The MCP server of tests/mcp (this suite uses part of it).
#[allow(dead_code)]
#[path = "../mcp/server.rs"]
mod server;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentfleet::identity::SpaceKey;
use agentfleet::store::{
    prelude::*, NewMessage, ReadQuery, RedisOptions, RedisStore, Sender, WaitReplicas,
};
use agentfleet::testing::{
    conversation, free_port, space_record, MockModel, MockTurn, RedisCluster, RedisServer,
};
use serde_json::{json, Value};

use server::{tracker_tools, Era, McpTestServer};

const BIN: &str = env!("CARGO_BIN_EXE_agentfleet");
const NS: &str = "chaos";
const AGENTS: usize = 3;
/// Time between two posts of the load.
const EVERY: Duration = Duration::from_millis(60);

fn agent(i: usize) -> String {
    format!("c{i}")
}

fn room(i: usize) -> String {
    format!("room-{i}")
}

/// The job numbers in `text` (`job 12`, `#12`).
fn jobs_in(text: &str, mark: &str) -> Vec<u64> {
    text.match_indices(mark)
        .filter_map(|(at, _)| {
            let rest = &text[at + mark.len()..];
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect()
}

/// The model every agent has: for the jobs of a new inbox line it calls `record` (HTTP) and
/// `tracker__echo` (MCP) for each; once their results are in it answers every job recorded
/// since its last answer in one `send_message` ("done #3 #4"); after that it is done.
fn model(request: &Value) -> MockTurn {
    let messages = conversation(request);
    let Some(last) = messages.last() else {
        return MockTurn::text("ok");
    };
    let space = request["tools"]
        .as_array()
        .and_then(|_| {
            messages
                .iter()
                .filter_map(|m| m["content"].as_str())
                .find_map(|c| c.find("[room-").map(|at| c[at + 1..at + 7].to_string()))
        })
        .unwrap_or_else(|| room(0));
    let calls = |m: &Value| -> Vec<(String, Value)> {
        m["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                let f = &c["function"];
                (
                    f["name"].as_str().unwrap_or_default().to_string(),
                    serde_json::from_str(f["arguments"].as_str().unwrap_or("{}"))
                        .unwrap_or_default(),
                )
            })
            .collect()
    };
    if last["role"] == "tool" {
        let asked = messages
            .iter()
            .rev()
            .find(|m| m["role"] == "assistant" && m["tool_calls"].is_array())
            .map(calls)
            .unwrap_or_default();
        if asked.iter().any(|(name, _)| name == "send_message") {
            return MockTurn::text("ok");
        }
        // Every job recorded since the last answer.
        let since = messages
            .iter()
            .rposition(|m| calls(m).iter().any(|(n, _)| n == "send_message"))
            .map_or(0, |i| i + 1);
        let mut jobs: Vec<u64> = messages[since..]
            .iter()
            .flat_map(calls)
            .filter(|(n, _)| n == "record")
            .filter_map(|(_, a)| a["job"].as_u64())
            .collect();
        jobs.sort_unstable();
        jobs.dedup();
        let text = jobs
            .iter()
            .map(|j| format!("#{j}"))
            .collect::<Vec<_>>()
            .join(" ");
        return MockTurn::tools(&[(
            "send_message",
            json!({"space": space, "text": format!("done {text}")}),
        )]);
    }
    let jobs = jobs_in(last["content"].as_str().unwrap_or_default(), "job ");
    if jobs.is_empty() {
        return MockTurn::text("ok");
    }
    let calls: Vec<(&str, Value)> = jobs
        .iter()
        .flat_map(|j| {
            [
                ("record", json!({"job": j})),
                ("tracker__echo", json!({"text": format!("job {j}")})),
            ]
        })
        .collect();
    MockTurn::tools(&calls)
}

/// The tool service: `POST /record` notes the job of every request it receives, 30 ms after
/// it arrived.
async fn effect_service() -> (String, Arc<Mutex<Vec<u64>>>) {
    let seen: Arc<Mutex<Vec<u64>>> = Arc::default();
    let noted = seen.clone();
    let app = axum::Router::new().route(
        "/record",
        axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
            let noted = noted.clone();
            async move {
                // Some work, so that a killed worker is often in the middle of a call.
                tokio::time::sleep(Duration::from_millis(30)).await;
                if let Some(job) = body["job"].as_u64() {
                    noted.lock().unwrap().push(job);
                }
                axum::Json(json!({"recorded": body["job"]}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (base, seen)
}

/// A worker process, killed (-9) when dropped.
struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Three agents on one data plane, their manifests, workers and tools.
struct Fleet {
    dir: std::path::PathBuf,
    redis_url: String,
    env: Vec<(String, String)>,
    workers: Vec<Option<Worker>>,
}

impl Fleet {
    fn new(
        tag: &str,
        redis_url: &str,
        env: &[(&str, &str)],
        model: &str,
        effects: &str,
        mcp: &str,
    ) -> Self {
        let mut fleet = Self::manifests_only(tag, model, effects, mcp);
        fleet.redis_url = redis_url.to_string();
        fleet.env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        for i in 0..AGENTS {
            fleet.start(i);
        }
        fleet
    }

    /// The agents' manifests, with no worker started (a pool runs them).
    fn manifests_only(tag: &str, model: &str, effects: &str, mcp: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("agentfleet-chaos-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..AGENTS {
            std::fs::write(
                dir.join(format!("{}.yaml", agent(i))),
                format!(
                    r#"apiVersion: agentfleet.dev/v1alpha1
kind: Agent
metadata: {{name: {name}, namespace: {NS}}}
spec:
  model: {{provider: openai, name: mock, baseUrl: "{model}"}}
  spaces: [{room}]
  tools:
    http:
      - {{name: record, description: Records a job., url: "{effects}/record", method: POST, inputSchema: {{type: object, properties: {{job: {{type: integer}}}}, required: [job]}}}}
    mcp:
      - {{name: tracker, url: "{mcp}", tools: [echo], timeoutSeconds: 5}}
"#,
                    name = agent(i),
                    room = room(i),
                ),
            )
            .unwrap();
        }
        Self {
            dir,
            redis_url: String::new(),
            env: Vec::new(),
            workers: (0..AGENTS).map(|_| None).collect(),
        }
    }

    fn start(&mut self, i: usize) {
        let manifest = self.dir.join(format!("{}.yaml", agent(i)));
        let child = agentfleet::testing::worker_command(BIN, &manifest, &self.redis_url)
            .unwrap()
            .envs(self.env.iter().cloned())
            .env("RUST_LOG", "error")
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.workers[i] = Some(Worker(child));
    }

    /// `kill -9` of agent `i`'s worker.
    fn kill(&mut self, i: usize) {
        self.workers[i] = None;
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.workers.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What the load posted: the jobs acknowledged, and those never acknowledged.
#[derive(Default)]
struct Posted {
    acknowledged: BTreeSet<u64>,
    refused: BTreeSet<u64>,
}

/// Posts job `n` to its agent's room as a person would through a client that retries: the
/// same idempotency key each time, for up to 15 s. Whether it was acknowledged.
async fn post(store: &RedisStore, n: u64) -> bool {
    let i = (n as usize) % AGENTS;
    let message = NewMessage {
        sender: Sender {
            groups: Vec::new(),
            id: "dana".into(),
            name: "Dana".into(),
            kind: Some(agentfleet::store::MemberKind::Human),
        },
        text: format!("job {n}"),
        mention: None,
        idempotency_key: Some(format!("job-{n}")),
        urgent: false,
        depth: 0,
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let tried = tokio::time::timeout(
            Duration::from_secs(3),
            store.post_message(&SpaceKey::new(NS, room(i)), &message),
        )
        .await;
        if matches!(tried, Ok(Ok(_))) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn stop_now(stop: &tokio::sync::watch::Receiver<bool>) -> bool {
    *stop.borrow()
}

/// The load under way: a post every [`EVERY`] until it is finished.
struct Load {
    posted: Arc<Mutex<Posted>>,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    started: Instant,
}

impl Load {
    fn start(store: Arc<RedisStore>) -> Self {
        let posted = Arc::new(Mutex::new(Posted::default()));
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let noted = posted.clone();
        let task = tokio::spawn(async move {
            let mut n = 0u64;
            while !stop_now(&stopped) {
                n += 1;
                let ok = post(&store, n).await;
                {
                    let mut p = noted.lock().unwrap();
                    if ok {
                        p.acknowledged.insert(n);
                    } else {
                        p.refused.insert(n);
                    }
                }
                tokio::time::sleep(EVERY).await;
            }
        });
        Self {
            posted,
            stop,
            task,
            started: Instant::now(),
        }
    }

    /// Sleeps until `secs` after the load started.
    async fn at(&self, secs: f64) {
        tokio::time::sleep_until((self.started + Duration::from_secs_f64(secs)).into()).await;
    }

    /// Stops posting; what was posted.
    async fn finish(self) -> Posted {
        self.stop.send(true).unwrap();
        self.task.await.unwrap();
        std::mem::take(&mut *self.posted.lock().unwrap())
    }
}

/// How often each job was answered, from the rooms' logs.
async fn answers(store: &RedisStore) -> BTreeMap<u64, usize> {
    let mut out = BTreeMap::new();
    for i in 0..AGENTS {
        let read = store
            .read_messages(
                &SpaceKey::new(NS, room(i)),
                &ReadQuery {
                    limit: 5000,
                    ..ReadQuery::default()
                },
            )
            .await;
        for m in read.unwrap_or_default() {
            if m.sender.id == agent(i) {
                for job in jobs_in(&m.text, "#") {
                    *out.entry(job).or_insert(0) += 1;
                }
            }
        }
    }
    out
}

/// What a run counted.
struct Figures {
    acknowledged: usize,
    refused: usize,
    answered: usize,
    answered_twice: Vec<u64>,
    lost: Vec<u64>,
    http_repeated: Vec<u64>,
    mcp_repeated: Vec<u64>,
    /// Jobs whose effect happened (a tool away answers an error instead).
    http_done: usize,
    mcp_done: usize,
}

/// Waits (up to 90 s) until every acknowledged job is answered, then counts.
async fn settle(
    store: &RedisStore,
    posted: &Posted,
    http: &Mutex<Vec<u64>>,
    mcp: &Mutex<Vec<(String, Value)>>,
) -> Figures {
    let started = Instant::now();
    let answered = loop {
        let answered = answers(store).await;
        let all = posted.acknowledged.iter().all(|j| answered.contains_key(j));
        if all || started.elapsed() > Duration::from_secs(90) {
            break answered;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    // Late duplicates would come soon after.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let answered = {
        let again = answers(store).await;
        if again.len() >= answered.len() {
            again
        } else {
            answered
        }
    };
    let distinct = |jobs: &[u64]| jobs.iter().collect::<BTreeSet<_>>().len();
    let repeated = |jobs: Vec<u64>| -> Vec<u64> {
        let mut count = BTreeMap::new();
        for j in jobs {
            *count.entry(j).or_insert(0usize) += 1;
        }
        count
            .into_iter()
            .filter(|(_, n)| *n > 1)
            .map(|(j, _)| j)
            .collect()
    };
    let http_jobs = http.lock().unwrap().clone();
    let mcp_jobs: Vec<u64> = mcp
        .lock()
        .unwrap()
        .iter()
        .filter(|(name, _)| name == "echo")
        .flat_map(|(_, args)| jobs_in(args["text"].as_str().unwrap_or_default(), "job "))
        .collect();
    Figures {
        acknowledged: posted.acknowledged.len(),
        refused: posted.refused.len(),
        answered: posted
            .acknowledged
            .iter()
            .filter(|j| answered.contains_key(j))
            .count(),
        answered_twice: answered
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(j, _)| *j)
            .collect(),
        lost: posted
            .acknowledged
            .iter()
            .filter(|j| !answered.contains_key(j))
            .copied()
            .collect(),
        http_done: distinct(&http_jobs),
        mcp_done: distinct(&mcp_jobs),
        http_repeated: repeated(http_jobs),
        mcp_repeated: repeated(mcp_jobs),
    }
}

impl Figures {
    fn print_and_check(&self, run: &str) {
        println!(
            "chaos ({run}): posts acknowledged {}, not acknowledged {}, answered {}, answered twice {}, lost {}, tool effects repeated {} (HTTP {}, MCP {}); effects made: HTTP {}, MCP {} (an unreachable tool answers an error instead)",
            self.acknowledged,
            self.refused,
            self.answered,
            self.answered_twice.len(),
            self.lost.len(),
            self.http_repeated.len() + self.mcp_repeated.len(),
            self.http_repeated.len(),
            self.mcp_repeated.len(),
            self.http_done,
            self.mcp_done,
        );
        assert!(
            self.acknowledged > 100,
            "too little load: {}",
            self.acknowledged
        );
        assert!(self.lost.is_empty(), "lost: {:?}", self.lost);
        assert!(
            self.answered_twice.is_empty(),
            "answered twice: {:?}",
            self.answered_twice
        );
        assert!(
            self.http_repeated.is_empty(),
            "HTTP effects repeated: {:?}",
            self.http_repeated
        );
        assert!(
            self.mcp_repeated.is_empty(),
            "MCP effects repeated: {:?}",
            self.mcp_repeated
        );
    }
}

/// The rooms, each with its agent and Dana.
async fn rooms(store: &RedisStore) {
    for i in 0..AGENTS {
        store
            .apply_space(
                &SpaceKey::new(NS, room(i)),
                &space_record(&room(i), &[&agent(i)], &["Dana"]),
            )
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_worker_kills_redis_restarts_and_an_mcp_outage_lose_and_repeat_nothing() {
    agentfleet::install_crypto_provider();
    let mut redis = RedisServer::start_persistent().unwrap();
    let store = Arc::new(RedisStore::new(&redis.url()).unwrap());
    rooms(&store).await;
    let model = MockModel::responding(model).await.unwrap();
    let (effects, http) = effect_service().await;
    let mcp_port = free_port().unwrap();
    let mcp = McpTestServer::start_on(mcp_port, Era::Current, tracker_tools()).await;
    let world = mcp.world.clone();
    let mut fleet = Fleet::new(
        "one",
        &redis.url(),
        &[],
        &model.base_url,
        &effects,
        &mcp.url,
    );

    let load = Load::start(store.clone());
    // Each agent's worker in turn is killed -9 and started again (as its Deployment would).
    for i in 0..AGENTS {
        load.at(2.0 + 2.0 * i as f64).await;
        fleet.kill(i);
        load.at(3.0 + 2.0 * i as f64).await;
        fleet.start(i);
    }
    // Redis is killed -9 and started again from its append-only file.
    load.at(9.0).await;
    redis.kill();
    load.at(11.0).await;
    tokio::task::block_in_place(|| redis.restart()).unwrap();
    // The MCP server goes away and comes back.
    load.at(17.0).await;
    mcp.stop().await;
    load.at(20.0).await;
    let mcp = McpTestServer::serve(mcp_port, world.clone()).await;
    load.at(26.0).await;
    let posted = load.finish().await;

    let figures = settle(&store, &posted, &http, &world.calls).await;
    drop(fleet);
    drop(mcp);
    figures.print_and_check(
        "one Redis: worker kill -9, Redis kill -9 and AOF restart, MCP server away 3 s",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_on_a_redis_cluster_whose_primary_fails_over_loses_and_repeats_nothing() {
    agentfleet::install_crypto_provider();
    let mut cluster = RedisCluster::start().unwrap();
    let wait = WaitReplicas {
        replicas: 1,
        timeout: Duration::from_millis(500),
    };
    let store = Arc::new(
        RedisStore::with_options(
            &cluster.url(),
            &RedisOptions {
                ca: None,
                wait: Some(wait),
            },
        )
        .unwrap(),
    );
    rooms(&store).await;
    let model = MockModel::responding(model).await.unwrap();
    let (effects, http) = effect_service().await;
    let mcp = McpTestServer::start(Era::Current, tracker_tools()).await;
    let world = mcp.world.clone();
    let fleet = Fleet::new(
        "cluster",
        &cluster.url(),
        &[("AGENTFLEET_REDIS_WAIT_REPLICAS", "1")],
        &model.base_url,
        &effects,
        &mcp.url,
    );

    let load = Load::start(store.clone());
    // The primary serving agent c0's keys dies; its replica takes over; the dead node comes
    // back as a replica (as Kubernetes would restart it).
    load.at(5.0).await;
    let key = format!("agentfleet:{{agent:{NS}/{}}}:inbox", agent(0));
    let primary = cluster.owner(&key).unwrap();
    cluster.kill(primary);
    let took = tokio::task::block_in_place(|| cluster.failed_over(primary, &key)).unwrap();
    println!("failover of {primary} took {:.1}s", took.as_secs_f64());
    tokio::task::block_in_place(|| cluster.restart(primary)).unwrap();
    load.at(18.0).await;
    let posted = load.finish().await;

    let figures = settle(&store, &posted, &http, &world.calls).await;
    drop(fleet);
    drop(mcp);
    figures
        .print_and_check("Redis Cluster 3+3 with WAIT 1: the primary of an agent's slot killed -9");
}

/// A remote A2A agent written to misbehave: its one skill `flood` answers a message of 900 KB
/// (far over what the model may be given) and its skill `stuck` starts a task that never ends.
async fn hostile_remote() -> (String, tokio::task::JoinHandle<()>) {
    async fn card(axum::extract::State(url): axum::extract::State<String>) -> axum::Json<Value> {
        axum::Json(json!({
            "name": "hostile", "description": "misbehaves", "version": "1",
            "supportedInterfaces": [{"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
            "capabilities": {}, "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
            "skills": [
                {"id": "flood", "name": "flood", "description": "answers too much", "tags": ["t"]},
                {"id": "stuck", "name": "stuck", "description": "never finishes", "tags": ["t"]}
            ]
        }))
    }
    async fn rpc(axum::Json(request): axum::Json<Value>) -> axum::Json<Value> {
        let params = &request["params"];
        let result = match request["method"].as_str().unwrap_or_default() {
            "SendMessage" if params["message"]["metadata"]["skill"] == "flood" => {
                json!({"message": {"messageId": "m", "role": "ROLE_AGENT", "contextId": "c", "parts": [{"text": "x".repeat(900_000)}]}})
            }
            "SendMessage" => {
                json!({"task": {"id": "stuck", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}})
            }
            _ => {
                json!({"id": "stuck", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}})
            }
        };
        axum::Json(json!({"jsonrpc": "2.0", "id": request["id"], "result": result}))
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/remote", listener.local_addr().unwrap());
    let app = axum::Router::new()
        .route(
            "/remote/.well-known/agent-card.json",
            axum::routing::get(card),
        )
        .route("/remote", axum::routing::post(rpc))
        .with_state(url.clone());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, task)
}

/// The hostile remote's caller: every poke calls both of its skills, then says it is done.
fn pokes_the_remote(request: &Value) -> MockTurn {
    let messages = conversation(request);
    let last = messages.last().cloned().unwrap_or_default();
    if last["role"] == "tool" {
        return MockTurn::text("done");
    }
    MockTurn::tools(&[
        ("hostile__flood", json!({"message": "hi"})),
        ("hostile__stuck", json!({"message": "hi"})),
    ])
}

/// `agentfleet pool` over `dir`: three cycles at once.
fn pool_process(dir: &std::path::Path, redis_url: &str) -> Worker {
    let child = std::process::Command::new(BIN)
        .args(["pool", "--namespace", NS, "--name", "chaos", "--agents"])
        .arg(dir)
        .args([
            "--cycles-at-once",
            "3",
            "--lease-seconds",
            "2",
            "--sweep-seconds",
            "1",
        ])
        .args(["--metrics-addr", "127.0.0.1:0", "--redis", redis_url])
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Worker(child)
}

/// The steady load's three agents in one pool of three cycles at once, beside three agents
/// whose model streams a byte a second and never finishes (each call ends by its 3 s
/// deadline, then again), and an agent calling a remote that answers 900 KB and starts
/// tasks that never end — all poked every second — while the pool is killed -9 and started
/// again. An older build, whose cycles held their slot while waiting on the model, answered
/// almost none of the load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_beside_slow_models_and_a_hostile_remote_loses_and_repeats_nothing() {
    agentfleet::install_crypto_provider();
    let redis = RedisServer::start_persistent().unwrap();
    let store = Arc::new(RedisStore::new(&redis.url()).unwrap());
    rooms(&store).await;
    let model = MockModel::responding(model).await.unwrap();
    let slow = MockModel::responding(|_| MockTurn::Trickle(Duration::from_secs(1)))
        .await
        .unwrap();
    let poker = MockModel::responding(pokes_the_remote).await.unwrap();
    let (remote, _remote) = hostile_remote().await;
    let (effects, http) = effect_service().await;
    let mcp = McpTestServer::start(Era::Current, tracker_tools()).await;
    let world = mcp.world.clone();
    // The steady agents' manifests, in a pool's directory with the others.
    let fleet = Fleet::manifests_only("neighbours", &model.base_url, &effects, &mcp.url);
    let mut others = String::new();
    let mut poked = Vec::new();
    for i in 0..3 {
        others.push_str(&format!(
            "---\napiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {{name: slow{i}, namespace: {NS}}}\nspec:\n  model: {{provider: openai, name: slow, baseUrl: \"{}\", timeoutSeconds: 3}}\n  spaces: [slow-{i}]\n",
            slow.base_url
        ));
        poked.push((format!("slow{i}"), format!("slow-{i}")));
    }
    others.push_str(&format!(
        "---\napiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {{name: caller, namespace: {NS}}}\nspec:\n  model: {{provider: openai, name: poker, baseUrl: \"{}\"}}\n  spaces: [remote-room]\n  tools:\n    a2a:\n      - {{name: hostile, url: \"{remote}\", timeoutSeconds: 2, resultTtlSeconds: 60}}\n",
        poker.base_url
    ));
    poked.push(("caller".into(), "remote-room".into()));
    std::fs::write(fleet.dir.join("neighbours.yaml"), others).unwrap();
    for (agent, room) in &poked {
        store
            .apply_space(
                &SpaceKey::new(NS, room),
                &space_record(room, &[agent], &["Dana"]),
            )
            .await
            .unwrap();
    }
    let pool = pool_process(&fleet.dir, &redis.url());

    let pokes = tokio::spawn({
        let store = store.clone();
        async move {
            for n in 0u64.. {
                for (_, room) in &poked {
                    let message = agentfleet::testing::human_message("Dana", &format!("poke {n}"));
                    let _ = store.post_message(&SpaceKey::new(NS, room), &message).await;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    });
    let load = Load::start(store.clone());
    // The pool is killed -9 and started again (as its Deployment would).
    load.at(8.0).await;
    drop(pool);
    load.at(9.0).await;
    let pool = pool_process(&fleet.dir, &redis.url());
    load.at(20.0).await;
    let posted = load.finish().await;

    let figures = settle(&store, &posted, &http, &world.calls).await;
    pokes.abort();
    let slow_calls = slow.request_count();
    let remote_calls = poker.request_count();
    drop(pool);
    drop(fleet);
    drop(mcp);
    println!(
        "beside the load: {slow_calls} calls to the never-ending model, {remote_calls} model calls of the hostile remote's caller"
    );
    assert!(slow_calls > 3, "the slow agents were not kept busy");
    figures.print_and_check(
        "one pool of 3 cycles at once: 3 never-ending models and a hostile remote beside the load, pool kill -9",
    );
}

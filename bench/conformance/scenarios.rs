//! The seed documents' worked examples, each as what must be true in the space and the
//! consciousness afterwards (never the exact words), against a real model.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentfleet::identity::SpaceKey;
use agentfleet::store::{
    prelude::*, Answer, CallResult, Completion, ReadQuery, RedisStore, Verdict,
};
use agentfleet::testing::RedisServer;
use serde_json::json;

use crate::dev::{Dev, ManifestDir};
use crate::proxy::{Call, Layout, Proxy};
use agentfleet::identity::AgentKey;

/// How long one answer of a real model may take (`AGENTFLEET_REAL_MODEL_ANSWER_SECONDS`,
/// default 300: a small model on two CPU cores).
fn answer_time() -> Duration {
    let seconds = std::env::var("AGENTFLEET_REAL_MODEL_ANSWER_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    Duration::from_secs(seconds)
}

/// The most tokens one model turn may write (`model.maxOutputTokens`): an answer and a call or
/// two; a small model that rambles stops here instead of at the server's context.
const MAX_TOKENS: u32 = 384;

/// Steps a cycle may take (`cycle.maxSteps`, 20 by default): a small model that loops
/// through tools would otherwise spend ten minutes of CPU on one cycle.
const MAX_STEPS: u32 = 6;

#[derive(Clone, Copy, Debug)]
pub enum Scenario {
    Greeting,
    RememberRecall,
    Batched,
    SkipNotAddressed,
    MentionAndWait,
    HttpTool,
    McpTool,
    Approval,
    Plan,
    Compaction,
}

pub const ALL: &[(&str, Scenario)] = &[
    ("greeting", Scenario::Greeting),
    ("remember-recall", Scenario::RememberRecall),
    ("three-quick-messages", Scenario::Batched),
    ("skip-not-addressed", Scenario::SkipNotAddressed),
    ("mention-and-wait", Scenario::MentionAndWait),
    ("http-tool", Scenario::HttpTool),
    ("mcp-tool", Scenario::McpTool),
    ("approval", Scenario::Approval),
    ("plan", Scenario::Plan),
    ("compaction", Scenario::Compaction),
];

/// What a scenario run showed.
pub struct Outcome {
    pub failure: Option<String>,
    pub calls: Vec<Call>,
    pub cycles: u64,
    pub nudges: u64,
    pub corrections: u64,
    /// Cycles that needed a nudge or a correction (at most one count per cycle).
    pub helped_cycles: u64,
    /// From a post to the answer it got.
    pub cycle_seconds: Vec<f64>,
}

impl Outcome {
    /// A scenario that panicked (what it said is on stderr).
    pub fn panicked() -> Outcome {
        Outcome {
            failure: Some("the scenario panicked (see its message above)".to_string()),
            calls: Vec::new(),
            cycles: 0,
            nudges: 0,
            corrections: 0,
            helped_cycles: 0,
            cycle_seconds: Vec::new(),
        }
    }
}

type Checked = Result<(), String>;

fn ensure(ok: bool, why: impl Into<String>) -> Checked {
    if ok {
        Ok(())
    } else {
        Err(why.into())
    }
}

/// The tools outside agentfleet a scenario uses: an HTTP server counting its calls.
#[derive(Clone, Default)]
struct Tools {
    seen: Arc<Mutex<Vec<String>>>,
}

async fn tool_server() -> (String, Tools) {
    use axum::extract::{Query, State};
    use axum::routing::{get, post};
    let tools = Tools::default();
    let app = axum::Router::new()
        .route(
            "/weather",
            get(
                |State(t): State<Tools>,
                 Query(q): Query<std::collections::HashMap<String, String>>| async move {
                    let city = q.get("city").cloned().unwrap_or_default();
                    t.seen.lock().unwrap().push(format!("weather {city}"));
                    axum::Json(json!({"city": city, "forecast": "heavy rain", "celsius": 12}))
                },
            ),
        )
        .route(
            "/restart",
            post(
                |State(t): State<Tools>, body: axum::body::Bytes| async move {
                    t.seen
                        .lock()
                        .unwrap()
                        .push(format!("restart {}", String::from_utf8_lossy(&body)));
                    axum::Json(json!({"restarted": true}))
                },
            ),
        )
        .with_state(tools.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://127.0.0.1:{port}"), tools)
}

struct Rig {
    _redis: RedisServer,
    store: Arc<RedisStore>,
    dev: Dev,
    _dir: ManifestDir,
    http: reqwest::Client,
    husam: String,
    proxy: Proxy,
    space: SpaceKey,
    cycle_seconds: Vec<f64>,
}

impl Rig {
    /// `agents`: name and spec lines besides `model` and `spaces`.
    async fn start(url: &str, model: &str, layout: Layout, agents: &[(&str, String)]) -> Rig {
        let redis = RedisServer::start().unwrap();
        let store = Arc::new(RedisStore::new(&redis.url()).unwrap());
        let proxy = Proxy::start(url, layout).await;
        let agents: Vec<(&str, String)> = agents
            .iter()
            .map(|(n, spec)| {
                (
                    *n,
                    format!(
                        "  model: {{provider: openai, name: '{model}', baseUrl: '{}', temperature: 0, maxOutputTokens: {MAX_TOKENS}}}\n  cycle: {{maxSteps: {MAX_STEPS}}}\n{spec}",
                        proxy.base_url
                    ),
                )
            })
            .collect();
        let dir = ManifestDir::new("real", "desk", &agents);
        let dev = Dev::start_in(dir.path(), &["--redis", &redis.url()]);
        let husam = dev.token("default/desk", "Husam");
        Rig {
            _redis: redis,
            store,
            dev,
            _dir: dir,
            http: reqwest::Client::new(),
            husam,
            proxy,
            space: SpaceKey::new("default", "desk"),
            cycle_seconds: Vec::new(),
        }
    }

    async fn say(&self, text: &str, mention: Option<&str>) -> i64 {
        let posted = self
            .dev
            .post(
                &self.http,
                &self.husam,
                "desk",
                &json!({"text": text, "mention": mention}),
            )
            .await;
        assert_eq!(posted.status(), 201, "posting {text:?}");
        agentfleet::store::now_ms()
    }

    /// Messages of the space after `since_ms` from `agent`.
    async fn from(&self, agent: &str, since_ms: i64) -> Vec<String> {
        let query = ReadQuery {
            limit: 200,
            ..Default::default()
        };
        let messages = self.store.read_messages(&self.space, &query).await.unwrap();
        let mut out: Vec<(i64, String)> = messages
            .into_iter()
            .filter(|m| m.sender.id == agent && m.time_ms >= since_ms)
            .map(|m| (m.time_ms, m.text))
            .collect();
        out.sort();
        out.into_iter().map(|(_, t)| t).collect()
    }

    /// The first message `agent` says after `since_ms` (then the model is left to finish its
    /// cycle, so that the next post begins a cycle of its own).
    async fn answer(&mut self, agent: &str, since_ms: i64) -> Result<String, String> {
        let started = Instant::now();
        loop {
            if let Some(first) = self.from(agent, since_ms).await.into_iter().next() {
                self.cycle_seconds
                    .push((agentfleet::store::now_ms() - since_ms) as f64 / 1000.0);
                self.quiet().await;
                return Ok(first);
            }
            // Every agent asleep with nothing waiting: no answer is coming.
            if started.elapsed() > answer_time() || self.settled(started).await {
                self.quiet().await;
                return Err(format!("{agent} said nothing"));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Whether, for 10 s since `since` and since the model's last answer, no agent has had
    /// events waiting or in flight: nothing more happens until someone posts.
    async fn settled(&self, since: Instant) -> bool {
        let quiet_for = self
            .proxy
            .last_call_ended()
            .map_or(since.elapsed(), |t| t.elapsed().min(since.elapsed()));
        quiet_for > Duration::from_secs(10) && self.idle().await
    }

    /// Waits until no agent has asked the model anything for 5 s.
    async fn quiet(&self) {
        let mut seen = (self.proxy.calls().len(), Instant::now());
        let started = Instant::now();
        while started.elapsed() < answer_time() {
            let n = self.proxy.calls().len();
            if n != seen.0 {
                seen = (n, Instant::now());
            } else if seen.1.elapsed() > Duration::from_secs(5) && self.idle().await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Whether no agent has events waiting or a cycle under way (a cycle paused for a
    /// human's approval waits for nothing the scenario will do).
    async fn idle(&self) -> bool {
        for agent in self.agents().await {
            let waiting = self.store.inbox_depth(&agent).await.unwrap_or(1);
            let inflight = self.store.inflight(&agent).await.unwrap_or(1);
            let paused = inflight > 0
                && !self
                    .store
                    .human_calls(&agent)
                    .await
                    .unwrap_or_default()
                    .is_empty();
            if waiting > 0 || (inflight > 0 && !paused) {
                return false;
            }
        }
        true
    }

    async fn agents(&self) -> Vec<AgentKey> {
        let record = self.store.space(&self.space).await.ok().flatten();
        record
            .map(|r| {
                r.members
                    .iter()
                    .filter(|m| m.kind == agentfleet::store::MemberKind::Agent)
                    .map(|m| AgentKey::new("default", &m.id))
                    .collect()
            })
            .unwrap_or_default()
    }

    async fn metric(&self, name: &str) -> u64 {
        let text = self.dev.metrics(&self.http).await;
        text.lines()
            .filter(|l| l.starts_with(name) && !l.starts_with('#'))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }

    async fn finish(self, checked: Checked) -> Outcome {
        let mut cycles = 0;
        for agent in self.agents().await {
            cycles += self
                .store
                .consciousness(&agent)
                .await
                .map(|c| c.cycle)
                .unwrap_or(0);
        }
        let nudges = self.metric("agentfleet_cycle_nudges_total").await;
        let corrections = self.metric("agentfleet_model_readings_total").await
            + errors(&self.dev.metrics(&self.http).await);
        Outcome {
            failure: checked.err(),
            calls: self.proxy.calls(),
            cycles,
            nudges,
            corrections,
            helped_cycles: (nudges + corrections).min(cycles),
            cycle_seconds: self.cycle_seconds,
        }
    }
}

/// Tool calls that failed (results the model had to correct).
fn errors(metrics: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("agentfleet_tool_calls_total{") && l.contains("outcome=\"error\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

fn contains(text: &str, any: &[&str]) -> bool {
    let lower = text.to_lowercase();
    any.iter().any(|a| lower.contains(&a.to_lowercase()))
}

pub async fn run(scenario: Scenario, url: String, model: String, layout: Layout) -> Outcome {
    let (url, model) = (url.as_str(), model.as_str());
    let one = |instructions: &str| vec![("assistant", format!("  instructions: {instructions}"))];
    match scenario {
        Scenario::Greeting => {
            let mut r = Rig::start(url, model, layout, &one("You are a friendly assistant.")).await;
            let since = r.say("Hi! Please say hello.", None).await;
            let checked = r.answer("assistant", since).await.map(|_| ());
            r.finish(checked).await
        }
        Scenario::RememberRecall => {
            let mut r = Rig::start(url, model, layout, &one("You are a family assistant.")).await;
            let checked = async {
                let since = r
                    .say(
                        "Please remember that dinner is at 8 tonight, and say ok.",
                        None,
                    )
                    .await;
                r.answer("assistant", since).await?;
                let since = r.say("What time is dinner tonight?", None).await;
                let said = r.answer("assistant", since).await?;
                ensure(contains(&said, &["8"]), format!("recalled {said:?}"))
            }
            .await;
            r.finish(checked).await
        }
        Scenario::Batched => {
            let mut r = Rig::start(url, model, layout, &one("You are a shopping assistant.")).await;
            let checked = async {
                let since = r.say("I need a few things noted.", None).await;
                r.say("First: buy milk.", None).await;
                r.say("Second: buy eggs. Please confirm both.", None).await;
                let said = r.answer("assistant", since).await?;
                let cycles = r
                    .store
                    .consciousness(&AgentKey::new("default", "assistant"))
                    .await
                    .map(|c| c.cycle)
                    .unwrap_or(0);
                ensure(
                    cycles <= 2,
                    format!("{cycles} cycles for three quick messages"),
                )?;
                let all = r.from("assistant", since).await.join(" ");
                ensure(
                    contains(&all, &["milk"]) && contains(&all, &["egg"]),
                    format!("answered {said:?}"),
                )
            }
            .await;
            r.finish(checked).await
        }
        Scenario::SkipNotAddressed => {
            let agents = [
                (
                    "alice",
                    "  instructions: You answer questions about cooking only.".to_string(),
                ),
                (
                    "bob",
                    "  instructions: You answer arithmetic questions.".to_string(),
                ),
            ];
            let mut r = Rig::start(url, model, layout, &agents).await;
            let checked = async {
                let since = r.say("@bob what is 2 + 2?", Some("bob")).await;
                let said = r.answer("bob", since).await?;
                ensure(
                    contains(&said, &["4", "four"]),
                    format!("bob said {said:?}"),
                )?;
                let alice = r.from("alice", since).await;
                ensure(
                    alice.is_empty(),
                    format!("alice, not addressed, said {alice:?}"),
                )
            }
            .await;
            r.finish(checked).await
        }
        Scenario::MentionAndWait => {
            let agents = [
                ("planner", "  instructions: You plan trips. You do not know facts about places; the researcher agent does, so you ask it.".to_string()),
                ("researcher", "  instructions: You answer questions about geography.".to_string()),
            ];
            let mut r = Rig::start(url, model, layout, &agents).await;
            let checked = async {
                let since = r
                    .say("Please ask the researcher what the capital of France is, wait for its answer, then tell me.", Some("planner"))
                    .await;
                r.answer("researcher", since).await?;
                let started = Instant::now();
                loop {
                    let said = r.from("planner", since).await.join(" ");
                    if contains(&said, &["paris"]) {
                        return Ok(());
                    }
                    if started.elapsed() > answer_time() || r.settled(started).await {
                        return Err(format!("the planner never passed the answer on: {said:?}"));
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
            .await;
            r.quiet().await;
            r.finish(checked).await
        }
        Scenario::HttpTool | Scenario::Approval => {
            let (base, tools) = tool_server().await;
            let spec = format!(
                "  instructions: You help with the weather and the services.\n  tools:\n    http:\n      - name: get_weather\n        description: The weather forecast of a city.\n        url: '{base}/weather'\n        inputSchema: {{type: object, properties: {{city: {{type: string}}}}, required: [city]}}\n      - name: restart_service\n        description: Restarts a service (a human approves first).\n        method: POST\n        url: '{base}/restart'\n        requireApproval: true\n        inputSchema: {{type: object, properties: {{service: {{type: string}}}}, required: [service]}}"
            );
            let mut r = Rig::start(url, model, layout, &[("assistant", spec)]).await;
            let checked = if matches!(scenario, Scenario::HttpTool) {
                async {
                    let since = r.say("What is the weather in Oslo today?", None).await;
                    let said = r.answer("assistant", since).await?;
                    let seen = tools.seen.lock().unwrap().clone();
                    ensure(
                        seen.iter().any(|s| contains(s, &["oslo"])),
                        format!("the tool was not asked about Oslo: {seen:?}"),
                    )?;
                    ensure(
                        contains(&said, &["rain", "12"]),
                        format!("answered {said:?}"),
                    )
                }
                .await
            } else {
                approval(&mut r, &tools).await
            };
            r.finish(checked).await
        }
        Scenario::McpTool => {
            let server = crate::mcp::McpTestServer::start(
                crate::mcp::Era::Current,
                crate::mcp::tracker_tools(),
            )
            .await;
            let spec = format!(
                "  instructions: You track tickets with the tracker tools.\n  tools:\n    mcp:\n      - name: tracker\n        url: '{}'\n        tools: [count]",
                server.url
            );
            let mut r = Rig::start(url, model, layout, &[("assistant", spec)]).await;
            let checked = async {
                let since = r
                    .say("How many tickets are open in the tracker?", None)
                    .await;
                let said = r.answer("assistant", since).await?;
                ensure(
                    contains(&said, &["3", "three"]),
                    format!("answered {said:?}"),
                )
            }
            .await;
            r.finish(checked).await
        }
        Scenario::Plan => {
            let mut r = Rig::start(
                url,
                model,
                layout,
                &one("You are a personal assistant who sets reminders with set_plans."),
            )
            .await;
            let checked = async {
                let since = r
                    .say("In one minute, remind me to drink water.", None)
                    .await;
                r.answer("assistant", since).await?;
                let key = AgentKey::new("default", "assistant");
                let plans = r.store.plans(&key).await.unwrap_or_default();
                ensure(!plans.is_empty(), "no plan was set")?;
                let started = Instant::now();
                loop {
                    let said = r.from("assistant", since + 45_000).await.join(" ");
                    if contains(&said, &["water"]) {
                        return Ok(());
                    }
                    // Due a minute after it was asked for: two are plenty.
                    if started.elapsed() > answer_time().min(Duration::from_secs(120)) {
                        return Err("the plan never reminded anyone".to_string());
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
            .await;
            r.quiet().await;
            r.finish(checked).await
        }
        Scenario::Compaction => {
            let spec = "  instructions: You are a helpful assistant.\n  consciousness: {windowTokens: 3000, keepRecentMessages: 4}".to_string();
            let mut r = Rig::start(url, model, layout, &[("assistant", spec)]).await;
            let checked = async {
                let since = r
                    .say("Please remember: my locker code is 4312.", None)
                    .await;
                r.answer("assistant", since).await?;
                for topic in ["the sea", "mountains", "rivers", "forests", "deserts"] {
                    let since = r
                        .say(&format!("Tell me one short fact about {topic}."), None)
                        .await;
                    r.answer("assistant", since).await?;
                }
                let key = AgentKey::new("default", "assistant");
                let c = r.store.consciousness(&key).await.unwrap();
                ensure(c.summary.is_some(), "no compaction happened")?;
                let since = r.say("What is my locker code?", None).await;
                let said = r.answer("assistant", since).await?;
                ensure(contains(&said, &["4312"]), format!("recalled {said:?}"))
            }
            .await;
            r.finish(checked).await
        }
    }
}

/// A call that needs a human's approval: asked, approved, made once, answered.
async fn approval(r: &mut Rig, tools: &Tools) -> Checked {
    let since = r.say("Please restart the service db-1.", None).await;
    let key = AgentKey::new("default", "assistant");
    let started = Instant::now();
    let call = loop {
        if let Some(call) = r.store.human_calls(&key).await.unwrap().into_iter().next() {
            break call;
        }
        if started.elapsed() > answer_time() {
            return Err("no approval was asked".into());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    ensure(
        call.record.tool == "restart_service",
        format!("asked for {}", call.record.tool),
    )?;
    let decision = CallResult::Decision(Verdict {
        answer: Answer::Approve,
        by: "Husam".into(),
        reason: Some("go ahead".into()),
    });
    let done = r
        .store
        .complete_call(&call.id, None, &decision)
        .await
        .unwrap();
    ensure(matches!(done, Completion::Accepted(_)), format!("{done:?}"))?;
    let decided = agentfleet::store::now_ms();
    let said = r.answer("assistant", decided).await?;
    // The agent's own notice of a second approval asked is not an answer.
    ensure(
        !said.contains(" wants to call "),
        format!("asked again instead of answering: {said:?}"),
    )?;
    let seen = tools.seen.lock().unwrap().clone();
    ensure(
        seen.len() == 1 && contains(&seen[0], &["db-1"]),
        format!("made {seen:?}"),
    )?;
    ensure(
        !said.is_empty() && since > 0,
        "no answer after the approval",
    )
}

//! `agentfleet dev config/samples` end to end, as a user runs it: the binary, its printed
//! gateway and tokens, posts over HTTP, the agents' streamed replies over SSE, and
//! `agentfleet chat` typing into it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{json, Value};

use agentfleet::chat::SseParser;
use agentfleet::testing::SseReader;

#[path = "support/dev.rs"]
mod support;
use support::{bin, lines, openai, Dev, ManifestDir};

/// The value of `agentfleet_cycles_total` for an agent of `default` and a result.
fn cycles(metrics: &str, agent: &str, result: &str) -> u64 {
    let series = format!(
        "agentfleet_cycles_total{{agent=\"{agent}\",namespace=\"default\",result=\"{result}\"}} "
    );
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .map_or(0, |v| v.trim().parse().unwrap())
}

#[tokio::test]
async fn dev_runs_the_samples_and_agents_answer_over_the_gateway() {
    agentfleet::install_crypto_provider();
    let dev = Dev::start();
    let http = reqwest::Client::new();
    let husam = dev.token("default/family", "Husam");
    assert_eq!(
        husam,
        dev.token("default/engineering", "Husam"),
        "one token per human"
    );

    // Listen to the family space, then say hello.
    let resp = dev.stream(&http, &husam, "family").await;
    let mut body = resp.bytes_stream();
    let posted: Value = dev
        .post(
            &http,
            &husam,
            "family",
            &json!({"text": "hello, what's for dinner?"}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(posted["delivered"], json!(["assistant"]));

    let mut parser = SseParser::default();
    let mut seen = Vec::new();
    let mut streamed = String::new();
    let reply = 'outer: loop {
        let chunk = tokio::time::timeout(Duration::from_secs(20), body.next())
            .await
            .expect("the assistant's reply within 20s")
            .unwrap()
            .unwrap();
        for e in parser.feed(&chunk) {
            let v: Value = serde_json::from_str(&e.data).unwrap();
            seen.push(format!(
                "{} {}",
                e.event,
                v["sender"]["id"].as_str().unwrap_or("")
            ));
            if e.event == "delta" {
                streamed.push_str(v["delta"].as_str().unwrap());
            }
            if e.event == "message" && v["sender"]["kind"] == "agent" {
                break 'outer v;
            }
        }
    };
    assert_eq!(reply["sender"]["id"], "assistant");
    assert!(
        reply["text"]
            .as_str()
            .unwrap()
            .contains("hello, what's for dinner?"),
        "{reply}"
    );
    assert_eq!(
        streamed,
        reply["text"].as_str().unwrap(),
        "the reply streamed before it was posted"
    );
    let first = |what: &str| seen.iter().position(|s| s == what).unwrap_or(usize::MAX);
    assert!(
        first("message husam") < first("activity assistant"),
        "{seen:?}"
    );
    assert!(
        first("activity assistant") < first("delta assistant"),
        "thinking shown first: {seen:?}"
    );
    assert!(
        first("delta assistant") < first("message assistant"),
        "{seen:?}"
    );

    // Engineering: only the addressed agent answers; the other skips without a trace.
    let posted: Value = dev
        .post(
            &http,
            &husam,
            "engineering",
            &json!({"text": "oncall, is prod up?"}),
        )
        .await
        .json()
        .await
        .unwrap();
    let mut delivered: Vec<String> = serde_json::from_value(posted["delivered"].clone()).unwrap();
    delivered.sort();
    assert_eq!(delivered, ["oncall", "reviewer"]);
    let start = Instant::now();
    let metrics = loop {
        let m = dev.metrics(&http).await;
        // The reviewer skips the question and oncall's answer (in one batch or two).
        if cycles(&m, "reviewer", "skipped") >= 1 && cycles(&m, "oncall", "completed") == 1 {
            break m;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "cycles not seen: {m}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(metrics.contains("agentfleet_gateway_requests_total"));
    let page: Value = http
        .get(format!(
            "{}/v1/spaces/default/engineering/messages",
            dev.url
        ))
        .bearer_auth(&husam)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let senders: Vec<&str> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["sender"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        senders,
        ["oncall", "husam"],
        "newest first; the reviewer said nothing"
    );

    // A mention makes the mentioned agent answer, though the text does not name it; the
    // other agent skips.
    let posted: Value = dev
        .post(
            &http,
            &husam,
            "engineering",
            &json!({"text": "please look at PR 12", "mention": "reviewer"}),
        )
        .await
        .json()
        .await
        .unwrap();
    let reply = wait_for_message(&http, &dev, &husam, "engineering", |m| {
        m["sender"]["id"] == "reviewer"
    })
    .await;
    assert_eq!(reply["text"], "Husam, you said: \"please look at PR 12\"");
    assert!(reply["id"].as_str() > posted["id"].as_str());

    // The banner's webhook example works as printed (a real agent, answering in its space);
    // a human's token may not trigger agents.
    assert!(
        dev.webhook.ends_with("/v1/agents/default/reviewer/events"),
        "{}",
        dev.webhook
    );
    let trigger = |token: String| {
        http.post(&dev.webhook)
            .bearer_auth(token)
            .json(&json!({"text": "deploy finished"}))
            .send()
    };
    assert_eq!(trigger(husam.clone()).await.unwrap().status(), 403);
    assert_eq!(trigger(dev.service.clone()).await.unwrap().status(), 202);
    let announced = wait_for_message(&http, &dev, &husam, "engineering", |m| {
        m["text"] == "dev reports: deploy finished"
    })
    .await;
    assert_eq!(announced["sender"]["id"], "reviewer");
}

/// Waits up to 20 s for a message of `space` (as `token`) that `matches`.
async fn wait_for_message(
    http: &reqwest::Client,
    dev: &Dev,
    token: &str,
    space: &str,
    matches: impl Fn(&Value) -> bool,
) -> Value {
    let start = Instant::now();
    loop {
        let page: Value = dev.messages(http, token, space).await;
        if let Some(m) = page["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| matches(m))
        {
            return m.clone();
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no matching message in {space}: {page}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn chat_types_as_a_human_and_shows_history() {
    let dev = Dev::start();
    let muhammad = dev.token("default/family", "Muhammad");
    let chat = |lines_until: &[(&str, &str)]| {
        let mut child = Command::new(bin())
            .args([
                "chat",
                "default/family",
                "--gateway",
                &dev.url,
                "--token",
                &muhammad,
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let rx = lines(child.stdout.take().unwrap());
        let mut out = Vec::new();
        let mut stdin = child.stdin.take().unwrap();
        let until_header = |out: &mut Vec<String>, want: &str| loop {
            let line = rx
                .recv_timeout(Duration::from_secs(20))
                .unwrap_or_else(|_| panic!("no {want:?} within 20s; saw {out:?}"));
            let hit = line.contains(want);
            out.push(line);
            if hit {
                break;
            }
        };
        until_header(&mut out, "Ctrl-D leaves");
        for (say, expect) in lines_until {
            if !say.is_empty() {
                writeln!(stdin, "{say}").unwrap();
            }
            until_header(&mut out, expect);
        }
        drop(stdin); // Ctrl-D
        let status = child.wait().unwrap();
        assert!(status.success(), "chat exits cleanly on end of input");
        while let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
            out.push(l);
        }
        out
    };

    let out = chat(&[
        (
            "remember that the plumber comes at 9",
            "assistant: Noted, Muhammad: I will remember that the plumber comes at 9.",
        ),
        (
            "what do you remember?",
            "assistant: Muhammad, I remember: the plumber comes at 9.",
        ),
    ]);
    assert!(
        out[0].starts_with("Family (default/family) — assistant (agent), Husam, Muhammad"),
        "{out:?}"
    );
    assert!(
        out.iter().any(|l| l == "· assistant is thinking…"),
        "{out:?}"
    );
    assert!(
        out.iter()
            .any(|l| l == "· assistant is using set_memories…"),
        "{out:?}"
    );
    assert!(
        out.iter()
            .any(|l| l == "Muhammad: remember that the plumber comes at 9"),
        "{out:?}"
    );

    // A second session starts with the history.
    let out = chat(&[(
        "",
        "assistant: Muhammad, I remember: the plumber comes at 9.",
    )]);
    let history: Vec<&String> = out
        .iter()
        .skip(2)
        .filter(|l| !l.is_empty())
        .take(4)
        .collect();
    assert_eq!(
        history,
        [
            "Muhammad: remember that the plumber comes at 9",
            "assistant: Noted, Muhammad: I will remember that the plumber comes at 9.",
            "Muhammad: what do you remember?",
            "assistant: Muhammad, I remember: the plumber comes at 9.",
        ],
        "{out:?}"
    );

    // A wrong token is a clear error, not a hang.
    let o = Command::new(bin())
        .args([
            "chat",
            "default/family",
            "--gateway",
            &dev.url,
            "--token",
            "nope",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("unauthenticated (401)"), "{err}");
    assert!(!err.contains("nope"), "the token is not echoed: {err}");
}

#[test]
fn dev_stops_cleanly_on_sigterm() {
    let mut dev = Dev::start();
    let pid = dev.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let start = Instant::now();
    loop {
        if let Some(status) = dev.child.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "dev did not stop"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends `signal` (`INT`, `TERM`) to a child.
fn kill(child: &Child, signal: &str) {
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args([&format!("-{signal}"), &pid])
        .status()
        .unwrap()
        .success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_ctrl_c_stops_dev_at_once_during_a_cycle() {
    use agentfleet::testing::{MockModel, MockTurn};
    agentfleet::install_crypto_provider();
    // A model that takes the request and does not answer for minutes.
    let model = MockModel::start(vec![MockTurn::Slow(
        Duration::from_secs(600),
        Box::new(MockTurn::text("too late")),
    )])
    .await
    .unwrap();
    let dir = ManifestDir::new("force", "home", &[("slow", openai(&model.base_url))]);
    let mut dev = Dev::start_in(dir.path(), &[]);
    let posted = reqwest::Client::new()
        .post(format!("{}/v1/spaces/default/home/messages", dev.url))
        .bearer_auth(dev.token("default/home", "Husam"))
        .json(&json!({"text": "are you there?"}))
        .send()
        .await
        .unwrap();
    assert_eq!(posted.status(), 201);
    let start = Instant::now();
    while model.request_count() == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no cycle started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The first Ctrl-C waits for the cycle under way.
    kill(&dev.child, "INT");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        dev.child.try_wait().unwrap().is_none(),
        "still finishing its cycle"
    );
    // The second does not.
    kill(&dev.child, "INT");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = dev.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "dev still runs after a second Ctrl-C"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(status.code(), Some(130), "{status}");
    let logs: Vec<String> = dev.stderr.iter().collect();
    let forced: Vec<&String> = logs.iter().filter(|l| l.contains("forced")).collect();
    assert_eq!(forced.len(), 1, "one line says it was forced: {logs:?}");
}

#[tokio::test]
async fn dev_runs_on_redis_with_the_redis_flag() {
    let redis = agentfleet::testing::RedisServer::start().unwrap();
    dev_answers_over(&redis.url(), &redis.url(), "hello from redis").await;
}

/// `dev --redis` on a real Redis Cluster (three primaries, three replicas), given one node's
/// URL: before, it exited at once with `Moved: 14652 127.0.0.1:7103` (issue 18). The reply is
/// read back through the seed list.
#[tokio::test]
async fn dev_runs_on_a_redis_cluster() {
    let cluster = agentfleet::testing::RedisCluster::start().unwrap();
    dev_answers_over(&cluster.url(), &cluster.seeds(), "hello from a cluster").await;
}

/// `dev --redis URL`, a post to family, and the assistant's reply read from the data plane by
/// another process (here: a store on `read_url`).
async fn dev_answers_over(url: &str, read_url: &str, text: &str) {
    agentfleet::install_crypto_provider();
    let dev = Dev::start_with(&["--redis", url]);
    let http = reqwest::Client::new();
    let husam = dev.token("default/family", "Husam");
    let post = dev
        .post(&http, &husam, "family", &json!({ "text": text }))
        .await;
    assert_eq!(post.status(), 201);
    let store = agentfleet::store::RedisStore::new(read_url).unwrap();
    let family = agentfleet::identity::SpaceKey::new("default", "family");
    let start = Instant::now();
    loop {
        use agentfleet::store::prelude::*;
        let q = agentfleet::store::ReadQuery {
            limit: 10,
            ..Default::default()
        };
        let messages = store.read_messages(&family, &q).await.unwrap();
        if let Some(reply) = messages.iter().find(|m| m.sender.id == "assistant") {
            assert!(reply.text.contains(text), "{reply:?}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no reply in Redis"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn plans_fire_in_dev_and_the_agent_acts_on_them() {
    agentfleet::install_crypto_provider();
    let at = k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_secs(3);
    let dir = ManifestDir::new(
        "plans",
        "home",
        &[(
            "butler",
            format!(
                "  model: {{provider: scripted, name: butler}}
  plans:
  - name: tea
    at: {at}
    instruction: Remind Husam to drink some tea.
  - name: daily
    schedule: '0 6 * * *'
    instruction: Good morning."
            ),
        )],
    );
    let dev = Dev::start_in(dir.path(), &[]);
    let http = reqwest::Client::new();
    let husam = dev.token("default/home", "Husam");
    let start = Instant::now();
    let from_butler = || async {
        let page: serde_json::Value = dev.messages(&http, &husam, "home").await;
        page["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["sender"]["id"] == "butler")
            .cloned()
            .collect::<Vec<_>>()
    };
    let reply = loop {
        if let Some(m) = from_butler().await.into_iter().next() {
            break m;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the plan never fired"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let text = reply["text"].as_str().unwrap();
    assert!(
        text.contains("plan tea") && text.contains("drink some tea"),
        "{text}"
    );
    assert!(
        reply["timeMs"].as_i64().unwrap() >= at.as_millisecond(),
        "fired at its time, not before: {reply}"
    );
    // Once: no second announcement.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(from_butler().await.len(), 1);
}

/// The value of the series `series` (name and labels, as `/metrics` writes them) in `metrics`.
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.trim().parse().unwrap())
}

/// Seen as a new user: what `dev` shows of an agent that answers must be true. Before, every
/// agent was `Pending` in `agentfleet_agents` (dev's pool holds no lease between sessions and
/// the gauge took no worker as available), `agentfleet_plans_fired_total` stayed 0 while plans
/// fired, and the agent's "over its life" tokens (committed cycles, billed input and output)
/// were fewer than "today" (every call, cache reads too).
#[tokio::test]
async fn what_dev_shows_of_an_agent_that_answers_is_true() {
    agentfleet::install_crypto_provider();
    let model = agentfleet::testing::MockModel::responding(|req| {
        use agentfleet::testing::MockTurn;
        let conversation = agentfleet::testing::conversation(req);
        let last = conversation.last().cloned().unwrap_or_default();
        if last["role"] == "tool" {
            return MockTurn::text("done");
        }
        // The plan's cycle is skipped: rolled back, its tokens spent all the same.
        if last["content"].as_str().is_some_and(|t| t.contains("tea")) {
            return MockTurn::tools(&[("skip", json!({"reason": "not now"}))]);
        }
        MockTurn::tools(&[("send_message", json!({"text": "At your service."}))])
    })
    .await
    .unwrap();
    // Of every call's 100 prompt tokens, 60 read from the provider's cache.
    model.report_cached_tokens(60);
    let at = k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_secs(2);
    let spec = format!(
        "{}\n  plans:\n  - name: tea\n    at: {at}\n    instruction: Remind Husam to drink some tea.",
        openai(&model.base_url)
    );
    let dir = ManifestDir::new("shown", "home", &[("butler", spec)]);
    let dev = Dev::start_in(dir.path(), &[]);
    let http = reqwest::Client::new();
    let husam = dev.token("default/home", "Husam");
    let posted = dev
        .post(&http, &husam, "home", &json!({"text": "Hello?"}))
        .await;
    assert_eq!(posted.status(), 201);
    wait_for_message(&http, &dev, &husam, "home", |m| {
        m["sender"]["id"] == "butler"
    })
    .await;

    let mut wrong = Vec::new();
    let start = Instant::now();
    let (mut fired, mut sleeping, mut pending) = (None, None, None);
    while start.elapsed() < Duration::from_secs(20) {
        let metrics = dev.metrics(&http).await;
        fired = sample(&metrics, "agentfleet_plans_fired_total{source=\"spec\"}");
        sleeping = sample(&metrics, "agentfleet_agents{phase=\"Sleeping\"}");
        pending = sample(&metrics, "agentfleet_agents{phase=\"Pending\"}");
        if fired == Some(1.0) && sleeping == Some(1.0) && pending.unwrap_or(0.0) == 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if fired != Some(1.0) {
        wrong.push(format!(
            "the plan fired, but agentfleet_plans_fired_total{{source=\"spec\"}} is {fired:?}"
        ));
    }
    if sleeping != Some(1.0) || pending.unwrap_or(0.0) != 0.0 {
        wrong.push(format!(
            "the agent answers in a running pool, but agentfleet_agents says Sleeping {sleeping:?}, Pending {pending:?}"
        ));
    }
    // The message's cycle committed, the plan's skipped (its one call made): the tokens as the
    // console shows them.
    let start = Instant::now();
    while model.request_count() < 3 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the plan's cycle never ran"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let agent = dev.get(&http, &husam, "/v1/agents/default/butler").await;
    assert_eq!(agent["cycles"], 1, "{agent}");
    let [today, month, life] =
        ["tokensToday", "tokensThisMonth", "tokensUsed"].map(|f| agent[f].as_u64().unwrap());
    assert!(today > 0, "{agent}");
    if !(life >= month && month >= today) {
        wrong.push(format!(
            "over its life {life} tokens, this month {month}, today {today}"
        ));
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Two agents on a real model that always answers by addressing the other: before the loop
/// guard they talked forever; now the chain stops at the space's `maxDepth` with a notice.
#[tokio::test]
async fn agents_answering_each_other_stop_at_the_loop_guard() {
    agentfleet::install_crypto_provider();
    let model = agentfleet::testing::MockModel::responding(|req| {
        use agentfleet::testing::MockTurn;
        let system = req["messages"][0]["content"].as_str().unwrap_or("");
        let me = if system.starts_with("You are ping,") {
            "ping"
        } else {
            "pong"
        };
        let other = if me == "ping" { "pong" } else { "ping" };
        // The last message of the conversation; the fresh context after it (with any preview
        // of what arrived mid-cycle) is not a request.
        let conversation = agentfleet::testing::conversation(req);
        let last = conversation.last().unwrap();
        if last["role"] != "user" {
            return MockTurn::text("done");
        }
        let inbox = last["content"].as_str().unwrap_or("");
        let addressed =
            inbox.contains(&format!("(to {me})")) || (me == "ping" && inbox.contains("Husam:"));
        if !addressed {
            return MockTurn::tools(&[("skip", json!({}))]);
        }
        MockTurn::tools(&[(
            "send_message",
            json!({"text": format!("hi {other}"), "mention": other}),
        )])
    })
    .await
    .unwrap();
    let dir = ManifestDir::new(
        "loop",
        "loop",
        &[
            ("ping", openai(&model.base_url)),
            ("pong", openai(&model.base_url)),
        ],
    );
    let dev = Dev::start_in(dir.path(), &[]);
    let http = reqwest::Client::new();
    let husam = dev.token("default/loop", "Husam");
    let posted = dev
        .post(
            &http,
            &husam,
            "loop",
            &json!({"text": "ping, say hi to pong"}),
        )
        .await;
    assert_eq!(posted.status(), 201);
    let notice = wait_for_message(&http, &dev, &husam, "loop", |m| {
        m["sender"]["id"] == "agentfleet"
    })
    .await;
    assert!(
        notice["text"]
            .as_str()
            .unwrap()
            .contains("agent message 9 in a row"),
        "{notice}"
    );
    // Quiet afterwards: nothing more is posted.
    let count = || async {
        let page: Value = http
            .get(format!(
                "{}/v1/spaces/default/loop/messages?limit=100",
                dev.url
            ))
            .bearer_auth(&husam)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        page["messages"].as_array().unwrap().len()
    };
    let settled = count().await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(count().await, settled, "the agents kept talking");
    // Husam, 9 agent messages (depth 1..9; the 9th is held), the notice.
    assert_eq!(settled, 11);
    let metrics = dev.metrics(&http).await;
    assert!(
        metrics.contains(
            "agentfleet_loop_guard_total{namespace=\"default\",reason=\"depth\",space=\"loop\"} 1"
        ),
        "{metrics}"
    );
}

/// kill -9 of Redis, then a restart on the same port: the agents wait it out, `/readyz` says
/// they cannot work meanwhile, and afterwards they answer again (each message once). Before,
/// every agent stopped for good at the first broken pipe while `/readyz` said ok.
#[tokio::test]
async fn agents_ride_out_a_redis_restart() {
    agentfleet::install_crypto_provider();
    let mut redis = agentfleet::testing::RedisServer::start_persistent().unwrap();
    let dev = Dev::start_with(&["--redis", &redis.url()]);
    let http = reqwest::Client::new();
    let husam = dev.token("default/family", "Husam");
    let readyz = || async {
        http.get(format!("{}/readyz", dev.url))
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0)
    };
    let until = |what: &'static str, secs: u64| {
        let deadline = Instant::now() + Duration::from_secs(secs);
        move || assert!(Instant::now() < deadline, "{what} within {secs}s")
    };
    let check = until("ready", 20);
    while readyz().await != 200 {
        check();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let post = |text: &'static str| {
        http.post(format!("{}/v1/spaces/default/family/messages", dev.url))
            .bearer_auth(&husam)
            .json(&json!({ "text": text }))
            .send()
    };
    assert_eq!(post("before the outage").await.unwrap().status(), 201);
    wait_for_message(&http, &dev, &husam, "family", |m| {
        m["sender"]["id"] == "assistant"
            && m["text"].as_str().unwrap().contains("before the outage")
    })
    .await;

    redis.kill();
    let check = until("/readyz to say not ready", 20);
    while readyz().await == 200 {
        check();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The agents find the inbox gone while Redis is down (a few seconds of it).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let body = http
        .get(format!("{}/readyz", dev.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(body.contains("data plane"), "{body}");
    redis.restart().unwrap();

    let check = until("ready again", 40);
    while readyz().await != 200 {
        check();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(post("after the outage").await.unwrap().status(), 201);
    wait_for_message(&http, &dev, &husam, "family", |m| {
        m["sender"]["id"] == "assistant" && m["text"].as_str().unwrap().contains("after the outage")
    })
    .await;
    // Each message answered once.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let replies = dev.count_from(&http, &husam, "family", "assistant").await;
    assert_eq!(replies, 2);
    let metrics = dev.metrics(&http).await;
    assert!(
        metrics.contains("agentfleet_agent_ready{agent=\"assistant\",namespace=\"default\"} 1"),
        "{metrics}"
    );
}

/// A model server that refuses the key and echoes it back (as some do): the key must show up
/// nowhere — not in logs, the space, live events, consciousness, the model health the
/// operator reads, metrics, nor in what is sent to the model afterwards — while the failure
/// itself is shown in the space, counted, and recorded for the `ModelAvailable` condition.
#[tokio::test]
async fn a_model_that_echoes_the_key_leaks_it_nowhere_and_the_failure_is_shown() {
    use agentfleet::store::prelude::*;
    agentfleet::install_crypto_provider();
    const KEY: &str = "sk-SECRET123-agentfleet";
    let bodies = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let recorded = bodies.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: String| {
            let recorded = recorded.clone();
            async move {
                recorded.lock().unwrap().push(body);
                let auth = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                (
                    axum::http::StatusCode::UNAUTHORIZED,
                    axum::Json(json!({"error": {"message": format!("Incorrect API key provided: {auth} ({})", auth.trim_start_matches("Bearer "))}})),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let model_url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let redis = agentfleet::testing::RedisServer::start().unwrap();
    let dir = ManifestDir::new("key", "family", &[("assistant", openai(&model_url))]);
    let dev = Dev::start_env(
        dir.path(),
        &["--redis", &redis.url()],
        &[("AGENTFLEET_MODEL_API_KEY", KEY)],
    );
    let http = reqwest::Client::new();
    let husam = dev.token("default/family", "Husam");
    let resp = dev.stream(&http, &husam, "family").await;
    let mut body = resp.bytes_stream();
    let posted = dev
        .post(&http, &husam, "family", &json!({"text": "hello?"}))
        .await;
    assert_eq!(posted.status(), 201);

    // The space sees each failure and what happens next, until the agent gives up.
    let mut parser = SseParser::default();
    let mut errors = Vec::new();
    let mut raw = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !errors.iter().any(|d: &String| d.contains("gave up")) {
        let chunk = tokio::time::timeout_at(deadline, body.next())
            .await
            .unwrap_or_else(|_| {
                panic!("no error activity saying it gave up within 30s: {errors:?}")
            })
            .unwrap()
            .unwrap();
        raw.push_str(&String::from_utf8_lossy(&chunk));
        for e in parser.feed(&chunk) {
            let v: Value = serde_json::from_str(&e.data).unwrap();
            if e.event == "activity" && v["activity"] == "error" {
                errors.push(v["detail"].as_str().unwrap().to_string());
            }
        }
    }
    assert!(
        errors[0].starts_with("the model refused the credentials: ")
            && errors[0].contains("answered 401 Unauthorized")
            && errors[0].ends_with("retrying in 1s"),
        "{errors:?}"
    );
    assert!(
        errors[0].contains("Incorrect API key provided: Bearer ***"),
        "{errors:?}"
    );

    // The failure is remembered (so the agent knows next cycle), and the model health is
    // recorded for the operator.
    let store = agentfleet::store::RedisStore::new(&redis.url()).unwrap();
    let agent = agentfleet::identity::AgentKey::new("default", "assistant");
    let check = Instant::now();
    let c = loop {
        let c = store.consciousness(&agent).await.unwrap();
        if c.cycle == 1 {
            break c;
        }
        assert!(
            check.elapsed() < Duration::from_secs(10),
            "the refusal was committed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let seen = store.observe(std::slice::from_ref(&agent)).await.unwrap();
    let model = seen[0].model.clone().expect("model health recorded");
    assert_eq!(
        (model.available, model.reason.as_str()),
        (false, "Unauthorized")
    );

    // Another message: the consciousness (with the failure in it) goes back to the model.
    dev.post(&http, &husam, "family", &json!({"text": "still there?"}))
        .await;
    let check = Instant::now();
    while bodies.lock().unwrap().len() < 4 {
        assert!(
            check.elapsed() < Duration::from_secs(20),
            "a fourth model call"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let metrics = dev.metrics(&http).await;
    // Counted (every reason's series starts at 0, so it must be more than there).
    let unauthorized = metrics
        .lines()
        .find_map(|l| l.strip_prefix("agentfleet_model_errors_total{agent=\"assistant\",namespace=\"default\",reason=\"unauthorized\"} "))
        .and_then(|v| v.trim().parse::<u64>().ok());
    assert!(unauthorized.is_some_and(|n| n >= 1), "{metrics}");

    let mut everywhere = vec![("the live events", raw), ("the metrics", metrics)];
    everywhere.push(("consciousness", c.messages.join("\n")));
    everywhere.push(("the model health", format!("{model:?}")));
    let log = store
        .read_messages(
            &agentfleet::identity::SpaceKey::new("default", "family"),
            &agentfleet::store::ReadQuery {
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    everywhere.push(("the space", format!("{log:?}")));
    everywhere.push(("what the model was sent", bodies.lock().unwrap().join("\n")));
    tokio::time::sleep(Duration::from_millis(300)).await;
    everywhere.push((
        "the logs",
        dev.stderr.try_iter().collect::<Vec<_>>().join("\n"),
    ));
    for (what, text) in &everywhere {
        assert!(!text.contains(KEY), "the key is in {what}: {text}");
    }
    let logs = &everywhere.last().unwrap().1;
    assert!(logs.contains("cycle failed"), "{logs}");
    assert!(
        !logs.contains('\u{1b}'),
        "colour codes in a log that is not a terminal: {logs}"
    );
    assert!(
        everywhere[2].1.contains("This cycle failed"),
        "the failure is in consciousness: {}",
        everywhere[2].1
    );
}

/// Quick posts while the assistant thinks: the mid-cycle preview tells it what waits, but
/// each message is answered once (the scripted model answered a preview again and again).
#[tokio::test]
async fn quick_messages_are_each_answered_once() {
    agentfleet::install_crypto_provider();
    let dev = Dev::start();
    let http = reqwest::Client::new();
    let husam = dev.token("default/family", "Husam");
    // All at once, so that most arrive while the first cycle runs.
    let posts = (1..=6).map(|i| {
        http.post(format!("{}/v1/spaces/default/family/messages", dev.url))
            .bearer_auth(&husam)
            .json(&json!({ "text": format!("quick message {i}") }))
            .send()
    });
    for r in futures::future::join_all(posts).await {
        assert_eq!(r.unwrap().status(), 201);
    }
    wait_for_message(&http, &dev, &husam, "family", |m| {
        m["sender"]["id"] == "assistant" && m["text"].as_str().unwrap().contains("quick message 6")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let page: Value = http
        .get(format!(
            "{}/v1/spaces/default/family/messages?limit=100",
            dev.url
        ))
        .bearer_auth(&husam)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for i in 1..=6 {
        let quoted = format!("\"quick message {i}\"");
        let answers = page["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| {
                m["sender"]["id"] == "assistant" && m["text"].as_str().unwrap().contains(&quoted)
            })
            .count();
        assert_eq!(answers, 1, "quick message {i}: {page}");
    }
}

/// Runs `agentfleet dev` on `dir` (plus `extra`) and returns its exit status, stdout and
/// stderr, killing it if it is still running after 20s (a `dev` that starts).
fn dev_exit(dir: &std::path::Path, extra: &[&str]) -> (std::process::ExitStatus, String, String) {
    use std::io::Read;
    let mut child = Command::new(bin())
        .arg("dev")
        .arg(dir)
        .args(["--addr", "127.0.0.1:0"])
        .args(extra)
        .env_remove("AGENTFLEET_REDIS_URL")
        .env_remove("AGENTFLEET_MODEL_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = support::exit_within(&mut child, Duration::from_secs(20))
        .unwrap_or_else(|| child.wait().unwrap());
    let (mut out, mut err) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status, out, err)
}

#[test]
fn dev_refuses_what_kubectl_apply_would_refuse_and_prints_no_banner() {
    let dir = std::env::temp_dir().join(format!("agentfleet-dev-names-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let space = "apiVersion: agentfleet.dev/v1alpha1\nkind: Space\nmetadata: {name: lobby}\nspec: {members: [{id: ann, name: Ann}]}\n";
    let agent = |name: &str, model: &str| {
        format!("apiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {{name: \"{name}\"}}\nspec:\n  model: {model}\n  spaces: [lobby]\n")
    };
    let scripted = agent("fine", "{provider: scripted, name: x}");
    // Issue 26: what the build before accepted and a cluster refuses, or should.
    let host_placeholder = format!(
        "{scripted}  tools:\n    http: [{{name: fetch, description: d, url: \"http://{{region}}:19102/x\", inputSchema: {{type: object, properties: {{region: {{type: string}}}}}}}}]\n"
    );
    let many_spaces = scripted.replace(
        "spaces: [lobby]",
        &format!(
            "spaces: [{}]",
            (0..101)
                .map(|i| format!("s{i}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    let huge = format!("{scripted}  instructions: \"{}\"\n", "x".repeat(300_000));
    for (files, extra, want) in [
        (
            vec![host_placeholder],
            &[][..],
            "Agent fine: tools.http[0].url (fetch): placeholder {region} is in the scheme, host or port",
        ),
        (
            vec![many_spaces],
            &[][..],
            "spec.spaces: must have at most 100 items",
        ),
        (
            vec![huge],
            &[][..],
            "spec.instructions: may not be more than 262144 characters",
        ),
        (
            vec![agent("Bad_Name!", "{provider: scripted, name: x}")],
            &[][..],
            "\"Bad_Name!\" is not a valid name",
        ),
        (
            vec![agent("fine", "{provider: scripted, name: x}")],
            &["--namespace", "NS/evil"][..],
            "\"NS/evil\" is not a valid namespace",
        ),
        (
            vec![agent("fine", "{provider: openai, name: gpt-4o-mini}")],
            &[][..],
            "AGENTFLEET_MODEL_API_KEY",
        ),
        (
            vec![agent("fine", "{provider: anthropic, name: claude}")],
            &[][..],
            "AGENTFLEET_MODEL_API_KEY",
        ),
    ] {
        for f in std::fs::read_dir(&dir).unwrap() {
            std::fs::remove_file(f.unwrap().path()).unwrap();
        }
        std::fs::write(dir.join("space.yaml"), space).unwrap();
        for (i, text) in files.iter().enumerate() {
            std::fs::write(dir.join(format!("agent{i}.yaml")), text).unwrap();
        }
        let (status, out, err) = dev_exit(&dir, extra);
        assert!(!status.success(), "{want}: {status}\n{out}\n{err}");
        assert!(err.contains(want), "{want}: {err}");
        assert!(
            !out.contains("agentfleet chat") && !out.contains("gateway"),
            "{want}: a banner was printed: {out}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn dev_gives_the_tools_the_directorys_secrets_never_prints_them_and_refuses_a_missing_one() {
    agentfleet::install_crypto_provider();
    let value = "Bearer dev-s3cr3t-4242";
    let tools = "  model: {provider: scripted, name: sre}\n  tools:\n    http:\n    - {name: prometheus_query, description: PromQL, method: GET, url: \"http://127.0.0.1:9/api/v1/query?query={query}\", inputSchema: {type: object, properties: {query: {type: string}}}, headersFrom: {secretName: prom-auth}}\n    mcp:\n    - {name: tracker, url: \"http://127.0.0.1:9/mcp\", headersFrom: {secretName: prom-auth}}";
    let dir = ManifestDir::new("secrets", "ops", &[("sre", tools.to_string())]);
    // data (base64 of the value) and stringData, as kubectl takes them.
    std::fs::write(
        dir.0.join("secret.yaml"),
        "apiVersion: v1\nkind: Secret\nmetadata: {name: prom-auth}\ndata: {Authorization: QmVhcmVyIGRldi1zM2NyM3QtNDI0Mg==}\nstringData: {X-Org: org-s3cr3t-77}\n",
    )
    .unwrap();
    {
        // Unreachable tool servers do not stop dev: the agent starts and answers.
        let mut dev = Dev::start_env(dir.path(), &[], &[("RUST_LOG", "debug")]);
        let http = reqwest::Client::new();
        let husam = dev.token("default/ops", "Husam");
        dev.post(&http, &husam, "ops", &json!({"text": "is the api up?"}))
            .await;
        let reply = wait_for_message(&http, &dev, &husam, "ops", |m| {
            m["sender"]["kind"] == "agent"
        })
        .await;
        assert_eq!(reply["sender"]["id"], "sre");
        // The cycle's lines may come just after its reply: read until one has (at most 10 s).
        let mut logs: Vec<String> = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !logs
            .iter()
            .any(|l| l.contains("cycle{namespace=default agent=sre"))
        {
            match dev
                .stderr
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(line) => logs.push(line),
                Err(_) => break,
            }
        }
        let _ = dev.child.kill();
        let _ = dev.child.wait();
        logs.extend(dev.stderr.iter());
        let logs = logs.join("\n");
        assert!(!logs.is_empty(), "debug logs were captured");
        assert!(
            !logs.contains('\x1b'),
            "no colour codes off a terminal:\n{logs}"
        );
        assert!(
            logs.contains("cycle{namespace=default agent=sre"),
            "a cycle's lines say whose: {logs}"
        );
        for secret in [
            value,
            "dev-s3cr3t",
            "org-s3cr3t",
            "QmVhcmVyIGRldi1zM2NyM3Qt",
        ] {
            assert!(!logs.contains(secret), "{secret} in the logs:\n{logs}");
            assert!(!reply.to_string().contains(secret));
        }
    }

    // Without the Secret: refused before anything starts, as the operator's ToolsConfigured.
    std::fs::remove_file(dir.0.join("secret.yaml")).unwrap();
    let (status, out, err) = dev_exit(&dir.0, &[]);
    assert!(!status.success(), "{out}\n{err}");
    assert!(
        err.contains("Agent sre: Secret prom-auth not found (headersFrom of HTTP tool prometheus_query, MCP server tracker)"),
        "{err}"
    );
    assert!(!out.contains("agentfleet chat"), "no banner: {out}");
}

/// The seeds' "Interactive Tool Pause" end to end in `agentfleet dev`: the agent calls
/// `confirm_deployment`, the request shows in the space naming the call, the cycle pauses;
/// Husam answers through the gateway (a wrong answer is refused by the tool's schema, a second
/// answer is a conflict), and the same cycle resumes with his answer as the tool's result.
#[tokio::test]
async fn an_interactive_tool_pauses_the_cycle_until_a_human_answers() {
    agentfleet::install_crypto_provider();
    let model = agentfleet::testing::MockModel::responding(|req| {
        use agentfleet::testing::MockTurn;
        let conversation = agentfleet::testing::conversation(req);
        let last = conversation.last().unwrap();
        if last["role"] == "tool" {
            let answer = last["content"].as_str().unwrap_or_default().to_string();
            if !answer.contains("confirmed") {
                return MockTurn::text("done");
            }
            return MockTurn::tools(&[(
                "send_message",
                json!({"text": format!("Deploying, as you said: {answer}")}),
            )]);
        }
        if last["role"] == "user" {
            return MockTurn::tools(&[("confirm_deployment", json!({"version": "1.2"}))]);
        }
        MockTurn::text("done")
    })
    .await
    .unwrap();
    let spec = format!(
        "{}\n  tools:\n    interactive:\n    - name: confirm_deployment\n      description: Ask a human to confirm a deployment.\n      inputSchema: {{type: object, properties: {{version: {{type: string}}}}}}\n      resultSchema: {{type: object, properties: {{confirmed: {{type: boolean}}}}, required: [confirmed]}}",
        openai(&model.base_url)
    );
    let dir = ManifestDir::new("interactive", "deploys", &[("deployer", spec)]);
    let dev = Dev::start_in(dir.path(), &[]);
    let http = reqwest::Client::new();
    let husam = dev.token("default/deploys", "Husam");
    let resp = dev.stream(&http, &husam, "deploys").await;
    let mut stream = SseReader::new(resp);
    let posted = dev
        .post(
            &http,
            &husam,
            "deploys",
            &json!({"text": "ship 1.2 please"}),
        )
        .await;
    assert_eq!(posted.status(), 201);
    // Clients render the request from its own SSE event…
    let event = stream
        .next("tool_request", Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(event["sender"]["id"], "deployer");
    assert_eq!(event["tool"], "confirm_deployment");
    assert_eq!(event["kind"], "interactive");
    assert_eq!(event["arguments"], json!({"version": "1.2"}));
    assert_eq!(event["resultSchema"]["required"], json!(["confirmed"]));
    assert!(event["expiresMs"].as_i64().unwrap() > event["sinceMs"].as_i64().unwrap());
    let call = event["callId"].as_str().unwrap().to_string();
    // …and the space's log has it as a message from the agent, for whoever was not listening.
    let request = wait_for_message(&http, &dev, &husam, "deploys", |m| {
        m["text"]
            .as_str()
            .is_some_and(|t| t.contains("asks: confirm_deployment"))
    })
    .await;
    assert!(
        request["text"].as_str().unwrap().contains(&call),
        "{request}"
    );
    let answer = |body: Value| {
        http.post(format!(
            "{}/v1/spaces/default/deploys/tool-calls/{call}",
            dev.url
        ))
        .bearer_auth(&husam)
        .json(&body)
        .send()
    };
    let wrong = answer(json!({"result": {"confirmed": "yes"}}))
        .await
        .unwrap();
    assert_eq!(wrong.status(), 400, "the tool's resultSchema");
    let right = answer(json!({"result": {"confirmed": true}}))
        .await
        .unwrap();
    assert!(right.status().is_success(), "{}", right.status());
    let again = answer(json!({"result": {"confirmed": false}}))
        .await
        .unwrap();
    assert_eq!(again.status(), 409);
    let reply = wait_for_message(&http, &dev, &husam, "deploys", |m| {
        m["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("Deploying, as you said"))
    })
    .await;
    assert!(
        reply["text"]
            .as_str()
            .unwrap()
            .contains("\"confirmed\":true"),
        "{reply}"
    );
}

/// The README's walkthrough of asking before acting, on the samples as they ship: the sample
/// SRE (scripted model, no key) asks the ops space to confirm a deployment and says what the
/// answer was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sample_sre_asks_before_it_deploys() {
    agentfleet::install_crypto_provider();
    let dev = Dev::start();
    let http = reqwest::Client::new();
    let husam = dev.token("default/ops", "Husam");
    let resp = dev.stream(&http, &husam, "ops").await;
    let mut stream = SseReader::new(resp);
    let posted = dev
        .post(&http, &husam, "ops", &json!({"text": "deploy api 1.2"}))
        .await;
    assert_eq!(posted.status(), 201);
    let request = stream
        .next("tool_request", Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(request["sender"]["id"], "sre");
    assert_eq!(request["tool"], "confirm_deployment");
    assert_eq!(
        request["arguments"],
        json!({"service": "api", "version": "1.2"})
    );
    let call = request["callId"].as_str().unwrap();
    let answered = http
        .post(format!(
            "{}/v1/spaces/default/ops/tool-calls/{call}",
            dev.url
        ))
        .bearer_auth(&husam)
        .json(&json!({"result": {"confirmed": true}}))
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), 202);
    wait_for_message(&http, &dev, &husam, "ops", |m| {
        m["sender"]["id"] == "sre" && m["text"] == "Deploying api 1.2, as Husam confirmed."
    })
    .await;
    // The audit trail: who answered what, in the space's log.
    wait_for_message(&http, &dev, &husam, "ops", |m| {
        m["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("Husam answered confirm_deployment"))
    })
    .await;
}

/// Waits up to 20 s for `path` to be a file (an archived checkpoint).
async fn until_file(path: &std::path::Path) {
    let start = Instant::now();
    while !path.is_file() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "not archived at {}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn with_an_archive_dev_remembers_across_restarts() {
    agentfleet::install_crypto_provider();
    let dir = std::env::temp_dir().join(format!("agentfleet-dev-archive-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let archive = format!("file://{}", dir.display());
    let http = reqwest::Client::new();
    let object = dir.join("default/assistant/1");
    {
        let dev = Dev::start_with(&["--archive", &archive]);
        let muhammad = dev.token("default/family", "Muhammad");
        dev.post(
            &http,
            &muhammad,
            "family",
            &json!({"text": "remember that the plumber comes at 9"}),
        )
        .await;
        wait_for_message(&http, &dev, &muhammad, "family", |m| {
            m["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("Noted, Muhammad"))
        })
        .await;
        until_file(&object).await;
    } // dev is killed: its embedded store is gone
    let dev = Dev::start_with(&["--archive", &archive]);
    let muhammad = dev.token("default/family", "Muhammad");
    dev.post(
        &http,
        &muhammad,
        "family",
        &json!({"text": "what do you remember?"}),
    )
    .await;
    let answer = wait_for_message(&http, &dev, &muhammad, "family", |m| {
        m["text"].as_str().is_some_and(|t| t.contains("I remember"))
    })
    .await;
    assert_eq!(
        answer["text"], "Muhammad, I remember: the plumber comes at 9.",
        "recovered from {archive}"
    );
    until_file(&dir.join("default/assistant/2")).await; // the new cycle archived too
    drop(dev);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A model's message longer than its space takes is not posted: the model reads a tool error
/// that says by how much (so it can shorten it); and `read_messages` gives the model at most
/// 64 KiB of messages, with `before` to read on. Issue 41: before, a model's megabytes were
/// posted and read back whole.
#[tokio::test]
async fn a_models_long_message_is_a_tool_error_and_its_reads_are_bounded() {
    use agentfleet::testing::MockTurn;
    use std::sync::{Arc, Mutex};
    agentfleet::install_crypto_provider();
    let results = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = results.clone();
    let model = agentfleet::testing::MockModel::responding(move |req| {
        let conversation = agentfleet::testing::conversation(req);
        let last = conversation.last().unwrap();
        if last["role"] == "tool" {
            seen.lock()
                .unwrap()
                .push(last["content"].as_str().unwrap_or_default().to_string());
            return MockTurn::text("done");
        }
        let inbox = last["content"].as_str().unwrap_or("");
        if inbox.contains("write it all out") {
            MockTurn::tools(&[("send_message", json!({"text": "w".repeat(100 * 1024)}))])
        } else if inbox.contains("read it back") {
            MockTurn::tools(&[("read_messages", json!({"limit": 50}))])
        } else {
            MockTurn::tools(&[("skip", json!({}))])
        }
    })
    .await
    .unwrap();
    let dir = ManifestDir::new("long", "long", &[("scribe", openai(&model.base_url))]);
    let dev = Dev::start_in(dir.path(), &[]);
    let http = reqwest::Client::new();
    let husam = dev.token("default/long", "Husam");
    let result = |what: &'static str| {
        let results = results.clone();
        async move {
            let start = Instant::now();
            loop {
                if let Some(r) = results.lock().unwrap().iter().find(|r| r.contains(what)) {
                    return r.clone();
                }
                assert!(
                    start.elapsed() < Duration::from_secs(20),
                    "no tool result with {what:?}: {:?}",
                    results
                        .lock()
                        .unwrap()
                        .iter()
                        .map(|r| &r[..r.len().min(300)])
                        .collect::<Vec<_>>()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };

    let posted = dev
        .post(&http, &husam, "long", &json!({"text": "write it all out"}))
        .await;
    assert_eq!(posted.status(), 201);
    let refused = result("not sent").await;
    assert!(
        refused.contains("102400 bytes, more than the 65536 bytes"),
        "{refused}"
    );
    let page = dev.messages(&http, &husam, "long").await;
    assert!(
        page["messages"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["sender"]["id"] != "scribe"),
        "nothing of the model's was posted: {}",
        page.to_string().len()
    );

    // Three messages of 40 KiB, then a read: one page of at most 64 KiB, and where to go on.
    for i in 0..3 {
        let posted = dev
            .post(
                &http,
                &husam,
                "long",
                &json!({"text": format!("filler {i} {}", "f".repeat(40 * 1024))}),
            )
            .await;
        assert_eq!(posted.status(), 201);
    }
    dev.post(&http, &husam, "long", &json!({"text": "read it back"}))
        .await;
    let read: Value = serde_json::from_str(&result("\"messages\"").await).unwrap();
    let texts: Vec<&str> = read["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    let bytes: usize = texts.iter().map(|t| t.len()).sum();
    assert!(bytes <= 64 * 1024, "{bytes} bytes read at once");
    assert_eq!(
        texts.last(),
        Some(&"read it back"),
        "oldest first, the newest last"
    );
    assert!(
        read["before"].is_string(),
        "where to read on: {}",
        read["before"]
    );
}

/// A model that writes megabytes in one turn does not carry them through its cycle: the call
/// over what a step keeps is not made, its result says why, and the next request holds a note
/// of the arguments' size instead of them. Issue 41: before, 3 MB of arguments were sent back
/// to the model in every later request of the cycle and kept in the worker.
#[tokio::test]
async fn a_models_megabytes_of_arguments_are_not_carried_through_its_cycle() {
    use agentfleet::testing::MockTurn;
    use std::sync::{Arc, Mutex};
    agentfleet::install_crypto_provider();
    let later = Arc::new(Mutex::new(Vec::<(usize, String)>::new()));
    let seen = later.clone();
    let model = agentfleet::testing::MockModel::responding(move |req| {
        let conversation = agentfleet::testing::conversation(req);
        let last = conversation.last().unwrap();
        if last["role"] == "tool" {
            seen.lock().unwrap().push((
                req.to_string().len(),
                last["content"].as_str().unwrap_or_default().to_string(),
            ));
            return MockTurn::text("done");
        }
        MockTurn::tools(&[
            ("send_message", json!({"text": "a short one"})),
            ("send_message", json!({"text": "m".repeat(3 << 20)})),
        ])
    })
    .await
    .unwrap();
    let dir = ManifestDir::new("megabytes", "big", &[("scribe", openai(&model.base_url))]);
    let dev = Dev::start_in(dir.path(), &[]);
    let http = reqwest::Client::new();
    let husam = dev.token("default/big", "Husam");
    let posted = dev
        .post(&http, &husam, "big", &json!({"text": "write"}))
        .await;
    assert_eq!(posted.status(), 201);
    let start = Instant::now();
    let (size, result) = loop {
        if let Some(found) = later.lock().unwrap().first().cloned() {
            break found;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no request after the calls"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        result.contains("not made: its arguments were 3145739 bytes"),
        "{result}"
    );
    assert!(size < 64 << 10, "the next request was {size} bytes");
    let page = dev.messages(&http, &husam, "big").await;
    let texts: Vec<&str> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["sender"]["id"] == "scribe")
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["a short one"], "the call within the bound was made");
}

/// Models in `agentfleet dev` (issue 46): an Agent naming a Model of the directory thinks
/// with it, each model with the key of its own Secret document, the second answering when
/// the first fails; a fallback loop is refused before anything starts, with its path.
#[tokio::test]
async fn dev_resolves_the_directorys_models_and_falls_over_to_the_next() {
    use agentfleet::testing::{MockModel, MockTurn};
    agentfleet::install_crypto_provider();
    let primary = MockModel::responding(|_| MockTurn::Status(503, "down".into()))
        .await
        .unwrap();
    let backup = MockModel::responding(|req| {
        let last = agentfleet::testing::conversation(req)
            .last()
            .and_then(|m| m["role"].as_str().map(str::to_string))
            .unwrap_or_default();
        if last == "tool" {
            MockTurn::text("done")
        } else {
            MockTurn::tools(&[("send_message", json!({"text": "from the fallback"}))])
        }
    })
    .await
    .unwrap();
    let dir = ManifestDir::new(
        "models",
        "ops",
        &[("sre", "  model: {ref: fast}".to_string())],
    );
    let models = format!(
        "apiVersion: agentfleet.dev/v1alpha1\nkind: Model\nmetadata: {{name: fast}}\nspec: {{provider: openai, name: fast-1, baseUrl: '{}', apiKeySecretRef: {{name: fast-key}}, fallback: [steady]}}\n---\napiVersion: agentfleet.dev/v1alpha1\nkind: Model\nmetadata: {{name: steady}}\nspec: {{provider: openai, name: steady-1, baseUrl: '{}', apiKeySecretRef: {{name: steady-key}}}}\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: fast-key}}\nstringData: {{apiKey: sk-fast-dev}}\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: steady-key}}\nstringData: {{apiKey: sk-steady-dev}}\n",
        primary.base_url, backup.base_url
    );
    std::fs::write(dir.0.join("models.yaml"), &models).unwrap();
    {
        let dev = Dev::start_in(dir.path(), &[]);
        let http = reqwest::Client::new();
        let husam = dev.token("default/ops", "Husam");
        dev.post(&http, &husam, "ops", &json!({"text": "is the api up?"}))
            .await;
        let reply = wait_for_message(&http, &dev, &husam, "ops", |m| {
            m["sender"]["kind"] == "agent"
        })
        .await;
        assert_eq!(reply["text"], "from the fallback");
        let keys = |m: &MockModel| {
            let mut k: Vec<String> = m
                .keys()
                .into_iter()
                .map(Option::unwrap_or_default)
                .collect();
            k.dedup();
            k
        };
        assert_eq!(
            keys(&primary),
            ["sk-fast-dev"],
            "the first model, with its key"
        );
        assert_eq!(keys(&backup), ["sk-steady-dev"], "the second, with its own");
    }

    // A loop: refused before anything starts, saying where.
    std::fs::write(
        dir.0.join("models.yaml"),
        models.replace(
            "apiKeySecretRef: {name: steady-key}}",
            "apiKeySecretRef: {name: steady-key}, fallback: [fast]}",
        ),
    )
    .unwrap();
    let (status, out, err) = dev_exit(&dir.0, &[]);
    assert!(!status.success(), "{out}\n{err}");
    assert!(
        err.contains("Model default/fast: spec.fallback[0]: a loop: fast → steady → fast"),
        "{err}"
    );
    assert!(
        err.contains("Agent sre: spec.model.ref: Model \"fast\" is refused"),
        "{err}"
    );
    assert!(!out.contains("agentfleet chat"), "no banner: {out}");
}

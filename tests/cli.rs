//! The `agentfleet` binary on a real `redis-server`: a worker process with the scripted model,
//! and the operator tools `space post|read` and `consciousness show|restore`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failing loudly is the point

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use agentfleet::identity::AgentKey;
use agentfleet::identity::SpaceKey;
use agentfleet::store::{prelude::*, RedisStore};
use agentfleet::testing::{free_port, space_record, RedisServer};

const BIN: &str = env!("CARGO_BIN_EXE_agentfleet");

fn run(redis: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("AGENTFLEET_REDIS_URL", redis)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn http_get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

#[tokio::test(flavor = "multi_thread")]
async fn worker_binary_and_operator_tools() {
    let server = RedisServer::start().unwrap();
    let url = server.url();
    let store = RedisStore::new(&url).unwrap();
    store
        .apply_space(
            &SpaceKey::new("fam", "family"),
            &space_record("Family", &["assistant"], &["Husam"]),
        )
        .await
        .unwrap();

    // Bad input: a clear message, a failing exit code.
    let bad = run(
        &url,
        &[
            "space",
            "post",
            "fam/family",
            "--from",
            "carol",
            "let me in",
        ],
    );
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).contains("carol is not a member of space fam/family"),
        "{}",
        stderr(&bad)
    );
    let bad = run(&url, &["space", "read", "family"]);
    assert!(stderr(&bad).contains("NAMESPACE/NAME"), "{}", stderr(&bad));
    let dir = std::env::temp_dir().join(format!("agentfleet-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let broken = dir.join("broken.yaml");
    std::fs::write(&broken, "kind: Agent\nspec: {model: 3}\n").unwrap();
    let bad = run(&url, &["worker", "--agent", broken.to_str().unwrap()]);
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).contains("is not a valid Agent manifest"),
        "{}",
        stderr(&bad)
    );

    // A worker process with the scripted model.
    let manifest = dir.join("assistant.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {name: assistant, namespace: fam}\nspec:\n  model: {provider: scripted, name: assistant}\n  spaces: [family]\n",
    )
    .unwrap();
    let (child, [port]) = agentfleet::testing::spawn_on_free_ports(
        "agentfleet worker",
        |[port]| {
            Command::new(BIN)
                .args([
                    "worker",
                    "--agent",
                    manifest.to_str().unwrap(),
                    "--metrics-addr",
                    &format!("127.0.0.1:{port}"),
                ])
                .env("AGENTFLEET_REDIS_URL", &url)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| e.to_string())
        },
        agentfleet::testing::listening,
    )
    .unwrap();
    let mut worker = Worker(child);
    wait_for("the worker to be ready", || {
        http_get(port, "/readyz").is_some_and(|r| r.starts_with("HTTP/1.1 200"))
    });

    let posted = run(
        &url,
        &[
            "space",
            "post",
            "fam/family",
            "--from",
            "husam",
            "Remember that the boiler is serviced in May.",
        ],
    );
    assert!(posted.status.success(), "{}", stderr(&posted));
    assert!(
        stdout(&posted).contains("delivered to assistant"),
        "{}",
        stdout(&posted)
    );
    wait_for("the agent's reply", || {
        stdout(&run(&url, &["space", "read", "fam/family"])).contains("assistant: Noted, Husam")
    });
    let read = stdout(&run(&url, &["space", "read", "fam/family", "--json"]));
    let lines: Vec<serde_json::Value> = read
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["sender"]["id"], "husam");
    assert_eq!(
        lines[1]["text"],
        "Noted, Husam: I will remember that the boiler is serviced in May."
    );

    wait_for("the cycle in the metrics", || {
        http_get(port, "/metrics").is_some_and(|m| m.contains("agentfleet_cycles_total{agent=\"assistant\",namespace=\"fam\",result=\"completed\"} 1"))
    });
    let show = stdout(&run(&url, &["consciousness", "show", "fam/assistant"]));
    assert!(show.contains("Cycles:       1"), "{show}");
    assert!(
        show.contains("note-1: the boiler is serviced in May"),
        "{show}"
    );
    let json: serde_json::Value = serde_json::from_str(&stdout(&run(
        &url,
        &["consciousness", "show", "fam/assistant", "--json"],
    )))
    .unwrap();
    assert_eq!(json["cycle"], 1);
    assert_eq!(json["checkpoints"][0]["cycle"], 1);
    assert_eq!(json["messages"][0]["role"], "user");

    // Restoring needs the agent's lease, which a worker holds only while the agent thinks:
    // asleep, it is restored under a running worker (whose next session reads it anew).
    let restored = run(
        &url,
        &["consciousness", "restore", "fam/assistant", "--cycle", "1"],
    );
    assert!(restored.status.success(), "{}", stderr(&restored));

    // SIGTERM: the worker finishes and exits cleanly, releasing the lease.
    let pid = worker.0.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let start = Instant::now();
    let status = loop {
        if let Some(s) = worker.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "the worker did not exit on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "exit status {status}");

    let restored = run(
        &url,
        &["consciousness", "restore", "fam/assistant", "--cycle", "1"],
    );
    assert!(restored.status.success(), "{}", stderr(&restored));
    assert!(stdout(&restored).contains("restored fam/assistant to cycle 1"));
    let missing = run(
        &url,
        &["consciousness", "restore", "fam/assistant", "--cycle", "9"],
    );
    assert!(
        stderr(&missing).contains("no checkpoint for cycle 9; retained: 1"),
        "{}",
        stderr(&missing)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_mid_cycle_then_restart_answers_exactly_once() {
    use agentfleet::testing::{MockModel, MockTurn};
    let server = RedisServer::start().unwrap();
    let url = server.url();
    let store = RedisStore::new(&url).unwrap();
    store
        .apply_space(
            &SpaceKey::new("fam", "family"),
            &space_record("Family", &["assistant"], &["Husam"]),
        )
        .await
        .unwrap();
    let answer = || {
        MockTurn::tools(&[(
            "send_message",
            serde_json::json!({"space": "family", "text": "The answer is 42."}),
        )])
    };
    let mock = MockModel::start(vec![
        answer(),
        MockTurn::Slow(Duration::from_secs(60), Box::new(MockTurn::text("never"))),
    ])
    .await
    .unwrap();
    let dir = std::env::temp_dir().join(format!("agentfleet-kill-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let manifest = dir.join("assistant.yaml");
    std::fs::write(
        &manifest,
        format!("apiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {{name: assistant, namespace: fam}}\nspec:\n  model: {{provider: openai, name: mock, baseUrl: \"{}\"}}\n  spaces: [family]\n", mock.base_url),
    )
    .unwrap();
    let spawn = || {
        Worker(
            agentfleet::testing::worker_command(BIN, &manifest, &url)
                .unwrap()
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    };
    let mut first = spawn();
    let posted = run(
        &url,
        &[
            "space",
            "post",
            "fam/family",
            "--from",
            "husam",
            "What is the answer?",
        ],
    );
    assert!(posted.status.success(), "{}", stderr(&posted));
    wait_for("the reply and the next step under way", || {
        mock.request_count() == 2
    });
    let pid = first.0.id().to_string();
    assert!(Command::new("kill")
        .args(["-9", &pid])
        .status()
        .unwrap()
        .success());
    let _ = first.0.wait();

    // The restarted worker resumes the cycle from its journal: the answer already posted is
    // replayed, not asked for again; the model is asked only for the next step.
    mock.push(MockTurn::text("Answered."));
    let _second = spawn();
    let agent = agentfleet::identity::AgentKey::new("fam", "assistant");
    let start = Instant::now();
    loop {
        if store.consciousness(&agent).await.unwrap().cycle == 1 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the restarted worker did not finish the cycle"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let read = stdout(&run(&url, &["space", "read", "fam/family"]));
    assert_eq!(
        read.matches("The answer is 42.").count(),
        1,
        "answered exactly once:\n{read}"
    );
    assert_eq!(store.inflight(&agent).await.unwrap(), 0);
    assert_eq!(mock.request_count(), 3, "one model call after the restart");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread")]
async fn operator_tools_show_what_others_wrote_without_obeying_it() {
    use agentfleet::identity::AgentKey;
    let server = RedisServer::start().unwrap();
    let url = server.url();
    let store = RedisStore::new(&url).unwrap();
    store
        .apply_space(
            &SpaceKey::new("fam", "family"),
            &space_record("Family", &["assistant"], &["Husam"]),
        )
        .await
        .unwrap();
    let hostile = "\x1b[2J\x1b]0;PWNED\x07hi\u{9b}31m\u{202e}\nnext";
    let posted = run(
        &url,
        &["space", "post", "fam/family", "--from", "husam", hostile],
    );
    assert!(posted.status.success(), "{}", stderr(&posted));
    let agent = AgentKey::new("fam", "assistant");
    store.register_agent(&agent).await.unwrap();
    let lease = store
        .acquire_lease(&agent, "test", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    let memories = [(format!("k{hostile}"), hostile.to_string())];
    store
        .set_memories(&agent, &lease, &memories.into_iter().collect())
        .await
        .unwrap();

    for (args, want) in [
        (
            &["space", "read", "fam/family"][..],
            "Husam: ␛[2J␛]0;PWNED␇hi\\u{9b}31m\\u{202e}\n  next",
        ),
        (
            &["consciousness", "show", "fam/assistant"][..],
            "  k␛[2J␛]0;PWNED␇hi\\u{9b}31m\\u{202e}\n    next: ␛[2J",
        ),
    ] {
        let out = stdout(&run(&url, args));
        let obeyed: Vec<char> = out
            .chars()
            .filter(|&c| (c.is_control() && c != '\n') || ('\u{202a}'..='\u{202e}').contains(&c))
            .collect();
        assert!(obeyed.is_empty(), "{args:?} printed {obeyed:?}: {out:?}");
        assert!(out.contains(want), "{args:?}: {out:?}");
    }
}

/// What the OS says when nothing listens on a loopback port, and such a port.
fn refused_port() -> (u16, String) {
    let port = free_port().unwrap();
    let e = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
    (port, e.to_string())
}

#[test]
fn an_unreachable_data_plane_is_said_once_with_a_hint_about_dev() {
    let (port, refused) = refused_port();
    let url = format!("redis://127.0.0.1:{port}/");
    for args in [
        &["space", "read", "default/x", "--redis", &url][..],
        &["consciousness", "show", "default/x", "--redis", &url][..],
    ] {
        let out = Command::new(BIN)
            .args(args)
            .env_remove("AGENTFLEET_REDIS_URL")
            .output()
            .unwrap();
        let err = stderr(&out);
        assert!(!out.status.success(), "{args:?}: {err}");
        assert_eq!(err.matches(&refused).count(), 1, "{args:?}: {err}");
        let first = err.lines().next().unwrap_or_default();
        assert!(
            first.starts_with("agentfleet: ") && first.contains(&refused) && first.contains(&url),
            "{args:?}: {err}"
        );
        assert!(
            err.contains("agentfleet dev DIR --redis URL") && err.contains("AGENTFLEET_REDIS_URL"),
            "{args:?}: the hint about dev's own memory: {err}"
        );
        assert!(stdout(&out).is_empty(), "{args:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_spaces_and_agents_are_errors_and_bad_names_are_never_queried() {
    use agentfleet::identity::AgentKey;
    let server = RedisServer::start().unwrap();
    let url = server.url();
    let store = RedisStore::new(&url).unwrap();
    store
        .apply_space(
            &SpaceKey::new("default", "family"),
            &space_record("Family", &["assistant"], &["Husam"]),
        )
        .await
        .unwrap();
    store
        .register_agent(&AgentKey::new("default", "assistant"))
        .await
        .unwrap();

    for (args, want) in [
        (
            &["space", "read", "default/nope"][..],
            "space default/nope does not exist in the data plane",
        ),
        (
            &["space", "post", "default/nope", "--from", "husam", "hi"][..],
            "space default/nope does not exist in the data plane",
        ),
        (
            &["consciousness", "show", "default/nobody"][..],
            "agent default/nobody does not exist in the data plane",
        ),
        (
            &["consciousness", "show", "default/nobody", "--json"][..],
            "agent default/nobody does not exist in the data plane",
        ),
        (
            &["consciousness", "restore", "default/nobody", "--cycle", "1"][..],
            "agent default/nobody does not exist in the data plane",
        ),
    ] {
        let out = run(&url, args);
        assert!(
            !out.status.success(),
            "{args:?} succeeded: {}",
            stdout(&out)
        );
        assert!(stderr(&out).contains(want), "{args:?}: {}", stderr(&out));
        assert!(stdout(&out).is_empty(), "{args:?}: {}", stdout(&out));
    }

    // What exists still answers: an empty space, an agent before its first cycle.
    let read = run(&url, &["space", "read", "default/family"]);
    assert!(read.status.success(), "{}", stderr(&read));
    let show = run(&url, &["consciousness", "show", "default/assistant"]);
    assert!(show.status.success(), "{}", stderr(&show));
    assert!(
        stdout(&show).contains("Cycles:       0"),
        "{}",
        stdout(&show)
    );

    // A name the API server would refuse is refused before any query: the data plane here
    // refuses connections, so a query would say so.
    let (port, refused) = refused_port();
    let closed = format!("redis://127.0.0.1:{port}/");
    let closed_gateway = format!("http://127.0.0.1:{port}");
    for (args, want) in [
        (&["space", "read", "NS/evil"][..], "not a valid namespace"),
        (&["space", "read", "default/../etc"][..], "not a valid name"),
        (
            &[
                "space",
                "post",
                "default/Bad_Name!",
                "--from",
                "husam",
                "hi",
            ][..],
            "not a valid name",
        ),
        (
            &["consciousness", "show", "default/Bad_Name!"][..],
            "not a valid name",
        ),
        (
            &["consciousness", "restore", "a/b/c", "--cycle", "1"][..],
            "not a valid name",
        ),
        (&["space", "read", "family"][..], "NAMESPACE/NAME"),
        (
            &[
                "chat",
                "default/../etc",
                "--token",
                "t",
                "--gateway",
                &closed_gateway,
            ][..],
            "not a valid name",
        ),
    ] {
        let out = run(&closed, args);
        let err = stderr(&out);
        assert!(!out.status.success(), "{args:?}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(
            !err.contains(&refused),
            "{args:?} queried the data plane: {err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reader_that_stops_reading_ends_the_output_quietly() {
    use agentfleet::store::{NewMessage, Sender};
    let server = RedisServer::start().unwrap();
    let url = server.url();
    let store = RedisStore::new(&url).unwrap();
    let family = SpaceKey::new("fam", "family");
    store
        .apply_space(&family, &space_record("Family", &[], &["Husam"]))
        .await
        .unwrap();
    // More than a pipe holds, so the writer meets the closed pipe whenever it closes.
    for i in 0..300 {
        let message = NewMessage {
            sender: Sender {
                groups: Vec::new(),
                id: "husam".into(),
                name: "Husam".into(),
                kind: Some(agentfleet::store::MemberKind::Human),
            },
            text: format!("{i} {}", "x".repeat(400)),
            mention: None,
            idempotency_key: None,
            urgent: false,
            depth: 0,
        };
        store.post_message(&family, &message).await.unwrap();
    }
    for args in [
        &["space", "read", "fam/family", "--limit", "300"][..],
        &["crd"][..],
    ] {
        // As `agentfleet … | head -1`: the reader is gone before the output ends.
        let mut child = Command::new(BIN)
            .args(args)
            .env("AGENTFLEET_REDIS_URL", &url)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = stderr(&out);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(out.status.success(), "{args:?}: {}: {err}", out.status);
        assert!(err.is_empty(), "{args:?}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn operators_answer_paused_calls_from_a_terminal() {
    use agentfleet::store::{now_ms, CallKind, HumanCall, ReadQuery, Sender};
    let server = RedisServer::start().unwrap();
    let url = server.url();
    let store = RedisStore::new(&url).unwrap();
    let space = SpaceKey::new("ops", "oncall");
    store
        .apply_space(&space, &space_record("On call", &["sre"], &["Dana", "Sam"]))
        .await
        .unwrap();
    let sre = AgentKey::new("ops", "sre");
    let register = |tool: &str, kind, ttl_ms| {
        HumanCall::new(
            &sre,
            tool,
            kind,
            "oncall",
            serde_json::json!({"deployment": "api"}),
            Some(serde_json::json!({"type": "object", "required": ["ok"]})),
            ttl_ms,
        )
        .unwrap()
    };
    let restart = register("restart_deployment", CallKind::Approval, 60_000);
    let scale = register("scale_deployment", CallKind::Approval, 60_000);
    let confirm = register("confirm_deployment", CallKind::Interactive, 60_000);
    let mut late = register("drain_node", CallKind::Approval, 60_000);
    late.record.expires_ms = now_ms() - 1;
    for c in [&restart, &scale, &confirm, &late] {
        store.register_human_call(c).await.unwrap();
    }
    let (restart, scale, confirm, late) = (
        restart.id.to_string(),
        scale.id.to_string(),
        confirm.id.to_string(),
        late.id.to_string(),
    );

    // What waits, with the tool, the call, the space and the times.
    let o = run(&url, &["calls", "ops/sre"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let listed = stdout(&o);
    assert_eq!(listed.lines().count(), 4, "{listed}");
    assert!(
        listed.contains(&format!(
            "restart_deployment  {restart}  approval  space oncall  since "
        )),
        "{listed}"
    );
    assert!(
        listed.contains(&format!("drain_node  {late}")) && listed.contains("(expired)"),
        "{listed}"
    );
    let o = run(&url, &["calls", "ops/sre", "--json"]);
    let first: serde_json::Value =
        serde_json::from_str(stdout(&o).lines().next().unwrap()).unwrap();
    assert_eq!(first["arguments"], serde_json::json!({"deployment": "api"}));

    // Approved as someone, once; a second answer, an expired call and an unknown one are
    // refused with their own exit codes, writing nothing.
    // Only its approvers answer it (here the humans of its space, by their ids), as on every
    // other route.
    let o = run(
        &url,
        &[
            "approve", "ops/sre", &restart, "--as", "eve", "--reason", "me",
        ],
    );
    assert_eq!(o.status.code(), Some(6), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("only the humans of space oncall may answer this call"),
        "{}",
        stderr(&o)
    );
    let o = run(
        &url,
        &[
            "approve", "ops/sre", &restart, "--as", "dana", "--reason", "go",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o).trim(),
        format!("approved restart_deployment (call {restart}) as Dana; the agent was woken")
    );
    let o = run(
        &url,
        &[
            "deny",
            "ops/sre",
            &restart,
            "--as",
            "sam",
            "--reason",
            "changed my mind",
        ],
    );
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("was already answered"),
        "{}",
        stderr(&o)
    );
    let o = run(
        &url,
        &["deny", "ops/sre", &late, "--as", "sam", "--reason", "x"],
    );
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    assert!(stderr(&o).contains("expired"), "{}", stderr(&o));
    let o = run(&url, &["approve", "ops/other", &scale]);
    assert_eq!(
        o.status.code(),
        Some(3),
        "another agent's call: {}",
        stderr(&o)
    );
    let o = run(
        &url,
        &[
            "approve",
            "ops/sre",
            "ops.sre.0123456789abcdef0123456789abcdef",
        ],
    );
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("no tool call"), "{}", stderr(&o));
    let o = run(&url, &["deny", "ops/sre", &scale]);
    assert!(!o.status.success(), "a denial needs a reason");
    let o = run(&url, &["answer", "ops/sre", &confirm, "--as", "sam", "{}"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("does not match the schema"),
        "{}",
        stderr(&o)
    );
    let o = run(&url, &["approve", "ops/sre", &confirm, "--as", "sam"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "an interactive call takes a result: {}",
        stderr(&o)
    );

    let o = run(
        &url,
        &[
            "deny", "ops/sre", &scale, "--as", "sam", "--reason", "freeze",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(
        &url,
        &[
            "answer",
            "ops/sre",
            &confirm,
            "--as",
            "sam",
            r#"{"ok": true}"#,
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));

    // Three answers: three events in the agent's inbox, three notices in the space's log.
    let inbox = store.peek_inbox(&sre, 10).await.unwrap();
    let decided: Vec<_> = inbox
        .iter()
        .map(|e| {
            e.data.as_ref().unwrap()["decision"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(decided, ["approved", "denied", "answered"]);
    let mut log = store
        .read_messages(
            &space,
            &ReadQuery {
                limit: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    log.reverse();
    assert!(log.iter().all(|m| m.sender == Sender::system()));
    let texts: Vec<&str> = log.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(
        texts,
        [
            format!("Dana approved restart_deployment (call {restart}): go"),
            format!("Sam denied scale_deployment (call {scale}): freeze"),
            format!("Sam answered confirm_deployment (call {confirm}): {{\"ok\":true}}"),
        ]
    );
    let o = run(&url, &["calls", "ops/sre"]);
    assert_eq!(
        stdout(&o).lines().count(),
        1,
        "only the expired one: {}",
        stdout(&o)
    );
}

/// Alice, scripted, lives three cycles in `fam/family` on `store`: she keeps a fact, says
/// what she remembers, and says hello.
async fn alice_lives(store: &std::sync::Arc<RedisStore>) {
    let family = SpaceKey::new("fam", "family");
    store
        .apply_space(&family, &space_record("Family", &["alice"], &["Husam"]))
        .await
        .unwrap();
    let key = AgentKey::new("fam", "alice");
    store.register_agent(&key).await.unwrap();
    let agent: agentfleet::crd::Agent = serde_yaml::from_str(ALICE).unwrap();
    let model = agentfleet::model::client(&agent.spec.model, "alice", Default::default()).unwrap();
    let alice = agentfleet::worker::cycle::Agentlet::new(
        agent,
        key.clone(),
        store.clone(),
        std::sync::Arc::from(model),
        agentfleet::telemetry::WorkerMetrics::new().unwrap(),
    );
    for text in [
        "alice, please remember that dinner is at 8",
        "alice, what do you remember?",
        "hello alice",
    ] {
        store
            .post_message(&family, &agentfleet::testing::human_message("Husam", text))
            .await
            .unwrap();
        let lease = store
            .acquire_lease(&key, "w", Duration::from_secs(60))
            .await
            .unwrap()
            .unwrap();
        let events = store.take_inbox(&key, &lease).await.unwrap();
        alice.cycle(&lease, &events).await.unwrap();
        store.release_lease(&key, &lease).await.unwrap();
    }
}

const ALICE: &str = "apiVersion: agentfleet.dev/v1alpha1
kind: Agent
metadata: {name: alice, namespace: fam}
spec:
  model: {provider: scripted, name: scripted}
  instructions: You help the family.
  spaces: [family]
";

/// `agentfleet rehearse` (issue 45): a line per recorded cycle and the summary; exit 0 when
/// the candidate passes, 3 when it fails its criteria, 1 when it cannot run.
#[tokio::test(flavor = "multi_thread")]
async fn rehearse_prints_each_cycle_and_says_the_verdict_in_its_exit_status() {
    let redis = RedisServer::start().unwrap();
    let store = std::sync::Arc::new(RedisStore::new(&redis.url()).unwrap());
    alice_lives(&store).await;
    let dir = std::env::temp_dir().join(format!("agentfleet-cli-rehearse-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };

    // New instructions on the same model: it passes.
    let brief = file("brief.txt", "You help the family, briefly.");
    let same = file("alice.yaml", ALICE);
    let out = run(
        &redis.url(),
        &[
            "rehearse",
            "fam/alice",
            "-f",
            &same,
            "--instructions-file",
            &brief,
        ],
    );
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    assert!(text.starts_with(" CYCLE  RECORDED"), "{text}");
    assert_eq!(
        text.lines()
            .filter(|l| l.contains("replied family"))
            .count(),
        3,
        "{text}"
    );
    assert!(text.contains("\nPASSED: over 3 cycles"), "{text}");

    // A model that skips everything: each cycle said, the verdict, exit status 3.
    let quiet = agentfleet::testing::MockModel::responding(|_| {
        agentfleet::testing::MockTurn::tools(&[("skip", serde_json::json!({"reason": "quiet"}))])
    })
    .await
    .unwrap();
    let skipping = file(
        "quiet.yaml",
        &ALICE.replace(
            "{provider: scripted, name: scripted}",
            &format!(
                "{{provider: openai, name: quiet, baseUrl: '{}'}}",
                quiet.base_url
            ),
        ),
    );
    let out = run(&redis.url(), &["rehearse", "fam/alice", "-f", &skipping]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(3), "{text}{}", stderr(&out));
    assert_eq!(
        text.lines().filter(|l| l.contains(" NO ")).count(),
        3,
        "{text}"
    );
    assert!(
        text.contains(
            "\nFAILED: the candidate replied or stayed quiet as recorded in 0 of 3 cycles"
        ),
        "{text}"
    );

    // An agent without records cannot be rehearsed: exit status 1, said in one line.
    let out = run(&redis.url(), &["rehearse", "fam/bob", "-f", &same]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("fam/bob has no cycle records to rehearse"),
        "{}",
        stderr(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

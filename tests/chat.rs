//! `agentfleet chat` as a user runs it: the real binary, against the real `agentfleet gateway`
//! binary on a real `redis-server`; on a pipe, and on a real pseudo-terminal (`script`) whose
//! output a terminal emulator (`vt100`) draws.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use agentfleet::gateway::auth::hash_token;
use agentfleet::identity::AgentKey;
use agentfleet::identity::SpaceKey;
use agentfleet::store::{
    prelude::*, LiveEvent, Member, MemberKind, RedisStore, Sender, SpaceRecord,
};
use agentfleet::testing::{spawn_on_free_ports, RedisServer};

const BIN: &str = env!("CARGO_BIN_EXE_agentfleet");
const HUSAM: &str = "tok-husam";
const EVE: &str = "tok-eve";

/// What a hostile member can put on another member's terminal: clear the screen, retitle the
/// window, a C1 CSI, a right-to-left override, a NUL, a tab, a second line and a DEL.
const HOSTILE: &str =
    "\x1b[2J\x1b]0;PWNED\x07hi\u{9b}31m \u{202e}evil\u{2066}\0\tok\nsecond line\r\x7f";

/// One human token of the token file: `(token, id, display name)`.
type Human<'a> = (&'a str, &'a str, &'a str);

fn write_tokens(path: &PathBuf, humans: &[Human]) {
    let tokens: Vec<serde_json::Value> = humans
        .iter()
        .map(|(token, id, name)| {
            serde_json::json!({"sha256": hash_token(token), "kind": "human", "id": id, "name": name})
        })
        .collect();
    // JSON is YAML: the escapes of hostile names survive as they are.
    std::fs::write(path, serde_json::json!({ "tokens": tokens }).to_string()).unwrap();
}

/// The lines a child writes, as they come.
fn lines(out: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The bytes a child writes, as they come.
fn bytes(mut out: impl Read + Send + 'static) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    rx
}

/// Kills and reaps a child when the test ends, however it ends.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `agentfleet gateway` on a Redis with the space `ops/family`, on a fixed port (so it can be
/// restarted where its clients reconnect).
struct Fixture {
    redis: RedisServer,
    store: RedisStore,
    dir: PathBuf,
    tokens: PathBuf,
    port: u16,
    gateway: Option<Reaped>,
}

impl Fixture {
    async fn start(tag: &str, display_name: &str, humans: &[Human<'_>]) -> Fixture {
        agentfleet::install_crypto_provider();
        let redis = RedisServer::start().unwrap();
        let store = RedisStore::new(&redis.url()).unwrap();
        let mut members = vec![Member {
            kind: MemberKind::Agent,
            id: "assistant".into(),
            name: "assistant".into(),
        }];
        members.extend(humans.iter().map(|(_, id, name)| Member {
            kind: MemberKind::Human,
            id: id.to_string(),
            name: name.to_string(),
        }));
        let record = SpaceRecord {
            v: agentfleet::store::V1,
            display_name: display_name.into(),
            members,
            groups: Vec::new(),
            max_messages: 1000,
            max_message_bytes: agentfleet::store::DEFAULT_MAX_MESSAGE_BYTES,
            loop_guard: Default::default(),
            context_id: None,
        };
        store
            .apply_space(&SpaceKey::new("ops", "family"), &record)
            .await
            .unwrap();
        let dir = std::env::temp_dir().join(format!(
            "agentfleet-chat-{tag}-{}-{}",
            std::process::id(),
            redis.port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let tokens = dir.join("tokens.yaml");
        write_tokens(&tokens, humans);
        let mut f = Fixture {
            redis,
            store,
            dir,
            tokens,
            port: 0,
            gateway: None,
        };
        f.start_gateway().await;
        f
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn spawn_gateway(&self, port: u16) -> Result<Child, String> {
        Command::new(BIN)
            .args(["gateway", "--tokens"])
            .arg(&self.tokens)
            .args(["--redis", &self.redis.url()])
            .args(["--addr", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())
    }

    /// Starts the gateway: the first time on a free port (another if it was taken
    /// meanwhile), again on the same port after that.
    async fn start_gateway(&mut self) {
        let child = if self.port == 0 {
            let (child, [port]) = spawn_on_free_ports(
                "agentfleet gateway",
                |[port]| self.spawn_gateway(port),
                agentfleet::testing::listening,
            )
            .unwrap();
            self.port = port;
            child
        } else {
            self.spawn_gateway(self.port).unwrap()
        };
        self.gateway = Some(Reaped(child));
        let http = reqwest::Client::new();
        let start = Instant::now();
        loop {
            let ready = http.get(format!("{}/readyz", self.url())).send().await;
            if ready.is_ok_and(|r| r.status() == 200) {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the gateway did not get ready"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn post(&self, token: &str, text: &str) {
        let resp = reqwest::Client::new()
            .post(format!("{}/v1/spaces/ops/family/messages", self.url()))
            .bearer_auth(token)
            .json(&serde_json::json!({ "text": text }))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201, "{:?}", resp.text().await);
    }

    fn chat(&self, token: &str) -> Command {
        let mut c = Command::new(BIN);
        c.args([
            "chat",
            "ops/family",
            "--gateway",
            &self.url(),
            "--token",
            token,
        ]);
        c
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Lines from `rx` until one contains `want` (all of them, that one included).
fn until(rx: &mpsc::Receiver<String>, want: &str, seen: &mut Vec<String>) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no {want:?} within 20s; saw {seen:?}"));
        let hit = line.contains(want);
        seen.push(line);
        if hit {
            return;
        }
    }
}

/// Publishes `request` in `ops/family` until chat shows a line containing `want` (the event is
/// live only: it reaches chat once its stream is connected).
async fn shown_when_published(
    f: &Fixture,
    request: &LiveEvent,
    rx: &mpsc::Receiver<String>,
    want: &str,
    seen: &mut Vec<String>,
) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        f.store
            .publish_live(&SpaceKey::new("ops", "family"), request)
            .await
            .unwrap();
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(300)) {
            let shown = line.contains(want);
            seen.push(line);
            if shown {
                return;
            }
        }
        assert!(Instant::now() < deadline, "no request shown: {seen:?}");
    }
}

/// The terminal controls in `text`: C0 (but newline), DEL, C1, and bidi overrides/isolates.
fn controls(text: &str) -> Vec<char> {
    text.chars()
        .filter(|&c| {
            (c.is_control() && c != '\n')
                || ('\u{202a}'..='\u{202e}').contains(&c)
                || ('\u{2066}'..='\u{2069}').contains(&c)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_shows_hostile_text_without_obeying_it() {
    let f = Fixture::start(
        "hostile",
        "Fam\x1b]0;T\x07ily",
        &[
            (HUSAM, "husam", "Husam"),
            (EVE, "eve", "Eve\x1b[31m\u{202e}"),
        ],
    )
    .await;
    // History, then the live stream: the same text both ways.
    f.post(EVE, HOSTILE).await;
    let mut chat = f.chat(HUSAM);
    let mut child = Reaped(
        chat.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stdin = child.0.stdin.take().unwrap();
    let rx = lines(child.0.stdout.take().unwrap());
    let mut out = Vec::new();
    until(&rx, "Ctrl-D leaves", &mut out);
    until(&rx, "second line", &mut out);
    f.post(EVE, &format!("live {HOSTILE}")).await;
    // An agent's activity names a tool chosen by the model.
    f.store
        .publish_live(
            &SpaceKey::new("ops", "family"),
            &LiveEvent::Activity {
                sender: Sender {
                    groups: Vec::new(),
                    id: "assistant".into(),
                    name: "assistant".into(),
                    kind: Some(MemberKind::Agent),
                },
                activity: "tool".into(),
                tool: Some("rm\x1b[8m\u{9d}".into()),
                detail: None,
            },
        )
        .await
        .unwrap();
    // The two arrive in either order.
    until(&rx, "is using", &mut out);
    if !out
        .iter()
        .any(|l| l.starts_with("Eve") && l.contains("live "))
    {
        until(&rx, "live ", &mut out);
    }
    drop(stdin);
    assert!(child.0.wait().unwrap().success());
    out.extend(rx.iter());
    let all = out.join("\n");
    assert_eq!(controls(&all), Vec::<char>::new(), "{all:?}");
    // Shown, escaped, not dropped: the reader sees what was attempted.
    assert!(
        out.iter().any(
            |l| l.starts_with("Fam␛]0;T␇ily (ops/family) — assistant (agent), Husam, Eve␛[31m")
        ),
        "{out:?}"
    );
    let posted = "Eve␛[31m\\u{202e}: ␛[2J␛]0;PWNED␇hi\\u{9b}31m \\u{202e}evil\\u{2066}␀    ok";
    assert!(out.iter().any(|l| l == posted), "{out:?}");
    assert!(
        out.iter().any(|l| l == "  second line␍␡"),
        "continuation indented: {out:?}"
    );
    assert!(
        out.iter()
            .any(|l| l == "· assistant is using rm␛[8m\\u{9d}…"),
        "{out:?}"
    );

    // A space name no API server accepts is refused before the gateway is asked, and the
    // refusal quotes it escaped.
    let o = Command::new(BIN)
        .args(["chat", "ops/fam\x1b]0;PWNED\x07ily", "--gateway", &f.url()])
        .args(["--token", HUSAM])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8(o.stderr).unwrap();
    assert!(err.contains("is not a valid name"), "{err}");
    assert_eq!(controls(&err), Vec::<char>::new(), "{err:?}");
    // The gateway's own error messages quote what they were given.
    let o = Command::new(BIN)
        .args(["chat", "ops/nowhere", "--gateway", &f.url()])
        .args(["--token", HUSAM])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8(o.stderr).unwrap();
    assert!(err.contains("not_found (404)"), "{err}");
    assert_eq!(controls(&err), Vec::<char>::new(), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_exits_at_once_when_its_token_is_revoked_while_nobody_types() {
    let f = Fixture::start(
        "revoked",
        "Family",
        &[(HUSAM, "husam", "Husam"), (EVE, "eve", "Eve")],
    )
    .await;
    let mut chat = f.chat(HUSAM);
    let mut child = Reaped(
        chat.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // Standard input stays open and silent for the whole test.
    let _stdin = child.0.stdin.take().unwrap();
    let rx = lines(child.0.stdout.take().unwrap());
    let errors = lines(child.0.stderr.take().unwrap());
    let mut out = Vec::new();
    until(&rx, "Ctrl-D leaves", &mut out);
    f.post(EVE, "are you there?").await;
    until(&rx, "Eve: are you there?", &mut out);

    // Revoked: the token leaves the file. The gateway reloads it, ends the open stream with an
    // `unauthenticated` event, and refuses chat's reconnection; chat says so and exits.
    write_tokens(&f.tokens, &[(EVE, "eve", "Eve")]);
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(12),
            "chat still runs {:?} after its token was refused",
            start.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(!status.success(), "{status}");
    let err: Vec<String> = errors.iter().collect();
    assert_eq!(err.len(), 1, "one line: {err:?}");
    assert!(err[0].contains("unauthenticated (401)"), "{err:?}");
}

/// Runs `cmd` on a pseudo-terminal of `rows`×`cols` (util-linux `script`); what is written to
/// the returned stdin is typed on it.
fn on_terminal(
    cmd: &str,
    rows: u16,
    cols: u16,
) -> (Reaped, std::process::ChildStdin, mpsc::Receiver<Vec<u8>>) {
    let mut child = Reaped(
        Command::new("script")
            .args([
                "-qfec",
                &format!("stty rows {rows} cols {cols} && exec {cmd}"),
                "/dev/null",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("util-linux script (Debian: apt-get install -y bsdutils)"),
    );
    let stdin = child.0.stdin.take().unwrap();
    let rx = bytes(child.0.stdout.take().unwrap());
    (child, stdin, rx)
}

/// Feeds output into `screen` until its text contains `want`.
fn draw_until(rx: &mpsc::Receiver<Vec<u8>>, screen: &mut vt100::Parser, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !screen.screen().contents().contains(want) {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(chunk) = rx.recv_timeout(left) else {
            panic!(
                "{want:?} not on the screen within 20s:\n{}",
                screen.screen().contents()
            );
        };
        screen.process(&chunk);
    }
}

/// Feeds output into `screen` until the cursor is two rows below its last written row (the
/// blank line after it drawn).
fn settle_below(rx: &mpsc::Receiver<Vec<u8>>, screen: &mut vt100::Parser, cols: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let last = screen
            .screen()
            .rows(0, cols)
            .enumerate()
            .filter(|(_, row)| !row.trim().is_empty())
            .map(|(i, _)| i)
            .last()
            .and_then(|r| u16::try_from(r).ok());
        if last.is_some_and(|r| screen.screen().cursor_position().0 >= r + 2) {
            return;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(chunk) = rx.recv_timeout(left) else {
            panic!(
                "no blank line below the text within 20s:\n{}",
                screen.screen().contents()
            );
        };
        screen.process(&chunk);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_terminal_each_typed_line_shows_once() {
    let f = Fixture::start("tty", "Family", &[(HUSAM, "husam", "Husam")]).await;
    let (rows, cols) = (24, 60);
    let cmd = format!(
        "'{BIN}' chat ops/family --gateway {} --token {HUSAM}",
        f.url()
    );
    let (_script, mut stdin, rx) = on_terminal(&cmd, rows, cols);
    let size = |n| std::num::NonZeroU16::new(n).unwrap();
    let mut screen = vt100::Parser::new(size(rows), size(cols), 0);
    draw_until(&rx, &mut screen, "Ctrl-D leaves");
    // And the blank line after it: typed before it is drawn, the echo would land above it.
    settle_below(&rx, &mut screen, cols);

    let short = "hello from the terminal";
    // Longer than the terminal is wide: its echo takes three rows.
    let long = format!("a long line {}", "abcdefghij".repeat(11));
    for typed in [short, long.as_str()] {
        writeln!(stdin, "{typed}").unwrap();
        draw_until(&rx, &mut screen, &format!("Husam: {typed}"));
        // Anything written after the message is drawn too.
        tokio::time::sleep(Duration::from_millis(300)).await;
        while let Ok(chunk) = rx.try_recv() {
            screen.process(&chunk);
        }
        let shown = screen.screen().contents();
        assert_eq!(shown.matches(typed).count(), 1, "{typed:?} once:\n{shown}");
    }
    let shown = screen.screen().contents();
    assert!(
        shown.contains(&format!("Ctrl-D leaves.\n\nHusam: {short}\nHusam: {long}")),
        "nothing else erased:\n{shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_shows_a_request_and_approves_it_by_a_typed_command() {
    use agentfleet::store::{CallKind, HumanCall};
    let f = Fixture::start("approve", "Family", &[(HUSAM, "husam", "Husam")]).await;
    let assistant = AgentKey::new("ops", "assistant");
    let call = HumanCall::new(
        &assistant,
        "restart_deployment",
        CallKind::Approval,
        "family",
        serde_json::json!({"deployment": "api"}),
        None,
        60_000,
    )
    .unwrap();
    f.store.register_human_call(&call).await.unwrap();
    let id = call.id.to_string();

    let mut child = Reaped(
        f.chat(HUSAM)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut stdin = child.0.stdin.take().unwrap();
    let rx = lines(child.0.stdout.take().unwrap());
    let mut out = Vec::new();
    until(&rx, "Ctrl-D leaves", &mut out);
    // The worker shows the request as a `tool_request` event: live only, so published until
    // chat, once its stream is connected, shows it.
    let request = LiveEvent::ToolRequest {
        sender: Sender {
            groups: Vec::new(),
            id: "assistant".into(),
            name: "assistant".into(),
            kind: Some(MemberKind::Agent),
        },
        call_id: id.to_string(),
        tool: "restart_deployment".into(),
        kind: CallKind::Approval,
        arguments: serde_json::json!({"deployment": "api"}),
        result_schema: None,
        since_ms: 1,
        expires_ms: i64::MAX,
    };
    shown_when_published(
        &f,
        &request,
        &rx,
        "asks to run restart_deployment",
        &mut out,
    )
    .await;
    assert_eq!(
        out.last().unwrap(),
        &format!("? assistant asks to run restart_deployment {{\"deployment\":\"api\"}} — /approve {id} [reason] or /deny {id} REASON")
    );

    writeln!(stdin, "/approve {id} looks fine").unwrap();
    // Chat's answer and the space's audit notice arrive in either order.
    for want in [
        format!("· approved call {id}"),
        format!("agentfleet: Husam approved restart_deployment (call {id}): looks fine"),
    ] {
        if !out.iter().any(|l| l == &want) {
            until(&rx, &want, &mut out);
        }
    }
    writeln!(stdin, "/deny {id} too late").unwrap();
    until(&rx, "! not answered: conflict (409)", &mut out);
    // A call that names its approvers: Husam, not among them, is refused by the same rule as
    // every route (issue 40).
    let named = HumanCall::new(
        &assistant,
        "drain_node",
        CallKind::Approval,
        "family",
        serde_json::json!({}),
        None,
        60_000,
    )
    .unwrap()
    .answered_by(vec!["human:dana".into()]);
    f.store.register_human_call(&named).await.unwrap();
    writeln!(stdin, "/approve {}", named.id).unwrap();
    until(&rx, "only human:dana may answer this call", &mut out);
    writeln!(stdin, "/deny {id}").unwrap();
    until(&rx, "say why", &mut out);
    // The latest request is answered without its id (issue 43), and shown once however often
    // its event comes.
    let latest = HumanCall::new(
        &assistant,
        "scale_down",
        CallKind::Approval,
        "family",
        serde_json::json!({"replicas": 1}),
        None,
        60_000,
    )
    .unwrap();
    f.store.register_human_call(&latest).await.unwrap();
    let request = LiveEvent::ToolRequest {
        sender: Sender {
            groups: Vec::new(),
            id: "assistant".into(),
            name: "assistant".into(),
            kind: Some(MemberKind::Agent),
        },
        call_id: latest.id.to_string(),
        tool: "scale_down".into(),
        kind: CallKind::Approval,
        arguments: serde_json::json!({"replicas": 1}),
        result_schema: None,
        since_ms: 1,
        expires_ms: i64::MAX,
    };
    shown_when_published(&f, &request, &rx, "asks to run scale_down", &mut out).await;
    for _ in 0..3 {
        f.store
            .publish_live(&SpaceKey::new("ops", "family"), &request)
            .await
            .unwrap();
    }
    writeln!(stdin, "/approve").unwrap();
    until(&rx, &format!("· approved call {}", latest.id), &mut out);
    assert_eq!(
        out.iter()
            .filter(|l| l.contains("asks to run scale_down"))
            .count(),
        1,
        "{out:?}"
    );
    drop(stdin);
    assert!(child.0.wait().unwrap().success());

    let inbox = f.store.peek_inbox(&assistant, 10).await.unwrap();
    assert_eq!(inbox.len(), 2, "{inbox:?}");
    for (event, tool) in inbox.iter().zip(["restart_deployment", "scale_down"]) {
        let data = event.data.as_ref().unwrap();
        assert_eq!(data["decision"], serde_json::json!("approved"));
        assert_eq!(data["tool"], serde_json::json!(tool));
    }
}

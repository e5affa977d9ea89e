//! Test support: a real `redis-server` on a free loopback port, owned by the test.
//!
//! Used by the crate's own tests and by the integration tests under `tests/`. A test that
//! needs Redis fails with a clear message when `redis-server` is missing; it never skips.
#![doc(hidden)]

pub mod browser;
pub mod cluster;
pub mod inbox;
pub mod model;
pub mod ports;
pub mod s3;
pub mod secure;

pub use self::cluster::RedisCluster;
pub use self::inbox::WaitInbox;
pub use self::model::{
    cached_form, context_of, conversation, last_turn, shared_prefix, LastTurn, MockModel, MockTurn,
};
pub use self::ports::{free_port, listening, spawn_on_free_ports};
pub use self::s3::S3Server;
pub use self::secure::{SecureRedis, Secured};

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A process killed and reaped when dropped (a test's or benchmark's child never outlives it).
pub struct Kill(pub std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `redis-server` process that lives as long as this value.
pub struct RedisServer {
    child: Child,
    port: u16,
    dir: PathBuf,
    persistent: bool,
}

fn spawn(port: u16, dir: &std::path::Path, persistent: bool) -> Result<Child, String> {
    let persistence: &[&str] = if persistent {
        &[
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
        ]
    } else {
        &["--save", "", "--appendonly", "no"]
    };
    Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(persistence)
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| {
            format!("cannot start redis-server ({e}); install it (Debian: apt-get install -y redis-server)")
        })
}

/// Whether a plain `redis-server` on `port` answers `PING`.
fn answers_ping(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = [0u8; 7];
    s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

impl RedisServer {
    /// Starts `redis-server` (from `PATH`) on a free port with persistence off, and waits until
    /// it accepts connections.
    pub fn start() -> Result<Self, String> {
        Self::start_with(false)
    }

    /// Like [`RedisServer::start`], with every write appended and synced to disk first, so the
    /// data survives [`RedisServer::kill`] and [`RedisServer::restart`].
    pub fn start_persistent() -> Result<Self, String> {
        Self::start_with(true)
    }

    fn start_with(persistent: bool) -> Result<Self, String> {
        // One directory for every start (one that exits at start writes nothing there).
        let dir = std::env::temp_dir().join(format!(
            "agentfleet-redis-{}-{}",
            std::process::id(),
            free_port()?
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let started = spawn_on_free_ports(
            "redis-server",
            |[port]| spawn(port, &dir, persistent),
            answers_ping,
        );
        let (child, [port]) = started.inspect_err(|_| {
            let _ = std::fs::remove_dir_all(&dir);
        })?;
        Ok(Self {
            child,
            port,
            dir,
            persistent,
        })
    }

    /// Kills the server as `kill -9` would (no chance to save anything).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the server again on the same port and directory (after [`RedisServer::kill`]).
    pub fn restart(&mut self) -> Result<(), String> {
        self.kill();
        self.child = spawn(self.port, &self.dir, self.persistent)?;
        ports::wait_ready("redis-server", &mut self.child, self.port, answers_ping)
    }

    /// The server's URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Husam's message `text` in space `family`, as an inbox event of id `id`.
pub fn human_event(id: &str, text: &str) -> crate::store::InboxEvent {
    use crate::store::{now_ms, EventKind, InboxEvent, Sender};
    InboxEvent {
        id: id.into(),
        kind: EventKind::SpaceMessage,
        time_ms: now_ms(),
        urgent: false,
        space: Some("family".into()),
        sender: Some(Sender {
            groups: Vec::new(),
            id: "husam".into(),
            name: "Husam".into(),
            kind: Some(crate::store::MemberKind::Human),
        }),
        text: Some(text.into()),
        data: None,
        depth: 0,
    }
}

/// A human's message `text` to post (id: the name in lower case), starting a chain.
pub fn human_message(name: &str, text: &str) -> crate::store::NewMessage {
    crate::store::NewMessage {
        sender: crate::store::Sender {
            groups: Vec::new(),
            id: name.to_lowercase(),
            name: name.into(),
            kind: Some(crate::store::MemberKind::Human),
        },
        text: text.into(),
        mention: None,
        idempotency_key: None,
        urgent: false,
        depth: 0,
    }
}

/// A space record with these agents, then these humans (id: the name in lower case), keeping
/// up to 1,000 messages.
pub fn space_record(
    display_name: &str,
    agents: &[&str],
    humans: &[&str],
) -> crate::store::SpaceRecord {
    use crate::store::{Member, MemberKind};
    let agents = agents.iter().map(|a| Member {
        kind: MemberKind::Agent,
        id: a.to_string(),
        name: a.to_string(),
    });
    let humans = humans.iter().map(|h| Member {
        kind: MemberKind::Human,
        id: h.to_lowercase(),
        name: h.to_string(),
    });
    crate::store::SpaceRecord {
        v: crate::store::V1,
        display_name: display_name.into(),
        members: agents.chain(humans).collect(),
        max_messages: 1000,
        groups: Vec::new(),
        max_message_bytes: crate::store::DEFAULT_MAX_MESSAGE_BYTES,
        loop_guard: Default::default(),
        context_id: None,
    }
}

/// Applies the CRDs to a real API server (server-side, field manager `manager`) and waits
/// until it serves them (for the e2e suite and the operator benchmark).
pub async fn install_crds(client: &kube::Client, manager: &str) -> Result<(), String> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Patch, PatchParams};
    use kube::ResourceExt;
    let crds: kube::Api<CustomResourceDefinition> = kube::Api::all(client.clone());
    for crd in crate::crd::definitions() {
        let name = crd.name_any();
        crds.patch(
            &name,
            &PatchParams::apply(manager).force(),
            &Patch::Apply(&crd),
        )
        .await
        .map_err(|e| format!("applying CRD {name}: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let established = crds
                .get(&name)
                .await
                .ok()
                .and_then(|c| c.status?.conditions)
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
            if established {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("CRD {name} not established within 30s"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// Everything logged on this thread while it lives (a subscriber of this thread only): what
/// the tests that look for leaked secrets read.
#[derive(Clone, Default)]
pub struct CapturedLogs(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl CapturedLogs {
    /// Captures every level up to `level` as text lines (as `agentfleet` writes them, without
    /// colours), until the guard is dropped.
    pub fn capture(level: tracing::Level) -> (Self, tracing::subscriber::DefaultGuard) {
        Self::capture_as(crate::telemetry::LogFormat::Text, level)
    }

    /// Captures every level up to `level` as JSON lines (`--log-format json`), until the guard
    /// is dropped.
    pub fn capture_json(level: tracing::Level) -> (Self, tracing::subscriber::DefaultGuard) {
        Self::capture_as(crate::telemetry::LogFormat::Json, level)
    }

    fn capture_as(
        format: crate::telemetry::LogFormat,
        level: tracing::Level,
    ) -> (Self, tracing::subscriber::DefaultGuard) {
        use tracing_subscriber::layer::SubscriberExt as _;
        let logs = CapturedLogs::default();
        let writer = logs.clone();
        let lines = crate::telemetry::logs::layer(format, move || writer.clone(), false);
        let subscriber =
            tracing_subscriber::registry().with(tracing_subscriber::Layer::with_filter(
                lines,
                tracing_subscriber::filter::LevelFilter::from_level(level),
            ));
        (logs, tracing::subscriber::set_default(subscriber))
    }

    /// What was logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }
}

impl std::io::Write for CapturedLogs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Reads the events of an SSE response (a space's stream) as a client does.
pub struct SseReader {
    body: futures::stream::BoxStream<'static, reqwest::Result<Vec<u8>>>,
    parser: crate::chat::SseParser,
    read: std::collections::VecDeque<crate::chat::SseEvent>,
}

impl SseReader {
    /// Reads `response`'s body.
    pub fn new(response: reqwest::Response) -> Self {
        use futures::StreamExt;
        Self {
            body: response
                .bytes_stream()
                .map(|r| r.map(|b| b.to_vec()))
                .boxed(),
            parser: crate::chat::SseParser::default(),
            read: Default::default(),
        }
    }

    /// The data (JSON) of the next event named `event` within `within`, skipping others.
    pub async fn next(
        &mut self,
        event: &str,
        within: Duration,
    ) -> Result<serde_json::Value, String> {
        use futures::StreamExt;
        let deadline = tokio::time::Instant::now() + within;
        loop {
            while let Some(e) = self.read.pop_front() {
                if e.event == event {
                    return serde_json::from_str(&e.data)
                        .map_err(|err| format!("{event} event not JSON ({err}): {}", e.data));
                }
            }
            let chunk = tokio::time::timeout_at(deadline, self.body.next())
                .await
                .map_err(|_| format!("no {event} event within {within:?}"))?
                .ok_or_else(|| format!("the stream ended before a {event} event"))?
                .map_err(|e| format!("the stream failed: {e}"))?;
            self.read.extend(self.parser.feed(&chunk));
        }
    }
}

/// Spawns `command` (`agentfleet worker` or `pool`), logging as text at `info`, and returns it
/// once it says it listens for wake signals (within `within`).
pub fn spawn_listening(command: &mut Command, within: std::time::Duration) -> Result<Kill, String> {
    use std::io::BufRead as _;
    let mut child = Kill(
        command
            .env("RUST_LOG", "info")
            .env("AGENTFLEET_LOG_FORMAT", "text")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting {:?}: {e}", command.get_program()))?,
    );
    let err = child
        .0
        .stderr
        .take()
        .ok_or("the process has no standard error")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            if line.contains("listening for wake signals") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(within)
        .map_err(|_| format!("the process never listened for wake signals within {within:?}"))?;
    Ok(child)
}

/// `BIN worker` for the agent of `manifest` on the Redis at `redis_url`: a one-second lease
/// (a killed worker's successor takes over at once), metrics on a free loopback port, stdout
/// dropped. The caller decides stderr and spawns it.
pub fn worker_command(
    bin: &str,
    manifest: &std::path::Path,
    redis_url: &str,
) -> Result<Command, String> {
    let manifest = manifest
        .to_str()
        .ok_or_else(|| format!("{} is not UTF-8", manifest.display()))?;
    let mut command = Command::new(bin);
    command
        .args([
            "worker",
            "--agent",
            manifest,
            "--lease-seconds",
            "1",
            "--metrics-addr",
            &format!("127.0.0.1:{}", free_port()?),
        ])
        .env("AGENTFLEET_REDIS_URL", redis_url)
        .stdout(Stdio::null());
    Ok(command)
}

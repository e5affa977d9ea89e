//! The gateway on a free port over a real `redis-server`, and clients: reqwest, an SSE reader,
//! raw TCP.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use agentfleet::chat::{SseEvent, SseParser};
use agentfleet::gateway::auth::{Entity, EntityKind, Tokens};
use agentfleet::gateway::{self, Gateway, Limits};
use agentfleet::identity::AgentKey;
use agentfleet::identity::SpaceKey;
use agentfleet::store::{prelude::*, RedisStore};
use agentfleet::testing::{space_record, RedisServer};

pub const HUSAM: &str = "tok-husam";
pub const MUHAMMAD: &str = "tok-muhammad";
pub const ALERTS: &str = "tok-alerts";

/// The data plane under the gateway.
pub enum DataPlane {
    One {
        _server: RedisServer,
    },
    Cluster {
        _nodes: agentfleet::testing::RedisCluster,
    },
}

pub struct Fixture {
    /// Held: the servers live as long as the fixture.
    pub _data: DataPlane,
    /// The URL the gateway's store was given.
    pub redis_url: String,
    pub store: Arc<dyn Store>,
    pub addr: SocketAddr,
    pub base: String,
    pub http: reqwest::Client,
    pub registry: prometheus::Registry,
    pub shutdown: watch::Sender<bool>,
    pub server: tokio::task::JoinHandle<std::io::Result<()>>,
}

pub fn human(id: &str, name: &str) -> Entity {
    Entity {
        kind: EntityKind::Human,
        id: id.into(),
        name: name.into(),
        agents: vec![],
        groups: Vec::new(),
    }
}

/// The tokens of the fixture's callers.
pub fn tokens() -> Tokens {
    Tokens::from_plain([
        (HUSAM.to_string(), human("husam", "Husam")),
        (MUHAMMAD.to_string(), human("muhammad", "Muhammad")),
        (
            ALERTS.to_string(),
            Entity {
                kind: EntityKind::Service,
                id: "alerts".into(),
                name: "Alertmanager".into(),
                agents: vec!["ops/oncall".into(), "ops/ghost".into()],
                groups: Vec::new(),
            },
        ),
    ])
}

pub async fn start(limits: Limits) -> Fixture {
    start_with(limits, tokens()).await
}

pub async fn start_with(limits: Limits, tokens: Tokens) -> Fixture {
    let redis = RedisServer::start().unwrap();
    start_over(DataPlane::One { _server: redis }, limits, tokens, None).await
}

/// The gateway taking Kubernetes tokens too, reviewed by `reviewer`.
pub async fn start_reviewing(reviewer: agentfleet::gateway::kubernetes::Reviewer) -> Fixture {
    let redis = RedisServer::start().unwrap();
    start_over(
        DataPlane::One { _server: redis },
        Limits::default(),
        tokens(),
        Some(reviewer),
    )
    .await
}

/// The gateway over a real Redis Cluster (three primaries, three replicas), given one node.
pub async fn start_on_cluster(limits: Limits) -> Fixture {
    let cluster = agentfleet::testing::RedisCluster::start().unwrap();
    start_over(
        DataPlane::Cluster { _nodes: cluster },
        limits,
        tokens(),
        None,
    )
    .await
}

async fn start_over(
    data: DataPlane,
    limits: Limits,
    tokens: Tokens,
    reviewer: Option<agentfleet::gateway::kubernetes::Reviewer>,
) -> Fixture {
    agentfleet::install_crypto_provider();
    let redis_url = match &data {
        DataPlane::One { _server: r } => r.url(),
        DataPlane::Cluster { _nodes: c } => c.url(),
    };
    let store: Arc<dyn Store> = Arc::new(RedisStore::new(&redis_url).unwrap());
    store
        .apply_space(
            &SpaceKey::new("ops", "family"),
            &space_record("Family", &["assistant"], &["Husam", "Muhammad"]),
        )
        .await
        .unwrap();
    store
        .apply_space(
            &SpaceKey::new("ops", "engineering"),
            &space_record("Engineering", &["reviewer", "oncall"], &["Husam"]),
        )
        .await
        .unwrap();
    for a in ["assistant", "reviewer", "oncall"] {
        store
            .register_agent(&AgentKey::new("ops", a))
            .await
            .unwrap();
    }
    let registry = prometheus::Registry::new();
    let (tx, rx) = watch::channel(false);
    let gw = Gateway::new(store.clone(), tokens, limits, &registry, rx).unwrap();
    if let Some(reviewer) = reviewer {
        gw.set_kubernetes(reviewer);
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(gateway::serve(listener, gw, registry.clone()));
    Fixture {
        _data: data,
        redis_url,
        store,
        addr,
        base: format!("http://{addr}"),
        http: reqwest::Client::new(),
        registry,
        shutdown: tx,
        server,
    }
}

impl Fixture {
    pub async fn post(&self, token: &str, space: &str, body: Value) -> (u16, Value) {
        let resp = self
            .http
            .post(format!("{}/v1/spaces/ops/{space}/messages", self.base))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap();
        (resp.status().as_u16(), resp.json().await.unwrap())
    }

    pub async fn get(&self, token: Option<&str>, path: &str) -> (u16, Value) {
        let mut req = self.http.get(format!("{}{path}", self.base));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    pub async fn stream(&self, token: &str, space: &str, last: Option<&str>) -> Sse {
        let mut req = self
            .http
            .get(format!("{}/v1/spaces/ops/{space}/stream", self.base))
            .bearer_auth(token);
        if let Some(id) = last {
            req = req.header("Last-Event-ID", id);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(
            resp.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        Sse {
            body: Box::pin(resp.bytes_stream()),
            parser: SseParser::default(),
            pending: Default::default(),
        }
    }

    /// The value of a metric line (`name{labels}` as the text format writes it).
    pub fn metric(&self, line: &str) -> f64 {
        let mut buf = Vec::new();
        use prometheus::Encoder as _;
        prometheus::TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .unwrap();
        let text = String::from_utf8(buf).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(line)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no metric {line} in\n{text}"))
            .parse()
            .unwrap()
    }

    /// A raw TCP connection to the gateway.
    pub async fn connect(&self) -> TcpStream {
        TcpStream::connect(self.addr).await.unwrap()
    }
}

type Body =
    std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<axum::body::Bytes>> + Send>>;

pub struct Sse {
    body: Body,
    parser: SseParser,
    pending: std::collections::VecDeque<SseEvent>,
}

impl Sse {
    pub async fn next(&mut self) -> SseEvent {
        loop {
            if let Some(e) = self.pending.pop_front() {
                return e;
            }
            let chunk = tokio::time::timeout(Duration::from_secs(5), self.body.next())
                .await
                .expect("an SSE event within 5s")
                .expect("the stream is open")
                .unwrap();
            self.pending.extend(self.parser.feed(&chunk));
        }
    }

    pub async fn next_message(&mut self) -> (String, Value) {
        loop {
            let e = self.next().await;
            if e.event == "message" {
                return (e.id.unwrap(), serde_json::from_str(&e.data).unwrap());
            }
        }
    }

    /// The next event that is not a message, delta or activity.
    pub async fn next_other(&mut self) -> SseEvent {
        loop {
            let e = self.next().await;
            if !["message", "delta", "activity"].contains(&e.event.as_str()) {
                return e;
            }
        }
    }

    /// Asserts the server ends the stream (within 5 s) with no further event.
    pub async fn assert_ends(&mut self) {
        assert!(self.pending.is_empty(), "events left: {:?}", self.pending);
        loop {
            let chunk = tokio::time::timeout(Duration::from_secs(5), self.body.next())
                .await
                .expect("the stream ends within 5s");
            match chunk {
                None | Some(Err(_)) => return,
                Some(Ok(bytes)) => {
                    let events = self.parser.feed(&bytes);
                    assert!(events.is_empty(), "an event after the end: {events:?}");
                }
            }
        }
    }
}

/// Everything the peer sends until it closes (or `within` passes: then `None`).
pub async fn read_until_closed(tcp: &mut TcpStream, within: Duration) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    tokio::time::timeout(within, async {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .ok()?;
    Some(out)
}

/// Sends `request` on a fresh connection and reads the answer until the server closes.
pub async fn exchange(f: &Fixture, request: &[u8]) -> Response {
    let mut tcp = f.connect().await;
    tcp.write_all(request).await.unwrap();
    let raw = read_until_closed(&mut tcp, Duration::from_secs(10))
        .await
        .expect("the server answers and closes within 10s");
    Response::parse(&raw)
}

/// An HTTP/1.1 response read off a raw socket.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn parse(raw: &[u8]) -> Self {
        let text = String::from_utf8_lossy(raw);
        let (head, body) = text
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("no response head in {text:?}"));
        let mut lines = head.lines();
        let status = lines.next().unwrap()[9..12].parse().unwrap();
        let headers = lines
            .map(|l| {
                let (n, v) = l.split_once(':').unwrap();
                (n.to_ascii_lowercase(), v.trim().to_string())
            })
            .collect();
        Self {
            status,
            headers,
            body: body.as_bytes().to_vec(),
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The JSON error's code, checking the answer is a whole JSON error.
    pub fn error_code(&self) -> String {
        assert_eq!(
            self.header("content-type"),
            Some("application/json"),
            "{self:?}"
        );
        assert_eq!(
            self.header("content-length"),
            Some(self.body.len().to_string().as_str()),
            "{self:?}"
        );
        let v: Value = serde_json::from_slice(&self.body).unwrap();
        assert!(v["error"]["message"].is_string(), "{v}");
        v["error"]["code"].as_str().unwrap().to_string()
    }
}

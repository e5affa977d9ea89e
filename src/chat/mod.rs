//! `agentfleet chat NS/SPACE`: a terminal client of the gateway. Type lines as the token's
//! human; agents' replies appear as they are written, with who is thinking or typing; the
//! recent history is shown on start; Ctrl-D leaves.
//!
//! The stream resumes from the last message seen (`Last-Event-ID`) when the connection
//! drops, so nothing posted meanwhile is missed.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context as _};
use futures::StreamExt;
use tokio::io::AsyncBufReadExt;

use crate::gateway::api::{
    ActivityEvent, DeltaEvent, ErrorBody, Message, MessagePage, Posted, SpaceInfo,
};

/// Flags of `agentfleet chat`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// The space, as NAMESPACE/NAME.
    pub space: String,
    /// The gateway's URL.
    #[arg(
        long,
        env = "AGENTFLEET_GATEWAY",
        default_value = "http://127.0.0.1:8080"
    )]
    pub gateway: String,
    /// Bearer token of a human member of the space.
    #[arg(long, env = "AGENTFLEET_TOKEN", hide_env_values = true)]
    pub token: String,
    /// Messages of history to show on start.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u16).range(0..=500))]
    pub history: u16,
}

/// One SSE event.
#[derive(Debug, Default, PartialEq)]
pub struct SseEvent {
    /// `event:` (default `message`).
    pub event: String,
    /// `data:` lines joined by newlines.
    pub data: String,
    /// `id:`, if the event had one.
    pub id: Option<String>,
}

/// Splits a byte stream into SSE events (comments and `retry:` are dropped).
#[derive(Default)]
pub struct SseParser {
    buf: String,
}

impl SseParser {
    /// Feeds bytes; returns the events they complete.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        self.buf.push_str(&String::from_utf8_lossy(bytes));
        if self.buf.contains('\r') {
            self.buf = self.buf.replace("\r\n", "\n").replace('\r', "\n");
        }
        let mut out = Vec::new();
        while let Some(end) = self.buf.find("\n\n") {
            let block: String = self.buf.drain(..end + 2).collect();
            let mut ev = SseEvent::default();
            let mut data = Vec::new();
            for line in block.lines() {
                let (field, value) = line.split_once(':').unwrap_or((line, ""));
                let value = value.strip_prefix(' ').unwrap_or(value);
                match field {
                    "event" => ev.event = value.to_string(),
                    "data" => data.push(value.to_string()),
                    "id" => ev.id = Some(value.to_string()),
                    _ => {}
                }
            }
            if data.is_empty() {
                continue;
            }
            if ev.event.is_empty() {
                ev.event = "message".into();
            }
            ev.data = data.join("\n");
            out.push(ev);
        }
        out
    }
}

/// What the terminal shows: permanent lines, plus (on a terminal) one status line that is
/// redrawn in place: who is thinking, or the reply being typed.
struct Screen {
    tty: bool,
    status: BTreeMap<String, String>,
    shown: bool,
}

impl Screen {
    fn clear(&mut self, out: &mut impl Write) {
        if self.tty && self.shown {
            let _ = write!(out, "\r\x1b[2K");
            self.shown = false;
        }
    }

    fn redraw(&mut self, out: &mut impl Write) {
        self.clear(out);
        if self.tty && !self.status.is_empty() {
            let line: Vec<String> = self
                .status
                .iter()
                .map(|(who, what)| format!("{who} {what}"))
                .collect();
            let mut line = line.join(" · ");
            // Keep the newest text of a long reply in view.
            let chars = line.chars().count();
            if chars > 100 {
                line = format!("…{}", line.chars().skip(chars - 97).collect::<String>());
            }
            let _ = write!(out, "\x1b[2m{line}\x1b[0m");
            self.shown = true;
        }
        let _ = out.flush();
    }

    fn line(&mut self, text: &str) {
        let mut out = std::io::stdout().lock();
        self.clear(&mut out);
        let _ = writeln!(out, "{text}");
        self.redraw(&mut out);
    }

    fn set_status(&mut self, who: &str, what: Option<String>) {
        let changed = match &what {
            Some(w) => self.status.insert(who.to_string(), w.clone()).as_ref() != Some(w),
            None => self.status.remove(who).is_some(),
        };
        if !changed {
            return;
        }
        let mut out = std::io::stdout().lock();
        if self.tty {
            self.redraw(&mut out);
        } else if let Some(w) = what {
            // Not a terminal: say once what an agent starts doing.
            if !w.starts_with("is typing: ") {
                let _ = writeln!(out, "· {who} {w}");
            }
        }
    }
}

fn format_message(m: &Message) -> String {
    format!("{}: {}", m.sender.name, m.text)
}

/// The API error of a response, as one line.
async fn api_error(resp: reqwest::Response) -> anyhow::Error {
    let status = resp.status();
    match resp.json::<ErrorBody>().await {
        Ok(b) => anyhow::anyhow!(
            "{} ({}): {}",
            b.error.code,
            status.as_u16(),
            b.error.message
        ),
        Err(_) => anyhow::anyhow!("the gateway answered {status}"),
    }
}

struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
    ns: String,
    space: String,
}

impl Client {
    fn url(&self, tail: &str) -> String {
        format!("{}/v1/spaces/{}/{}{tail}", self.base, self.ns, self.space)
    }

    async fn get<T: serde::de::DeserializeOwned>(&self, url: &str) -> anyhow::Result<T> {
        self.call(self.http.get(url)).await
    }

    async fn post(&self, text: &str, key: &str) -> anyhow::Result<Posted> {
        let req = self
            .http
            .post(self.url("/messages"))
            .header("Idempotency-Key", key)
            .json(&serde_json::json!({ "text": text }));
        self.call(req).await
    }

    /// Sends an authenticated request; the JSON answer, or the API error as one line.
    async fn call<T: serde::de::DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
    ) -> anyhow::Result<T> {
        let resp = req
            .bearer_auth(&self.token)
            .send()
            .await
            .with_context(|| format!("reaching the gateway at {}", self.base))?;
        if !resp.status().is_success() {
            return Err(api_error(resp).await);
        }
        resp.json().await.context("reading the gateway's answer")
    }
}

/// Follows the space's stream, reconnecting after `last` when it drops. Returns only on an
/// error that reconnecting cannot fix (the token or membership was revoked).
async fn follow(
    client: Arc<Client>,
    screen: Arc<Mutex<Screen>>,
    mut last: Option<String>,
) -> anyhow::Error {
    let mut backoff = Duration::from_millis(500);
    let mut typing: BTreeMap<String, String> = BTreeMap::new();
    loop {
        let mut req = client
            .http
            .get(client.url("/stream"))
            .bearer_auth(&client.token)
            .header("Accept", "text/event-stream");
        if let Some(id) = &last {
            req = req.header("Last-Event-ID", id);
        }
        match req.send().await {
            Ok(resp) if resp.status().is_success() => {
                backoff = Duration::from_millis(500);
                let mut parser = SseParser::default();
                let mut body = resp.bytes_stream();
                while let Some(Ok(chunk)) = body.next().await {
                    for ev in parser.feed(&chunk) {
                        let Ok(mut screen) = screen.lock() else {
                            return anyhow::anyhow!("terminal state poisoned");
                        };
                        match ev.event.as_str() {
                            "message" => {
                                if let Ok(m) = serde_json::from_str::<Message>(&ev.data) {
                                    typing.remove(&m.sender.name);
                                    screen.set_status(&m.sender.name, None);
                                    screen.line(&format_message(&m));
                                    last = ev.id.or(Some(m.id));
                                }
                            }
                            "delta" => {
                                if let Ok(d) = serde_json::from_str::<DeltaEvent>(&ev.data) {
                                    let text = typing.entry(d.sender.name.clone()).or_default();
                                    text.push_str(&d.delta);
                                    let shown = format!("is typing: {text}");
                                    screen.set_status(&d.sender.name, Some(shown));
                                }
                            }
                            "activity" => {
                                if let Ok(a) = serde_json::from_str::<ActivityEvent>(&ev.data) {
                                    let what = match (a.activity.as_str(), &a.tool) {
                                        ("thinking", _) => Some("is thinking…".to_string()),
                                        ("tool", Some(t)) if t != "send_message" => {
                                            Some(format!("is using {t}…"))
                                        }
                                        ("idle", _) => {
                                            typing.remove(&a.sender.name);
                                            None
                                        }
                                        _ => continue,
                                    };
                                    screen.set_status(&a.sender.name, what);
                                }
                            }
                            _ => {}
                        }
                    }
                }
            }
            Ok(resp) => {
                let status = resp.status();
                let err = api_error(resp).await;
                if status.is_client_error() && status != reqwest::StatusCode::TOO_MANY_REQUESTS {
                    return err;
                }
            }
            Err(_) => {}
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}

/// `agentfleet chat`.
pub async fn run(args: Args) -> anyhow::Result<()> {
    crate::install_crypto_provider();
    let Some((ns, space)) = args.space.split_once('/') else {
        bail!("the space is NAMESPACE/NAME, not {:?}", args.space);
    };
    let client = Arc::new(Client {
        http: reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .context("building the HTTP client")?,
        base: args.gateway.trim_end_matches('/').to_string(),
        token: args.token.clone(),
        ns: ns.to_string(),
        space: space.to_string(),
    });
    let info: SpaceInfo = client.get(&client.url("")).await?;
    let screen = Arc::new(Mutex::new(Screen {
        tty: std::io::stdout().is_terminal(),
        status: BTreeMap::new(),
        shown: false,
    }));
    let members: Vec<String> = info
        .members
        .iter()
        .map(|m| {
            if m.kind == "agent" {
                format!("{} (agent)", m.name)
            } else {
                m.name.clone()
            }
        })
        .collect();
    let history: MessagePage = client
        .get(&client.url(&format!("/messages?limit={}", args.history.max(1))))
        .await?;
    // The stream resumes after the newest message shown (or from the start of the log), so a
    // message posted before the stream is connected is not missed.
    let last = Some(
        history
            .messages
            .first()
            .map_or_else(|| "0-0".to_string(), |m| m.id.clone()),
    );
    if let Ok(mut s) = screen.lock() {
        s.line(&format!(
            "{} ({}/{}) — {}\nType a message and press Enter; Ctrl-D leaves.\n",
            info.display_name,
            info.namespace,
            info.name,
            members.join(", ")
        ));
        if args.history > 0 {
            for m in history.messages.iter().rev() {
                s.line(&format_message(m));
            }
        }
    }

    let mut follower = tokio::spawn(follow(client.clone(), screen.clone(), last));
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut n = 0u64;
    let session = crate::gateway::auth::new_token("chat-")?;
    loop {
        tokio::select! {
            line = lines.next_line() => {
                let Some(line) = line.context("reading the terminal")? else { break };
                let text = line.trim();
                if text.is_empty() {
                    continue;
                }
                n += 1;
                if let Err(e) = client.post(text, &format!("{session}-{n}")).await {
                    if let Ok(mut s) = screen.lock() {
                        s.line(&format!("! not sent: {e:#}"));
                    }
                }
            }
            ended = &mut follower => {
                return Err(match ended {
                    Ok(e) => e.context("the stream ended"),
                    Err(e) => anyhow::anyhow!("the stream stopped: {e}"),
                });
            }
        }
    }
    follower.abort();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_events_are_parsed_across_chunks() {
        let mut p = SseParser::default();
        assert!(p
            .feed(b"retry: 2000\n: connected\n\nevent: mess")
            .is_empty());
        let evs = p.feed(b"age\ndata: {\"a\":1}\nid: 5-0\n\nevent: delta\r\ndata: x\r\n\r\n");
        assert_eq!(
            evs,
            vec![
                SseEvent {
                    event: "message".into(),
                    data: "{\"a\":1}".into(),
                    id: Some("5-0".into())
                },
                SseEvent {
                    event: "delta".into(),
                    data: "x".into(),
                    id: None
                },
            ]
        );
        assert_eq!(p.feed(b"data: a\ndata: b\n\n")[0].data, "a\nb");
    }
}

//! `agentfleet chat NS/SPACE`: a terminal client of the gateway. Type lines as the token's
//! human; agents' replies appear as they are written, with who is thinking or typing; the
//! recent history is shown on start; Ctrl-D leaves. Agents' requests for a human are shown
//! with their call id, and answered by typing `/approve ID [reason]`, `/deny ID REASON` or
//! `/answer ID {json}` (module `calls`).
//!
//! The stream resumes from the last message seen (`Last-Event-ID`) when the connection
//! drops, so nothing posted meanwhile is missed; when the gateway refuses it for good (the
//! token or the membership was revoked), chat ends at once, whether or not someone is typing.
//!
//! Everything shown comes from other people and their agents, so it is shown through
//! `screen`, which escapes whatever a terminal would obey.

mod requests;
mod screen;
mod sse;

use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use futures::StreamExt;
use reqwest::StatusCode;

use crate::api::{ActivityEvent, DeltaEvent, ErrorBody, Message, MessagePage, Posted, SpaceInfo};
use screen::Screen;
pub use sse::{SseEvent, SseParser};

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
    /// Bearer token of a member of the space; by default the current kubeconfig context's
    /// (its token, token file or credential plugin, as kubectl uses them).
    #[arg(long, env = "AGENTFLEET_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Messages of history to show on start.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u16).range(0..=500))]
    pub history: u16,
}

/// The terminal, shared by the stream and the input loop.
type Shared = Arc<Mutex<Screen<std::io::Stdout>>>;

/// The requests seen, shared by the stream's follower and the typed lines.
type Waiting = Arc<Mutex<requests::Waiting>>;

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

    /// Answers a paused tool call of the space with `body`.
    async fn answer(
        &self,
        call: &str,
        body: &serde_json::Value,
    ) -> anyhow::Result<crate::api::CallAnswered> {
        let req = self
            .http
            .post(self.url(&format!("/tool-calls/{call}")))
            .json(body);
        self.call(req).await
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

/// Whether reconnecting cannot help: the token, the membership or the space is gone (a client
/// error other than a timeout or a rate limit).
fn permanent(status: StatusCode) -> bool {
    status.is_client_error()
        && !matches!(
            status,
            StatusCode::REQUEST_TIMEOUT | StatusCode::TOO_MANY_REQUESTS
        )
}

/// Follows the space's stream, reconnecting after `last` when it drops. Returns only on an
/// error that reconnecting cannot fix (the token or membership was revoked).
async fn follow(
    client: Arc<Client>,
    screen: Shared,
    waiting: Waiting,
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
                    let Ok(mut screen) = screen.lock() else {
                        return anyhow::anyhow!("terminal state poisoned");
                    };
                    let Ok(mut waiting) = waiting.lock() else {
                        return anyhow::anyhow!("terminal state poisoned");
                    };
                    for ev in parser.feed(&chunk) {
                        if let Some(id) = show(&mut screen, &mut typing, &mut waiting, ev) {
                            last = Some(id);
                        }
                    }
                }
            }
            Ok(resp) => {
                let status = resp.status();
                let err = api_error(resp).await;
                if permanent(status) {
                    return err;
                }
            }
            Err(_) => {}
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}

/// Shows one event of the stream (`typing`: each agent's reply so far). A message returns the
/// id to resume after.
fn show(
    screen: &mut Screen<std::io::Stdout>,
    typing: &mut BTreeMap<String, String>,
    waiting: &mut requests::Waiting,
    ev: SseEvent,
) -> Option<String> {
    if let Some(request) = requests::request(&ev.event, &ev.data) {
        // Shown once: its line only when no message of the agent said it.
        if waiting.saw_request(&request) {
            screen.line(&requests::line(&request));
        }
        return None;
    }
    match ev.event.as_str() {
        "message" => {
            let m: Message = serde_json::from_str(&ev.data).ok()?;
            waiting.saw_message(&m, true);
            typing.remove(&m.sender.name);
            screen.set_status(&m.sender.name, None);
            screen.line(&format_message(&m));
            return Some(ev.id.unwrap_or(m.id));
        }
        "delta" => {
            let d: DeltaEvent = serde_json::from_str(&ev.data).ok()?;
            let text = typing.entry(d.sender.name.clone()).or_default();
            text.push_str(&d.delta);
            let shown = format!("is typing: {text}");
            screen.set_status(&d.sender.name, Some(shown));
        }
        "activity" => {
            let a: ActivityEvent = serde_json::from_str(&ev.data).ok()?;
            let what = match (a.activity.as_str(), &a.tool) {
                ("thinking", _) => Some("is thinking…".to_string()),
                ("tool", Some(t)) if t != "send_message" => Some(format!("is using {t}…")),
                ("idle", _) => {
                    typing.remove(&a.sender.name);
                    None
                }
                // A failed cycle: said once, as a line of its own (also off a terminal).
                ("error", _) => {
                    typing.remove(&a.sender.name);
                    screen.set_status(&a.sender.name, None);
                    screen.line(&format!(
                        "! {} cannot answer: {}",
                        a.sender.name,
                        a.detail.as_deref().unwrap_or("its cycle failed")
                    ));
                    return None;
                }
                _ => return None,
            };
            screen.set_status(&a.sender.name, what);
        }
        _ => {}
    }
    None
}

/// The lines typed on standard input (without their line end), read on a thread of their own;
/// the channel closes at the end of input. A read of standard input cannot be cancelled: on
/// tokio's blocking pool it would hold up the runtime's shutdown, and so chat's exit, until
/// the next Enter. This thread is never joined: the process ends without waiting for it.
fn typed_lines() -> anyhow::Result<tokio::sync::mpsc::Receiver<std::io::Result<String>>> {
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    std::thread::Builder::new()
        .name("chat-input".into())
        .spawn(move || {
            let mut input = std::io::stdin().lock();
            let mut line = Vec::new();
            loop {
                line.clear();
                let read = match input.read_until(b'\n', &mut line) {
                    Ok(0) => return,
                    Ok(_) => {
                        let text = line.strip_suffix(b"\n").unwrap_or(&line);
                        let text = text.strip_suffix(b"\r").unwrap_or(text);
                        Ok(String::from_utf8_lossy(text).into_owned())
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => Err(e),
                };
                let failed = read.is_err();
                if tx.blocking_send(read).is_err() || failed {
                    return;
                }
            }
        })
        .context("starting the input thread")?;
    Ok(rx)
}

/// `agentfleet chat`.
pub async fn run(args: Args) -> anyhow::Result<()> {
    crate::install_crypto_provider();
    let space = crate::identity::SpaceKey::named(&args.space).map_err(anyhow::Error::msg)?;
    let client = Arc::new(Client {
        http: reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .context("building the HTTP client")?,
        base: args.gateway.trim_end_matches('/').to_string(),
        token: match &args.token {
            Some(token) => token.clone(),
            None => crate::cli::kubeconfig::token().await?,
        },
        ns: space.namespace,
        space: space.name,
    });
    let info: SpaceInfo = client.get(&client.url("")).await?;
    let stdout = std::io::stdout();
    let tty = stdout.is_terminal();
    let screen: Shared = Arc::new(Mutex::new(Screen::new(
        stdout,
        tty,
        std::io::stdin().is_terminal(),
        || terminal_size::terminal_size_of(std::io::stdout()).map(|(w, _)| usize::from(w.0)),
    )));
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
            "{} ({}/{}) — {}",
            info.display_name,
            info.namespace,
            info.name,
            members.join(", ")
        ));
        s.line(&format!(
            "Type a message and press Enter; {}; Ctrl-D leaves.",
            requests::HELP
        ));
        s.line("");
        if args.history > 0 {
            for m in history.messages.iter().rev() {
                s.line(&format_message(m));
            }
        }
    }
    let waiting: Waiting = Arc::default();
    if let Ok(mut w) = waiting.lock() {
        for m in history.messages.iter().rev() {
            w.saw_message(m, false);
        }
    }

    let mut follower = tokio::spawn(follow(
        client.clone(),
        screen.clone(),
        waiting.clone(),
        last,
    ));
    let mut typed = typed_lines()?;
    let mut n = 0u64;
    let session = crate::gateway::auth::new_token("chat-")?;
    let result = loop {
        tokio::select! {
            line = typed.recv() => {
                let Some(line) = line else { break Ok(()) };
                let line = line.context("reading the terminal")?;
                if let Ok(mut s) = screen.lock() {
                    s.typed(&line);
                }
                let text = line.trim();
                if text.is_empty() {
                    continue;
                }
                let said = match requests::parse(text) {
                    requests::Typed::Say(text) => {
                        n += 1;
                        client.post(&text, &format!("{session}-{n}")).await.err().map(|e| {
                            format!("! not sent: {}", crate::report::chain(&*e))
                        })
                    }
                    requests::Typed::Answer(named, body) => {
                        let call = waiting.lock().ok().and_then(|w| w.call(named));
                        Some(match call {
                            None => "! no request to answer here yet: name its call id".to_string(),
                            Some(call) => match client.answer(&call, &body).await {
                                Ok(a) => {
                                    if let Ok(mut w) = waiting.lock() {
                                        w.answered(&call);
                                    }
                                    format!("· {} call {}", a.decision, a.call_id)
                                }
                                Err(e) => format!("! not answered: {}", crate::report::chain(&*e)),
                            },
                        })
                    }
                    requests::Typed::Bad(why) => Some(format!("! {why}")),
                };
                if let (Some(said), Ok(mut s)) = (said, screen.lock()) {
                    s.line(&said);
                }
            }
            ended = &mut follower => {
                break Err(match ended {
                    Ok(e) => e.context("the stream ended"),
                    Err(e) => anyhow::anyhow!("the stream stopped: {e}"),
                });
            }
        }
    };
    follower.abort();
    if let Ok(mut s) = screen.lock() {
        s.finish();
    }
    result
}

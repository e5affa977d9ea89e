//! The tools of an MCP server (Streamable HTTP, through `rmcp`), as one [`External`] source.
//!
//! A background task per server connects, lists the tools and keeps the list current; the
//! worker waits only for its first attempt, at a session's start. While the server cannot be
//! reached (down at start, gone since, its Secret missing) its tools are not offered,
//! `status.tools` says why in one `NAME__*` entry, and the task tries again with backoff
//! (1 s doubling to 60 s). Once it answers, its tools are in the next cycle's list. A call of
//! a tool whose server is unavailable, that fails, or that takes longer than `timeoutSeconds`
//! is an error result.
//!
//! The worker learns of every change through [`External::changed`] (it reports its tools
//! again at once) and waits for the first connection attempt through [`External::settled`].
//! A call carries the journal's idempotency key in its `_meta` ([`META_KEY`]) and, for what
//! stands in front of the server, as an `Idempotency-Key` header.

mod connection;
mod keyed;
pub(crate) mod offer;
mod result;

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rmcp::model::{CallToolRequestParams, RequestMetaObject};
use rmcp::{Peer, RoleClient, ServiceError};
use serde_json::{Map, Value};
use tokio::sync::Notify;
use tracing::{info, warn};

use self::connection::{describe, Connection, Credentials, Unlisted, MAX_SAID};
use self::offer::Offer;
use super::secrets::Secrets;
use super::{External, ExternalCall, Outcome};
use crate::crd::{McpServerSpec, ToolStatus};
use crate::identity::AgentKey;
use crate::model::ToolSpec;
use crate::secrets::Redactor;
use crate::worker::Backoff;

pub use self::keyed::META_KEY;
pub use self::offer::{model_name, SEPARATOR};
pub use self::result::MAX_RESULT_BYTES;

/// The first wait before trying an unreachable server again.
const FIRST_RETRY: Duration = Duration::from_secs(1);

/// The longest wait between tries.
const LAST_RETRY: Duration = Duration::from_secs(60);

/// Whether the server can be used now.
enum Link {
    /// Not connected; why, masked (the same text while the cause stays the same, so the
    /// status does not change on every try).
    Down(String),
    /// Connected: what to call through, and what it offers.
    Up {
        peer: Peer<RoleClient>,
        offer: Offer,
    },
}

/// What the server's task and the calls share.
struct Shared {
    spec: McpServerSpec,
    link: RwLock<Link>,
    /// Every name the server's tools were offered under (and the allowlist's): the calls
    /// that are its to answer, up or down.
    known: RwLock<BTreeSet<String>>,
    /// Told whenever `link` changes (the worker reports its tools again).
    changed: Notify,
    /// Whether a connection attempt has ended (every change of `link` is the end of one).
    settled: tokio::sync::watch::Sender<bool>,
    /// Masks the header values of the last Secret read.
    redactor: RwLock<Redactor>,
    /// A call found the connection broken: reconnect now.
    lost: Notify,
}

impl Shared {
    fn link(&self) -> std::sync::RwLockReadGuard<'_, Link> {
        self.link.read().unwrap_or_else(|e| e.into_inner())
    }

    fn set(&self, link: Link) {
        if let Link::Up { offer, .. } = &link {
            let mut known = self.known.write().unwrap_or_else(|e| e.into_inner());
            known.extend(offer.tools.iter().map(|t| t.spec.name.clone()));
        }
        *self.link.write().unwrap_or_else(|e| e.into_inner()) = link;
        self.changed.notify_one();
        self.settled.send_replace(true);
    }

    fn knows(&self, name: &str) -> bool {
        self.known
            .read()
            .map(|k| k.contains(name))
            .unwrap_or_else(|e| e.into_inner().contains(name))
    }

    fn redactor(&self) -> Redactor {
        self.redactor
            .read()
            .map(|r| r.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }

    /// Marks the server down for `cause` (masked here), logging only a change of cause.
    fn down(&self, cause: &str) {
        self.refuse(&format!(
            "MCP server {} is unavailable: {cause}",
            self.spec.name
        ));
    }

    /// Marks the server down, `why` (masked here) being the whole reason.
    fn refuse(&self, why: &str) {
        let why = self.redactor().redact(why);
        let same = matches!(&*self.link(), Link::Down(w) if *w == why);
        if !same {
            warn!(server = %self.spec.name, reason = %why, "MCP tools unavailable; retrying with backoff");
            self.set(Link::Down(why));
        }
    }
}

/// One MCP server's tools. Dropping it stops its background task.
pub struct McpServer {
    shared: Arc<Shared>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for McpServer {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl McpServer {
    /// Starts connecting to the server of `spec` in the background (on the current Tokio
    /// runtime), reading its headers from `secrets`; returns at once.
    pub fn start(agent: &AgentKey, spec: &McpServerSpec, secrets: &Secrets) -> Self {
        let shared = Arc::new(Shared {
            spec: spec.clone(),
            link: RwLock::new(Link::Down(format!(
                "MCP server {} is not connected yet",
                spec.name
            ))),
            known: RwLock::new(
                spec.tools
                    .iter()
                    .map(|t| model_name(&spec.name, t))
                    .collect(),
            ),
            changed: Notify::new(),
            settled: tokio::sync::watch::Sender::new(false),
            redactor: RwLock::new(Redactor::default()),
            lost: Notify::new(),
        });
        let task = match tokio::runtime::Handle::try_current() {
            Ok(runtime) => Some(runtime.spawn(run(agent.clone(), shared.clone(), secrets.clone()))),
            Err(_) => {
                shared.set(Link::Down(format!(
                    "MCP server {} cannot be connected: no async runtime",
                    spec.name
                )));
                None
            }
        };
        Self { shared, task }
    }

    /// Marks the connection lost after a call failed on it, and has the task reconnect.
    fn lost(&self, cause: &str) {
        self.shared.down(cause);
        self.shared.lost.notify_one();
    }
}

/// The server's task: connect, list, keep the list current; when anything fails, say why
/// and try again after a wait (which grows until a listing succeeds: a server whose list is
/// over its bounds is asked again at most every [`LAST_RETRY`]).
async fn run(agent: AgentKey, shared: Arc<Shared>, secrets: Secrets) {
    let mut backoff = Backoff::new(FIRST_RETRY, LAST_RETRY);
    loop {
        match connect(&shared, &secrets).await {
            Ok(mut connection) => {
                let (lost, listed) = follow(&agent, &shared, &mut connection).await;
                if listed {
                    backoff.reset();
                }
                match lost {
                    Unlisted::Failed(cause) => shared.down(&cause),
                    Unlisted::OverLimit(over) => shared.refuse(&over.0),
                }
            }
            Err(cause) => shared.down(&cause),
        }
        tokio::time::sleep(backoff.take()).await;
    }
}

/// Reads the Secret, connects and lists the tools; the error is the cause.
async fn connect(shared: &Shared, secrets: &Secrets) -> Result<Connection, String> {
    let credentials = Credentials::read(&shared.spec, secrets)?;
    *shared.redactor.write().unwrap_or_else(|e| e.into_inner()) = credentials.redactor.clone();
    Connection::open(&shared.spec, &credentials)
        .await
        .map_err(|e| format!("unreachable at {}: {e}", shared.spec.url))
}

/// Keeps the tool list of a live connection current until it is lost; returns why, and
/// whether any listing succeeded. Listings are at least `limits.minRelistSeconds` apart.
async fn follow(
    agent: &AgentKey,
    shared: &Shared,
    connection: &mut Connection,
) -> (Unlisted, bool) {
    let mut listed = false;
    let apart = Duration::from_secs(u64::from(shared.spec.limits.min_relist_seconds));
    loop {
        let started = Instant::now();
        match connection.list(&shared.spec).await {
            Ok(offer) => {
                // What a server says of its tools reaches the model: masked like its results.
                let offer = offer.masked(&shared.redactor());
                let changed = !matches!(&*shared.link(), Link::Up { offer: o, .. } if *o == offer);
                if changed {
                    let names: Vec<&str> =
                        offer.tools.iter().map(|t| t.spec.name.as_str()).collect();
                    info!(agent = %agent, server = %shared.spec.name, tools = ?names, summary = %offer.summary(), connected = !listed, "MCP tools listed");
                    shared.set(Link::Up {
                        peer: connection.peer(),
                        offer,
                    });
                }
                listed = true;
            }
            Err(lost) => return (lost, listed),
        }
        tokio::select! {
            heard = connection.changed(started + apart) => {
                if let Err(cause) = heard {
                    return (Unlisted::Failed(cause), listed);
                }
            }
            _ = shared.lost.notified() => {
                return (Unlisted::Failed("a call found the connection broken".into()), listed)
            }
        }
    }
}

#[async_trait]
impl External for McpServer {
    fn masks(&self) -> Redactor {
        self.shared.redactor()
    }

    fn specs(&self) -> Vec<ToolSpec> {
        match &*self.shared.link() {
            Link::Up { offer, .. } => offer.tools.iter().map(|t| t.spec.clone()).collect(),
            Link::Down(_) => Vec::new(),
        }
    }

    fn status(&self) -> Vec<ToolStatus> {
        match &*self.shared.link() {
            Link::Up { offer, .. } => offer.status(&self.shared.spec.name),
            Link::Down(why) => vec![offer::unavailable(&self.shared.spec.name, why)],
        }
    }

    fn idempotent(&self, _tool: &str) -> bool {
        self.shared.spec.idempotent
    }

    fn asks(&self, tool: &str) -> Option<super::Ask> {
        let spec = &self.shared.spec;
        spec.require_approval
            .iter()
            .any(|pattern| {
                crate::party::tool_matches(
                    &crate::names::prefixed_tool(&spec.name, pattern, true),
                    tool,
                )
            })
            .then_some(super::Ask {
                kind: crate::store::CallKind::Approval,
                result_schema: None,
                timeout_seconds: None,
            })
    }

    /// Its tools, offered now or before (a call of one while the server is down is this
    /// server's error result).
    fn owns(&self, tool: &str) -> bool {
        self.shared.knows(tool)
    }

    async fn changed(&self) {
        self.shared.changed.notified().await
    }

    async fn settled(&self) {
        // The sender lives as long as `self`: waiting cannot fail.
        let _ = self.shared.settled.subscribe().wait_for(|s| *s).await;
    }

    async fn call(&self, call: &ExternalCall<'_>) -> Outcome {
        let redactor = self.shared.redactor();
        let (peer, remote) = match &*self.shared.link() {
            Link::Down(why) => return Outcome::error(why.clone()),
            Link::Up { peer, offer } => match offer.find(call.name) {
                Some(tool) => (peer.clone(), tool.remote.clone()),
                None => {
                    return Outcome::error(format!(
                        "MCP server {} offers no tool {:?} now",
                        self.shared.spec.name, call.name
                    ))
                }
            },
        };
        let arguments = match arguments(call.arguments) {
            Ok(a) => a,
            Err(e) => return Outcome::error(e),
        };
        let limit = Duration::from_secs(u64::from(self.shared.spec.timeout_seconds));
        let mut meta = RequestMetaObject::new();
        meta.insert(META_KEY.into(), Value::String(call.idempotency_key.into()));
        let mut params = CallToolRequestParams::new(remote).with_arguments(arguments);
        params.meta = Some(meta);
        match tokio::time::timeout(limit, peer.call_tool(params)).await {
            Ok(Ok(answer)) => result::outcome(&answer, &redactor),
            Ok(Err(ServiceError::McpError(e))) => Outcome::error(redactor.redact(&format!(
                "MCP server {} refused the call of {}: {}",
                self.shared.spec.name,
                call.name,
                crate::names::cut(&e.message, MAX_SAID)
            ))),
            Ok(Err(e @ (ServiceError::TransportSend(_) | ServiceError::TransportClosed))) => {
                let cause = describe(&e);
                self.lost(&cause);
                Outcome::error(redactor.redact(&format!(
                    "MCP server {} could not be reached for {}: {cause}",
                    self.shared.spec.name, call.name
                )))
            }
            Ok(Err(e)) => Outcome::error(redactor.redact(&format!(
                "MCP tool {} failed: {}",
                call.name,
                describe(&e)
            ))),
            Err(_) => Outcome::error(format!(
                "MCP tool {} did not answer within {}s (timeoutSeconds)",
                call.name, self.shared.spec.timeout_seconds
            )),
        }
    }
}

/// The model's arguments as a JSON object (nothing at all is no arguments).
fn arguments(text: &str) -> Result<Map<String, Value>, String> {
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(Value::Null) => Ok(Map::new()),
        Ok(_) => Err("the arguments must be a JSON object".into()),
        Err(e) => Err(format!("the arguments are not valid JSON: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_an_object() {
        assert_eq!(arguments("").unwrap(), Map::new());
        assert_eq!(arguments("null").unwrap(), Map::new());
        assert_eq!(arguments(r#"{"q": 1}"#).unwrap()["q"], 1);
        assert!(arguments("[1]").unwrap_err().contains("JSON object"));
        assert!(arguments("{").unwrap_err().contains("not valid JSON"));
    }
}

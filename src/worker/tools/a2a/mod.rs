//! Remote agents called over A2A (`spec.tools.a2a`): each skill of a remote agent's card is a
//! tool `NAME__SKILL` that sends it a message and returns its task's answer.
//!
//! - The card is read in the background when the worker starts (again after a failure, with
//!   backoff, and every [`REREAD`]); until then its tools are not offered and `status.tools`
//!   says why. Nothing else of the agent waits for it.
//! - A call sends the message asking for the task at once, then reads the task until it is
//!   over or interrupted (`INPUT_REQUIRED`: the model gets the question, and answers by
//!   calling again with the `taskId`), for `timeoutSeconds`. A task still working then is
//!   followed in the background ([`follow`]) and the call answers `pending`: its result comes
//!   into the inbox as a `tool_result`, like an async HTTP tool's.
//! - Never sent twice: calls are not idempotent (a redone cycle gets "outcome unknown"), and
//!   the message id is the call's idempotency key, so a remote that deduplicates by it sees
//!   one message even from two tries.

mod client;
mod follow;
mod reply;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::HeaderMap;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::Notify;
use tracing::{debug, info, warn};

use super::mcp::offer::{model_name, unavailable_from, SEPARATOR};
use super::{Ask, External, ExternalCall, ExternalContext, Outcome};
use crate::a2a::{Message, Part, Role, SendMessageResponse, Task};
use crate::crd::{A2aAgentToolSpec, ToolStatus};
use crate::identity::AgentKey;
use crate::model::ToolSpec;
use crate::party::depth::GRACE_MS;
use crate::secrets::Redactor;
use crate::store::{now_ms, NewCall, RemoteTask, Store};
use reply::Reply;

pub use client::MAX_ANSWER_BYTES;
pub use reply::{MAX_ERROR_BYTES, MAX_ID_BYTES, MAX_TEXT_BYTES};

/// How often a card that was read is read again (skills may change).
const REREAD: Duration = Duration::from_secs(600);

/// How long reading a card may take.
const CARD_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest skill description offered to the model, in bytes.
const MAX_DESCRIPTION_BYTES: usize = 2048;

/// The most skills offered of one remote agent.
const MAX_SKILLS: usize = 32;

/// The longest tool name model providers take.
const MAX_TOOL_NAME: usize = 64;

/// How often a call reads its task while it waits.
const POLL: Duration = Duration::from_millis(250);

/// A remote agent and the tools made of its skills.
pub struct A2aAgent {
    shared: Arc<Shared>,
    reader: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for A2aAgent {
    fn drop(&mut self) {
        if let Some(task) = self.reader.take() {
            task.abort();
        }
    }
}

/// What the background reader and the calls share.
struct Shared {
    agent: AgentKey,
    spec: A2aAgentToolSpec,
    client: Result<reqwest::Client, String>,
    store: Arc<dyn Store>,
    secrets: super::secrets::Secrets,
    card: Mutex<Card>,
    changed: Notify,
    settled: tokio::sync::watch::Sender<bool>,
}

/// What is known of the card.
enum Card {
    /// Not read yet.
    Reading,
    /// Read: where to send, and the tools (skill id, spec).
    Read {
        url: String,
        tools: Vec<(String, ToolSpec)>,
    },
    /// Could not be read: why.
    Failed(String),
}

impl A2aAgent {
    /// Starts reading `spec`'s card, and following the remote tasks calls of this agent left
    /// open (a restart).
    pub fn start(agent: &AgentKey, spec: &A2aAgentToolSpec, context: &ExternalContext) -> Self {
        crate::install_crypto_provider();
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("agentfleet/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("building the HTTP client: {}", crate::report::chain(&e)));
        let shared = Arc::new(Shared {
            agent: agent.clone(),
            spec: spec.clone(),
            client,
            store: context.store.clone(),
            secrets: context.secrets.clone(),
            card: Mutex::new(Card::Reading),
            changed: Notify::new(),
            settled: tokio::sync::watch::channel(false).0,
        });
        let reader = tokio::spawn(read_card(shared.clone()));
        Self {
            shared,
            reader: Some(reader),
        }
    }
}

/// Reads the card now and then, and once follows the open calls.
async fn read_card(shared: Arc<Shared>) {
    follow::resume(&shared).await;
    let mut backoff = Duration::from_secs(2);
    loop {
        let read = shared.read().await;
        let ok = read.is_ok();
        {
            let mut card = crate::sync::lock(&shared.card);
            *card = match read {
                Ok((url, tools)) => Card::Read { url, tools },
                Err(why) => {
                    // What status and the model are told: masked and bounded like an answer.
                    let why = reply::error(&shared.redactor().redact(&why));
                    info!(agent = %shared.agent, a2a = %shared.spec.name, error = %why, "A2A agent unavailable");
                    Card::Failed(why)
                }
            };
        }
        shared.changed.notify_waiters();
        shared.settled.send_replace(true);
        let wait = if ok {
            backoff = Duration::from_secs(2);
            REREAD
        } else {
            backoff = (backoff * 2).min(Duration::from_secs(120));
            backoff
        };
        tokio::time::sleep(wait).await;
    }
}

impl Shared {
    /// The headers of a request to `to` (the Secret's, read now: a mounted Secret changes in
    /// place). The one place a request gets them: refused for any origin but the one of the
    /// Agent's `url` (see [`same_origin`]).
    fn headers(&self, to: &str) -> Result<HeaderMap, String> {
        match &self.spec.headers_from {
            None => Ok(HeaderMap::new()),
            Some(from) => {
                self.secret_may_go(to)?;
                let entries = self.secrets.get(&from.secret_name)?;
                super::http::request::secret_headers(&from.secret_name, &entries)
            }
        }
    }

    /// Whether the Secret's headers may go to `to`: only to the origin (scheme, host, port)
    /// of the `url` the Agent's author wrote — never where a remote's card points.
    fn secret_may_go(&self, to: &str) -> Result<(), String> {
        if self.spec.headers_from.is_none() || same_origin(&self.spec.url, to) {
            return Ok(());
        }
        Err(format!(
            "its card names its JSON-RPC interface at {}, not at the origin of url ({}), and the Secret of headersFrom goes only there: point url at the origin that serves the interface",
            origin(to),
            origin(&self.spec.url)
        ))
    }

    /// Masks the values of its Secret.
    fn redactor(&self) -> Redactor {
        let names: Vec<&str> = self
            .spec
            .headers_from
            .iter()
            .map(|h| h.secret_name.as_str())
            .collect();
        Redactor::new(self.secrets.values(&names))
    }

    fn client(&self) -> Result<&reqwest::Client, String> {
        self.client.as_ref().map_err(Clone::clone)
    }

    /// Notes that the agent waits on this remote agent until `until_ms`, in a chain `depth`
    /// deep (see [`crate::party::depth`]); a failure is logged (the call goes on).
    async fn note_outbound(&self, key: &str, depth: u32, until_ms: i64) {
        if let Err(e) = self
            .store
            .note_outbound(&self.agent, key, depth, until_ms)
            .await
        {
            warn!(agent = %self.agent, error = %e, "a call of a remote agent could not be noted: a remote calling back meanwhile may start a chain anew");
        }
    }

    /// Reads the card: the JSON-RPC URL and a tool per skill.
    async fn read(&self) -> Result<(String, Vec<(String, ToolSpec)>), String> {
        let masks = self.redactor();
        let headers = self.headers(&client::card_url(&self.spec.url))?;
        let remote =
            client::read_card(self.client()?, &self.spec.url, &headers, CARD_TIMEOUT).await?;
        self.secret_may_go(&remote.url)?;
        let mut tools: Vec<(String, ToolSpec)> = Vec::new();
        for skill in remote.card.skills.iter().take(MAX_SKILLS) {
            let tool = tool_spec(&self.spec.name, &remote.card.name, skill, &masks);
            // A name too long for the providers, one another skill's took, or one with a
            // secret in it: not offered.
            if skill.id.is_empty()
                || tool.name.len() > MAX_TOOL_NAME
                || tools.iter().any(|(_, t)| t.name == tool.name)
                || masks.redact(&tool.name) != tool.name
            {
                debug!(agent = %self.agent, a2a = %self.spec.name, "skill not offered: its tool name is empty, too long, taken or holds a secret");
                continue;
            }
            tools.push((skill.id.clone(), tool));
        }
        if tools.is_empty() {
            return Err("its card lists no skill that can be offered".into());
        }
        Ok((remote.url, tools))
    }
}

/// The origin (scheme, host, port) of `url`, as text; the URL itself when it is none.
fn origin(url: &str) -> String {
    reqwest::Url::parse(url)
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_else(|_| url.to_string())
}

/// Whether `a` and `b` have one origin (scheme, host and port, the default port written or
/// not).
fn same_origin(a: &str, b: &str) -> bool {
    match (reqwest::Url::parse(a), reqwest::Url::parse(b)) {
        (Ok(a), Ok(b)) => a.origin() == b.origin() && a.origin().is_tuple(),
        _ => false,
    }
}

/// The tool a skill is: what the card says of it, the Secret's values masked (a card is the
/// remote's text, like its answers).
fn tool_spec(
    prefix: &str,
    agent: &str,
    skill: &crate::a2a::AgentSkill,
    masks: &Redactor,
) -> ToolSpec {
    let mut description = format!(
        "Ask the remote agent {agent} (A2A) to {}: {}",
        if skill.name.is_empty() {
            &skill.id
        } else {
            &skill.name
        },
        skill.description
    );
    if !skill.examples.is_empty() {
        description.push_str(&format!(" Examples: {}", skill.examples.join("; ")));
    }
    description.push_str(" Returns its answer; if it asks something back (state input_required), call again with its taskId and your answer.");
    let mut description = masks.redact(&description);
    if description.len() > MAX_DESCRIPTION_BYTES {
        let cut = super::mcp::offer::floor_char_boundary(&description, MAX_DESCRIPTION_BYTES);
        description.truncate(cut);
    }
    ToolSpec {
        name: model_name(prefix, &skill.id),
        description,
        parameters: json!({
            "type": "object",
            "properties": {
                "message": {"type": "string", "description": "What to ask or tell it."},
                "taskId": {"type": "string", "description": "To answer a question of one of its tasks: that task's id."},
                "contextId": {"type": "string", "description": "To go on in a conversation with it: the contextId of an earlier answer."}
            },
            "required": ["message"]
        }),
    }
}

/// The arguments of a call.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Args {
    message: String,
    #[serde(default)]
    task_id: Option<String>,
    #[serde(default)]
    context_id: Option<String>,
}

impl A2aAgent {
    /// Runs a call: the outcome's JSON value, or an error message.
    async fn run(&self, call: &ExternalCall<'_>) -> Result<Value, String> {
        let s = &self.shared;
        let (url, skill) = {
            let card = crate::sync::lock(&s.card);
            match &*card {
                Card::Read { url, tools } => (
                    url.clone(),
                    tools
                        .iter()
                        .find(|(_, t)| t.name == call.name)
                        .map(|(id, _)| id.clone())
                        .ok_or_else(|| {
                            format!("{} is no skill of A2A agent {}", call.name, s.spec.name)
                        })?,
                ),
                Card::Reading => {
                    return Err(format!("A2A agent {} is not reachable yet", s.spec.name))
                }
                Card::Failed(why) => {
                    return Err(format!("A2A agent {} is unavailable: {why}", s.spec.name))
                }
            }
        };
        let args: Args = serde_json::from_str(call.arguments)
            .map_err(|e| format!("invalid arguments for {}: {e}", call.name))?;
        if args.message.trim().is_empty() {
            return Err(format!(
                "invalid arguments for {}: message is empty",
                call.name
            ));
        }
        let headers = s.headers(&url)?;
        let message = Message {
            message_id: format!("agentfleet-{}", call.idempotency_key),
            context_id: args.context_id.filter(|c| !c.is_empty()),
            task_id: args.task_id.filter(|t| !t.is_empty()),
            role: Role::User,
            parts: vec![Part::text(args.message)],
            // The chain's depth travels with it: an agentfleet agent on the other side goes
            // on counting (cycle.maxChainDepth), so agents calling each other cannot loop.
            metadata: Some(serde_json::Map::from_iter([
                ("skill".to_string(), Value::String(skill)),
                (crate::a2a::DEPTH_KEY.to_string(), json!(call.depth)),
            ])),
            extensions: Vec::new(),
            reference_task_ids: Vec::new(),
        };
        let wait = Duration::from_secs(u64::from(s.spec.timeout_seconds));
        // While it waits on the remote (and a moment after), what reaches the agent from
        // outside continues this chain: a remote that calls back counts, echoing the depth
        // or not (crate::party::depth).
        let key = call.idempotency_key;
        let waits = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX / 4);
        s.note_outbound(key, call.depth, now_ms() + 2 * waits + GRACE_MS)
            .await;
        let answered = self.exchange(call, &url, &headers, &message, wait).await;
        // Over, or followed from now on: a remote that calls back while it works on a long
        // task past the wait is not told apart from any caller (the note would otherwise
        // stand for days, deepening every caller's chain).
        s.note_outbound(key, call.depth, now_ms() + GRACE_MS).await;
        answered
    }

    /// Sends the message and reads the task until it is over, asks something, or `wait` is
    /// up (then the call goes on asynchronously).
    async fn exchange(
        &self,
        call: &ExternalCall<'_>,
        url: &str,
        headers: &HeaderMap,
        message: &Message,
        wait: Duration,
    ) -> Result<Value, String> {
        let s = &self.shared;
        let client = s.client()?;
        let masks = s.redactor();
        let task = match client::send(client, url, headers, message, wait)
            .await
            .map_err(|f| f.message())?
        {
            SendMessageResponse::Message(m) => {
                return Reply::Message(&m).for_model(&s.spec.name, &masks)
            }
            SendMessageResponse::Task(t) => t,
        };
        // An id that cannot be shown is refused before the task is read again by it.
        reply::checked_id("taskId", &task.id)?;
        let deadline = tokio::time::Instant::now() + wait;
        let mut task = task;
        while !(task.status.state.is_terminal() || task.status.state.is_interrupted()) {
            if tokio::time::Instant::now() >= deadline {
                return self.pending(call, url, &task, &masks).await;
            }
            tokio::time::sleep(POLL).await;
            match client::get(client, url, headers, &task.id, wait).await {
                Ok(t) => task = t,
                Err(f) => {
                    debug!(agent = %s.agent, task = %task.id, error = %f.message(), "reading a remote task failed; trying again")
                }
            }
        }
        Reply::Task(&task).for_model(&s.spec.name, &masks)
    }

    /// Turns a call whose remote task is still working into an asynchronous one.
    async fn pending(
        &self,
        call: &ExternalCall<'_>,
        url: &str,
        task: &Task,
        masks: &Redactor,
    ) -> Result<Value, String> {
        let s = &self.shared;
        let remote = RemoteTask {
            source: s.spec.name.clone(),
            url: url.to_string(),
            task_id: task.id.clone(),
        };
        let ttl = i64::from(s.spec.result_ttl_seconds) * 1000;
        let mut new = NewCall::following(call.agent, call.name, remote, ttl, call.depth)
            .map_err(|e| e.to_string())?;
        new.record.conversation = call.conversation();
        // What the model is to get, before anything is kept: an id over the bound is refused.
        let answer = Reply::Pending {
            task,
            call: new.id.as_str(),
        }
        .for_model(&s.spec.name, masks)?;
        s.store
            .register_call(&new)
            .await
            .map_err(|e| format!("the remote task goes on, but it cannot be followed: {e}"))?;
        follow::spawn(self.shared.clone(), new.id.clone(), new.record.clone());
        Ok(answer)
    }
}

#[async_trait]
impl External for A2aAgent {
    fn specs(&self) -> Vec<ToolSpec> {
        match &*crate::sync::lock(&self.shared.card) {
            Card::Read { tools, .. } => tools.iter().map(|(_, t)| t.clone()).collect(),
            _ => Vec::new(),
        }
    }

    fn status(&self) -> Vec<ToolStatus> {
        let source = format!("a2a:{}", self.shared.spec.name);
        match &*crate::sync::lock(&self.shared.card) {
            Card::Read { tools, .. } => tools
                .iter()
                .map(|(_, t)| ToolStatus {
                    name: t.name.clone(),
                    source: source.clone(),
                    ready: true,
                    last_error: None,
                    note: None,
                })
                .collect(),
            Card::Reading => vec![unavailable_from(
                &self.shared.spec.name,
                &source,
                "its card is being read",
            )],
            Card::Failed(why) => vec![unavailable_from(&self.shared.spec.name, &source, why)],
        }
    }

    fn idempotent(&self, _tool: &str) -> bool {
        false
    }

    async fn call(&self, call: &ExternalCall<'_>) -> Outcome {
        match reply::masked(self.run(call).await, &self.shared.redactor()) {
            Ok(v) => Outcome {
                content: v.to_string(),
                ok: true,
            },
            Err(e) => Outcome::error(e),
        }
    }

    fn continues(&self, _tool: &str) -> bool {
        true
    }

    fn owns(&self, tool: &str) -> bool {
        tool.strip_prefix(self.shared.spec.name.as_str())
            .is_some_and(|rest| rest.starts_with(SEPARATOR))
    }

    async fn changed(&self) {
        self.shared.changed.notified().await
    }

    async fn settled(&self) {
        let mut rx = self.shared.settled.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    fn asks(&self, tool: &str) -> Option<Ask> {
        let spec = &self.shared.spec;
        spec.require_approval
            .iter()
            .any(|pattern| {
                crate::party::tool_matches(
                    &crate::names::prefixed_tool(&spec.name, pattern, true),
                    tool,
                )
            })
            .then_some(Ask {
                kind: crate::store::CallKind::Approval,
                result_schema: None,
                timeout_seconds: None,
            })
    }

    fn masks(&self) -> Redactor {
        self.shared.redactor()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skill_is_a_namespaced_tool_with_a_bounded_description() {
        let skill = crate::a2a::AgentSkill {
            id: "sum up".into(),
            name: "Sum up".into(),
            description: "x".repeat(5000),
            tags: vec!["t".into()],
            examples: Vec::new(),
            input_modes: Vec::new(),
            output_modes: Vec::new(),
            security_requirements: Vec::new(),
        };
        let t = tool_spec("calc", "Calculator", &skill, &Redactor::default());
        assert_eq!(t.name, "calc__sum_up");
        assert!(t.description.len() <= MAX_DESCRIPTION_BYTES);
        assert_eq!(t.parameters["required"], json!(["message"]));
    }

    #[test]
    fn a_secret_in_a_card_is_masked_and_never_a_tools_name() {
        let masks = Redactor::new(["Bearer s3cr3t-t0k3n"]);
        let skill = |id: &str| crate::a2a::AgentSkill {
            id: id.into(),
            name: "Echo".into(),
            description: "I know your token: s3cr3t-t0k3n".into(),
            tags: Vec::new(),
            examples: vec!["say Bearer s3cr3t-t0k3n".into()],
            input_modes: Vec::new(),
            output_modes: Vec::new(),
            security_requirements: Vec::new(),
        };
        let t = tool_spec("r", "Remote", &skill("echo"), &masks);
        assert!(!t.description.contains("s3cr3t"), "{}", t.description);
        assert!(t.description.contains("I know your token: ***"));
        let t = tool_spec("r", "Remote", &skill("s3cr3t-t0k3n"), &masks);
        assert_ne!(
            masks.redact(&t.name),
            t.name,
            "read() leaves such a skill out"
        );
    }

    #[test]
    fn origins_are_scheme_host_and_port() {
        assert!(same_origin("http://a.example/x", "http://A.example:80/y/z"));
        assert!(same_origin(
            "https://a.example/card.json",
            "https://a.example:443/rpc"
        ));
        assert!(!same_origin(
            "http://a.example/x",
            "http://a.example:8080/x"
        ));
        assert!(!same_origin("http://a.example/x", "https://a.example/x"));
        assert!(!same_origin("http://a.example/x", "http://b.example/x"));
        assert!(!same_origin("http://a.example/x", "not a url"));
        assert_eq!(origin("http://127.0.0.1:9/a/b"), "http://127.0.0.1:9");
    }
}

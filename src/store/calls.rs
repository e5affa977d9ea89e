//! Asynchronous tool calls waiting for their result (seed 000, "Async Tool Completion").
//!
//! A worker registers a call before it sends the request that starts it: the call's id, the
//! tool, the hash of a fresh token only the called service gets, and when the call expires.
//! The service later posts its result to the gateway with that token; accepting it marks the
//! call done and pushes a `tool_result` event into the agent's inbox in one atomic step (with
//! a wake signal, like any push), so a result is delivered once and a refused one writes
//! nothing.
//!
//! Calls a human answers go through the same registry (issue 14): an approval
//! (`requireApproval`: a member of the space approves or denies the call before it runs) and an
//! interactive tool (a member supplies its result). Such a record has no token (the gateway
//! checks that the one answering is a member of the record's space) and carries what people
//! are shown (the space, the arguments) and, for an interactive tool, the schema its result
//! must match. The answer goes into the inbox as the same one `tool_result` event, once.
//!
//! A call id names its agent (`NS.NAME.RANDOM`): the gateway finds the agent from the id
//! alone, and every step on a call runs on the agent's own keys (one Redis Cluster slot). A
//! call is remembered [`FORGET_AFTER_MS`] past its expiry (a late result is told it came too
//! late, a repeated one that it is a duplicate); after that it is unknown.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{now_ms, EventKind, InboxEvent, Pushed, Sender, StoreError};
use crate::identity::AgentKey;

/// How long a call is remembered after it expired, in milliseconds (a day).
pub const FORGET_AFTER_MS: i64 = 86_400_000;

/// Random bytes in a call id (hex in the id).
const ID_BYTES: usize = 16;

/// Random bytes in a call's token.
const TOKEN_BYTES: usize = 32;

/// The id of an asynchronous call: `NS.NAME.RANDOM` (a namespace holds no dot, the random
/// part is hex), so it names the agent the result is for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CallId {
    agent: AgentKey,
    id: String,
}

impl CallId {
    /// A fresh id for a call of `agent`.
    pub fn new(agent: &AgentKey) -> Result<Self, NoRandom> {
        let random = random_hex(ID_BYTES)?;
        Ok(Self {
            agent: agent.clone(),
            id: format!("{}.{}.{random}", agent.namespace, agent.name),
        })
    }

    /// Reads an id as [`CallId::as_str`] writes it; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        let (ns, rest) = s.split_once('.')?;
        let (name, random) = rest.rsplit_once('.')?;
        let valid = crate::names::is_dns1123_label(ns)
            && crate::names::is_dns1123_subdomain(name)
            && random.len() == ID_BYTES * 2
            && random
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        valid.then(|| Self {
            agent: AgentKey::new(ns, name),
            id: s.to_string(),
        })
    }

    /// The agent that made the call.
    pub fn agent(&self) -> &AgentKey {
        &self.agent
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.id
    }
}

impl std::fmt::Display for CallId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.id)
    }
}

/// Who answers a call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum CallKind {
    /// The service of an async tool, with the call's token.
    #[default]
    Async,
    /// A member of the space approves or denies the call before it runs.
    Approval,
    /// A member of the space supplies the call's result.
    Interactive,
}

impl CallKind {
    /// Whether a human answers it (in the space of its record), not a service with a token.
    pub fn human(self) -> bool {
        self != CallKind::Async
    }

    /// Its name as status, CLI and API show it (as serialized): `async`, `approval`,
    /// `interactive`.
    pub fn name(self) -> &'static str {
        match self {
            CallKind::Async => "async",
            CallKind::Approval => "approval",
            CallKind::Interactive => "interactive",
        }
    }
}

/// A call as registered: what the step accepting its result checks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallRecord {
    /// The tool called (the name the model calls it by).
    pub tool: String,
    /// Who answers it.
    #[serde(default)]
    pub kind: CallKind,
    /// Hex SHA-256 of the call's token (the token itself is never stored); empty for a call a
    /// human answers.
    #[serde(default)]
    pub token_hash: String,
    /// When the call was made (ms since the epoch; 0 when not kept).
    #[serde(default)]
    pub since_ms: i64,
    /// When results stop being accepted (ms since the epoch).
    pub expires_ms: i64,
    /// For a human's call: the space it was asked in (only its members answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub space: Option<String>,
    /// For a human's call: the arguments shown (secrets masked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// For an interactive tool: the JSON Schema its result must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_schema: Option<Value>,
    /// The causal depth of the cycle that made the call: an async tool's result continues
    /// that cycle's chain (a human's answer starts a new one).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub depth: u32,
    /// For a call of a remote A2A agent that went on past its wait: the remote task the
    /// worker follows until it is over (then the worker completes the call itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<RemoteTask>,
    /// For a human's call: who may answer it (`human:ID`, `group:NAME`, from
    /// `spec.tools.approvers`); empty: the humans of its space (see
    /// [`crate::party::may_answer`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvers: Vec<String>,
    /// The A2A conversation whose cycle made the call (`None`: the agent's members'): its
    /// result is that conversation's event, answered in its own cycle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<String>,
}

/// A remote agent's task that a call waits for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RemoteTask {
    /// Which of the agent's A2A agents (`spec.tools.a2a[].name`).
    pub source: String,
    /// The remote agent's JSON-RPC URL.
    pub url: String,
    /// The remote task's id.
    pub task_id: String,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl CallRecord {
    /// When the call is forgotten altogether (ms since the epoch).
    pub fn forget_ms(&self) -> i64 {
        self.expires_ms.saturating_add(FORGET_AFTER_MS)
    }

    /// Whether a result presented at `now_ms` comes too late: past the call's expiry — except
    /// for a remote task the worker follows, which the worker ends itself, even late (a worker
    /// that was down when its time was up): that end is how the model learns of it.
    /// `complete_call.lua` holds the same rule.
    pub fn expired_at(&self, now_ms: i64) -> bool {
        self.remote.is_none() && now_ms > self.expires_ms
    }

    /// The inbox event that delivers `result` of call `id` to its agent: sent by the tool,
    /// its text naming the call, the result (or error) in its data, so the model reads one
    /// line `(tool result) TOOL: "call ID finished" {"callId", "tool", "result"}`.
    pub fn event(&self, id: &CallId, result: &CallResult) -> InboxEvent {
        let mut data = serde_json::Map::new();
        data.insert("callId".into(), Value::String(id.as_str().to_string()));
        data.insert("tool".into(), Value::String(self.tool.clone()));
        let text = match result {
            CallResult::Result(v) => {
                data.insert("result".into(), v.clone());
                format!("call {id} finished")
            }
            CallResult::Error(e) => {
                data.insert("error".into(), Value::String(e.clone()));
                format!("call {id} failed")
            }
            CallResult::Decision(d) => {
                let verb = match &d.answer {
                    Answer::Approve => "approved",
                    Answer::Deny => "denied",
                    Answer::Result(v) => {
                        data.insert("result".into(), v.clone());
                        "answered"
                    }
                };
                data.insert("decision".into(), Value::String(verb.to_string()));
                data.insert("by".into(), Value::String(d.by.clone()));
                if let Some(reason) = &d.reason {
                    data.insert("reason".into(), Value::String(reason.clone()));
                }
                format!("call {id} {verb} by {}", d.by)
            }
        };
        InboxEvent {
            id: format!("toolresult:{id}"),
            kind: EventKind::ToolResult,
            time_ms: now_ms(),
            urgent: false,
            // The party of the cycle that made the call (see `crate::party::Party::of`).
            space: self.conversation.clone(),
            sender: Some(Sender {
                groups: Vec::new(),
                id: self.tool.clone(),
                name: self.tool.clone(),
                kind: None,
            }),
            text: Some(text),
            data: Some(Value::Object(data)),
            // A service's result continues the chain of the cycle that called it; a
            // person's answer is a person's event.
            depth: match result {
                CallResult::Decision(_) => 0,
                CallResult::Result(_) | CallResult::Error(_) => self.depth,
            },
        }
    }
}

/// A call to register, with the token to give its service.
pub struct NewCall {
    /// The call's id, the agent's in it (the key the service's result must name).
    pub id: CallId,
    /// What is stored.
    pub record: CallRecord,
    /// The token the service presents with the result (never stored).
    pub token: String,
}

impl NewCall {
    /// A call of `tool` by `agent` with a fresh id and token, accepting results for `ttl_ms`.
    pub fn new(agent: &AgentKey, tool: &str, ttl_ms: i64) -> Result<Self, NoRandom> {
        let token = random_hex(TOKEN_BYTES)?;
        Ok(Self {
            id: CallId::new(agent)?,
            record: CallRecord {
                tool: tool.to_string(),
                kind: CallKind::Async,
                token_hash: token_hash(&token),
                since_ms: now_ms(),
                expires_ms: now_ms().saturating_add(ttl_ms),
                space: None,
                arguments: None,
                result_schema: None,
                depth: 0,
                remote: None,
                approvers: Vec::new(),
                conversation: None,
            },
            token,
        })
    }

    /// A call of `tool` that waits for `remote`, a task of a remote A2A agent that the worker
    /// follows and completes itself: registered without a token, so no service's result is
    /// ever taken for it.
    pub fn following(
        agent: &AgentKey,
        tool: &str,
        remote: RemoteTask,
        ttl_ms: i64,
        depth: u32,
    ) -> Result<Self, NoRandom> {
        let mut call = Self::new(agent, tool, ttl_ms)?;
        call.record.token_hash = String::new();
        call.record.remote = Some(remote);
        call.record.depth = depth;
        call.token = String::new();
        Ok(call)
    }
}

/// A call a human answers, to register before the request is shown.
pub struct HumanCall {
    /// The call's id, which the person's answer names.
    pub id: CallId,
    /// What is stored (no token).
    pub record: CallRecord,
}

impl HumanCall {
    /// A call of `tool` by `agent` asked in `space` and answered within `ttl_ms` by a human
    /// of the space (see [`HumanCall::answered_by`]): approved or denied (`Approval`) or
    /// answered matching `result_schema` (`Interactive`).
    pub fn new(
        agent: &AgentKey,
        tool: &str,
        kind: CallKind,
        space: &str,
        arguments: Value,
        result_schema: Option<Value>,
        ttl_ms: i64,
    ) -> Result<Self, NoRandom> {
        let now = now_ms();
        Ok(Self {
            id: CallId::new(agent)?,
            record: CallRecord {
                tool: tool.to_string(),
                kind,
                token_hash: String::new(),
                since_ms: now,
                expires_ms: now.saturating_add(ttl_ms),
                space: Some(space.to_string()),
                arguments: Some(arguments),
                result_schema,
                depth: 0,
                remote: None,
                approvers: Vec::new(),
                conversation: crate::identity::is_conversation(space).then(|| space.to_string()),
            },
        })
    }

    /// The same call, answered only by `approvers` (`human:ID`, `group:NAME`; none: a human
    /// of its space).
    pub fn answered_by(mut self, approvers: Vec<String>) -> Self {
        self.record.approvers = approvers;
        self
    }
}

/// What came back for a call: a service's result or error, or a human's decision.
#[derive(Clone, Debug, PartialEq)]
pub enum CallResult {
    /// The call's result (any JSON).
    Result(Value),
    /// The call failed; the service says why.
    Error(String),
    /// A human's answer.
    Decision(Verdict),
}

/// A human's answer to a call waiting for one.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// What was decided.
    pub answer: Answer,
    /// Who answered (their name, for the model and the audit trail).
    pub by: String,
    /// Why, when they said.
    pub reason: Option<String>,
}

/// What a human answered.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// Run the call.
    Approve,
    /// Do not run it.
    Deny,
    /// An interactive tool's result.
    Result(Value),
}

/// A call of an agent as the registry holds it.
#[derive(Clone, Debug, PartialEq)]
pub struct RegisteredCall {
    /// The call's id.
    pub id: CallId,
    /// What the registry keeps of it: the tool, the kind, since and until when, the token's hash.
    pub record: CallRecord,
    /// Whether it has its result (or decision).
    pub done: bool,
}

impl RegisteredCall {
    /// The calls that wait for a human among an agent's registry, oldest first (then by id):
    /// not done, not forgotten at `now_ms` (expired ones too). `entries` are the registry's
    /// (id, record, done) as a store keeps them; an id that does not parse is left out.
    pub fn waiting_for_humans<'a>(
        entries: impl IntoIterator<Item = (&'a str, &'a CallRecord, bool)>,
        now_ms: i64,
    ) -> Vec<RegisteredCall> {
        let mut out = Self::open(entries, now_ms);
        out.retain(|c| c.record.kind.human());
        out
    }

    /// The calls without their result among an agent's registry, oldest first (then by
    /// id): not done, not forgotten at `now_ms` (expired ones too).
    pub fn open<'a>(
        entries: impl IntoIterator<Item = (&'a str, &'a CallRecord, bool)>,
        now_ms: i64,
    ) -> Vec<RegisteredCall> {
        let mut out: Vec<RegisteredCall> = entries
            .into_iter()
            .filter(|(_, r, done)| !done && r.forget_ms() > now_ms)
            .filter_map(|(id, record, _)| {
                Some(RegisteredCall {
                    id: CallId::parse(id)?,
                    record: record.clone(),
                    done: false,
                })
            })
            .collect();
        out.sort_by(|a, b| {
            (a.record.since_ms, a.id.as_str()).cmp(&(b.record.since_ms, b.id.as_str()))
        });
        out
    }
}

/// What became of a posted result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// Delivered into the agent's inbox; the call is done.
    Accepted(Pushed),
    /// No such call (never registered, or forgotten).
    Unknown,
    /// The token is not the call's.
    Unauthorized,
    /// The call already has its result.
    Duplicate,
    /// The call expired before the result came.
    Expired,
}

/// Hex SHA-256 of a call's token, as the registry keeps it.
pub fn token_hash(token: &str) -> String {
    crate::hex(&Sha256::digest(token.as_bytes()))
}

/// What a presented token must match in a record: its hash, or nothing for no token (a
/// human's answer, which a call registered with a token never takes, nor the reverse).
pub fn presented_hash(token: Option<&str>) -> String {
    token.map(token_hash).unwrap_or_default()
}

/// `bytes` random bytes from the system's generator, as hex.
fn random_hex(bytes: usize) -> Result<String, NoRandom> {
    use ring::rand::SecureRandom;
    let mut buf = vec![0u8; bytes];
    ring::rand::SystemRandom::new()
        .fill(&mut buf)
        .map_err(|_| NoRandom)?;
    Ok(crate::hex(&buf))
}

/// The system's random generator failed (no id or token can be made).
#[derive(Debug, thiserror::Error)]
#[error("the system's random generator failed")]
pub struct NoRandom;

/// The registry of asynchronous calls.
#[async_trait]
pub trait Calls: Send + Sync {
    /// Registers a call (before the request that starts it is sent). Also forgets calls of
    /// the same agent whose time is over.
    async fn register_call(&self, call: &NewCall) -> Result<(), StoreError>;

    /// Removes a call whose start failed: no result is accepted for it.
    async fn forget_call(&self, call: &CallId) -> Result<(), StoreError>;

    /// Registers a call a human answers (before it is shown). Also forgets calls of the same
    /// agent whose time is over.
    async fn register_human_call(&self, call: &HumanCall) -> Result<(), StoreError>;

    /// A call as registered, while it is remembered.
    async fn call(&self, call: &CallId) -> Result<Option<RegisteredCall>, StoreError>;

    /// The calls of `agent` that wait for a human (not done, not forgotten; expired ones
    /// too), oldest first.
    async fn human_calls(&self, agent: &AgentKey) -> Result<Vec<RegisteredCall>, StoreError>;

    /// The calls of `agent` without their result (not done, not forgotten; expired ones
    /// too), oldest first: what a worker follows again after a restart.
    async fn open_calls(&self, agent: &AgentKey) -> Result<Vec<RegisteredCall>, StoreError>;

    /// Accepts the result of `call` presented with `token` (`None`: a human's answer, for a
    /// call registered without one): when the call is known, the token is its own, it has no
    /// result yet and has not expired ([`CallRecord::expired_at`]), marks it done and pushes its `tool_result` event
    /// ([`CallRecord::event`]) into the agent's inbox, atomically. Otherwise writes nothing
    /// and says why (checked in this order).
    async fn complete_call(
        &self,
        call: &CallId,
        token: Option<&str>,
        result: &CallResult,
    ) -> Result<Completion, StoreError>;

    /// Notes that `agent` waits on a remote A2A agent until `until_ms` (ms since the epoch)
    /// in a chain `depth` deep; `key` names the call (noted again, its time is replaced).
    /// What arrives from outside meanwhile continues that chain ([`crate::party::depth`]).
    /// Notes past their time are forgotten, and at most [`OUTBOUND_NOTES`] are kept.
    async fn note_outbound(
        &self,
        agent: &AgentKey,
        key: &str,
        depth: u32,
        until_ms: i64,
    ) -> Result<(), StoreError>;

    /// The deepest chain `agent` waits on a remote A2A agent in now, if it waits on any.
    async fn outbound_depth(&self, agent: &AgentKey) -> Result<Option<u32>, StoreError>;
}

/// The most notes of calls of remote agents under way an agent keeps (the latest).
pub const OUTBOUND_NOTES: usize = 1000;

/// The member of an outbound note: its depth, then its key (so the deepest is read without
/// another lookup).
pub fn outbound_member(key: &str, depth: u32) -> String {
    format!("{depth}:{key}")
}

/// The depth of an outbound note's member, as [`outbound_member`] writes it.
pub fn outbound_member_depth(member: &str) -> Option<u32> {
    member.split_once(':')?.0.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_ids_name_their_agent_and_parse_back() {
        let agent = AgentKey::new("ops", "ticket.bot");
        let id = CallId::new(&agent).unwrap();
        assert!(id.as_str().starts_with("ops.ticket.bot."), "{id}");
        let parsed = CallId::parse(id.as_str()).unwrap();
        assert_eq!(parsed, id);
        assert_eq!(parsed.agent(), &agent);
        assert_ne!(CallId::new(&agent).unwrap(), id, "random");
        let random = "0123456789abcdef0123456789abcdef";
        for bad in [
            "",
            "ops",
            "ops.bot",
            &format!("ops.{random}"),
            &format!("Ops.bot.{random}"),
            &format!("ops.bot.{}", &random[1..]),
            &format!("ops.bot.{}", random.to_uppercase()),
            &format!("ops.b/t.{random}"),
            &format!("ops..{random}"),
        ] {
            assert_eq!(CallId::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_new_call_keeps_only_the_hash_of_its_token() {
        let call = NewCall::new(&AgentKey::new("ops", "bot"), "create_ticket", 1000).unwrap();
        assert_eq!(call.token.len(), TOKEN_BYTES * 2);
        assert_eq!(call.record.token_hash, token_hash(&call.token));
        assert_ne!(call.record.token_hash, call.token);
        let json = serde_json::to_string(&call.record).unwrap();
        assert!(!json.contains(&call.token), "{json}");
        assert_eq!(
            call.record.forget_ms() - call.record.expires_ms,
            FORGET_AFTER_MS
        );
    }

    #[test]
    fn a_humans_answer_says_who_decided_what_and_why() {
        let agent = AgentKey::new("ops", "sre");
        let call = HumanCall::new(
            &agent,
            "confirm_deployment",
            CallKind::Interactive,
            "oncall",
            serde_json::json!({"version": "1.2"}),
            None,
            1000,
        )
        .unwrap();
        assert!(call.record.token_hash.is_empty() && call.record.kind.human());
        assert!(!CallKind::Async.human());
        let id = &call.id;
        let answered = call.record.event(
            id,
            &CallResult::Decision(Verdict {
                answer: Answer::Result(serde_json::json!({"ok": true})),
                by: "Dana".into(),
                reason: None,
            }),
        );
        assert_eq!(
            answered.text.unwrap(),
            format!("call {id} answered by Dana")
        );
        assert_eq!(
            answered.data.unwrap(),
            serde_json::json!({"callId": id.as_str(), "tool": "confirm_deployment", "result": {"ok": true}, "decision": "answered", "by": "Dana"})
        );
        let denied = call.record.event(
            id,
            &CallResult::Decision(Verdict {
                answer: Answer::Deny,
                by: "Sam".into(),
                reason: Some("not during the freeze".into()),
            }),
        );
        assert_eq!(denied.text.unwrap(), format!("call {id} denied by Sam"));
        assert_eq!(denied.data.unwrap()["reason"], "not during the freeze");
        // An older record (before calls answered by humans) still reads as an async call.
        let old: CallRecord =
            serde_json::from_str(r#"{"tool":"t","tokenHash":"ab","expiresMs":5}"#).unwrap();
        assert_eq!(
            (old.kind, old.since_ms, old.space),
            (CallKind::Async, 0, None)
        );
    }

    #[test]
    fn the_event_carries_the_call_the_tool_and_the_result() {
        let id = CallId::new(&AgentKey::new("ops", "bot")).unwrap();
        let record = NewCall::new(&AgentKey::new("ops", "bot"), "create_ticket", 0)
            .unwrap()
            .record;
        let ok = record.event(
            &id,
            &CallResult::Result(serde_json::json!({"ticket": "T-1"})),
        );
        assert_eq!(ok.id, format!("toolresult:{id}"));
        assert_eq!(ok.kind, EventKind::ToolResult);
        assert_eq!(
            ok.data.unwrap(),
            serde_json::json!({"callId": id.as_str(), "tool": "create_ticket", "result": {"ticket": "T-1"}})
        );
        assert_eq!(ok.sender.unwrap().name, "create_ticket");
        assert_eq!(ok.text.unwrap(), format!("call {id} finished"));
        let failed = record.event(&id, &CallResult::Error("quota".into()));
        assert_eq!(failed.text.unwrap(), format!("call {id} failed"));
        assert_eq!(failed.data.unwrap()["error"], "quota");
    }
}

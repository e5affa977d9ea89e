//! Space messages and live events; how a post reaches the member agents (both stores).

use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;

use super::inbox::is_zero;
use super::{now_ms, CallKind, EventKind, MemberKind};
use super::{Inbox, InboxEvent, SpaceRecord, StoreError};
use crate::identity::AgentKey;
use crate::identity::SpaceKey;
use serde::{Deserialize, Serialize};

/// A space's append-only message log, and its live events.
///
/// # How a post reaches the agents
///
/// Posting is two kinds of step, as on a Redis Cluster each space's keys and each agent's
/// keys live on their own slot:
/// 1. **The post**, one atomic step on the space: the message goes into the log, with its
///    idempotency record, the loop guard's count, its live event and any loop-guard notice.
/// 2. **The fan-out**: the message's inbox event (id `msg:SPACE:ID`) is pushed into the inbox
///    of every other member agent, one step per agent, all at once. A push is idempotent by
///    event id, so it is retried when it fails for a passing reason.
///
/// A keyed post ([`NewMessage::idempotency_key`]) records its fan-out with the message, in
/// step 1, and drops the record once every agent has the event. When a push still fails, the
/// post returns the error with the message in the log; posting again with the same key finds
/// the message (`duplicate`) and its unfinished fan-out, and pushes to the agents again: those
/// that already have the event drop it, the others get it (`delivered` names them). A post
/// without a key has no retry that could find it: the agents its fan-out missed never get it.
#[async_trait]
pub trait Messages: Send + Sync {
    /// Posts a message as a member of the space and delivers it to the inbox of every member
    /// agent but the sender (unless the space's loop guard holds it). Refused with
    /// [`StoreError::NotMember`] when the sender is not a member.
    async fn post_message(
        &self,
        space: &SpaceKey,
        message: &NewMessage,
    ) -> Result<Posted, StoreError>;

    /// Posts a notice of agentfleet itself ([`Sender::system`]) in an existing space: into
    /// its log with its live event, like the loop guard's, delivered to no agent. A keyed
    /// notice is posted once, like a keyed message ([`NewMessage::idempotency_key`]).
    /// [`StoreError::NotMember`] when there is no such space.
    async fn post_notice(
        &self,
        space: &SpaceKey,
        text: &str,
        idempotency_key: Option<&str>,
    ) -> Result<Posted, StoreError>;

    /// A page of a space's log (see [`ReadQuery`]): at most `limit` messages, stopped before
    /// its messages pass the page's bytes ([`ReadQuery::max_bytes`]; one message at least).
    async fn read_page(&self, space: &SpaceKey, query: &ReadQuery) -> Result<Page, StoreError>;

    /// The messages of [`Messages::read_page`], for a reader that does not continue.
    async fn read_messages(
        &self,
        space: &SpaceKey,
        query: &ReadQuery,
    ) -> Result<Vec<SpaceMessage>, StoreError> {
        Ok(self.read_page(space, query).await?.messages)
    }

    /// Publishes a live event of a space (streamed text, activity).
    async fn publish_live(&self, space: &SpaceKey, event: &LiveEvent) -> Result<(), StoreError>;

    /// The live events of a space from now on.
    async fn subscribe_live(
        &self,
        space: &SpaceKey,
    ) -> Result<BoxStream<'static, LiveEvent>, StoreError>;
}

/// The second step of a post: an inbox event and the agents (of the space's namespace) to
/// push it to.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct FanOut {
    /// The message's inbox event.
    pub event: InboxEvent,
    /// Member agents, the sender excluded.
    pub agents: Vec<String>,
}

/// How a message enters a space's log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Posting {
    /// A member posts it; it goes to the other member agents.
    Member,
    /// agentfleet posts a notice ([`Messages::post_notice`]); it goes to no agent.
    Notice,
}

/// The notice [`Messages::post_notice`] posts.
pub(super) fn notice(text: &str, idempotency_key: Option<&str>) -> NewMessage {
    NewMessage {
        sender: Sender::system(),
        text: text.to_string(),
        mention: None,
        idempotency_key: idempotency_key.map(str::to_string),
        urgent: false,
        depth: 0,
    }
}

/// The bytes of text a message may have in a space whose Space does not say
/// (`spec.retention.maxMessageBytes`): a long report fits, a runaway model's megabytes do not.
pub const DEFAULT_MAX_MESSAGE_BYTES: u64 = 64 * 1024;

/// The most bytes of messages a page of a space's log holds ([`ReadQuery::max_bytes`]), and so
/// the most a Space's `maxMessageBytes` may be: any message fits in a page.
pub const PAGE_BYTES: usize = 1024 * 1024;

/// The record of the space `message` is posted in: refused unless its sender is a member
/// (or it is a notice, in a space that exists), and a member's message unless its text fits
/// the space's bound. The one rule for every poster (agents, people, services, A2A callers),
/// checked before anything is written.
pub(super) fn admit(
    space: &SpaceKey,
    record: Option<SpaceRecord>,
    message: &NewMessage,
    posting: Posting,
) -> Result<SpaceRecord, StoreError> {
    let record = record
        .filter(|r| posting == Posting::Notice || r.admits(&message.sender))
        .ok_or_else(|| StoreError::NotMember {
            space: space.to_string(),
            sender: message.sender.id.clone(),
        })?;
    let bytes = message.text.len() as u64;
    if posting == Posting::Member && bytes > record.max_message_bytes {
        return Err(StoreError::TooLarge {
            space: space.to_string(),
            bytes,
            max: record.max_message_bytes,
        });
    }
    Ok(record)
}

/// A page of `messages` (in the order read) as [`Messages::read_page`] returns it: at most
/// `query.limit`, stopped before their bytes pass `query.max_bytes` (one message at least, so
/// a reader always moves on). `more`: the log may go on past the page.
pub(super) fn page(messages: impl IntoIterator<Item = SpaceMessage>, query: &ReadQuery) -> Page {
    let max_bytes = query.page_bytes();
    let mut page = Page::default();
    let mut bytes = 0;
    for message in messages {
        if page.messages.len() == query.limit {
            page.more = true;
            break;
        }
        let size = message.bytes();
        if !page.messages.is_empty() && bytes + size > max_bytes {
            page.more = true;
            break;
        }
        bytes += size;
        page.messages.push(message);
    }
    page
}

/// The message as the log keeps it, before it has an id.
pub(super) fn unposted(space: &SpaceKey, message: &NewMessage, time_ms: i64) -> SpaceMessage {
    SpaceMessage {
        id: String::new(),
        space: space.name.clone(),
        sender: message.sender.clone(),
        text: message.text.clone(),
        time_ms,
        mention: message.mention.clone(),
        depth: message.depth,
    }
}

/// The agents a post is pushed to: the member agents but the sender (none for a notice).
pub(super) fn recipients<'a>(
    record: &'a SpaceRecord,
    message: &'a NewMessage,
    posting: Posting,
) -> impl Iterator<Item = &'a str> {
    record
        .agents()
        .filter(move |a| posting == Posting::Member && *a != message.sender.id)
}

/// How often a push of a fan-out is tried, and the pause before each retry.
const PUSH_ATTEMPTS: u32 = 3;
const PUSH_BACKOFF: Duration = Duration::from_millis(100);

/// Runs a fan-out: pushes its event into each agent's inbox, one step per agent, all at
/// once; a push that fails for a passing reason is tried again. Returns the agents whose
/// inbox got the event: for a `fresh` post every agent reached (its event id is new, so an
/// inbox that had it got it from an earlier try of this fan-out); for a repeated post only
/// those that did not have it yet. The first error, once every push has ended.
pub(super) async fn fan_out<S: Inbox + ?Sized>(
    store: &S,
    space: &SpaceKey,
    fan_out: &FanOut,
    fresh: bool,
) -> Result<Vec<String>, StoreError> {
    let pushes = fan_out.agents.iter().map(|name| async move {
        let agent = AgentKey::new(space.namespace.clone(), name.as_str());
        let mut attempt = 1;
        loop {
            match store.push_event(&agent, &fan_out.event).await {
                Ok(pushed) => return Ok((fresh || pushed.queued).then(|| name.clone())),
                Err(e) if e.is_transient() && attempt < PUSH_ATTEMPTS => {
                    tokio::time::sleep(PUSH_BACKOFF * attempt).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    });
    let mut delivered = Vec::with_capacity(fan_out.agents.len());
    let mut failed = None;
    for result in futures::future::join_all(pushes).await {
        match result {
            Ok(name) => delivered.extend(name),
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(delivered),
    }
}

/// Who wrote something: an agent, a human or a service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sender {
    /// Entity id (an Agent's name, a human's id, a service's name).
    pub id: String,
    /// Display name.
    pub name: String,
    /// `Agent`, `Human`, or `None` for a service or the system.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<MemberKind>,
    /// For a person: the groups its sign-in said it is in, which admit it to the spaces that
    /// name one of them. Never stored: what was written keeps who wrote it, not their groups.
    #[serde(skip)]
    pub groups: Vec<String>,
}

impl Sender {
    /// agentfleet itself, the sender of the space's notices (such as the loop guard's).
    pub fn system() -> Self {
        Self {
            groups: Vec::new(),
            id: "agentfleet".into(),
            name: "agentfleet".into(),
            kind: None,
        }
    }
}

/// A message to post in a space.
#[derive(Clone, Debug, PartialEq)]
pub struct NewMessage {
    /// Who posts it; must be a member of the space.
    pub sender: Sender,
    /// What is said, as plain text (shown as text everywhere, never as markup).
    pub text: String,
    /// An agent member addressed by the message.
    pub mention: Option<String>,
    /// Posting again with the same key returns the first message instead of a second one, so
    /// a retried or re-run post never duplicates; it only completes the first one's delivery
    /// to the member agents, if that was interrupted (see [`Messages`](super::Messages)).
    pub idempotency_key: Option<String>,
    /// Deliver to the member agents as urgent events.
    pub urgent: bool,
    /// Causal depth (see [`InboxEvent::depth`]): 0 for humans and services; for an agent, one
    /// more than the deepest event it is answering.
    pub depth: u32,
}

impl NewMessage {
    /// The idempotency key as stored: scoped to the sender (kind and id), so one sender's keys
    /// can never suppress another's posts — and no client can write in an agent's scope.
    pub fn scoped_idempotency_key(&self) -> Option<String> {
        let key = self.idempotency_key.as_deref()?;
        let kind = match self.sender.kind {
            Some(MemberKind::Agent) => "agent",
            Some(MemberKind::Human) => "human",
            None => "service",
        };
        Some(format!("{kind}:{}:{key}", self.sender.id))
    }

    /// Whether the loop guard watches this post: an agent's message in a space with another
    /// agent it could wake.
    pub fn guarded_by_loop_guard(&self, record: &SpaceRecord) -> bool {
        self.sender.kind == Some(MemberKind::Agent) && record.agents().any(|a| a != self.sender.id)
    }

    /// The loop guard this post trips in `record`, given how many watched agent messages the
    /// space has seen this minute before it (for the rate).
    pub fn loop_guard(
        &self,
        record: &SpaceRecord,
        agent_messages_this_minute: u64,
    ) -> Option<Guard> {
        if !self.guarded_by_loop_guard(record) {
            return None;
        }
        if self.depth > record.loop_guard.max_depth {
            return Some(Guard::Depth);
        }
        (agent_messages_this_minute >= u64::from(record.loop_guard.max_agent_messages_per_minute))
            .then_some(Guard::Rate)
    }
}

/// Why an agent's message woke no other agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guard {
    /// The chain of agent messages is longer than the space's `loopGuard.maxDepth`.
    Depth,
    /// The space had more agent messages this minute than `loopGuard.maxAgentMessagesPerMinute`.
    Rate,
}

impl Guard {
    /// A bounded label (metrics, the store's wire).
    pub fn as_str(self) -> &'static str {
        match self {
            Guard::Depth => "depth",
            Guard::Rate => "rate",
        }
    }

    /// Parses [`Guard::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        [Guard::Depth, Guard::Rate]
            .into_iter()
            .find(|g| g.as_str() == s)
    }

    /// The notice posted in the space when the guard trips for `sender`'s message.
    pub fn notice(
        self,
        space: &str,
        record: &SpaceRecord,
        sender: &Sender,
        depth: u32,
    ) -> SpaceMessage {
        let text = match self {
            Guard::Depth => format!(
                "Loop guard: {}'s message was not delivered to the other agents: it is agent message {depth} in a row since the last human, webhook or plan event (this space allows {}, spec.loopGuard.maxDepth).",
                sender.name, record.loop_guard.max_depth
            ),
            Guard::Rate => format!(
                "Loop guard: agents' messages in this space wake no other agent for the rest of this minute: more than {} agent messages in a minute (spec.loopGuard.maxAgentMessagesPerMinute). {}'s message was not delivered to the other agents.",
                record.loop_guard.max_agent_messages_per_minute, sender.name
            ),
        };
        SpaceMessage {
            id: String::new(),
            space: space.to_string(),
            sender: Sender::system(),
            text,
            time_ms: now_ms(),
            mention: None,
            depth: 0,
        }
    }
}

/// Parses a message id (`MILLIS-SEQ`, as Redis stream ids) into its ordered parts.
pub fn parse_message_id(id: &str) -> Option<(i64, u64)> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

/// A message of a space's log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpaceMessage {
    /// Stable id, ordered by posting time (`MILLIS-SEQ`).
    #[serde(default)]
    pub id: String,
    /// Name of the space.
    pub space: String,
    /// Who posted it.
    pub sender: Sender,
    /// What was said, as plain text.
    pub text: String,
    /// When it was posted, in milliseconds since the Unix epoch.
    pub time_ms: i64,
    /// An agent member addressed by the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mention: Option<String>,
    /// Causal depth (see [`InboxEvent::depth`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub depth: u32,
}

impl SpaceMessage {
    /// What the message weighs in a page: its text, its sender, its id and its mention.
    pub fn bytes(&self) -> usize {
        self.text.len()
            + self.sender.id.len()
            + self.sender.name.len()
            + self.id.len()
            + self.mention.as_ref().map_or(0, String::len)
    }

    /// The inbox event this message becomes for the other member agents.
    pub fn event(&self, urgent: bool) -> InboxEvent {
        InboxEvent {
            id: format!("msg:{}:{}", self.space, self.id),
            kind: EventKind::SpaceMessage,
            time_ms: self.time_ms,
            urgent,
            space: Some(self.space.clone()),
            sender: Some(self.sender.clone()),
            text: Some(self.text.clone()),
            // A message of an A2A conversation is a task, which ends with its cycle.
            data: Some(if crate::identity::is_conversation(&self.space) {
                serde_json::json!({
                    "messageId": self.id,
                    "mention": self.mention,
                    "receipt": true,
                })
            } else {
                serde_json::json!({
                    "messageId": self.id,
                    "mention": self.mention,
                })
            }),
            depth: self.depth,
        }
    }
}

/// The outcome of a post.
#[derive(Clone, Debug, PartialEq)]
pub struct Posted {
    /// The message (the first one, for a repeated idempotency key).
    pub id: String,
    /// An earlier post had the same idempotency key; nothing new was written to the log.
    pub duplicate: bool,
    /// Agents whose inbox received the message (for a duplicate: those an interrupted
    /// delivery had missed, reached now).
    pub delivered: Vec<String>,
    /// The space's loop guard kept the message from the other agents (a notice says so).
    pub guarded: Option<Guard>,
}

/// Which messages of a space to read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadQuery {
    /// The most messages returned.
    pub limit: usize,
    /// Newest first, older than this id.
    pub before: Option<String>,
    /// Oldest first, newer than this id (takes precedence over `before`).
    pub after: Option<String>,
    /// The most bytes of messages ([`SpaceMessage::bytes`]) in the page; 0 or more than
    /// [`PAGE_BYTES`]: [`PAGE_BYTES`].
    pub max_bytes: usize,
}

impl ReadQuery {
    /// The page's bound in bytes.
    pub fn page_bytes(&self) -> usize {
        match self.max_bytes {
            0 => PAGE_BYTES,
            n => n.min(PAGE_BYTES),
        }
    }
}

/// A page of a space's log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Page {
    /// The messages, in the order asked for (newest first, or oldest first after an id).
    pub messages: Vec<SpaceMessage>,
    /// The page stopped at its limit or its bytes: the log may go on past its last message
    /// (read on from that id).
    pub more: bool,
}

impl Page {
    /// The id to read on from (`before`, or `after` for a page read after an id), if the
    /// log may go on.
    pub fn next(&self) -> Option<&str> {
        self.more
            .then(|| self.messages.last().map(|m| m.id.as_str()))
            .flatten()
    }
}

/// What a space's live stream carries.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LiveEvent {
    /// A message was posted.
    Message {
        /// The message as the space's log keeps it (with its id, for resuming after it).
        message: SpaceMessage,
    },
    /// Text an agent is generating for the space, as it streams.
    Delta {
        /// Groups the deltas of one message being written.
        stream_id: String,
        /// The writing agent.
        sender: Sender,
        /// The next piece of text.
        delta: String,
    },
    /// What an agent is doing (`thinking`, `tool`, `idle`), for "who is typing".
    Activity {
        /// The agent.
        sender: Sender,
        /// `thinking`, `tool`, `tool_result` (a `visible` tool's arguments and result as JSON
        /// in `detail`), `idle` or `error` (the cycle failed; see `detail`).
        activity: String,
        /// The tool being run, for `tool`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
        /// For `error`: what failed and what happens next (a retry, or giving up); for
        /// `tool_result`: `{"arguments", "result"}` as JSON, secrets masked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// An agent asks the space's members about a call (issue 14): to approve or deny it, or
    /// to answer an interactive tool. Answered at `POST /v1/spaces/{ns}/{space}/tool-calls/{call_id}`.
    ToolRequest {
        /// The asking agent.
        sender: Sender,
        /// The call to answer.
        call_id: String,
        /// The name of the tool the agent called.
        tool: String,
        /// `approval` or `interactive`.
        kind: CallKind,
        /// The call's arguments, secrets masked.
        arguments: serde_json::Value,
        /// What an interactive answer must match (JSON Schema), if the tool says.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result_schema: Option<serde_json::Value>,
        /// When it was asked (ms since the epoch).
        since_ms: i64,
        /// When the request times out (ms since the epoch).
        expires_ms: i64,
    },
}

//! Space messages and live events; how a post reaches the member agents (both stores).

use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;

use super::{
    AgentKey, Inbox, InboxEvent, LiveEvent, NewMessage, Posted, ReadQuery, Sender, SpaceMessage,
    SpaceRecord, StoreError,
};
use crate::keys::SpaceKey;

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

    /// Messages of a space's log (see [`ReadQuery`]).
    async fn read_messages(
        &self,
        space: &SpaceKey,
        query: &ReadQuery,
    ) -> Result<Vec<SpaceMessage>, StoreError>;

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

/// The record of the space `message` is posted in: refused unless its sender is a member
/// (or it is a notice, in a space that exists).
pub(super) fn admit(
    space: &SpaceKey,
    record: Option<SpaceRecord>,
    message: &NewMessage,
    posting: Posting,
) -> Result<SpaceRecord, StoreError> {
    record
        .filter(|r| posting == Posting::Notice || r.admits(&message.sender))
        .ok_or_else(|| StoreError::NotMember {
            space: space.to_string(),
            sender: message.sender.id.clone(),
        })
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

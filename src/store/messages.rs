//! Space messages and live events; what both stores share of posting.

use async_trait::async_trait;
use futures::stream::BoxStream;

use super::{LiveEvent, NewMessage, Posted, ReadQuery, SpaceMessage, SpaceRecord, StoreError};
use crate::keys::SpaceKey;

/// A space's append-only message log, and its live events.
#[async_trait]
pub trait Messages: Send + Sync {
    /// Posts a message as a member of the space and delivers it, in the same atomic step, to
    /// the inbox of every member agent but the sender (unless the space's loop guard holds
    /// it). Refused with [`StoreError::NotMember`] when the sender is not a member.
    async fn post_message(
        &self,
        space: &SpaceKey,
        message: &NewMessage,
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

/// The record of the space `message` is posted in: refused unless its sender is a member.
pub(super) fn admit(
    space: &SpaceKey,
    record: Option<SpaceRecord>,
    message: &NewMessage,
) -> Result<SpaceRecord, StoreError> {
    record
        .filter(|r| r.admits(&message.sender))
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

/// The agents a post is pushed to: the member agents but the sender.
pub(super) fn recipients<'a>(
    record: &'a SpaceRecord,
    message: &'a NewMessage,
) -> impl Iterator<Item = &'a str> {
    record.agents().filter(|a| *a != message.sender.id)
}

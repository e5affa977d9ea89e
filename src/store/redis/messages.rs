//! Space messages on Redis: a post is `post.lua` on the space's slot, then one `push.lua` per
//! recipient on its own slot (see [`Messages`] for what happens when a push fails).

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::StreamExt;
use redis::AsyncCommands;

use super::keys::SpaceKeys;
use super::scripts::{self, Post, ID_PLACEHOLDER};
use super::{from_json, redis_err, to_json, RedisStore};
use crate::identity::SpaceKey;
use crate::store::messages::{admit, fan_out, notice, page, recipients, unposted, FanOut, Posting};
use crate::store::{
    now_ms, Guard, InboxEvent, LiveEvent, Messages, NewMessage, Page, Posted, ReadQuery,
    SpaceMessage, Spaces, StoreError,
};

/// How many messages one read of a page takes from Redis at a time.
const READ_BATCH: usize = 8;

impl RedisStore {
    /// A post (`post.lua`, then its fan-out) of a member's message or a notice.
    async fn post(
        &self,
        space: &SpaceKey,
        message: &NewMessage,
        posting: Posting,
    ) -> Result<Posted, StoreError> {
        let record = admit(space, self.space(space).await?, message, posting)?;
        let keys = SpaceKeys::new(space);
        let what = |w: &str| {
            let w = format!("{w} for space {space}");
            move || w
        };
        let stored = unposted(space, message, now_ms());
        // The script puts the message's id where the templates say.
        let templated = SpaceMessage {
            id: ID_PLACEHOLDER.into(),
            ..stored.clone()
        };
        let stored_json = to_json(what("a message"), &stored)?;
        let event_template = to_json(what("an inbox event"), &templated.event(message.urgent))?;
        let live_template = to_json(
            what("a live event"),
            &LiveEvent::Message { message: templated },
        )?;
        // The loop guard's notices (the rate is counted by the script), for the posts it watches.
        let watched = message.guarded_by_loop_guard(&record);
        let notice = |guard: Guard| -> Result<(String, String), StoreError> {
            if !watched {
                return Ok(Default::default());
            }
            let notice = guard.notice(&space.name, &record, &message.sender, message.depth);
            let live = LiveEvent::Message {
                message: SpaceMessage {
                    id: ID_PLACEHOLDER.into(),
                    ..notice.clone()
                },
            };
            Ok((
                to_json(what("a notice"), &notice)?,
                to_json(what("a notice"), &live)?,
            ))
        };
        let (depth_notice, rate_notice) = (notice(Guard::Depth)?, notice(Guard::Rate)?);
        let scoped = message.scoped_idempotency_key();
        let recipients: Vec<&str> = recipients(&record, message, posting).collect();

        let mut conn = self.conns.durable().await?;
        let reply = scripts::post(
            &mut conn,
            &keys,
            &Post {
                message: &stored_json,
                idempotency: scoped.as_deref(),
                max_messages: record.max_messages,
                event_template: &event_template,
                live_template: &live_template,
                watched,
                over_depth: message.loop_guard(&record, 0) == Some(Guard::Depth),
                max_per_minute: record.loop_guard.max_agent_messages_per_minute,
                depth_notice: (&depth_notice.0, &depth_notice.1),
                rate_notice: (&rate_notice.0, &rate_notice.1),
                recipients: &recipients,
            },
        )
        .await?;
        // A duplicate waits too: it may be the retry of a post that was not replicated.
        self.conns
            .replicated(&mut conn, &keys.log(), "post message")
            .await?;

        let (event, agents) = reply.fan_out;
        let mut delivered = Vec::new();
        if !agents.is_empty() {
            let event: InboxEvent = from_json(what("the inbox event"), &event)?;
            let run = FanOut { event, agents };
            delivered = fan_out(self, space, &run, !reply.duplicate).await?;
            if let Some(scoped) = &scoped {
                // Every recipient has the event: the record goes. One left behind (this
                // failed) only makes a retry push again what every inbox drops as seen.
                let _ = conn.del::<_, ()>(keys.fan_out(scoped)).await;
            }
        }
        Ok(Posted {
            id: reply.id,
            duplicate: reply.duplicate,
            delivered,
            guarded: reply.guarded,
        })
    }
}

#[async_trait]
impl Messages for RedisStore {
    async fn post_message(
        &self,
        space: &SpaceKey,
        message: &NewMessage,
    ) -> Result<Posted, StoreError> {
        self.post(space, message, Posting::Member).await
    }

    async fn post_notice(
        &self,
        space: &SpaceKey,
        text: &str,
        idempotency_key: Option<&str>,
    ) -> Result<Posted, StoreError> {
        let message = notice(text, idempotency_key);
        self.post(space, &message, Posting::Notice).await
    }

    async fn read_page(&self, space: &SpaceKey, query: &ReadQuery) -> Result<Page, StoreError> {
        if query.limit == 0 {
            return Ok(Page::default());
        }
        // Read in small batches, so that a page stopped by its bytes takes from Redis no
        // more than a batch past them.
        let log = SpaceKeys::new(space).log();
        let mut conn = self.conns.shared().await?;
        let mut read = Vec::new();
        let mut bytes = 0;
        let mut cursor: Option<String> = None;
        loop {
            let count = (query.limit + 1 - read.len()).min(READ_BATCH);
            let from = |id: &Option<String>, or: &Option<String>, end: &str| match id
                .as_ref()
                .or(or.as_ref())
            {
                Some(id) => format!("({id}"),
                None => end.to_string(),
            };
            let reply: redis::streams::StreamRangeReply = match &query.after {
                Some(_) => {
                    conn.xrange_count(&log, from(&cursor, &query.after, "-"), "+", count)
                        .await
                }
                None => {
                    conn.xrevrange_count(&log, from(&cursor, &query.before, "+"), "-", count)
                        .await
                }
            }
            .map_err(redis_err("read messages"))?;
            let done = reply.ids.len() < count;
            for entry in reply.ids {
                let json: String = entry.get("m").unwrap_or_default();
                let mut message: SpaceMessage =
                    from_json(|| format!("message {} of space {space}", entry.id), &json)?;
                message.id = entry.id;
                bytes += message.bytes();
                cursor = Some(message.id.clone());
                read.push(message);
            }
            // One past the limit or the bytes says whether the log goes on.
            if done || read.len() > query.limit || bytes > query.page_bytes() {
                return Ok(page(read, query));
            }
        }
    }

    async fn publish_live(&self, space: &SpaceKey, event: &LiveEvent) -> Result<(), StoreError> {
        let json = to_json(|| format!("a live event of space {space}"), event)?;
        let mut conn = self.conns.shared().await?;
        redis::cmd(conn.publish_command())
            .arg(SpaceKeys::new(space).live())
            .arg(json)
            .query_async::<()>(&mut conn)
            .await
            .map_err(redis_err("publish live event"))
    }

    async fn subscribe_live(
        &self,
        space: &SpaceKey,
    ) -> Result<BoxStream<'static, LiveEvent>, StoreError> {
        let payloads = self
            .conns
            .subscribe(&SpaceKeys::new(space).live(), "subscribe")
            .await?;
        Ok(payloads
            .filter_map(|payload| async move { serde_json::from_str(&payload).ok() })
            .boxed())
    }
}

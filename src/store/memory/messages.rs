//! Space messages in memory: a post is one step on the space (under the lock), then one push
//! per recipient, as on Redis (see [`Messages`]).

use std::collections::{HashMap, VecDeque};

use async_trait::async_trait;
use futures::stream::BoxStream;
use tokio::sync::broadcast;

use super::{received, MemoryStore, State};
use crate::identity::SpaceKey;
use crate::store::messages::{admit, fan_out, notice, page, recipients, unposted, FanOut, Posting};
use crate::store::{
    now_ms, parse_message_id, Guard, LiveEvent, Messages, NewMessage, Page, Posted, ReadQuery,
    SpaceMessage, StoreError,
};

/// The log of one space.
#[derive(Default)]
pub(super) struct SpaceLog {
    messages: VecDeque<SpaceMessage>,
    last_ms: i64,
    seq: u64,
    idempotency: HashMap<String, String>,
    /// Keyed posts whose fan-out has not finished, by scoped key.
    fan_outs: HashMap<String, FanOut>,
    /// When the current minute of agent messages began (ms), and how many were posted in it.
    agent_minute: (i64, u64),
}

impl SpaceLog {
    /// The next id, `MILLIS-SEQ`, strictly increasing like a Redis stream's.
    fn next_id(&mut self, now: i64) -> String {
        if now > self.last_ms {
            self.last_ms = now;
            self.seq = 0;
        } else {
            self.seq += 1;
        }
        format!("{}-{}", self.last_ms, self.seq)
    }
}

/// Orders `MILLIS-SEQ` ids (a malformed id sorts first).
fn id_key(id: &str) -> (i64, u64) {
    parse_message_id(id).unwrap_or((0, 0))
}

impl State {
    /// The live channel of a space.
    fn live(&mut self, space: &SpaceKey) -> broadcast::Sender<LiveEvent> {
        self.live
            .entry(space.clone())
            .or_insert_with(|| broadcast::channel(1024).0)
            .clone()
    }
}

impl MemoryStore {
    /// The space's step of a post (as `post.lua`): the log, the idempotency and fan-out
    /// records, the loop guard's count and notice, the live events. Returns the post (with
    /// nobody delivered yet) and the fan-out to run, if any.
    fn post(
        &self,
        space: &SpaceKey,
        message: &NewMessage,
        posting: Posting,
    ) -> Result<(Posted, Option<FanOut>), StoreError> {
        self.with(|s| {
            let record = admit(space, s.spaces.get(space).cloned(), message, posting)?;
            let log = s.logs.entry(space.clone()).or_default();
            let scoped = message.scoped_idempotency_key();
            if let Some(id) = scoped.as_ref().and_then(|k| log.idempotency.get(k)) {
                let pending = scoped.as_ref().and_then(|k| log.fan_outs.get(k)).cloned();
                return Ok((
                    Posted {
                        id: id.clone(),
                        duplicate: true,
                        delivered: Vec::new(),
                        guarded: None,
                    },
                    pending,
                ));
            }
            let time_ms = now_ms();
            // A window of a minute from its first agent message (as the Redis store's key
            // that expires a minute after it is created).
            if time_ms - log.agent_minute.0 >= 60_000 {
                log.agent_minute = (time_ms, 0);
            }
            let guarded = message.loop_guard(&record, log.agent_minute.1);
            if message.guarded_by_loop_guard(&record) && guarded != Some(Guard::Depth) {
                log.agent_minute.1 += 1;
            }
            let id = log.next_id(time_ms);
            let posted = SpaceMessage {
                id: id.clone(),
                ..unposted(space, message, time_ms)
            };
            if let Some(k) = &scoped {
                log.idempotency.insert(k.clone(), id.clone());
            }
            log.messages.push_back(posted.clone());
            // The rate notice is posted once a minute (when the limit is first passed).
            let notice = guarded
                .filter(|g| {
                    *g == Guard::Depth
                        || log.agent_minute.1
                            == u64::from(record.loop_guard.max_agent_messages_per_minute) + 1
                })
                .map(|g| {
                    let mut n = g.notice(&space.name, &record, &message.sender, message.depth);
                    n.id = log.next_id(time_ms);
                    n
                });
            log.messages.extend(notice.iter().cloned());
            while log.messages.len() as u64 > record.max_messages {
                log.messages.pop_front();
            }
            let agents: Vec<String> = match guarded {
                None => recipients(&record, message, posting)
                    .map(str::to_string)
                    .collect(),
                Some(_) => Vec::new(),
            };
            let run = (!agents.is_empty()).then(|| FanOut {
                event: posted.event(message.urgent),
                agents,
            });
            if let (Some(k), Some(run)) = (&scoped, &run) {
                log.fan_outs.insert(k.clone(), run.clone());
            }
            let live = s.live(space);
            let _ = live.send(LiveEvent::Message { message: posted });
            if let Some(n) = notice {
                let _ = live.send(LiveEvent::Message { message: n });
            }
            Ok((
                Posted {
                    id,
                    duplicate: false,
                    delivered: Vec::new(),
                    guarded,
                },
                run,
            ))
        })
    }
}

#[async_trait]
impl Messages for MemoryStore {
    async fn post_message(
        &self,
        space: &SpaceKey,
        message: &NewMessage,
    ) -> Result<Posted, StoreError> {
        let (mut posted, run) = self.post(space, message, Posting::Member)?;
        if let Some(run) = run {
            posted.delivered = fan_out(self, space, &run, !posted.duplicate).await?;
            if let Some(k) = message.scoped_idempotency_key() {
                self.with(|s| {
                    if let Some(log) = s.logs.get_mut(space) {
                        log.fan_outs.remove(&k);
                    }
                });
            }
        }
        Ok(posted)
    }

    async fn post_notice(
        &self,
        space: &SpaceKey,
        text: &str,
        idempotency_key: Option<&str>,
    ) -> Result<Posted, StoreError> {
        let message = notice(text, idempotency_key);
        Ok(self.post(space, &message, Posting::Notice)?.0)
    }

    async fn read_page(&self, space: &SpaceKey, query: &ReadQuery) -> Result<Page, StoreError> {
        Ok(self.with(|s| {
            let Some(log) = s.logs.get(space) else {
                return Page::default();
            };
            if let Some(after) = &query.after {
                let after = id_key(after);
                page(
                    log.messages
                        .iter()
                        .filter(|m| id_key(&m.id) > after)
                        .cloned(),
                    query,
                )
            } else {
                let before = query.before.as_deref().map(id_key);
                page(
                    log.messages
                        .iter()
                        .rev()
                        .filter(|m| before.is_none_or(|b| id_key(&m.id) < b))
                        .cloned(),
                    query,
                )
            }
        }))
    }

    async fn publish_live(&self, space: &SpaceKey, event: &LiveEvent) -> Result<(), StoreError> {
        let sender = self.with(|s| s.live(space));
        let _ = sender.send(event.clone());
        Ok(())
    }

    async fn subscribe_live(
        &self,
        space: &SpaceKey,
    ) -> Result<BoxStream<'static, LiveEvent>, StoreError> {
        Ok(received(self.with(|s| s.live(space).subscribe())))
    }
}

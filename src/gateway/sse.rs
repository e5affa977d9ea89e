//! Streaming a space over SSE: one data-plane subscription per space and gateway process,
//! fanned out in memory to every connected client, each frame encoded once.
//!
//! Messages carry their id as the SSE event id, so a client that reconnects with
//! `Last-Event-ID` first gets every message it missed (from the space's log), then the live
//! stream, without duplicates. Text deltas and activity are live only. A client too slow to
//! keep up is disconnected and resumes the same way, so it never silently misses a message.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use futures::StreamExt;
use tokio::sync::{broadcast, Mutex};
use tracing::{debug, warn};

use super::api::{ActivityEvent, DeltaEvent, EntityRef, Message};
use crate::membership::SpaceKey;
use crate::store::{parse_message_id, LiveEvent, Store, StoreError};

/// Frames buffered per space for slow clients before they are cut off.
const BUFFER: usize = 4096;

/// One encoded SSE frame.
#[derive(Debug)]
pub struct Frame {
    /// SSE event name: `message`, `delta`, `activity`.
    pub event: &'static str,
    /// SSE id (messages only).
    pub id: Option<String>,
    /// The message id, ordered, for de-duplication after a resume.
    pub order: Option<(i64, u64)>,
    /// The JSON data.
    pub data: String,
    /// For messages: when it was posted (ms), for the fan-out latency.
    pub posted_ms: Option<i64>,
}

impl Frame {
    /// Encodes a live event.
    pub fn encode(event: &LiveEvent) -> Result<Self, serde_json::Error> {
        Ok(match event {
            LiveEvent::Message { message } => Self::message(&Message::from(message))?,
            LiveEvent::Delta {
                stream_id,
                sender,
                delta,
            } => Self {
                event: "delta",
                id: None,
                order: None,
                data: serde_json::to_string(&DeltaEvent {
                    stream_id: stream_id.clone(),
                    sender: EntityRef::from(sender),
                    delta: delta.clone(),
                })?,
                posted_ms: None,
            },
            LiveEvent::Activity {
                sender,
                activity,
                tool,
                detail,
            } => Self {
                event: "activity",
                id: None,
                order: None,
                data: serde_json::to_string(&ActivityEvent {
                    sender: EntityRef::from(sender),
                    activity: activity.clone(),
                    tool: tool.clone(),
                    detail: detail.clone(),
                })?,
                posted_ms: None,
            },
        })
    }

    /// Encodes a message of the log.
    pub fn message(m: &Message) -> Result<Self, serde_json::Error> {
        Ok(Self {
            event: "message",
            id: Some(m.id.clone()),
            order: parse_message_id(&m.id),
            data: serde_json::to_string(m)?,
            posted_ms: Some(m.time_ms),
        })
    }
}

/// What a client receives from the hub.
#[derive(Clone, Debug)]
pub enum Item {
    /// A frame.
    Frame(Arc<Frame>),
    /// The data-plane subscription ended: the client should reconnect (and resume).
    Closed,
}

struct Channel {
    tx: broadcast::Sender<Item>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Channel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A subscription to one space; the space's data-plane subscription lives while any does.
pub struct Subscription {
    /// The frames.
    pub rx: broadcast::Receiver<Item>,
    _channel: Arc<Channel>,
}

/// The per-process fan-out of live events.
pub struct Hub {
    store: Arc<dyn Store>,
    spaces: Mutex<HashMap<SpaceKey, Weak<Channel>>>,
}

impl Hub {
    /// A hub reading from `store`.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            spaces: Mutex::new(HashMap::new()),
        }
    }

    /// Subscribes to a space's live events; returns once the data plane delivers them, so
    /// anything posted afterwards is seen.
    pub async fn subscribe(&self, space: &SpaceKey) -> Result<Subscription, StoreError> {
        let mut spaces = self.spaces.lock().await;
        if let Some(channel) = spaces.get(space).and_then(Weak::upgrade) {
            return Ok(Subscription {
                rx: channel.tx.subscribe(),
                _channel: channel,
            });
        }
        let mut upstream = self.store.subscribe_live(space).await?;
        let (tx, rx) = broadcast::channel(BUFFER);
        let task = {
            let tx = tx.clone();
            let space = space.clone();
            tokio::spawn(async move {
                while let Some(event) = upstream.next().await {
                    match Frame::encode(&event) {
                        Ok(frame) => {
                            let _ = tx.send(Item::Frame(Arc::new(frame)));
                        }
                        Err(e) => warn!(space = %space, error = %e, "live event not encodable"),
                    }
                }
                debug!(space = %space, "live subscription ended; clients will resume");
                let _ = tx.send(Item::Closed);
            })
        };
        let channel = Arc::new(Channel { tx, task });
        spaces.retain(|_, w| w.strong_count() > 0);
        spaces.insert(space.clone(), Arc::downgrade(&channel));
        Ok(Subscription {
            rx,
            _channel: channel,
        })
    }

    /// Spaces with a live subscription.
    pub async fn active(&self) -> usize {
        let spaces = self.spaces.lock().await;
        spaces.values().filter(|w| w.strong_count() > 0).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{MemoryStore, SpaceMessage};

    #[tokio::test]
    async fn one_subscription_per_space_shared_and_dropped_with_the_last_client() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let hub = Hub::new(store.clone());
        let space = SpaceKey::new("ns", "family");
        let mut a = hub.subscribe(&space).await.unwrap();
        let mut b = hub.subscribe(&space).await.unwrap();
        assert_eq!(hub.active().await, 1);
        let message = SpaceMessage {
            id: "5-1".into(),
            space: "family".into(),
            sender: crate::store::Sender {
                id: "husam".into(),
                name: "Husam".into(),
                kind: Some(crate::crd::MemberKind::Human),
            },
            text: "hi".into(),
            time_ms: 5,
            mention: None,
            depth: 0,
        };
        store
            .publish_live(&space, &LiveEvent::Message { message })
            .await
            .unwrap();
        for rx in [&mut a.rx, &mut b.rx] {
            let Item::Frame(f) = rx.recv().await.unwrap() else {
                panic!("a frame")
            };
            assert_eq!(
                (f.event, f.id.as_deref(), f.order),
                ("message", Some("5-1"), Some((5, 1)))
            );
            assert!(f.data.contains("\"text\":\"hi\""));
        }
        drop(a);
        drop(b);
        assert_eq!(hub.active().await, 0);
    }

    #[test]
    fn ids_order_numerically() {
        assert!(parse_message_id("10-0") > parse_message_id("9-5"));
        assert!(parse_message_id("10-10") > parse_message_id("10-9"));
        assert_eq!(parse_message_id("x-1"), None);
        assert_eq!(parse_message_id("10"), None);
    }
}

//! Streaming a space over SSE: one data-plane subscription per space and gateway process,
//! fanned out in memory to every connected client, each frame encoded once.
//!
//! Messages carry their id as the SSE event id, so a client that reconnects with
//! `Last-Event-ID` first gets every message it missed (from the space's log), then the live
//! stream, without duplicates. Text deltas and activity are live only. A client too slow to
//! keep up is disconnected and resumes the same way, so it never silently misses a message.
//!
//! Each space's channel also reads the space's record again every `recheck` and publishes it,
//! so open streams learn that their caller stopped being a member with one data-plane read per
//! space, not one per client.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use axum::response::sse::Event;
use futures::StreamExt;
use tokio::sync::{broadcast, watch, Mutex};
use tracing::{debug, warn};

use super::error::ApiError;
use crate::api::{ActivityEvent, DeltaEvent, EntityRef, Message, ToolRequestEvent};
use crate::identity::SpaceKey;
use crate::store::{parse_message_id, LiveEvent, SpaceRecord, Store, StoreError};

/// Frames buffered per space for slow clients before they are cut off.
const BUFFER: usize = 4096;

/// One encoded SSE frame.
#[derive(Debug)]
pub struct Frame {
    /// SSE event name: `message`, `delta`, `activity`, `tool_request`, `error`.
    pub event: &'static str,
    /// SSE id (messages only; only a valid message id, which has no line break or NUL).
    pub id: Option<String>,
    /// The message id, ordered, for de-duplication after a resume.
    pub order: Option<(i64, u64)>,
    /// The JSON data (JSON escapes every control character, so it is one line).
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
            } => Self::data(
                "delta",
                serde_json::to_string(&DeltaEvent {
                    stream_id: stream_id.clone(),
                    sender: EntityRef::from(sender),
                    delta: delta.clone(),
                })?,
            ),
            LiveEvent::Activity {
                sender,
                activity,
                tool,
                detail,
            } => Self::data(
                "activity",
                serde_json::to_string(&ActivityEvent {
                    sender: EntityRef::from(sender),
                    activity: activity.clone(),
                    tool: tool.clone(),
                    detail: detail.clone(),
                })?,
            ),
            LiveEvent::ToolRequest {
                sender,
                call_id,
                tool,
                kind,
                arguments,
                result_schema,
                since_ms,
                expires_ms,
            } => Self::data(
                "tool_request",
                serde_json::to_string(&ToolRequestEvent {
                    sender: EntityRef::from(sender),
                    call_id: call_id.clone(),
                    tool: tool.clone(),
                    kind: kind.name().into(),
                    arguments: arguments.clone(),
                    result_schema: result_schema.clone(),
                    since_ms: *since_ms,
                    expires_ms: *expires_ms,
                })?,
            ),
        })
    }

    /// Encodes a message of the log. An id that is not a message id (a damaged log) is not
    /// sent as the SSE id: the message still goes out, it just cannot be resumed after.
    pub fn message(m: &Message) -> Result<Self, serde_json::Error> {
        let order = parse_message_id(&m.id);
        Ok(Self {
            event: "message",
            id: order.map(|_| m.id.clone()),
            order,
            data: serde_json::to_string(m)?,
            posted_ms: Some(m.time_ms),
        })
    }

    /// The last frame of a stream that ends on an error: `event: error`, data
    /// `{"error": {"code", "message"}}` as every refusal.
    pub fn error(e: &ApiError) -> Self {
        let data = serde_json::to_string(&e.body()).unwrap_or_else(|_| {
            // An ErrorBody is two strings: encoding cannot fail, but a stream must not either.
            r#"{"error":{"code":"unavailable","message":""}}"#.to_string()
        });
        Self::data("error", data)
    }

    fn data(event: &'static str, data: String) -> Self {
        Self {
            event,
            id: None,
            order: None,
            data,
            posted_ms: None,
        }
    }

    /// The SSE event. Never panics: the name is one of ours, the id a message id (digits and
    /// a dash) and the data JSON, which has no raw line break.
    pub fn to_event(&self) -> Event {
        let event = Event::default().event(self.event).data(&self.data);
        match &self.id {
            Some(id) => event.id(id),
            None => event,
        }
    }
}

/// What a client receives from the hub.
#[derive(Clone, Debug)]
pub enum Item {
    /// An event, encoded once for every client that receives it.
    Frame(Arc<Frame>),
    /// The data-plane subscription ended: the client should reconnect (and resume).
    Closed,
}

struct Channel {
    tx: broadcast::Sender<Item>,
    members: watch::Receiver<Option<SpaceRecord>>,
    tasks: [tokio::task::JoinHandle<()>; 2],
}

impl Drop for Channel {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// A subscription to one space; the space's data-plane subscription lives while any does.
pub struct Subscription {
    /// The frames.
    pub rx: broadcast::Receiver<Item>,
    /// The space's record as last read (`None`: the space is gone), re-read every `recheck`.
    pub members: watch::Receiver<Option<SpaceRecord>>,
    _channel: Arc<Channel>,
}

/// The per-process fan-out of live events.
pub struct Hub {
    store: Arc<dyn Store>,
    recheck: Duration,
    spaces: Mutex<HashMap<SpaceKey, Weak<Channel>>>,
}

impl Hub {
    /// A hub reading from `store`, reading each streamed space's record every `recheck`.
    pub fn new(store: Arc<dyn Store>, recheck: Duration) -> Self {
        Self {
            store,
            recheck,
            spaces: Mutex::new(HashMap::new()),
        }
    }

    /// Subscribes to a space's live events; returns once the data plane delivers them, so
    /// anything posted afterwards is seen. `record` is the space as the caller just read it.
    pub async fn subscribe(
        &self,
        space: &SpaceKey,
        record: &SpaceRecord,
    ) -> Result<Subscription, StoreError> {
        let mut spaces = self.spaces.lock().await;
        if let Some(channel) = spaces.get(space).and_then(Weak::upgrade) {
            return Ok(Subscription {
                rx: channel.tx.subscribe(),
                members: channel.members.clone(),
                _channel: channel,
            });
        }
        let upstream = self.store.subscribe_live(space).await?;
        let (tx, rx) = broadcast::channel(BUFFER);
        let (members_tx, members) = watch::channel(Some(record.clone()));
        let tasks = [
            tokio::spawn(forward(upstream, tx.clone(), space.clone())),
            tokio::spawn(recheck(
                self.store.clone(),
                space.clone(),
                self.recheck,
                members_tx,
            )),
        ];
        let channel = Arc::new(Channel {
            tx,
            members: members.clone(),
            tasks,
        });
        spaces.retain(|_, w| w.strong_count() > 0);
        spaces.insert(space.clone(), Arc::downgrade(&channel));
        Ok(Subscription {
            rx,
            members,
            _channel: channel,
        })
    }

    /// Spaces with a live subscription.
    pub async fn active(&self) -> usize {
        let spaces = self.spaces.lock().await;
        spaces.values().filter(|w| w.strong_count() > 0).count()
    }
}

/// Encodes a space's live events once and fans them out.
async fn forward(
    mut upstream: futures::stream::BoxStream<'static, LiveEvent>,
    tx: broadcast::Sender<Item>,
    space: SpaceKey,
) {
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
}

/// Reads the space's record every `every` and publishes it when it changed. A failed read
/// keeps the record in force: the data plane being away is no reason to cut streams.
async fn recheck(
    store: Arc<dyn Store>,
    space: SpaceKey,
    every: Duration,
    members: watch::Sender<Option<SpaceRecord>>,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        match store.space(&space).await {
            Ok(record) => {
                members.send_if_modified(|current| {
                    let changed = *current != record;
                    if changed {
                        *current = record;
                    }
                    changed
                });
            }
            Err(e) => debug!(space = %space, error = %e, "re-reading the space's members"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{CallKind, MemoryStore, SpaceMessage};

    #[tokio::test]
    async fn one_subscription_per_space_shared_and_dropped_with_the_last_client() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let hub = Hub::new(store.clone(), Duration::from_secs(60));
        let space = SpaceKey::new("ns", "family");
        let record = crate::testing::space_record("Family", &[], &["Husam"]);
        let mut a = hub.subscribe(&space, &record).await.unwrap();
        let mut b = hub.subscribe(&space, &record).await.unwrap();
        assert_eq!(hub.active().await, 1);
        let message = SpaceMessage {
            id: "5-1".into(),
            space: "family".into(),
            sender: crate::store::Sender {
                groups: Vec::new(),
                id: "husam".into(),
                name: "Husam".into(),
                kind: Some(crate::store::MemberKind::Human),
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

    #[tokio::test]
    async fn the_channel_publishes_the_space_record_when_it_changes() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let hub = Hub::new(store.clone(), Duration::from_millis(20));
        let space = SpaceKey::new("ns", "family");
        let record = crate::testing::space_record("Family", &[], &["Husam", "Muhammad"]);
        store.apply_space(&space, &record).await.unwrap();
        let mut sub = hub.subscribe(&space, &record).await.unwrap();
        assert_eq!(sub.members.borrow_and_update().as_ref(), Some(&record));
        let smaller = crate::testing::space_record("Family", &[], &["Husam"]);
        store.apply_space(&space, &smaller).await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), sub.members.changed())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(sub.members.borrow_and_update().as_ref(), Some(&smaller));
        store.remove_space(&space).await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), sub.members.changed())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(*sub.members.borrow(), None);
    }

    #[test]
    fn ids_order_numerically() {
        assert!(parse_message_id("10-0") > parse_message_id("9-5"));
        assert!(parse_message_id("10-10") > parse_message_id("10-9"));
        assert_eq!(parse_message_id("x-1"), None);
        assert_eq!(parse_message_id("10"), None);
    }

    mod unicode {
        //! Property: any text in any field (combining marks, right-to-left, emoji, NUL,
        //! control characters, CR/LF) makes a frame that encodes without panicking, and
        //! whose SSE text has one `data:` line, no raw CR, and JSON that reads back the same.
        use super::*;
        use crate::gateway::error::quote;
        use axum::response::sse::Sse;
        use axum::response::IntoResponse;
        use proptest::prelude::*;

        fn text() -> impl Strategy<Value = String> {
            let c = prop_oneof![
                4 => any::<char>(),
                1 => prop::sample::select(vec![
                    '\r', '\n', '\0', '\u{7f}', '\u{85}', '\u{2028}', '\u{202e}', '\u{200f}',
                    '\u{301}', '\u{fe0f}', '😀', 'ع', '\u{1b}', ':', '"', '\\',
                ]),
            ];
            prop::collection::vec(c, 0..24).prop_map(String::from_iter)
        }

        fn sender() -> impl Strategy<Value = crate::store::Sender> {
            (
                text(),
                text(),
                prop::option::of(Just(crate::store::MemberKind::Agent)),
            )
                .prop_map(|(id, name, kind)| crate::store::Sender {
                    groups: Vec::new(),
                    id,
                    name,
                    kind,
                })
        }

        fn id() -> impl Strategy<Value = String> {
            prop_oneof![
                (0i64..i64::MAX, 0u64..u64::MAX).prop_map(|(ms, seq)| format!("{ms}-{seq}")),
                text(),
            ]
        }

        fn live_event() -> impl Strategy<Value = LiveEvent> {
            prop_oneof![
                (id(), text(), sender(), text(), prop::option::of(text())).prop_map(
                    |(id, space, sender, text, mention)| LiveEvent::Message {
                        message: SpaceMessage {
                            id,
                            space,
                            sender,
                            text,
                            time_ms: 5,
                            mention,
                            depth: 0,
                        },
                    }
                ),
                (text(), sender(), text()).prop_map(|(stream_id, sender, delta)| {
                    LiveEvent::Delta {
                        stream_id,
                        sender,
                        delta,
                    }
                }),
                (
                    sender(),
                    text(),
                    prop::option::of(text()),
                    prop::option::of(text())
                )
                    .prop_map(|(sender, activity, tool, detail)| {
                        LiveEvent::Activity {
                            sender,
                            activity,
                            tool,
                            detail,
                        }
                    }),
                (sender(), text(), text(), any::<bool>(), any::<i64>()).prop_map(
                    |(sender, call_id, tool, interactive, expires_ms)| {
                        LiveEvent::ToolRequest {
                            sender,
                            call_id,
                            tool: tool.clone(),
                            kind: if interactive {
                                CallKind::Interactive
                            } else {
                                CallKind::Approval
                            },
                            arguments: serde_json::json!({ "text": tool }),
                            result_schema: interactive
                                .then(|| serde_json::json!({"type": "object"})),
                            since_ms: 1,
                            expires_ms,
                        }
                    }
                ),
            ]
        }

        /// The SSE text of one frame, as a client receives it.
        fn sse_text(frame: &Frame) -> String {
            let event = frame.to_event();
            let body = Sse::new(futures::stream::iter([Ok::<_, std::convert::Infallible>(
                event,
            )]))
            .into_response()
            .into_body();
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            let bytes = runtime
                .block_on(axum::body::to_bytes(body, usize::MAX))
                .unwrap();
            String::from_utf8(bytes.to_vec()).unwrap()
        }

        /// The frame's SSE text read back: `(event, id, data JSON)`.
        fn read_back(frame: &Frame) -> (String, Option<String>, serde_json::Value) {
            let text = sse_text(frame);
            assert!(!text.contains('\r'), "a raw CR: {text:?}");
            assert!(text.ends_with("\n\n"), "{text:?}");
            let lines: Vec<&str> = text.trim_end_matches('\n').split('\n').collect();
            let field = |name: &str| -> Vec<&str> {
                lines
                    .iter()
                    .filter_map(|l| l.strip_prefix(name)?.strip_prefix(": "))
                    .collect()
            };
            let data = field("data");
            assert_eq!(data.len(), 1, "one data line: {text:?}");
            assert_eq!(
                lines.len(),
                field("event").len() + field("id").len() + 1,
                "only event, id and data lines: {text:?}"
            );
            let event = field("event");
            let id = field("id");
            (
                event.first().map(|e| e.to_string()).unwrap_or_default(),
                id.first().map(|i| i.to_string()),
                serde_json::from_str(data[0]).unwrap(),
            )
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn live_events_encode_to_valid_sse(event in live_event()) {
                let frame = Frame::encode(&event).unwrap();
                let (name, id, data) = read_back(&frame);
                prop_assert_eq!(name.as_str(), frame.event);
                match &event {
                    LiveEvent::Message { message } => {
                        let want = Message::from(message);
                        let valid_id = parse_message_id(&message.id).is_some();
                        prop_assert_eq!(id.as_deref(), valid_id.then_some(message.id.as_str()));
                        prop_assert_eq!(serde_json::from_value::<Message>(data).unwrap(), want);
                    }
                    LiveEvent::Delta { stream_id, sender, delta } => {
                        prop_assert_eq!(id, None);
                        prop_assert_eq!(data["streamId"].as_str(), Some(stream_id.as_str()));
                        prop_assert_eq!(data["sender"]["name"].as_str(), Some(sender.name.as_str()));
                        prop_assert_eq!(data["delta"].as_str(), Some(delta.as_str()));
                    }
                    LiveEvent::Activity { sender, activity, tool, detail } => {
                        prop_assert_eq!(id, None);
                        prop_assert_eq!(data["sender"]["id"].as_str(), Some(sender.id.as_str()));
                        prop_assert_eq!(data["activity"].as_str(), Some(activity.as_str()));
                        prop_assert_eq!(data["tool"].as_str(), tool.as_deref());
                        prop_assert_eq!(data["detail"].as_str(), detail.as_deref());
                    }
                    LiveEvent::ToolRequest { sender, call_id, tool, kind, arguments, result_schema, expires_ms, .. } => {
                        prop_assert_eq!(id, None);
                        let r: ToolRequestEvent = serde_json::from_value(data).unwrap();
                        prop_assert_eq!(r.sender.id, sender.id.clone());
                        prop_assert_eq!(&r.call_id, call_id);
                        prop_assert_eq!(&r.tool, tool);
                        prop_assert_eq!(r.kind.as_str(), kind.name());
                        prop_assert_eq!(&r.arguments, arguments);
                        prop_assert_eq!(&r.result_schema, result_schema);
                        prop_assert_eq!(r.expires_ms, *expires_ms);
                    }
                }
            }

            #[test]
            fn error_events_encode_to_valid_sse(input in text()) {
                let e = ApiError::not_member(format!("{} left", quote(&input)));
                let (name, id, data) = read_back(&Frame::error(&e));
                prop_assert_eq!(name.as_str(), "error");
                prop_assert_eq!(id, None);
                prop_assert_eq!(data["error"]["code"].as_str(), Some("not_member"));
                prop_assert_eq!(data["error"]["message"].as_str(), Some(e.message.as_str()));
            }
        }
    }
}

//! `GET /v1/spaces/{namespace}/{space}/stream`: one client's SSE stream.
//!
//! A resume first replays the messages the client missed, read from the space's log one small
//! page at a time, and only when the client has taken the previous page: a client that reads
//! slowly holds one page, not the backlog. Then the space's live events. The stream ends with a
//! final `error` event when the caller's token is revoked or the caller stops being a member.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::stream::{self, Stream, StreamExt};
use serde::Deserialize;
use tokio::sync::{broadcast, watch};
use tracing::{debug, warn};
use utoipa::IntoParams;

use super::auth::{Caller, Entity, TokenHash};
use super::error::ApiError;
use super::sse::{Frame, Item, Subscription};
use super::{admit, message_id, Gateway, RequestRefusals, SpacePath, SpaceRefusals};
use crate::api::{ErrorBody, Message};
use crate::identity::SpaceKey;
use crate::store::{now_ms, ReadQuery, SpaceMessage, Store, StoreError};

/// Messages read per data-plane round trip while replaying: what one slow client holds.
pub const REPLAY_PAGE: usize = 50;

/// Where a stream resumes.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StreamParams {
    /// Resume after this message id (as the `Last-Event-ID` header does; the header wins).
    pub after: Option<String>,
}

/// Streams a space over SSE.
///
/// Events: `message` (a posted message, JSON `Message`, with the message id as the SSE id),
/// `delta` (JSON `DeltaEvent`: text an agent is writing, as it streams), `activity` (JSON
/// `ActivityEvent`: thinking, running a tool, idle, or `error` with what failed and what
/// happens next), `tool_request` (JSON `ToolRequestEvent`: an agent asks the space's members to
/// approve, deny or answer a call at `POST /v1/spaces/{ns}/{space}/tool-calls/{callId}`).
/// Reconnecting with `Last-Event-ID` (or
/// `?after=`) first replays the messages posted since that id.
///
/// The stream ends with a last `error` event (JSON `ErrorBody`) when the caller may no longer
/// read: code `unauthenticated` (the token was revoked), `not_member` (removed from the
/// space), `not_found` (the space was deleted) — reconnecting then gets the matching 401, 403
/// or 404 — or `unavailable` (the data plane failed mid-replay: reconnect with
/// `Last-Event-ID`).
#[utoipa::path(
    get,
    path = "/v1/spaces/{namespace}/{space}/stream",
    tag = "spaces",
    params(
        SpacePath,
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this message id"),
        StreamParams,
    ),
    responses(
        (status = 200, description = "An SSE stream of `message`, `delta`, `activity` and `tool_request` events; a final `error` event (`ErrorBody`) when access ends", content_type = "text/event-stream", body = String),
        (status = 400, description = "Invalid resume id", body = ErrorBody),
        SpaceRefusals,
        RequestRefusals,
    ),
    security(("bearer" = []))
)]
pub async fn stream_space(
    State(gw): State<Gateway>,
    Caller(caller, token): Caller,
    Path(SpacePath {
        namespace: ns,
        space: name,
    }): Path<SpacePath>,
    headers: HeaderMap,
    query: Result<Query<StreamParams>, QueryRejection>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::invalid(e.body_text()))?;
    let (space, record) = gw.member_space(&caller, &ns, &name).await?;
    let resume = match headers.get("last-event-id") {
        Some(v) => Some(
            v.to_str()
                .map_err(|_| ApiError::invalid("Last-Event-ID: not visible ASCII"))?
                .to_string(),
        ),
        None => q.after,
    }
    .map(|id| message_id("Last-Event-ID", &id))
    .transpose()?;

    let slot = gw
        .inner
        .streams
        .open(&caller)
        .map_err(|full| ApiError::too_many_streams(full.message()))?;
    // Subscribe first, then replay what was missed: a message posted in between arrives both
    // ways and is sent once.
    let sub = gw
        .inner
        .hub
        .subscribe(&space, &record)
        .await
        .map_err(|e| ApiError::unavailable(&e))?;
    gw.inner.metrics.sse_clients.inc();
    let client = Client {
        last: resume.as_deref().and_then(crate::store::parse_message_id),
        replay: resume.map(Replay::after),
        look_at_token: false,
        look_at_members: false,
        review_at: gw
            .review_every()
            .map(|every| tokio::time::Instant::now() + every),
        tokens: gw.inner.tokens.changes(),
        shutdown: gw.inner.shutdown.clone(),
        _guard: ClientGuard(gw.inner.metrics.sse_clients.clone()),
        _slot: slot,
        gw,
        space,
        caller,
        token,
        sub,
        ended: false,
    };
    let keep_alive = client.gw.inner.limits.sse_keep_alive();
    let hello = Event::default()
        .retry(Duration::from_secs(2))
        .comment("connected");
    let events = stream::unfold(client, |mut c| async move {
        let event = c.next().await?;
        Some((Ok(event), c))
    });
    Ok(Sse::new(stream::once(async { Ok(hello) }).chain(events))
        .keep_alive(KeepAlive::new().interval(keep_alive)))
}

/// The replay of a resume: the log after a message id, read a page at a time, each page only
/// once the previous one has been taken.
pub struct Replay {
    /// Where the next page starts; `None` once a page came back short (the end of the log).
    cursor: Option<String>,
    page: VecDeque<SpaceMessage>,
    pages_read: usize,
}

impl Replay {
    /// The messages after `id`; nothing is read yet.
    pub fn after(id: String) -> Self {
        Self {
            cursor: Some(id),
            page: VecDeque::new(),
            pages_read: 0,
        }
    }

    /// The next message; reads the next page only when the current one is used up. `None`
    /// at the end of the log.
    pub async fn next(
        &mut self,
        store: &dyn Store,
        space: &SpaceKey,
    ) -> Result<Option<SpaceMessage>, StoreError> {
        if self.page.is_empty() {
            let Some(cursor) = self.cursor.take() else {
                return Ok(None);
            };
            let page = store
                .read_page(
                    space,
                    &ReadQuery {
                        limit: REPLAY_PAGE,
                        after: Some(cursor),
                        ..Default::default()
                    },
                )
                .await?;
            self.pages_read += 1;
            self.cursor = page.next().map(str::to_string);
            self.page = page.messages.into();
        }
        Ok(self.page.pop_front())
    }

    /// Pages read so far.
    #[cfg(test)]
    fn pages_read(&self) -> usize {
        self.pages_read
    }

    /// Messages read and not yet taken (less than a page).
    #[cfg(test)]
    fn held(&self) -> usize {
        self.page.len()
    }
}

/// Counts a connected SSE client while it lives.
struct ClientGuard(prometheus::IntGauge);

impl Drop for ClientGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// One client's stream: the replay, then live frames, until access ends.
struct Client {
    gw: Gateway,
    space: SpaceKey,
    caller: Entity,
    token: TokenHash,
    sub: Subscription,
    tokens: watch::Receiver<u64>,
    shutdown: watch::Receiver<bool>,
    replay: Option<Replay>,
    /// The newest message sent: live frames at or before it were replayed already.
    last: Option<(i64, u64)>,
    /// The tokens changed since the caller's token was last looked at.
    look_at_token: bool,
    /// The space's record changed since the caller's membership was last looked at.
    look_at_members: bool,
    /// For a Kubernetes token: when it is reviewed again.
    review_at: Option<tokio::time::Instant>,
    ended: bool,
    _guard: ClientGuard,
    /// Its place among its caller's open streams.
    _slot: super::streams::Slot,
}

impl Client {
    /// The next event; `None` ends the stream.
    async fn next(&mut self) -> Option<Event> {
        if self.ended {
            return None;
        }
        loop {
            if *self.shutdown.borrow() {
                return None;
            }
            if let Some(refusal) = self.refusal().await {
                return Some(self.end_with(&refusal));
            }
            if let Some(replay) = &mut self.replay {
                match replay.next(self.gw.inner.store.as_ref(), &self.space).await {
                    Ok(Some(m)) => match Frame::message(&Message::from(&m)) {
                        Ok(frame) => {
                            self.last = frame.order.or(self.last);
                            return Some(frame.to_event());
                        }
                        Err(e) => warn!(space = %self.space, error = %e, "message not encodable"),
                    },
                    Ok(None) => {
                        debug!(space = %self.space, pages = replay.pages_read, "replay done");
                        self.replay = None;
                    }
                    Err(e) => return Some(self.end_with(&ApiError::unavailable(&e))),
                }
                continue;
            }
            let item = tokio::select! {
                _ = self.shutdown.wait_for(|v| *v) => return None,
                // A change is looked at by `refusal` at the top of the loop; a closed channel
                // (its task gone) ends the stream, and the client resumes.
                r = self.sub.members.changed() => match r {
                    Ok(()) => {
                        self.look_at_members = true;
                        continue;
                    }
                    Err(_) => return None,
                },
                r = self.tokens.changed() => match r {
                    Ok(()) => {
                        self.look_at_token = true;
                        continue;
                    }
                    Err(_) => return None,
                },
                // A Kubernetes token: reviewed again now and then (see `refusal`).
                () = until(self.review_at), if matches!(self.token, TokenHash::Kubernetes { .. }) => {
                    self.look_at_token = true;
                    continue;
                }
                r = self.sub.rx.recv() => r,
            };
            let metrics = &self.gw.inner.metrics;
            match item {
                Ok(Item::Frame(frame)) => {
                    if let Some(order) = frame.order {
                        if self.last.is_some_and(|l| order <= l) {
                            continue;
                        }
                        self.last = Some(order);
                    }
                    if let Some(posted) = frame.posted_ms {
                        let ms = (now_ms() - posted).max(0) as f64;
                        metrics.fanout_latency.observe(ms / 1000.0);
                    }
                    return Some(frame.to_event());
                }
                Ok(Item::Closed) | Err(broadcast::error::RecvError::Closed) => return None,
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    metrics.sse_lagged.inc();
                    return None;
                }
            }
        }
    }

    /// For a Kubernetes token whose time has come: reviewed again (from the reviewer's cache
    /// when it is fresh), and a refusal when it no longer names the caller. The API server
    /// unreachable keeps the stream: the token may be good.
    async fn reviewed_again(&mut self) -> Option<ApiError> {
        let TokenHash::Kubernetes { token, .. } = &self.token else {
            return None;
        };
        let due = self
            .review_at
            .is_some_and(|at| at <= tokio::time::Instant::now());
        let reviewer = self.gw.kubernetes()?;
        if !due {
            return None;
        }
        self.review_at = Some(tokio::time::Instant::now() + reviewer.ttl());
        match reviewer.review(token.expose()).await {
            Ok(entity) if entity.id == self.caller.id => None,
            Ok(_) => Some(ApiError::unauthenticated(
                "the token names someone else now",
            )),
            Err(e) if e.status == axum::http::StatusCode::UNAUTHORIZED => Some(e),
            Err(_) => None,
        }
    }

    /// The last event: the error, then the stream ends.
    fn end_with(&mut self, e: &ApiError) -> Event {
        self.ended = true;
        Frame::error(e).to_event()
    }

    /// Why the caller may no longer read, looked at when the tokens or the space's record
    /// changed.
    async fn refusal(&mut self) -> Option<ApiError> {
        // Changes seen while replaying (the live loop notes them as they come).
        if self.tokens.has_changed().unwrap_or(false) {
            self.tokens.borrow_and_update();
            self.look_at_token = true;
        }
        if self.sub.members.has_changed().unwrap_or(false) {
            self.look_at_members = true;
        }
        if std::mem::take(&mut self.look_at_token) {
            if !self.gw.inner.tokens.still_grants(&self.token, &self.caller) {
                return Some(ApiError::unauthenticated("the token was revoked"));
            }
            if let Some(refusal) = self.reviewed_again().await {
                return Some(refusal);
            }
        }
        if !std::mem::take(&mut self.look_at_members) {
            return None;
        }
        let member = self
            .sub
            .members
            .borrow_and_update()
            .as_ref()
            .is_some_and(|r| self.caller.is_member(r));
        if member {
            return None;
        }
        // The shared record may be older than this client's own admission (a member added a
        // moment ago): confirm with a fresh read before ending the stream. A failed read keeps
        // the stream; the next change looks again.
        match self.gw.inner.store.space(&self.space).await {
            Ok(record) => admit(&self.caller, &self.space, record).err(),
            Err(e) => {
                warn!(space = %self.space, error = %e, "confirming a member's removal");
                None
            }
        }
    }
}

/// Ready at `at`, never when `None`.
async fn until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{prelude::*, MemberKind, MemoryStore, NewMessage, Sender};

    #[tokio::test]
    async fn replay_reads_a_page_only_when_the_last_one_is_taken() {
        let store = MemoryStore::new();
        let space = SpaceKey::new("ns", "log");
        let mut record = crate::testing::space_record("Log", &[], &["Husam"]);
        record.max_messages = 10_000;
        store.apply_space(&space, &record).await.unwrap();
        let total = REPLAY_PAGE * 4 + 7;
        let mut ids = Vec::new();
        for i in 0..total {
            let posted = store
                .post_message(
                    &space,
                    &NewMessage {
                        sender: Sender {
                            groups: Vec::new(),
                            id: "husam".into(),
                            name: "Husam".into(),
                            kind: Some(MemberKind::Human),
                        },
                        text: format!("m{i}"),
                        mention: None,
                        idempotency_key: None,
                        urgent: false,
                        depth: 0,
                    },
                )
                .await
                .unwrap();
            ids.push(posted.id);
        }
        let mut replay = Replay::after("0-0".into());
        assert_eq!(
            replay.pages_read(),
            0,
            "nothing is read before it is asked for"
        );
        for (taken, id) in ids.iter().enumerate() {
            let m = replay.next(&store, &space).await.unwrap().unwrap();
            assert_eq!(&m.id, id);
            assert_eq!(
                replay.pages_read(),
                taken / REPLAY_PAGE + 1,
                "after {taken}"
            );
            assert!(replay.held() < REPLAY_PAGE);
        }
        assert!(replay.next(&store, &space).await.unwrap().is_none());
        assert!(replay.next(&store, &space).await.unwrap().is_none());
        assert_eq!(
            replay.pages_read(),
            5,
            "the short last page ends the replay"
        );
    }
}

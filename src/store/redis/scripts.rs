//! Every Lua script of the Redis store, each with the one typed function that runs it.
//!
//! A script lives in `lua/NAME.lua` (its header says its KEYS, ARGV and reply); the function
//! of the same name here is its only caller and fills KEYS and ARGV from named parameters, so
//! no other code builds a KEYS/ARGV list. Each function takes the keys of one agent
//! ([`AgentKeys`]) or of one space ([`SpaceKeys`]), never more, so every script runs on one
//! Redis Cluster slot. Shared snippets under `lua/lib/` are prepended when a script is loaded:
//! `fence.lua` (fenced scripts: the caller's `HOLDER|TOKEN` against the lease, else the error
//! `FENCED`) and `push.lua` (the wake signal, and queueing one event with it; `push`,
//! `mark_plan`, `complete_call` and `release`).

use std::sync::LazyLock;

use super::conn::Conn;
use redis::Script;

use super::keys::{AgentKeys, SpaceKeys};
use super::{decode_events, fenced, redis_err, to_json};
use crate::store::{
    now_ms, CallId, CallRecord, Completion, Guard, InboxEvent, Lease, MidCycle, NoteKind, Pushed,
    RecordWrite, StoreError, SEEN_IDS,
};

mod consciousness;

pub(super) use self::consciousness::{commit, replace, restore, CommitError};

const FENCE: &str = include_str!("lua/lib/fence.lua");
const PUSH_FN: &str = include_str!("lua/lib/push.lua");
const RECEIPTS_FN: &str = include_str!("lua/lib/receipts.lua");
const RECORDS_FN: &str = include_str!("lua/lib/records.lua");

/// A script made of snippets and a body.
fn load(parts: &[&str]) -> Script {
    Script::new(&parts.concat())
}

static PUSH: LazyLock<Script> = LazyLock::new(|| load(&[PUSH_FN, include_str!("lua/push.lua")]));
static MARK_PLAN: LazyLock<Script> =
    LazyLock::new(|| load(&[PUSH_FN, include_str!("lua/mark_plan.lua")]));
static POST: LazyLock<Script> = LazyLock::new(|| load(&[include_str!("lua/post.lua")]));
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| load(&[include_str!("lua/acquire.lua")]));
static RENEW: LazyLock<Script> = LazyLock::new(|| load(&[include_str!("lua/renew.lua")]));
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| load(&[PUSH_FN, include_str!("lua/release.lua")]));
static DRAIN: LazyLock<Script> = LazyLock::new(|| load(&[FENCE, include_str!("lua/drain.lua")]));
static TAKE_URGENT: LazyLock<Script> =
    LazyLock::new(|| load(&[FENCE, include_str!("lua/take_urgent.lua")]));
static MID_CYCLE: LazyLock<Script> =
    LazyLock::new(|| load(&[FENCE, include_str!("lua/mid_cycle.lua")]));
static ACK: LazyLock<Script> =
    LazyLock::new(|| load(&[FENCE, RECEIPTS_FN, RECORDS_FN, include_str!("lua/ack.lua")]));
static PAUSE: LazyLock<Script> =
    LazyLock::new(|| load(&[FENCE, RECORDS_FN, include_str!("lua/pause.lua")]));
static RECORD: LazyLock<Script> =
    LazyLock::new(|| load(&[FENCE, RECORDS_FN, include_str!("lua/record.lua")]));
static DEFER: LazyLock<Script> = LazyLock::new(|| load(&[FENCE, include_str!("lua/defer.lua")]));
static NOTES: LazyLock<Script> = LazyLock::new(|| load(&[FENCE, include_str!("lua/notes.lua")]));
static REGISTER_CALL: LazyLock<Script> =
    LazyLock::new(|| load(&[include_str!("lua/register_call.lua")]));
static COMPLETE_CALL: LazyLock<Script> =
    LazyLock::new(|| load(&[PUSH_FN, include_str!("lua/complete_call.lua")]));
static TOKENS: LazyLock<Script> = LazyLock::new(|| load(&[include_str!("lua/record_tokens.lua")]));
static JOURNAL: LazyLock<Script> =
    LazyLock::new(|| load(&[FENCE, include_str!("lua/journal.lua")]));

/// `record_tokens.lua`: counts `usage` of calls made in `periods` and returns the record.
/// KEYS: tokens. ARGV: day, month, then the tokens by direction (input billed in full, cache
/// read, cache write, output).
pub(super) async fn record_tokens(
    conn: &mut Conn,
    agent: &AgentKeys,
    periods: &crate::periods::Periods,
    usage: &crate::model::Usage,
) -> Result<crate::store::TokenSpend, StoreError> {
    let mut invocation = TOKENS.prepare_invoke();
    invocation
        .key(agent.tokens())
        .arg(&periods.day)
        .arg(&periods.month);
    for (_, n) in usage.by_direction() {
        invocation.arg(n);
    }
    let fields: std::collections::HashMap<String, String> = invocation
        .invoke_async(conn)
        .await
        .map_err(redis_err("record tokens"))?;
    Ok(crate::store::TokenSpend::from_fields(&fields))
}

/// Where `post.lua` puts the new message's id in the templates it fills.
pub(super) const ID_PLACEHOLDER: &str = "@@agentfleet-message-id@@";

/// A lease as the lease key holds it: `HOLDER|TOKEN`.
pub(super) fn lease_value(lease: &Lease) -> String {
    format!("{}|{}", lease.holder, lease.token)
}

fn flag(b: bool) -> &'static str {
    if b {
        "1"
    } else {
        "0"
    }
}

/// An inbox event, encoded once for `push.lua` and `mark_plan.lua`.
pub(super) struct Event<'a> {
    event: &'a InboxEvent,
    json: String,
}

impl<'a> Event<'a> {
    /// Encodes `event`.
    pub(super) fn new(event: &'a InboxEvent) -> Result<Self, StoreError> {
        Ok(Self {
            event,
            json: to_json(|| format!("event {}", event.id), event)?,
        })
    }
}

/// `push.lua`: queues `event` in `agent`'s inbox unless its id was seen.
/// KEYS: inbox, urgent, ids, state, lease. ARGV: id, JSON, urgent, time, [`SEEN_IDS`], the
/// agent's `NS/NAME`, its wake channel and the publish command ([`Conn::wake`]).
pub(super) async fn push(
    conn: &mut Conn,
    agent: &AgentKeys,
    event: &Event<'_>,
) -> Result<Pushed, StoreError> {
    let (queued, woke): (u8, u8) = PUSH
        .key(agent.inbox())
        .key(agent.urgent())
        .key(agent.ids())
        .key(agent.state())
        .key(agent.lease())
        .arg(&event.event.id)
        .arg(&event.json)
        .arg(flag(event.event.urgent))
        .arg(event.event.time_ms)
        .arg(SEEN_IDS)
        .arg(conn.wake(agent))
        .invoke_async(conn)
        .await
        .map_err(redis_err("push event"))?;
    Ok(Pushed {
        queued: queued == 1,
        woke: woke == 1,
    })
}

/// `mark_plan.lua`: records `due_ms` as handled for `plan_id` and pushes `event` (as
/// [`push`]), unless a due time at or after it was handled before (`None`).
/// KEYS: planmarks, inbox, urgent, ids, state, lease. ARGV: plan id, due, has an event, then
/// the event as [`push`] takes it.
pub(super) async fn mark_plan(
    conn: &mut Conn,
    agent: &AgentKeys,
    plan_id: &str,
    due_ms: i64,
    event: Option<&Event<'_>>,
) -> Result<Option<Pushed>, StoreError> {
    let mut invocation = MARK_PLAN.prepare_invoke();
    invocation
        .key(agent.plan_marks())
        .key(agent.inbox())
        .key(agent.urgent())
        .key(agent.ids())
        .key(agent.state())
        .key(agent.lease())
        .arg(plan_id)
        .arg(due_ms)
        .arg(flag(event.is_some()));
    if let Some(e) = event {
        invocation
            .arg(&e.event.id)
            .arg(&e.json)
            .arg(flag(e.event.urgent))
            .arg(e.event.time_ms)
            .arg(SEEN_IDS)
            .arg(conn.wake(agent));
    }
    let (marked, queued, woke): (u8, u8, u8) = invocation
        .invoke_async(conn)
        .await
        .map_err(redis_err("fire plan"))?;
    Ok((marked == 1).then_some(Pushed {
        queued: queued == 1,
        woke: woke == 1,
    }))
}

/// A message to post, as `post.lua` takes it.
pub(super) struct Post<'a> {
    /// The message as the log keeps it (JSON, no id).
    pub message: &'a str,
    /// The scoped idempotency key of a keyed post.
    pub idempotency: Option<&'a str>,
    /// The most messages the log keeps.
    pub max_messages: u64,
    /// The inbox event (JSON) with [`ID_PLACEHOLDER`] for the id.
    pub event_template: &'a str,
    /// The live event (JSON) with [`ID_PLACEHOLDER`] for the id.
    pub live_template: &'a str,
    /// The loop guard watches this post.
    pub watched: bool,
    /// The post is beyond the space's depth limit.
    pub over_depth: bool,
    /// The space's agent messages a minute.
    pub max_per_minute: u32,
    /// The depth notice: the message (JSON) and its live event template.
    pub depth_notice: (&'a str, &'a str),
    /// The rate notice: the message (JSON) and its live event template.
    pub rate_notice: (&'a str, &'a str),
    /// The member agents but the sender, in the record's order.
    pub recipients: &'a [&'a str],
}

/// What `post.lua` answered.
pub(super) struct PostReply {
    /// The message's id (the first post's, for a duplicate).
    pub id: String,
    /// A post with the same key came first.
    pub duplicate: bool,
    /// The loop guard held the message.
    pub guarded: Option<Guard>,
    /// The inbox event (JSON) and the agents to push it to (none: nothing to push).
    pub fan_out: (String, Vec<String>),
}

/// `post.lua`: writes a message to `space`'s log, its idempotency and fan-out records, the
/// loop guard's count and notice, and its live event; returns what to push to which agents.
/// KEYS: log, agents, idempotency, agent rate, fan-out record. ARGV: message, max messages,
/// live channel, event and live templates, keyed, watched, over depth, rate, depth and rate
/// notices and their live templates, the publish command, then the recipients.
pub(super) async fn post(
    conn: &mut Conn,
    space: &SpaceKeys,
    post: &Post<'_>,
) -> Result<PostReply, StoreError> {
    let scoped = post.idempotency.unwrap_or("");
    let mut invocation = POST.prepare_invoke();
    invocation
        .key(space.log())
        .key(space.agents())
        .key(space.idempotency(scoped))
        .key(space.agent_rate())
        .key(space.fan_out(scoped))
        .arg(post.message)
        .arg(post.max_messages)
        .arg(space.live())
        .arg(post.event_template)
        .arg(post.live_template)
        .arg(flag(post.idempotency.is_some()))
        .arg(flag(post.watched))
        .arg(flag(post.over_depth))
        .arg(post.max_per_minute)
        .arg(post.depth_notice.0)
        .arg(post.rate_notice.0)
        .arg(post.depth_notice.1)
        .arg(post.rate_notice.1)
        .arg(conn.publish_command());
    for agent in post.recipients {
        invocation.arg(*agent);
    }
    let reply: Vec<String> = invocation
        .invoke_async(conn)
        .await
        .map_err(redis_err("post message"))?;
    let mut reply = reply.into_iter();
    let id = reply.next().unwrap_or_default();
    let duplicate = reply.next().as_deref() == Some("1");
    let guarded = reply.next().as_deref().and_then(Guard::parse);
    let event = reply.next().unwrap_or_default();
    Ok(PostReply {
        id,
        duplicate,
        guarded,
        fan_out: (event, reply.collect()),
    })
}

/// `acquire.lua`: takes `agent`'s lease for `holder`; the fencing token, or `None` while
/// another holds it. KEYS: lease, fence. ARGV: holder, time to live.
pub(super) async fn acquire(
    conn: &mut Conn,
    agent: &AgentKeys,
    holder: &str,
    ttl_ms: u64,
) -> Result<Option<u64>, StoreError> {
    ACQUIRE
        .key(agent.lease())
        .key(agent.fence())
        .key(agent.host())
        .arg(holder)
        .arg(ttl_ms)
        .invoke_async(conn)
        .await
        .map_err(redis_err("acquire lease"))
}

/// `renew.lua`: extends the lease; `false` when it is no longer ours.
/// KEYS: lease. ARGV: lease value, time to live.
pub(super) async fn renew(
    conn: &mut Conn,
    agent: &AgentKeys,
    lease: &Lease,
    ttl_ms: u64,
) -> Result<bool, StoreError> {
    let ours: u8 = RENEW
        .key(agent.lease())
        .arg(lease_value(lease))
        .arg(ttl_ms)
        .invoke_async(conn)
        .await
        .map_err(redis_err("renew lease"))?;
    Ok(ours == 1)
}

/// `release.lua`: gives the lease up, with a wake signal when events are left.
/// KEYS: lease, inbox, urgent, inflight, state. ARGV: lease value, the agent's `NS/NAME`, its
/// wake channel, the publish command.
pub(super) async fn release(
    conn: &mut Conn,
    agent: &AgentKeys,
    lease: &Lease,
) -> Result<(), StoreError> {
    RELEASE
        .key(agent.lease())
        .key(agent.inbox())
        .key(agent.urgent())
        .key(agent.inflight())
        .key(agent.state())
        .arg(lease_value(lease))
        .arg(conn.wake(agent))
        .invoke_async::<u8>(conn)
        .await
        .map_err(redis_err("release lease"))?;
    Ok(())
}

/// `drain.lua` (fenced): moves the inbox in flight; every event in flight.
/// KEYS: lease, inbox, inflight, state, held. ARGV: lease value.
pub(super) async fn drain(
    conn: &mut Conn,
    agent: &AgentKeys,
    lease: &Lease,
) -> Result<Vec<InboxEvent>, StoreError> {
    let raw: Vec<String> = DRAIN
        .key(agent.lease())
        .key(agent.inbox())
        .key(agent.inflight())
        .key(agent.state())
        .key(agent.held())
        .arg(lease_value(lease))
        .invoke_async(conn)
        .await
        .map_err(fenced(agent.name(), "drain inbox"))?;
    decode_events(agent.name(), raw)
}

/// `defer.lua` (fenced): the events in flight with these ids back to the inbox (merged by
/// time), held there for a later cycle; how many moved.
/// KEYS: lease, inflight, inbox, held. ARGV: lease value, the ids.
pub(super) async fn defer(
    conn: &mut Conn,
    agent: &AgentKeys,
    lease: &Lease,
    ids: &[String],
) -> Result<u64, StoreError> {
    let mut invocation = DEFER.prepare_invoke();
    invocation
        .key(agent.lease())
        .key(agent.inflight())
        .key(agent.inbox())
        .key(agent.held())
        .arg(lease_value(lease));
    for id in ids {
        invocation.arg(id);
    }
    invocation
        .invoke_async(conn)
        .await
        .map_err(fenced(agent.name(), "defer events"))
}

/// `take_urgent.lua` (fenced): moves the urgent queue in flight and returns it.
/// KEYS: lease, urgent, inflight. ARGV: lease value.
pub(super) async fn take_urgent(
    conn: &mut Conn,
    agent: &AgentKeys,
    lease: &Lease,
) -> Result<Vec<InboxEvent>, StoreError> {
    let raw: Vec<String> = TAKE_URGENT
        .key(agent.lease())
        .key(agent.urgent())
        .key(agent.inflight())
        .arg(lease_value(lease))
        .invoke_async(conn)
        .await
        .map_err(fenced(agent.name(), "take urgent events"))?;
    decode_events(agent.name(), raw)
}

/// `mid_cycle.lua` (fenced): one look at the inbox between steps.
/// KEYS: lease, urgent, inflight, inbox. ARGV: lease value, take urgent, preview limit.
pub(super) async fn mid_cycle(
    conn: &mut Conn,
    agent: &AgentKeys,
    lease: &Lease,
    take_urgent: bool,
    preview: usize,
) -> Result<MidCycle, StoreError> {
    let (urgent, waiting, previewed): (Vec<String>, u64, Vec<String>) = MID_CYCLE
        .key(agent.lease())
        .key(agent.urgent())
        .key(agent.inflight())
        .key(agent.inbox())
        .arg(lease_value(lease))
        .arg(flag(take_urgent))
        .arg(preview)
        .invoke_async(conn)
        .await
        .map_err(fenced(agent.name(), "look at the inbox mid-cycle"))?;
    Ok(MidCycle {
        urgent: decode_events(agent.name(), urgent)?,
        waiting,
        preview: decode_events(agent.name(), previewed)?,
    })
}

/// `ack.lua` (fenced): ends the cycle (and its journal), keeping its `record`, if any.
/// KEYS: lease, inflight, state, urgent, inbox, journal, receipts, receipt ids, A2A record,
/// records, record heads. ARGV: lease value, receipt, receipts kept, the record's four.
pub(super) async fn ack(
    conn: &mut Conn,
    agent: &AgentKeys,
    lease: &Lease,
    receipt: &crate::store::Receipt,
    record: Option<&RecordWrite>,
) -> Result<(), StoreError> {
    let mut invocation = ACK.prepare_invoke();
    invocation
        .key(agent.lease())
        .key(agent.inflight())
        .key(agent.state())
        .key(agent.urgent())
        .key(agent.inbox())
        .key(agent.journal())
        .key(agent.receipts())
        .key(agent.receipt_ids())
        .key(agent.a2a())
        .key(agent.records())
        .key(agent.record_heads())
        .arg(lease_value(lease))
        .arg(receipt.to_json())
        .arg(crate::store::RECEIPTS_KEPT_MS);
    record_args(&mut invocation, record)?;
    invocation
        .invoke_async::<u8>(conn)
        .await
        .map_err(fenced(agent.name(), "acknowledge cycle"))?;
    Ok(())
}

/// `pause.lua`: marks the agent paused (its events stay in flight) and keeps the cycle's
/// `record`, unless events arrived since the drain (`false`); urgent events move back to
/// the inbox. KEYS: lease, state, urgent, inbox, held, records, record heads. ARGV: lease,
/// the record's four.
pub(super) async fn pause(
    conn: &mut Conn,
    agent: &AgentKeys,
    lease: &Lease,
    record: Option<&RecordWrite>,
) -> Result<bool, StoreError> {
    let mut invocation = PAUSE.prepare_invoke();
    invocation
        .key(agent.lease())
        .key(agent.state())
        .key(agent.urgent())
        .key(agent.inbox())
        .key(agent.held())
        .key(agent.records())
        .key(agent.record_heads())
        .arg(lease_value(lease));
    record_args(&mut invocation, record)?;
    let paused = invocation
        .invoke_async::<u8>(conn)
        .await
        .map_err(fenced(agent.name(), "pause cycle"))?;
    Ok(paused == 1)
}

/// The ARGV of a record to keep: its head, the record (`''` for none), how many to keep and
/// their bytes at most (a record not given keeps none new, and trims nothing).
pub(super) fn record_args(
    invocation: &mut redis::ScriptInvocation<'_>,
    record: Option<&RecordWrite>,
) -> Result<(), StoreError> {
    match record.map(|r| r.encode(None)).transpose()? {
        Some(r) => invocation
            .arg(r.head)
            .arg(r.body)
            .arg(r.keep)
            .arg(r.max_bytes),
        None => invocation.arg("").arg("").arg(1).arg(u64::MAX),
    };
    Ok(())
}

/// `record.lua` (fenced): keeps the record of a cycle that ended without a step of its own;
/// its number. KEYS: lease, records, record heads. ARGV: lease value, the record's four.
pub(super) async fn record(
    conn: &mut Conn,
    agent: &AgentKeys,
    lease: &Lease,
    record: &RecordWrite,
) -> Result<u64, StoreError> {
    let mut invocation = RECORD.prepare_invoke();
    invocation
        .key(agent.lease())
        .key(agent.records())
        .key(agent.record_heads())
        .arg(lease_value(lease));
    record_args(&mut invocation, Some(record))?;
    invocation
        .invoke_async::<u64>(conn)
        .await
        .map_err(fenced(agent.name(), "record the cycle"))
}

/// A write of [`notes`].
pub(super) enum NotesWrite<'a> {
    /// Set these entries (key, text).
    Set(&'a [(String, String)]),
    /// Delete these keys.
    Delete(&'a [String]),
}

/// `notes.lua` (fenced): writes one of `agent`'s note collections; how many entries were
/// deleted. KEYS: lease, the collection. ARGV: lease value, `set` KEY TEXT… | `del` KEY….
pub(super) async fn notes(
    conn: &mut Conn,
    agent: &AgentKeys,
    lease: &Lease,
    kind: NoteKind,
    write: NotesWrite<'_>,
) -> Result<u64, StoreError> {
    let mut invocation = NOTES.prepare_invoke();
    invocation
        .key(agent.lease())
        .key(agent.notes(kind))
        .arg(lease_value(lease));
    match write {
        NotesWrite::Set(entries) => {
            invocation.arg("set");
            for (key, text) in entries {
                invocation.arg(key).arg(text);
            }
        }
        NotesWrite::Delete(keys) => {
            invocation.arg("del").arg(keys);
        }
    }
    invocation
        .invoke_async(conn)
        .await
        .map_err(fenced(agent.name(), "write memories, goals or plans"))
}

/// `register_call.lua`: registers `call` (and forgets the agent's calls whose time is over).
/// KEYS: calls, calls by forget time. ARGV: call id, record JSON, forget time, now.
pub(super) async fn register_call(
    conn: &mut Conn,
    agent: &AgentKeys,
    id: &CallId,
    record: &CallRecord,
) -> Result<(), StoreError> {
    let json = to_json(|| format!("call {id}"), record)?;
    REGISTER_CALL
        .key(agent.calls())
        .key(agent.calls_forget())
        .arg(id.as_str())
        .arg(json)
        .arg(record.forget_ms())
        .arg(now_ms())
        .invoke_async::<u8>(conn)
        .await
        .map_err(redis_err("register call"))?;
    Ok(())
}

/// `complete_call.lua`: accepts a result of `call` presented with the token of hash
/// `token_hash`, pushing `event` (as [`push`]) when it is accepted.
/// KEYS: calls, calls by forget time, inbox, urgent, ids, state, lease. ARGV: call id, token
/// hash, now, then the event as [`push`] takes it.
pub(super) async fn complete_call(
    conn: &mut Conn,
    agent: &AgentKeys,
    call: &CallId,
    token_hash: &str,
    event: &Event<'_>,
) -> Result<Completion, StoreError> {
    let (outcome, queued, woke): (String, u8, u8) = COMPLETE_CALL
        .key(agent.calls())
        .key(agent.calls_forget())
        .key(agent.inbox())
        .key(agent.urgent())
        .key(agent.ids())
        .key(agent.state())
        .key(agent.lease())
        .arg(call.as_str())
        .arg(token_hash)
        .arg(now_ms())
        .arg(&event.event.id)
        .arg(&event.json)
        .arg(flag(event.event.urgent))
        .arg(event.event.time_ms)
        .arg(SEEN_IDS)
        .arg(conn.wake(agent))
        .invoke_async(conn)
        .await
        .map_err(redis_err("complete call"))?;
    Ok(match outcome.as_str() {
        "accepted" => Completion::Accepted(Pushed {
            queued: queued == 1,
            woke: woke == 1,
        }),
        "unauthorized" => Completion::Unauthorized,
        "duplicate" => Completion::Duplicate,
        "expired" => Completion::Expired,
        _ => Completion::Unknown,
    })
}

/// `journal.lua` (fenced): appends entries to the journal of the cycle under way.
/// KEYS: lease, journal. ARGV: lease value, entries.
pub(super) async fn journal(
    conn: &mut Conn,
    agent: &AgentKeys,
    lease: &Lease,
    entries: &[String],
) -> Result<(), StoreError> {
    if entries.is_empty() {
        return Ok(());
    }
    let mut invocation = JOURNAL.prepare_invoke();
    invocation
        .key(agent.lease())
        .key(agent.journal())
        .arg(lease_value(lease));
    for e in entries {
        invocation.arg(e);
    }
    invocation
        .invoke_async::<u64>(conn)
        .await
        .map_err(fenced(agent.name(), "write the cycle's journal"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_post_script_fills_the_placeholder_the_store_writes() {
        assert!(include_str!("lua/post.lua").contains(super::ID_PLACEHOLDER));
    }

    #[test]
    fn every_script_is_loaded_once_and_has_its_one_function() {
        let own = include_str!("scripts.rs");
        let source = [
            &own[..own.find("#[cfg(test)]").unwrap()],
            include_str!("scripts/consciousness.rs"),
        ]
        .concat()
        .replace("include_str!(\"../lua/", "include_str!(\"lua/");
        let source = source.as_str();
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store/redis/lua");
        let mut scripts = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let Some(stem) = name.strip_suffix(".lua") else {
                continue;
            };
            scripts += 1;
            let loads = format!("include_str!(\"lua/{name}\")");
            assert_eq!(
                source.matches(&loads).count(),
                1,
                "{name} is not loaded once"
            );
            let function = format!(" async fn {stem}(");
            assert_eq!(
                source.matches(&function).count(),
                1,
                "{name} has no one function"
            );
        }
        assert_eq!(scripts, 21);
    }
}

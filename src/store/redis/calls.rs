//! Asynchronous calls on Redis: one hash of records per agent (and a sorted set of when each
//! is forgotten), on the agent's slot, so accepting a result and pushing its event into the
//! inbox is one script.

use async_trait::async_trait;

use super::keys::AgentKeys;
use super::scripts::{self, Event};
use super::{from_json, redis_err, RedisStore};
use crate::identity::AgentKey;
use crate::store::{
    now_ms, outbound_member, outbound_member_depth, presented_hash, CallId, CallRecord, CallResult,
    Calls, Completion, HumanCall, NewCall, RegisteredCall, StoreError, OUTBOUND_NOTES,
};

#[async_trait]
impl Calls for RedisStore {
    async fn register_call(&self, call: &NewCall) -> Result<(), StoreError> {
        let mut conn = self.conns.shared().await?;
        let keys = AgentKeys::new(call.id.agent());
        scripts::register_call(&mut conn, &keys, &call.id, &call.record).await
    }

    async fn register_human_call(&self, call: &HumanCall) -> Result<(), StoreError> {
        let mut conn = self.conns.shared().await?;
        let keys = AgentKeys::new(call.id.agent());
        scripts::register_call(&mut conn, &keys, &call.id, &call.record).await
    }

    async fn call(&self, call: &CallId) -> Result<Option<RegisteredCall>, StoreError> {
        let keys = AgentKeys::new(call.agent());
        let done = format!("{call}:done");
        let mut conn = self.conns.shared().await?;
        let (record, done): (Option<String>, bool) = redis::pipe()
            .hget(keys.calls(), call.as_str())
            .hexists(keys.calls(), done)
            .query_async(&mut conn)
            .await
            .map_err(redis_err("read call"))?;
        let Some(record) = record else {
            return Ok(None);
        };
        let record: CallRecord = from_json(|| format!("call {call}"), &record)?;
        Ok((record.forget_ms() > now_ms()).then(|| RegisteredCall {
            id: call.clone(),
            record,
            done,
        }))
    }

    async fn human_calls(&self, agent: &AgentKey) -> Result<Vec<RegisteredCall>, StoreError> {
        Ok(waiting_for_humans(&self.call_registry(agent).await?))
    }

    async fn open_calls(&self, agent: &AgentKey) -> Result<Vec<RegisteredCall>, StoreError> {
        Ok(open(&self.call_registry(agent).await?))
    }

    async fn forget_call(&self, call: &CallId) -> Result<(), StoreError> {
        let keys = AgentKeys::new(call.agent());
        let done = format!("{call}:done");
        let mut conn = self.conns.shared().await?;
        redis::pipe()
            .atomic()
            .hdel(keys.calls(), &[call.as_str(), done.as_str()])
            .zrem(keys.calls_forget(), call.as_str())
            .query_async::<()>(&mut conn)
            .await
            .map_err(redis_err("forget call"))
    }

    async fn complete_call(
        &self,
        call: &CallId,
        token: Option<&str>,
        result: &CallResult,
    ) -> Result<Completion, StoreError> {
        let keys = AgentKeys::new(call.agent());
        let mut conn = self.conns.shared().await?;
        // The record names the tool, which the event carries; a record never changes, so
        // reading it first is safe: the script checks everything again as it writes.
        let record: Option<String> = redis::cmd("HGET")
            .arg(keys.calls())
            .arg(call.as_str())
            .query_async(&mut conn)
            .await
            .map_err(redis_err("read call"))?;
        let Some(record) = record else {
            return Ok(Completion::Unknown);
        };
        let record: CallRecord = from_json(|| format!("call {call}"), &record)?;
        let event = record.event(call, result);
        let event = Event::new(&event)?;
        scripts::complete_call(&mut conn, &keys, call, &presented_hash(token), &event).await
    }

    async fn note_outbound(
        &self,
        agent: &AgentKey,
        key: &str,
        depth: u32,
        until_ms: i64,
    ) -> Result<(), StoreError> {
        let keys = AgentKeys::new(agent);
        let now = now_ms();
        let mut conn = self.conns.shared().await?;
        redis::pipe()
            .atomic()
            .cmd("ZREMRANGEBYSCORE")
            .arg(keys.outbound())
            .arg("-inf")
            .arg(now)
            .ignore()
            .zadd(keys.outbound(), outbound_member(key, depth), until_ms)
            .ignore()
            // The latest OUTBOUND_NOTES by time (notes past theirs go with the next note, and
            // are never read: reads start at now).
            .cmd("ZREMRANGEBYRANK")
            .arg(keys.outbound())
            .arg(0)
            .arg(-(OUTBOUND_NOTES as i64) - 1)
            .ignore()
            .query_async::<()>(&mut conn)
            .await
            .map_err(redis_err("note a call of a remote agent"))
    }

    async fn outbound_depth(&self, agent: &AgentKey) -> Result<Option<u32>, StoreError> {
        let keys = AgentKeys::new(agent);
        let mut conn = self.conns.shared().await?;
        let members: Vec<String> = redis::cmd("ZRANGEBYSCORE")
            .arg(keys.outbound())
            .arg(now_ms())
            .arg("+inf")
            .query_async(&mut conn)
            .await
            .map_err(redis_err("read calls of remote agents"))?;
        Ok(members
            .iter()
            .filter_map(|m| outbound_member_depth(m))
            .max())
    }
}

/// The calls waiting for a human among an agent's call registry as `HGETALL` gives it
/// (`ID` → record, `ID:done` → time); a record it cannot read is left out (the store wrote
/// it; one bad entry must not hide the others).
pub(super) fn waiting_for_humans(all: &[(String, String)]) -> Vec<RegisteredCall> {
    let mut calls = open(all);
    calls.retain(|c| c.record.kind.human());
    calls
}

/// The calls without their result among an agent's call registry as `HGETALL` gives it.
fn open(all: &[(String, String)]) -> Vec<RegisteredCall> {
    let (records, done) = registry(all);
    RegisteredCall::open(
        records
            .iter()
            .map(|(id, record)| (*id, record, done.contains(id))),
        now_ms(),
    )
}

impl RedisStore {
    /// An agent's call registry as `HGETALL` gives it.
    async fn call_registry(&self, agent: &AgentKey) -> Result<Vec<(String, String)>, StoreError> {
        let mut conn = self.conns.shared().await?;
        redis::cmd("HGETALL")
            .arg(AgentKeys::new(agent).calls())
            .query_async(&mut conn)
            .await
            .map_err(redis_err("read calls"))
    }
}

/// The records of an agent's call registry as `HGETALL` gives it, and the ids that are done;
/// a record it cannot read is left out.
fn registry(
    all: &[(String, String)],
) -> (Vec<(&str, CallRecord)>, std::collections::HashSet<&str>) {
    let done = all
        .iter()
        .filter_map(|(k, _)| k.strip_suffix(":done"))
        .collect();
    let records = all
        .iter()
        .filter(|(k, _)| !k.ends_with(":done"))
        .filter_map(|(k, v)| Some((k.as_str(), serde_json::from_str(v).ok()?)))
        .collect();
    (records, done)
}

//! Asynchronous calls on Redis: one hash of records per agent (and a sorted set of when each
//! is forgotten), on the agent's slot, so accepting a result and pushing its event into the
//! inbox is one script.

use async_trait::async_trait;

use super::keys::AgentKeys;
use super::scripts::{self, Event};
use super::{from_json, redis_err, RedisStore};
use crate::store::{
    token_hash, CallId, CallRecord, CallResult, Calls, Completion, NewCall, StoreError,
};

#[async_trait]
impl Calls for RedisStore {
    async fn register_call(&self, call: &NewCall) -> Result<(), StoreError> {
        let mut conn = self.conns.shared().await?;
        scripts::register_call(&mut conn, &AgentKeys::new(call.id.agent()), call).await
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
        token: &str,
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
        scripts::complete_call(&mut conn, &keys, call, &token_hash(token), &event).await
    }
}

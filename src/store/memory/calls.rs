//! Asynchronous calls in memory: each step takes the one lock once.

use async_trait::async_trait;

use super::MemoryStore;
use crate::store::{
    now_ms, token_hash, CallId, CallResult, Calls, Completion, NewCall, StoreError,
};

#[async_trait]
impl Calls for MemoryStore {
    async fn register_call(&self, call: &NewCall) -> Result<(), StoreError> {
        let now = now_ms();
        self.agent(call.id.agent(), |a| {
            a.calls.retain(|_, (record, _)| record.forget_ms() > now);
            a.calls
                .insert(call.id.as_str().to_string(), (call.record.clone(), false));
        });
        Ok(())
    }

    async fn forget_call(&self, call: &CallId) -> Result<(), StoreError> {
        self.agent(call.agent(), |a| a.calls.remove(call.as_str()));
        Ok(())
    }

    async fn complete_call(
        &self,
        call: &CallId,
        token: &str,
        result: &CallResult,
    ) -> Result<Completion, StoreError> {
        let now = now_ms();
        let hash = token_hash(token);
        let completion = self.agent(call.agent(), |a| {
            let Some((record, done)) = a
                .calls
                .get_mut(call.as_str())
                .filter(|(r, _)| r.forget_ms() > now)
            else {
                return Completion::Unknown;
            };
            if record.token_hash != hash {
                Completion::Unauthorized
            } else if *done {
                Completion::Duplicate
            } else if now > record.expires_ms {
                Completion::Expired
            } else {
                *done = true;
                let event = record.event(call, result);
                Completion::Accepted(a.push(&event))
            }
        });
        if let Completion::Accepted(pushed) = completion {
            return Ok(Completion::Accepted(self.wake(call.agent(), pushed)));
        }
        Ok(completion)
    }
}

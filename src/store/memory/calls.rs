//! Asynchronous calls in memory: each step takes the one lock once.

use async_trait::async_trait;

use super::MemoryStore;
use crate::identity::AgentKey;
use crate::store::{
    now_ms, presented_hash, CallId, CallRecord, CallResult, Calls, Completion, HumanCall, NewCall,
    RegisteredCall, StoreError, OUTBOUND_NOTES,
};

impl super::AgentState {
    /// The calls that wait for a human, oldest first.
    pub(super) fn human_calls(&self) -> Vec<RegisteredCall> {
        RegisteredCall::waiting_for_humans(
            self.calls
                .iter()
                .map(|(id, (record, done))| (id.as_str(), record, *done)),
            now_ms(),
        )
    }
}

impl MemoryStore {
    /// Registers `record` as `id` (forgetting the agent's calls whose time is over).
    fn register(&self, id: &CallId, record: &CallRecord) {
        let now = now_ms();
        self.agent(id.agent(), |a| {
            a.calls.retain(|_, (record, _)| record.forget_ms() > now);
            a.calls
                .insert(id.as_str().to_string(), (record.clone(), false));
        });
    }
}

#[async_trait]
impl Calls for MemoryStore {
    async fn register_call(&self, call: &NewCall) -> Result<(), StoreError> {
        self.register(&call.id, &call.record);
        Ok(())
    }

    async fn register_human_call(&self, call: &HumanCall) -> Result<(), StoreError> {
        self.register(&call.id, &call.record);
        Ok(())
    }

    async fn call(&self, call: &CallId) -> Result<Option<RegisteredCall>, StoreError> {
        let now = now_ms();
        Ok(self.agent(call.agent(), |a| {
            a.calls
                .get(call.as_str())
                .filter(|(r, _)| r.forget_ms() > now)
                .map(|(record, done)| RegisteredCall {
                    id: call.clone(),
                    record: record.clone(),
                    done: *done,
                })
        }))
    }

    async fn human_calls(&self, agent: &AgentKey) -> Result<Vec<RegisteredCall>, StoreError> {
        Ok(self.agent(agent, |a| a.human_calls()))
    }

    async fn open_calls(&self, agent: &AgentKey) -> Result<Vec<RegisteredCall>, StoreError> {
        Ok(self.agent(agent, |a| {
            RegisteredCall::open(
                a.calls
                    .iter()
                    .map(|(id, (record, done))| (id.as_str(), record, *done)),
                now_ms(),
            )
        }))
    }

    async fn forget_call(&self, call: &CallId) -> Result<(), StoreError> {
        self.agent(call.agent(), |a| a.calls.remove(call.as_str()));
        Ok(())
    }

    async fn complete_call(
        &self,
        call: &CallId,
        token: Option<&str>,
        result: &CallResult,
    ) -> Result<Completion, StoreError> {
        let now = now_ms();
        let hash = presented_hash(token);
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
            } else if record.expired_at(now) {
                Completion::Expired
            } else {
                *done = true;
                // A human's answer ends the pause of the cycle that asked.
                if record.kind.human() {
                    a.paused = false;
                }
                let event = record.event(call, result);
                Completion::Accepted(a.push(&event))
            }
        });
        if let Completion::Accepted(pushed) = completion {
            return Ok(Completion::Accepted(self.wake(call.agent(), pushed)));
        }
        Ok(completion)
    }

    async fn note_outbound(
        &self,
        agent: &AgentKey,
        key: &str,
        depth: u32,
        until_ms: i64,
    ) -> Result<(), StoreError> {
        let now = now_ms();
        self.agent(agent, |a| {
            a.outbound.retain(|_, (_, until)| *until > now);
            a.outbound.insert(key.to_string(), (depth, until_ms));
            while a.outbound.len() > OUTBOUND_NOTES {
                let earliest = a
                    .outbound
                    .iter()
                    .min_by_key(|(_, (_, until))| *until)
                    .map(|(k, _)| k.clone());
                if let Some(k) = earliest {
                    a.outbound.remove(&k);
                }
            }
        });
        Ok(())
    }

    async fn outbound_depth(&self, agent: &AgentKey) -> Result<Option<u32>, StoreError> {
        let now = now_ms();
        Ok(self.agent(agent, |a| {
            a.outbound
                .values()
                .filter(|(_, until)| *until >= now)
                .map(|(d, _)| *d)
                .max()
        }))
    }
}

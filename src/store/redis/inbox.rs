//! The inbox of an agent on Redis: every step is one script or one command on the agent's
//! slot; waiting sleeps on the agent's own connection.

use std::collections::BTreeMap;

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::StreamExt;
use redis::AsyncCommands;

use super::keys::AgentKeys;
use super::scripts::{self, Event};
use super::{decode_events, redis_err, RedisStore};
use crate::identity::AgentKey;
use crate::store::{
    Inbox, InboxEvent, Lease, MidCycle, Pushed, Receipt, RecordWrite, StoreError, WakeScope,
};

#[async_trait]
impl Inbox for RedisStore {
    async fn push_event(&self, agent: &AgentKey, event: &InboxEvent) -> Result<Pushed, StoreError> {
        let event = Event::new(event)?;
        let keys = AgentKeys::new(agent);
        let mut conn = self.conns.durable().await?;
        let pushed = scripts::push(&mut conn, &keys, &event).await?;
        self.conns
            .replicated(&mut conn, &keys.inbox(), "push event")
            .await?;
        Ok(pushed)
    }

    async fn take_urgent(
        &self,
        agent: &AgentKey,
        lease: &Lease,
    ) -> Result<Vec<InboxEvent>, StoreError> {
        let mut conn = self.conns.shared().await?;
        scripts::take_urgent(&mut conn, &AgentKeys::new(agent), lease).await
    }

    async fn peek_inbox(
        &self,
        agent: &AgentKey,
        limit: usize,
    ) -> Result<Vec<InboxEvent>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let keys = AgentKeys::new(agent);
        let mut conn = self.conns.shared().await?;
        let stop = isize::try_from(limit).unwrap_or(isize::MAX) - 1;
        let raw: Vec<String> = conn
            .lrange(keys.inbox(), 0, stop)
            .await
            .map_err(redis_err("peek inbox"))?;
        decode_events(keys.name(), raw)
    }

    async fn inbox_depth(&self, agent: &AgentKey) -> Result<u64, StoreError> {
        let keys = AgentKeys::new(agent);
        let mut conn = self.conns.shared().await?;
        let (inbox, urgent): (u64, u64) = redis::pipe()
            .llen(keys.inbox())
            .llen(keys.urgent())
            .query_async(&mut conn)
            .await
            .map_err(redis_err("inbox depth"))?;
        Ok(inbox + urgent)
    }

    async fn mid_cycle(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        take_urgent: bool,
        preview: usize,
    ) -> Result<MidCycle, StoreError> {
        let mut conn = self.conns.shared().await?;
        scripts::mid_cycle(
            &mut conn,
            &AgentKeys::new(agent),
            lease,
            take_urgent,
            preview,
        )
        .await
    }

    async fn inflight(&self, agent: &AgentKey) -> Result<u64, StoreError> {
        let mut conn = self.conns.shared().await?;
        conn.llen(AgentKeys::new(agent).inflight())
            .await
            .map_err(redis_err("in-flight count"))
    }

    async fn end_cycle_recorded(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        receipt: &Receipt,
        record: Option<&RecordWrite>,
    ) -> Result<(), StoreError> {
        let mut conn = self.conns.shared().await?;
        scripts::ack(&mut conn, &AgentKeys::new(agent), lease, receipt, record).await
    }

    async fn defer_events(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        ids: &[String],
    ) -> Result<u64, StoreError> {
        if ids.is_empty() {
            return Ok(0);
        }
        let mut conn = self.conns.shared().await?;
        scripts::defer(&mut conn, &AgentKeys::new(agent), lease, ids).await
    }

    async fn pause_cycle_recorded(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        record: Option<&RecordWrite>,
    ) -> Result<bool, StoreError> {
        let mut conn = self.conns.shared().await?;
        scripts::pause(&mut conn, &AgentKeys::new(agent), lease, record).await
    }

    async fn subscribe_wakes(
        &self,
        scope: &WakeScope,
    ) -> Result<BoxStream<'static, AgentKey>, StoreError> {
        // On a cluster each agent's channel is subscribed on its slot's node: every registered
        // agent's in scope, and those registered later by this process (`register_agent`).
        let payloads = match self.conns.shards().await? {
            Some(shards) => {
                let mut agents = self.registered_agents().await?;
                agents.retain(|a| scope.covers(a));
                shards.wakes(&agents).await?
            }
            None => self.conns.subscribe_wakes(scope).await?,
        };
        let scope = scope.clone();
        Ok(payloads
            .filter_map(move |payload| {
                let key = AgentKey::parse(&payload).filter(|k| scope.covers(k));
                async move { key }
            })
            .boxed())
    }

    async fn take_inbox(
        &self,
        agent: &AgentKey,
        lease: &Lease,
    ) -> Result<Vec<InboxEvent>, StoreError> {
        let mut conn = self.conns.shared().await?;
        scripts::drain(&mut conn, &AgentKeys::new(agent), lease).await
    }

    async fn mark_plan(
        &self,
        agent: &AgentKey,
        plan_id: &str,
        due_ms: i64,
        event: Option<&InboxEvent>,
    ) -> Result<Option<Pushed>, StoreError> {
        let event = event.map(Event::new).transpose()?;
        let mut conn = self.conns.shared().await?;
        scripts::mark_plan(
            &mut conn,
            &AgentKeys::new(agent),
            plan_id,
            due_ms,
            event.as_ref(),
        )
        .await
    }

    async fn plan_marks(&self, agent: &AgentKey) -> Result<BTreeMap<String, i64>, StoreError> {
        let mut conn = self.conns.shared().await?;
        conn.hgetall(AgentKeys::new(agent).plan_marks())
            .await
            .map_err(redis_err("read plan marks"))
    }

    async fn receipt(
        &self,
        agent: &AgentKey,
        event_id: &str,
    ) -> Result<Option<Receipt>, StoreError> {
        let mut conn = self.conns.shared().await?;
        let json: Option<String> = conn
            .hget(AgentKeys::new(agent).receipts(), event_id)
            .await
            .map_err(redis_err("read a receipt"))?;
        json.map(|j| super::from_json(|| format!("the receipt of event {event_id}"), &j))
            .transpose()
    }
}

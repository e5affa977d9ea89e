//! The operator's view on Redis: every agent in one pipelined round trip.

use std::collections::BTreeMap;

use async_trait::async_trait;
use redis::AsyncCommands;
use tracing::warn;

use super::conn::{by_node, Conn};
use super::keys::AgentKeys;
use super::{redis_err, to_json, RedisStore};
use crate::identity::AgentKey;
use crate::store::notes::readable_plans;
use crate::store::{
    AgentObservation, AgentWork, ArchiveReport, ModelHealth, NoteKind, Observe, RestoreReport,
    StoreError, TokenSpend,
};
use redis::cluster_async::ClusterConnection;

/// Agents read in one pipeline: what a look at a large fleet holds at once (a pipeline of
/// 10,000 agents' sixteen reads and its replies took 80 MB at its peak).
const AT_ONCE: usize = 1_000;

impl RedisStore {
    /// `row`'s reads (`width` replies) of every agent, each agent's replies made into a `T`
    /// by `parse`, in order: [`AT_ONCE`] agents a round trip (see [`Self::pipeline`]).
    async fn rows<T>(
        &self,
        agents: &[AgentKey],
        row: fn(&mut redis::Pipeline, &AgentKeys),
        width: usize,
        parse: impl Fn(&[redis::Value]) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        let mut out = Vec::with_capacity(agents.len());
        for chunk in agents.chunks(AT_ONCE) {
            let values = self.pipeline(chunk, row, width).await?;
            for replies in values.chunks(width) {
                out.push(parse(replies)?);
            }
        }
        Ok(out)
    }

    /// `row`'s reads of `agents`: one pipeline on one Redis; on a cluster, one per node (its
    /// agents, by the slot map read first), all sent at once: a round trip per node.
    async fn pipeline(
        &self,
        agents: &[AgentKey],
        row: fn(&mut redis::Pipeline, &AgentKeys),
        width: usize,
    ) -> Result<Vec<redis::Value>, StoreError> {
        let mut conn = self.conns.shared().await?;
        if let Conn::Cluster(cluster) = &conn {
            return rows_on_cluster(cluster, agents, row, width).await;
        }
        let mut pipe = redis::pipe();
        for a in agents.iter().map(AgentKeys::new) {
            row(&mut pipe, &a);
        }
        pipe.query_async(&mut conn)
            .await
            .map_err(redis_err("observe agents"))
    }
}

#[async_trait]
impl Observe for RedisStore {
    async fn ping(&self) -> Result<(), StoreError> {
        let mut conn = self.conns.shared().await?;
        redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .map_err(redis_err("ping"))?;
        Ok(())
    }

    async fn observe(&self, agents: &[AgentKey]) -> Result<Vec<AgentObservation>, StoreError> {
        if agents.is_empty() {
            return Ok(Vec::new());
        }
        type Row = (
            u64,
            u64,
            u64,
            Option<String>,
            bool,
            (Option<u64>, Option<u64>, Option<i64>, Option<String>),
            Option<String>,
            Vec<String>,
            BTreeMap<String, i64>,
            Option<String>,
            Option<String>,
            Vec<(String, String)>,
        );
        self.rows(agents, observe_agent, ROW, |chunk| {
            let decode = |e: redis::ParsingError| StoreError::Redis {
                op: "observe agents",
                source: e.into(),
            };
            let row: Row = redis::from_redis_value(redis::Value::Array(chunk[..12].to_vec()))
                .map_err(decode)?;
            let (archive, restore, tokens, host): (
                Option<String>,
                Option<String>,
                std::collections::HashMap<String, String>,
                Option<String>,
            ) = redis::from_redis_value(redis::Value::Array(chunk[12..].to_vec()))
                .map_err(decode)?;
            let (
                inbox,
                urgent,
                inflight,
                state,
                leased,
                meta,
                checkpoint,
                plans,
                marks,
                model,
                tools,
                calls,
            ) = row;
            Ok(AgentObservation {
                waiting: inbox + urgent,
                in_flight: inflight,
                thinking: state.as_deref() == Some("thinking"),
                paused: state.as_deref() == Some("paused"),
                worker: leased,
                host,
                cycles: meta.0.unwrap_or(0),
                tokens_used: meta.1.unwrap_or(0),
                last_cycle_ms: meta.2,
                restored: meta.3,
                // Written by the store itself; an entry it cannot read is left out rather
                // than failing the observation of every agent.
                checkpoint: checkpoint.and_then(|c| serde_json::from_str(&c).ok()),
                plans: readable_plans(&plans),
                plan_marks: marks,
                model: model.and_then(|m| serde_json::from_str(&m).ok()),
                tools: tools.and_then(|t| serde_json::from_str(&t).ok()),
                pending: super::calls::waiting_for_humans(&calls),
                archive: archive.and_then(|a| serde_json::from_str(&a).ok()),
                restore: restore.and_then(|r| serde_json::from_str(&r).ok()),
                tokens: (!tokens.is_empty()).then(|| TokenSpend::from_fields(&tokens)),
            })
        })
        .await
    }

    async fn observe_work(&self, agents: &[AgentKey]) -> Result<Vec<AgentWork>, StoreError> {
        if agents.is_empty() {
            return Ok(Vec::new());
        }
        self.rows(agents, observe_work, WORK_ROW, |chunk| {
            let (inbox, urgent, inflight, state): (u64, u64, u64, Option<String>) =
                redis::from_redis_value(redis::Value::Array(chunk.to_vec())).map_err(|e| {
                    StoreError::Redis {
                        op: "observe agents",
                        source: e.into(),
                    }
                })?;
            Ok(AgentWork {
                waiting: inbox + urgent,
                in_flight: inflight,
                thinking: state.as_deref() == Some("thinking"),
                paused: state.as_deref() == Some("paused"),
            })
        })
        .await
    }

    async fn set_model_health(
        &self,
        agent: &AgentKey,
        health: &ModelHealth,
    ) -> Result<(), StoreError> {
        let json = to_json(|| format!("the model health of agent {agent}"), health)?;
        let mut conn = self.conns.shared().await?;
        conn.set(AgentKeys::new(agent).model(), json)
            .await
            .map_err(redis_err("record model health"))
    }

    async fn set_tools(
        &self,
        agent: &AgentKey,
        tools: &[crate::store::ToolRecord],
    ) -> Result<(), StoreError> {
        let json = to_json(|| format!("the tools of agent {agent}"), &tools)?;
        let mut conn = self.conns.shared().await?;
        conn.set(AgentKeys::new(agent).tools(), json)
            .await
            .map_err(redis_err("record tools"))
    }

    async fn set_tool_specs(&self, agent: &AgentKey, json: &str) -> Result<(), StoreError> {
        let mut conn = self.conns.shared().await?;
        conn.set(AgentKeys::new(agent).tool_specs(), json)
            .await
            .map_err(redis_err("record tool specs"))
    }

    async fn tool_specs(&self, agent: &AgentKey) -> Result<Option<String>, StoreError> {
        let key = AgentKeys::new(agent).tool_specs();
        let mut conn = self.conns.shared().await?;
        // Read back only within the bound it was written within.
        let bytes: usize = conn
            .strlen(&key)
            .await
            .map_err(redis_err("read tool specs"))?;
        if bytes > crate::store::TOOL_SPECS_BYTES {
            warn!(%agent, bytes, "the recorded tool specs are over their bound: not read");
            return Ok(None);
        }
        conn.get(&key).await.map_err(redis_err("read tool specs"))
    }

    async fn set_rehearsal_report(
        &self,
        agent: &AgentKey,
        name: &str,
        json: &str,
        time_ms: i64,
    ) -> Result<(), StoreError> {
        let keys = AgentKeys::new(agent);
        let mut conn = self.conns.shared().await?;
        let err = redis_err("record a rehearsal's report");
        // One slot: the report and its place, then the oldest beyond the bound go.
        redis::pipe()
            .atomic()
            .hset(keys.rehearsals(), name, json)
            .ignore()
            .zadd(keys.rehearsal_order(), name, time_ms)
            .ignore()
            .query_async::<()>(&mut conn)
            .await
            .map_err(err)?;
        let kept = crate::store::REHEARSALS_KEPT as isize;
        let old: Vec<String> = conn
            .zrange(keys.rehearsal_order(), 0, -(kept + 1))
            .await
            .map_err(redis_err("bound the rehearsals' reports"))?;
        if !old.is_empty() {
            redis::pipe()
                .atomic()
                .hdel(keys.rehearsals(), &old)
                .ignore()
                .zrem(keys.rehearsal_order(), &old)
                .ignore()
                .query_async::<()>(&mut conn)
                .await
                .map_err(redis_err("bound the rehearsals' reports"))?;
        }
        Ok(())
    }

    async fn rehearsal_report(
        &self,
        agent: &AgentKey,
        name: &str,
    ) -> Result<Option<String>, StoreError> {
        let key = AgentKeys::new(agent).rehearsals();
        let mut conn = self.conns.shared().await?;
        let bytes: usize = redis::cmd("HSTRLEN")
            .arg(&key)
            .arg(name)
            .query_async(&mut conn)
            .await
            .map_err(redis_err("read a rehearsal's report"))?;
        if bytes > crate::store::REHEARSAL_REPORT_BYTES {
            warn!(%agent, rehearsal = name, bytes, "a rehearsal's report is over its bound: not read");
            return Ok(None);
        }
        conn.hget(&key, name)
            .await
            .map_err(redis_err("read a rehearsal's report"))
    }

    async fn rehearsal_reports(&self, agent: &AgentKey) -> Result<Vec<String>, StoreError> {
        let keys = AgentKeys::new(agent);
        let mut conn = self.conns.shared().await?;
        let names: Vec<String> = conn
            .zrevrange(keys.rehearsal_order(), 0, -1)
            .await
            .map_err(redis_err("read the rehearsals' reports"))?;
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let mut sizes = redis::pipe();
        for name in &names {
            sizes.cmd("HSTRLEN").arg(keys.rehearsals()).arg(name);
        }
        let sizes: Vec<usize> = sizes
            .query_async(&mut conn)
            .await
            .map_err(redis_err("read the rehearsals' reports"))?;
        let within: Vec<&String> = names
            .iter()
            .zip(sizes)
            .filter(|(_, bytes)| *bytes <= crate::store::REHEARSAL_REPORT_BYTES)
            .map(|(name, _)| name)
            .collect();
        if within.is_empty() {
            return Ok(Vec::new());
        }
        let reports: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(keys.rehearsals())
            .arg(&within)
            .query_async(&mut conn)
            .await
            .map_err(redis_err("read the rehearsals' reports"))?;
        Ok(reports.into_iter().flatten().collect())
    }

    async fn set_archive_report(
        &self,
        agent: &AgentKey,
        report: &ArchiveReport,
    ) -> Result<(), StoreError> {
        let json = to_json(|| format!("the archive report of agent {agent}"), report)?;
        let mut conn = self.conns.shared().await?;
        conn.set(AgentKeys::new(agent).archive(), json)
            .await
            .map_err(redis_err("record archive report"))
    }

    async fn forget_archive_report(&self, agent: &AgentKey) -> Result<(), StoreError> {
        let mut conn = self.conns.shared().await?;
        conn.del(AgentKeys::new(agent).archive())
            .await
            .map_err(redis_err("forget archive report"))
    }

    async fn set_restore_report(
        &self,
        agent: &AgentKey,
        report: &RestoreReport,
    ) -> Result<(), StoreError> {
        let json = to_json(|| format!("the restore report of agent {agent}"), report)?;
        let mut conn = self.conns.shared().await?;
        conn.set(AgentKeys::new(agent).restore_report(), json)
            .await
            .map_err(redis_err("record restore report"))
    }

    async fn record_tokens(
        &self,
        agent: &AgentKey,
        periods: &crate::periods::Periods,
        usage: &crate::model::Usage,
    ) -> Result<TokenSpend, StoreError> {
        let mut conn = self.conns.shared().await?;
        super::scripts::record_tokens(&mut conn, &AgentKeys::new(agent), periods, usage).await
    }

    async fn purge_agent(&self, agent: &AgentKey) -> Result<(), StoreError> {
        let mut conn = self.conns.shared().await?;
        // One slot (the agent's hash tag) for the keys; the index lives elsewhere.
        conn.del::<_, ()>(AgentKeys::new(agent).all())
            .await
            .map_err(redis_err("remove agent data"))?;
        crate::store::Spaces::unregister_agent(self, agent).await?;
        self.committed.take(agent);
        Ok(())
    }

    fn checkpoint_ref(&self, agent: &AgentKey, cycle: u64) -> String {
        AgentKeys::new(agent).checkpoint_ref(cycle)
    }

    fn agent_data(&self, agent: &AgentKey) -> String {
        format!("the keys {} in Redis", AgentKeys::new(agent).pattern())
    }
}

/// Replies per agent of [`observe_agent`].
const ROW: usize = 16;

/// Replies per agent of [`observe_work`].
const WORK_ROW: usize = 4;

/// The reads of one agent for [`Observe::observe_work`], all on its slot.
fn observe_work(pipe: &mut redis::Pipeline, a: &AgentKeys) {
    pipe.llen(a.inbox())
        .llen(a.urgent())
        .llen(a.inflight())
        .get(a.state());
}

/// The reads of one agent for [`Observe::observe`], all on its slot ([`ROW`] replies).
fn observe_agent(pipe: &mut redis::Pipeline, a: &AgentKeys) {
    pipe.llen(a.inbox())
        .llen(a.urgent())
        .llen(a.inflight())
        .get(a.state())
        .exists(a.lease())
        .cmd("HMGET")
        .arg(a.cmeta())
        .arg("cycle")
        .arg("tokensUsed")
        .arg("lastCycleMs")
        .arg("restored")
        .lindex(a.checkpoints(), 0)
        .hvals(a.notes(NoteKind::Plans))
        .hgetall(a.plan_marks())
        .get(a.model())
        .get(a.tools())
        .hgetall(a.calls())
        .get(a.archive())
        .get(a.restore_report())
        .hgetall(a.tokens())
        .get(a.host());
}

/// The observation replies of `agents` on a cluster, in their order: one pipeline per node;
/// when a node refuses its pipeline (a slot moved since the map was read), or a slot is
/// served by no node, one pipeline per agent, each routed by its slot.
async fn rows_on_cluster(
    conn: &ClusterConnection,
    agents: &[AgentKey],
    row: fn(&mut redis::Pipeline, &AgentKeys),
    width: usize,
) -> Result<Vec<redis::Value>, StoreError> {
    let keys: Vec<AgentKeys> = agents.iter().map(AgentKeys::new).collect();
    let inboxes: Vec<String> = keys.iter().map(AgentKeys::inbox).collect();
    if let Some(groups) = by_node(&mut conn.clone(), &inboxes).await? {
        let reads = groups.into_iter().map(|(route, indexes)| {
            let mut cluster = conn.clone();
            let mut pipe = redis::pipe();
            for &i in &indexes {
                row(&mut pipe, &keys[i]);
            }
            let count = pipe.len();
            async move {
                let values = cluster
                    .route_pipeline(pipe, 0, count, route)
                    .await
                    .map_err(|_| ())?;
                // A command the node refused (its slot moved): try the slow way.
                if values
                    .iter()
                    .any(|v| matches!(v, redis::Value::ServerError(_)))
                {
                    return Err(());
                }
                Ok((indexes, values))
            }
        });
        if let Ok(replies) = futures::future::try_join_all(reads).await {
            let mut rows: Vec<Vec<redis::Value>> = vec![Vec::new(); agents.len()];
            for (indexes, values) in replies {
                for (&i, values) in indexes.iter().zip(values.chunks(width)) {
                    rows[i] = values.to_vec();
                }
            }
            return Ok(rows.into_iter().flatten().collect());
        }
    }
    let reads = keys.iter().map(|k| {
        let mut conn = conn.clone();
        let mut pipe = redis::pipe();
        row(&mut pipe, k);
        async move { pipe.query_async::<Vec<redis::Value>>(&mut conn).await }
    });
    Ok(futures::future::try_join_all(reads)
        .await
        .map_err(redis_err("observe agents"))?
        .into_iter()
        .flatten()
        .collect())
}

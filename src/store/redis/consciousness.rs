//! An agent's consciousness on Redis: commits through `commit.lua`, planned from the window
//! this process committed last (the commit cache) or, when that is stale, read afresh.

use std::collections::HashMap;

use async_trait::async_trait;
use redis::AsyncCommands;
use tracing::warn;

use super::keys::AgentKeys;
use super::scripts::{self, lease_value, CommitError};
use super::{from_json, redis_err, RedisStore};
use crate::identity::AgentKey;
use crate::store::consciousness::{at_checkpoint, plan_commit, replaced_checkpoint, WindowState};
use crate::store::{
    now_ms, Checkpoint, Consciousness, ConsciousnessLog, CycleCommit, Lease, Snapshot, StoreError,
};

impl RedisStore {
    /// The window the next commit builds on, and the raw meta hash.
    async fn window(
        &self,
        agent: &AgentKeys,
    ) -> Result<(WindowState, HashMap<String, String>), StoreError> {
        let mut conn = self.conns.shared().await?;
        let meta: HashMap<String, String> = conn
            .hgetall(agent.cmeta())
            .await
            .map_err(redis_err("read consciousness"))?;
        let num = |k: &str| meta.get(k).and_then(|v| v.parse::<u64>().ok());
        let cycle = num("cycle").unwrap_or(0);
        let window = WindowState {
            cycle,
            start: num("start").unwrap_or(0),
            end: num("end").unwrap_or(0),
            summary_cycle: num("summaryCycle"),
            digest: meta.get("digest").cloned().unwrap_or_default(),
            highest: num("highest").unwrap_or(0).max(cycle),
        };
        Ok((window, meta))
    }

    /// A connection, once `lease` is found to be the agent's lease (a script that writes
    /// checks again, atomically).
    async fn holding(
        &self,
        keys: &AgentKeys,
        agent: &AgentKey,
        lease: &Lease,
    ) -> Result<super::conn::Conn, StoreError> {
        let mut conn = self.conns.shared().await?;
        let holder: Option<String> = conn
            .get(keys.lease())
            .await
            .map_err(redis_err("read lease"))?;
        if holder.as_deref() != Some(lease_value(lease).as_str()) {
            return Err(StoreError::Fenced {
                agent: agent.to_string(),
            });
        }
        Ok(conn)
    }

    /// One commit attempt, building on `known` (window, retained checkpoints) when given.
    async fn commit_once(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        commit: &CycleCommit,
        known: Option<(WindowState, Vec<Checkpoint>)>,
    ) -> Result<(Checkpoint, WindowState, Vec<Checkpoint>), CommitError> {
        let keys = AgentKeys::new(agent);
        let (window, retained) = match known {
            Some(k) => k,
            None => (self.window(&keys).await?.0, self.checkpoints(agent).await?),
        };
        let plan = plan_commit(&window, &retained, commit, now_ms()).map_err(|reason| {
            StoreError::InvalidCommit {
                agent: agent.to_string(),
                reason,
            }
        })?;
        let mut conn = self.conns.durable().await?;
        scripts::commit(&mut conn, &keys, lease, &window, &plan, commit).await?;
        // Done on the primary: a commit is not undone nor redone, so one that too few
        // replicas have in time is said, not failed.
        if let Err(e) = self
            .conns
            .replicated(&mut conn, &keys.cmeta(), "commit")
            .await
        {
            warn!(%agent, cycle = plan.checkpoint.cycle, error = %e, "committed, but a failover now could lose the commit");
        }
        let after = WindowState::from(&plan.checkpoint);
        Ok((plan.checkpoint, after, plan.retained))
    }
}

#[async_trait]
impl ConsciousnessLog for RedisStore {
    async fn commit_cycle(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        commit: &CycleCommit,
    ) -> Result<Checkpoint, StoreError> {
        let known = self.committed.take(agent);
        let result = match self.commit_once(agent, lease, commit, known.clone()).await {
            Err(CommitError::Stale) => self.commit_once(agent, lease, commit, None).await,
            other => other,
        };
        match result {
            Ok((checkpoint, window, retained)) => {
                self.committed.put(agent, window, retained);
                Ok(checkpoint)
            }
            Err(CommitError::Stale) => Err(StoreError::InvalidCommit {
                agent: agent.to_string(),
                reason: "the consciousness changed under the commit".into(),
            }),
            Err(CommitError::Store(e)) => Err(e),
        }
    }

    async fn consciousness(&self, agent: &AgentKey) -> Result<Consciousness, StoreError> {
        let keys = AgentKeys::new(agent);
        let (window, meta) = self.window(&keys).await?;
        let base = meta
            .get("base")
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        let mut conn = self.conns.shared().await?;
        let messages: Vec<String> = if window.end > window.start {
            let from = isize::try_from(window.start.saturating_sub(base)).unwrap_or(isize::MAX);
            let to = isize::try_from(window.end.saturating_sub(base)).unwrap_or(isize::MAX) - 1;
            conn.lrange(keys.clog(), from, to)
                .await
                .map_err(redis_err("read consciousness"))?
        } else {
            Vec::new()
        };
        let summary: Option<String> = match window.summary_cycle {
            Some(c) => conn
                .hget(keys.summaries(), c)
                .await
                .map_err(redis_err("read summary"))?,
            None => None,
        };
        let num = |k: &str| meta.get(k).and_then(|v| v.parse::<u64>().ok());
        Ok(Consciousness {
            cycle: window.cycle,
            summary,
            messages,
            start: window.start,
            tokens: num("tokens").unwrap_or(0),
            digest: window.digest,
            tokens_used: num("tokensUsed").unwrap_or(0),
            last_cycle_ms: meta.get("lastCycleMs").and_then(|v| v.parse().ok()),
            restored: meta.get("restored").cloned(),
        })
    }

    async fn consciousness_at(
        &self,
        agent: &AgentKey,
        cycle: u64,
    ) -> Result<Option<Consciousness>, StoreError> {
        if cycle == 0 {
            return Ok(Some(Consciousness::default()));
        }
        let keys = AgentKeys::new(agent);
        let retained = self.checkpoints(agent).await?;
        let Some(cp) = retained.into_iter().find(|c| c.cycle == cycle) else {
            return Ok(None);
        };
        let mut conn = self.conns.shared().await?;
        let base = async |conn: &mut super::conn::Conn| {
            conn.hget::<_, _, Option<u64>>(keys.cmeta(), "base")
                .await
                .map_err(redis_err("read consciousness"))
        };
        // The log's start moves when a commit trims it: read again until the messages were
        // read between two looks that saw the same start.
        for _ in 0..3 {
            let before = base(&mut conn).await?.unwrap_or(0);
            // Messages trimmed before the start are gone: `at_checkpoint` then finds too few.
            let messages: Vec<String> = if cp.end > cp.start && cp.start >= before {
                let from = isize::try_from(cp.start - before).unwrap_or(isize::MAX);
                let to = isize::try_from(cp.end - before).unwrap_or(isize::MAX) - 1;
                conn.lrange(keys.clog(), from, to)
                    .await
                    .map_err(redis_err("read consciousness"))?
            } else {
                Vec::new()
            };
            if base(&mut conn).await?.unwrap_or(0) != before {
                continue;
            }
            let summary: Option<String> = match cp.summary_cycle {
                Some(c) => conn
                    .hget(keys.summaries(), c)
                    .await
                    .map_err(redis_err("read summary"))?,
                None => None,
            };
            return Ok(at_checkpoint(&cp, messages, summary));
        }
        Ok(None)
    }

    async fn checkpoints(&self, agent: &AgentKey) -> Result<Vec<Checkpoint>, StoreError> {
        let mut conn = self.conns.shared().await?;
        let raw: Vec<String> = conn
            .lrange(AgentKeys::new(agent).checkpoints(), 0, -1)
            .await
            .map_err(redis_err("read checkpoints"))?;
        raw.iter()
            .map(|j| from_json(|| format!("a checkpoint of agent {agent}"), j))
            .collect()
    }

    async fn restore_checkpoint(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        cycle: u64,
        request: Option<&str>,
    ) -> Result<Option<Checkpoint>, StoreError> {
        self.committed.take(agent);
        let keys = AgentKeys::new(agent);
        // Fenced before anything else (the script checks again, atomically).
        let mut conn = self.holding(&keys, agent, lease).await?;
        let retained = self.checkpoints(agent).await?;
        let Some(cp) = retained.iter().find(|c| c.cycle == cycle).cloned() else {
            return Ok(None);
        };
        let kept: Vec<Checkpoint> = retained.into_iter().filter(|c| c.cycle <= cycle).collect();
        scripts::restore(&mut conn, &keys, lease, &cp, &kept, request).await?;
        Ok(Some(cp))
    }

    async fn replace_consciousness(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        snapshot: &Snapshot,
    ) -> Result<Checkpoint, StoreError> {
        self.committed.take(agent);
        let keys = AgentKeys::new(agent);
        let cp = replaced_checkpoint(&snapshot.consciousness, now_ms());
        let mut conn = self.conns.shared().await?;
        scripts::replace(&mut conn, &keys, lease, snapshot, &cp).await?;
        Ok(cp)
    }

    async fn forget_restore(&self, agent: &AgentKey, lease: &Lease) -> Result<(), StoreError> {
        let keys = AgentKeys::new(agent);
        let mut conn = self.holding(&keys, agent, lease).await?;
        conn.hdel::<_, _, ()>(keys.cmeta(), "restored")
            .await
            .map_err(redis_err("forget restore"))
    }
}

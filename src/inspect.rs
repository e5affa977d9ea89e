//! What people inspect and change of an agent itself — its consciousness, a restore to a
//! retained checkpoint, its cycle records ([`crate::cycles::read`]) — read and written on
//! the data plane. One home for the gateway's
//! routes (which decide who may, with RBAC) and the CLI's break-glass path on the data plane,
//! so both show and do the same.

use std::time::Duration;

use crate::api::ConsciousnessView;
use crate::identity::AgentKey;
use crate::store::{Checkpoint, Consciousness, Snapshot, Store, StoreError};

/// Why an inspection or a restore did not happen.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// The data plane does not know the agent.
    #[error("agent {0} does not exist in the data plane (is the Agent applied, and the operator or `agentfleet dev` running?)")]
    NoAgent(AgentKey),
    /// A worker holds the agent's lease.
    #[error("agent {0} is thinking (a worker holds its lease); try again once it sleeps, or pause the Agent (spec.paused: true) first")]
    Thinking(AgentKey),
    /// No retained checkpoint of that cycle.
    #[error("agent {agent} has no checkpoint for cycle {cycle}; retained: {kept}")]
    NoCheckpoint {
        /// The agent.
        agent: AgentKey,
        /// The cycle asked for.
        cycle: u64,
        /// The cycles retained, or `none`.
        kept: String,
    },
    /// No cycle record of that number is kept.
    #[error("agent {agent} keeps no record of cycle {seq} (records are kept for its last cycles, spec.cycle.records)")]
    NoRecord {
        /// The agent.
        agent: AgentKey,
        /// The record asked for.
        seq: u64,
    },
    /// The data plane failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// An error unless the data plane knows the agent: registered (by the operator or
/// `agentfleet dev`), or with a consciousness or checkpoints of its own.
pub async fn require_agent(store: &dyn Store, key: &AgentKey) -> Result<(), InspectError> {
    if store.agent_registered(key).await?
        || store.consciousness(key).await? != Consciousness::default()
        || !store.checkpoints(key).await?.is_empty()
    {
        return Ok(());
    }
    Err(InspectError::NoAgent(key.clone()))
}

/// The agent's consciousness, memories, goals, checkpoints, archive and restores.
pub async fn view(store: &dyn Store, key: &AgentKey) -> Result<ConsciousnessView, InspectError> {
    require_agent(store, key).await?;
    let seen = store.observe(std::slice::from_ref(key)).await?.pop();
    let mut archive = Vec::new();
    if let Some(a) = seen.as_ref().and_then(|s| s.archive.as_ref()) {
        let at = match (a.cycle, &a.url) {
            (Some(c), Some(u)) => format!("cycle {c} at {u}"),
            _ => "nothing yet".into(),
        };
        let state = if a.ok {
            String::new()
        } else {
            format!(" ({}: {})", a.reason, a.message)
        };
        archive.push(("Archived:".to_string(), format!("{at}{state}")));
    }
    if let Some(r) = seen.as_ref().and_then(|s| s.restore.as_ref()) {
        if let Some(applied) = &r.applied {
            archive.push((
                "Restored:".to_string(),
                format!(
                    "{} of cycle {} from {}",
                    applied.reason, applied.cycle, applied.storage_ref
                ),
            ));
        }
        if !r.ok {
            archive.push((
                "Last restore:".to_string(),
                format!("{}: {}", r.reason, r.message),
            ));
        }
    }
    let consciousness = store.consciousness(key).await?;
    Ok(ConsciousnessView {
        memories: store.memories(key).await?,
        goals: store.goals(key).await?,
        checkpoints: store.checkpoints(key).await?,
        archive,
        ..of(key, consciousness)
    })
}

/// A consciousness as shown (no notes, no checkpoints).
pub fn of(key: &AgentKey, c: Consciousness) -> ConsciousnessView {
    ConsciousnessView {
        agent: key.to_string(),
        cycle: c.cycle,
        last_cycle_ms: c.last_cycle_ms,
        tokens: c.tokens,
        tokens_used: c.tokens_used,
        digest: c.digest,
        summary: c.summary,
        messages: c
            .messages
            .iter()
            .map(|m| {
                serde_json::from_str(m).unwrap_or_else(|_| serde_json::Value::String(m.clone()))
            })
            .collect(),
        restored: c.restored,
        ..ConsciousnessView::default()
    }
}

/// What a restore makes the consciousness.
pub enum Restore {
    /// What it was after a retained checkpoint's cycle.
    Cycle(u64),
    /// What an archived (and verified) checkpoint holds.
    Snapshot(Box<Snapshot>),
}

/// Restores the agent while no worker runs it (holding its lease meanwhile): the checkpoint
/// the consciousness now is.
pub async fn restore(
    store: &dyn Store,
    key: &AgentKey,
    holder: &str,
    what: Restore,
) -> Result<Checkpoint, InspectError> {
    require_agent(store, key).await?;
    let lease = store
        .acquire_lease(key, holder, Duration::from_secs(30))
        .await?
        .ok_or_else(|| InspectError::Thinking(key.clone()))?;
    let restored = match what {
        Restore::Snapshot(snapshot) => {
            let mut snapshot = *snapshot;
            // The spec's restore request stays applied: this is not one.
            snapshot.consciousness.restored = store.consciousness(key).await?.restored;
            store
                .replace_consciousness(key, &lease, &snapshot)
                .await
                .map(|cp| (Some(cp), 0))
        }
        Restore::Cycle(cycle) => store
            .restore_checkpoint(key, &lease, cycle, None)
            .await
            .map(|cp| (cp, cycle)),
    };
    store.release_lease(key, &lease).await?;
    match restored? {
        (Some(cp), _) => Ok(cp),
        (None, cycle) => {
            let kept: Vec<String> = store
                .checkpoints(key)
                .await?
                .iter()
                .map(|c| c.cycle.to_string())
                .collect();
            Err(InspectError::NoCheckpoint {
                agent: key.clone(),
                cycle,
                kept: if kept.is_empty() {
                    "none".into()
                } else {
                    kept.join(", ")
                },
            })
        }
    }
}

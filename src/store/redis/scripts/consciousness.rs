//! The scripts of an agent's consciousness: committing a cycle, restoring a retained
//! checkpoint, replacing the whole consciousness (an archived checkpoint restored, a fork, a
//! recovery).

use std::sync::LazyLock;

use super::super::conn::Conn;
use redis::Script;

use super::super::keys::AgentKeys;
use super::super::{fenced, to_json};
use super::{lease_value, load, FENCE, RECEIPTS_FN, RECORDS_FN};
use crate::store::consciousness::{CommitPlan, WindowState};
use crate::store::{Checkpoint, CycleCommit, Lease, NoteKind, Snapshot, StoreError};

static COMMIT: LazyLock<Script> = LazyLock::new(|| {
    load(&[
        FENCE,
        RECEIPTS_FN,
        RECORDS_FN,
        include_str!("../lua/commit.lua"),
    ])
});
static RESTORE: LazyLock<Script> =
    LazyLock::new(|| load(&[FENCE, include_str!("../lua/restore.lua")]));
static REPLACE: LazyLock<Script> =
    LazyLock::new(|| load(&[FENCE, include_str!("../lua/replace.lua")]));

/// Why `commit.lua` refused a commit.
pub(in crate::store::redis) enum CommitError {
    /// The consciousness is no longer at the cycle the commit was planned on.
    Stale,
    /// Anything else.
    Store(StoreError),
}

impl From<StoreError> for CommitError {
    fn from(e: StoreError) -> Self {
        CommitError::Store(e)
    }
}

/// `commit.lua` (fenced): commits `commit`, planned as `plan` on the window `prev`.
/// KEYS: lease, clog, cmeta, checkpoints, summaries, inflight, state, urgent, inbox, journal,
/// receipts, receipt ids, A2A record, records, record heads.
/// ARGV: lease value, the plan (JSON), the record's head and body, the new messages.
pub(in crate::store::redis) async fn commit(
    conn: &mut Conn,
    agent: &AgentKeys,
    lease: &Lease,
    prev: &WindowState,
    plan: &CommitPlan,
    commit: &CycleCommit,
) -> Result<(), CommitError> {
    let cp = &plan.checkpoint;
    let summary_text = commit
        .compaction
        .as_ref()
        .and_then(|c| c.summary.clone())
        .unwrap_or_default();
    let record = commit
        .record
        .as_ref()
        .map(|r| r.encode(Some(cp.cycle)))
        .transpose()?;
    let plan_json = serde_json::json!({
        "prevCycle": prev.cycle.to_string(),
        "start": cp.start.to_string(),
        "finish": cp.end.to_string(),
        "summaryCycle": opt_string(cp.summary_cycle),
        "summaryText": summary_text,
        "cycle": cp.cycle.to_string(),
        "digest": cp.digest,
        "tokens": cp.tokens.to_string(),
        "cycleTokens": commit.cycle_tokens.to_string(),
        "timeMs": cp.time_ms.to_string(),
        "trimBefore": plan.trim_before.to_string(),
        "dropSummaries": plan.drop_summaries.iter().map(u64::to_string).collect::<Vec<_>>(),
        "checkpoints": checkpoints_json(agent, &plan.retained)?,
        "receipt": commit.receipt(cp.cycle).to_json(),
        "receipts": crate::store::RECEIPTS_KEPT_MS.to_string(),
        "recordKeep": record.as_ref().map_or(1, |r| r.keep).to_string(),
        "recordBytes": record.as_ref().map_or(u64::MAX, |r| r.max_bytes).to_string(),
    });
    let mut invocation = COMMIT.prepare_invoke();
    invocation
        .key(agent.lease())
        .key(agent.clog())
        .key(agent.cmeta())
        .key(agent.checkpoints())
        .key(agent.summaries())
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
        .arg(plan_json.to_string())
        .arg(record.as_ref().map_or("", |r| r.head.as_str()))
        .arg(record.as_ref().map_or("", |r| r.body.as_str()));
    for m in &commit.new_messages {
        invocation.arg(m);
    }
    invocation
        .invoke_async::<u8>(conn)
        .await
        .map_err(|e| match e.code() {
            Some("CONFLICT") => CommitError::Stale,
            _ => CommitError::Store(fenced(agent.name(), "commit cycle")(e)),
        })?;
    Ok(())
}

/// `restore.lua` (fenced): makes the consciousness what it was at checkpoint `to`, keeping
/// the checkpoints `kept` (newest first) and recording `request` as the restore applied;
/// refused with `INFLIGHT` while a cycle is in flight.
/// KEYS: lease, clog, cmeta, checkpoints, inflight, state, journal. ARGV: lease value, the
/// plan (JSON).
pub(in crate::store::redis) async fn restore(
    conn: &mut Conn,
    agent: &AgentKeys,
    lease: &Lease,
    to: &Checkpoint,
    kept: &[Checkpoint],
    request: Option<&str>,
) -> Result<(), StoreError> {
    let plan = serde_json::json!({
        "start": to.start.to_string(),
        "finish": to.end.to_string(),
        "summaryCycle": opt_string(to.summary_cycle),
        "cycle": to.cycle.to_string(),
        "digest": to.digest,
        "tokens": to.tokens.to_string(),
        "restored": request.unwrap_or_default(),
        "checkpoints": checkpoints_json(agent, kept)?,
    });
    RESTORE
        .key(agent.lease())
        .key(agent.clog())
        .key(agent.cmeta())
        .key(agent.checkpoints())
        .key(agent.inflight())
        .key(agent.state())
        .key(agent.journal())
        .arg(lease_value(lease))
        .arg(plan.to_string())
        .invoke_async::<u8>(conn)
        .await
        .map_err(in_flight(agent, "restore checkpoint"))?;
    Ok(())
}

/// The error of a script refused with `INFLIGHT`, `FENCED` or anything else.
fn in_flight<'a>(
    agent: &'a AgentKeys,
    op: &'static str,
) -> impl FnOnce(redis::RedisError) -> StoreError + 'a {
    move |e| match e.code() {
        Some("INFLIGHT") => StoreError::CycleInFlight {
            agent: agent.name().to_string(),
        },
        _ => fenced(agent.name(), op)(e),
    }
}

fn opt_string(v: Option<u64>) -> String {
    v.map(|n| n.to_string()).unwrap_or_default()
}

fn checkpoints_json(
    agent: &AgentKeys,
    checkpoints: &[Checkpoint],
) -> Result<Vec<String>, StoreError> {
    checkpoints
        .iter()
        .map(|c| to_json(|| format!("checkpoints of agent {}", agent.name()), c))
        .collect()
}

/// `replace.lua` (fenced): makes `snapshot` the agent's consciousness and notes, with `cp` its
/// only checkpoint; refused with `INFLIGHT` while a cycle is in flight.
/// KEYS: lease, clog, cmeta, checkpoints, summaries, inflight, state, journal, memories, goals,
/// plans. ARGV: lease value, the plan (JSON), the messages.
pub(in crate::store::redis) async fn replace(
    conn: &mut Conn,
    agent: &AgentKeys,
    lease: &Lease,
    snapshot: &Snapshot,
    cp: &Checkpoint,
) -> Result<(), StoreError> {
    let c = &snapshot.consciousness;
    let notes = |kind: NoteKind| -> Vec<&String> {
        snapshot
            .notes
            .get(&kind)
            .into_iter()
            .flatten()
            .flat_map(|(k, v)| [k, v])
            .collect()
    };
    let plan = serde_json::json!({
        "start": cp.start.to_string(),
        "finish": cp.end.to_string(),
        "summaryCycle": opt_string(cp.summary_cycle),
        "summaryText": c.summary.clone().unwrap_or_default(),
        "cycle": cp.cycle.to_string(),
        "digest": cp.digest,
        "tokens": cp.tokens.to_string(),
        "tokensUsed": c.tokens_used.to_string(),
        "lastCycleMs": cp.time_ms.to_string(),
        "restored": c.restored.clone().unwrap_or_default(),
        "highest": snapshot.highest.to_string(),
        "checkpoint": to_json(|| format!("a checkpoint of agent {}", agent.name()), cp)?,
        "memories": notes(NoteKind::Memories),
        "goals": notes(NoteKind::Goals),
        "plans": notes(NoteKind::Plans),
    });
    let mut invocation = REPLACE.prepare_invoke();
    invocation
        .key(agent.lease())
        .key(agent.clog())
        .key(agent.cmeta())
        .key(agent.checkpoints())
        .key(agent.summaries())
        .key(agent.inflight())
        .key(agent.state())
        .key(agent.journal())
        .key(agent.notes(NoteKind::Memories))
        .key(agent.notes(NoteKind::Goals))
        .key(agent.notes(NoteKind::Plans))
        .arg(lease_value(lease))
        .arg(plan.to_string());
    for m in &c.messages {
        invocation.arg(m);
    }
    invocation
        .invoke_async::<u8>(conn)
        .await
        .map_err(in_flight(agent, "replace consciousness"))?;
    Ok(())
}

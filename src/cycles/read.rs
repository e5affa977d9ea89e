//! Reading an agent's cycle records, for the gateway's routes (which decide who may, with
//! RBAC: those who may read the agent's consciousness) and the CLI's break-glass path on the
//! data plane, so both show the same.

use super::{CyclePage, CycleRecord};
use crate::identity::AgentKey;
use crate::inspect::{require_agent, InspectError};
use crate::store::{Store, StoreError};

/// Heads a page shows at most.
pub const PAGE_MAX: usize = 100;

/// Records a search by message looks through: every one an agent may keep.
const SEARCHED: usize = 1000;

/// A page of the agent's cycles, newest first: those numbered below `before` (all when
/// `None`), at most `limit` (1 to [`PAGE_MAX`]); with `message`, only those that posted a
/// message of that id.
pub async fn page(
    store: &dyn Store,
    key: &AgentKey,
    before: Option<u64>,
    limit: usize,
    message: Option<&str>,
) -> Result<CyclePage, InspectError> {
    require_agent(store, key).await?;
    let limit = limit.clamp(1, PAGE_MAX);
    let mut cycles = match message {
        None => store.cycle_heads(key, before, limit + 1).await?,
        Some(id) => store
            .cycle_heads(key, before, SEARCHED)
            .await?
            .into_iter()
            .filter(|h| h.posted.iter().any(|p| p.id == id))
            .take(limit + 1)
            .collect(),
    };
    let next_before = (cycles.len() > limit).then(|| {
        cycles.truncate(limit);
        cycles.last().map(|h| h.seq)
    });
    Ok(CyclePage {
        cycles,
        next_before: next_before.flatten(),
    })
}

/// The record numbered `seq`, and its size as kept.
pub async fn record(
    store: &dyn Store,
    key: &AgentKey,
    seq: u64,
) -> Result<(CycleRecord, u64), InspectError> {
    require_agent(store, key).await?;
    let Some(json) = store.cycle_record(key, seq).await? else {
        return Err(InspectError::NoRecord {
            agent: key.clone(),
            seq,
        });
    };
    // Read back from the data plane: bounded when written, and refused whole if it is not
    // a record.
    let mut record: CycleRecord =
        serde_json::from_str(&json).map_err(|source| StoreError::Decode {
            what: format!("the record of cycle {seq} of {key}"),
            source,
        })?;
    record.seq = seq;
    Ok((record, json.len() as u64))
}

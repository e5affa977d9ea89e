//! One recorded cycle run again by the candidate, in a data plane of its own (in memory)
//! that holds only what the cycle began with: the agent's spaces, its consciousness as of
//! the checkpoint the cycle began from, its notes as they were then, and the events it woke
//! for. Whatever the
//! candidate posts, remembers or spends stays there and is dropped with it.

use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument as _;

use crate::crd::Agent;
use crate::cycles::{CycleRecord, EventTrace};
use crate::identity::{AgentKey, SpaceKey};
use crate::model::Model;
use crate::store::prelude::*;
use crate::store::MemoryStore;
use crate::store::{
    Consciousness, EventKind, InboxEvent, NoteKind, Sender, Snapshot, SpaceRecord, StoreError,
};
use crate::telemetry::WorkerMetrics;
use crate::worker::cycle::{Agentlet, Outcome};

use super::replay::{Offered, Replay, Replayed};

/// How long the sandbox's lease lasts: longer than any cycle (nobody else takes it).
const LEASE: Duration = Duration::from_secs(24 * 3600);

/// What every rehearsed cycle of one rehearsal starts from besides its own consciousness
/// and events.
pub(super) struct Start {
    /// The agent as the data plane names it.
    pub key: AgentKey,
    /// The candidate's manifest.
    pub candidate: Agent,
    /// The candidate's model.
    pub model: Arc<dyn Model>,
    /// The agent's spaces and what the data plane knows of each, as they are now.
    pub spaces: Vec<(String, SpaceRecord)>,
    /// What the candidate is offered of its tools outside the worker.
    pub offered: Arc<Offered>,
    /// The rehearsal's own metrics (never the agent's).
    pub metrics: WorkerMetrics,
}

/// The candidate's run of one recorded cycle.
pub(super) struct Run {
    /// Its record, as the sandbox kept it.
    pub record: CycleRecord,
    /// How its calls were answered.
    pub replayed: Replayed,
    /// Whether an event was rebuilt from a cut text.
    pub inexact: bool,
    /// The model's failure, if the cycle failed on it.
    pub failed: Option<String>,
}

/// An event as it was pushed, rebuilt from its trace; `false` when the record had cut it.
fn event(t: &EventTrace) -> (InboxEvent, bool) {
    let kind = serde_json::from_value(serde_json::Value::String(t.kind.clone()))
        .unwrap_or(EventKind::SpaceMessage);
    let parse = |s: &str| serde_json::from_str::<serde_json::Value>(s).ok();
    let (text, data) = if t.no_text {
        (None, parse(&t.text))
    } else {
        (Some(t.text.clone()), t.data.as_deref().and_then(parse))
    };
    let whole = t.text_cut == 0 && t.data_cut == 0;
    let sender = t.from.as_ref().map(|name| Sender {
        id: t.from_id.clone().unwrap_or_else(|| name.clone()),
        name: name.clone(),
        kind: t.from_kind,
        groups: Vec::new(),
    });
    let event = InboxEvent {
        id: t.id.clone(),
        kind,
        time_ms: t.time_ms,
        // Events taken in mid-cycle are all there at the start of the rehearsed one.
        urgent: false,
        space: t.space.clone(),
        sender,
        text,
        data,
        depth: t.depth,
    };
    (event, whole)
}

impl Start {
    /// Runs the candidate's cycle in place of `record`, from `window` and `notes`.
    pub(super) async fn run(
        &self,
        record: &CycleRecord,
        window: Consciousness,
        notes: std::collections::BTreeMap<NoteKind, std::collections::BTreeMap<String, String>>,
    ) -> Result<Run, StoreError> {
        let key = &self.key;
        let sandbox = Arc::new(MemoryStore::new());
        for (name, space) in &self.spaces {
            let space_key = SpaceKey::new(key.namespace.clone(), name.clone());
            sandbox.apply_space(&space_key, space).await?;
        }
        sandbox.register_agent(key).await?;
        let Some(lease) = sandbox.acquire_lease(key, "rehearsal", LEASE).await? else {
            return Err(StoreError::Fenced {
                agent: key.to_string(),
            });
        };
        let snapshot = Snapshot {
            consciousness: window,
            notes,
            highest: 0,
        };
        sandbox
            .replace_consciousness(key, &lease, &snapshot)
            .await?;
        let mut inexact = false;
        for t in &record.events {
            let (e, whole) = event(t);
            inexact |= !whole;
            sandbox.push_event(key, &e).await?;
        }
        inexact |= record.events_cut > 0;
        let events = sandbox.take_inbox(key, &lease).await?;
        let store: Arc<dyn Store> = sandbox.clone();
        let replay = Arc::new(Replay::new(self.offered.clone(), record));
        let agentlet = Agentlet::new(
            self.candidate.clone(),
            key.clone(),
            store,
            self.model.clone(),
            self.metrics.clone(),
        )
        .with_external(vec![replay.clone()])
        .with_max_wait(Duration::ZERO);
        // Its log lines and spans say they are a rehearsal's, not the agent's own cycles.
        let span = tracing::info_span!("rehearsal", agent = %key, recorded = record.seq);
        let outcome = agentlet.cycle(&lease, &events).instrument(span).await?;
        let mut failed = None;
        let record = match outcome {
            Outcome::Paused { record, .. } => record.record,
            other => {
                if let Outcome::Failed(e) = other {
                    failed = Some(e.to_string());
                }
                newest_record(&sandbox, key).await?
            }
        };
        Ok(Run {
            record,
            replayed: replay.counts(),
            inexact,
            failed,
        })
    }
}

/// The newest record the sandbox kept.
async fn newest_record(sandbox: &MemoryStore, key: &AgentKey) -> Result<CycleRecord, StoreError> {
    let heads = sandbox.cycle_heads(key, None, 1).await?;
    let Some(head) = heads.first() else {
        return Ok(CycleRecord::default());
    };
    let json = sandbox
        .cycle_record(key, head.seq)
        .await?
        .unwrap_or_default();
    serde_json::from_str(&json).map_err(|source| StoreError::Decode {
        what: format!("the rehearsed record of {key}"),
        source,
    })
}

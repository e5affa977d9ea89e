//! Rehearsals: a change of an agent (its model, instructions or tools) tried on the agent's
//! own recent cycles before it goes live (docs/rehearsals.md).
//!
//! For each of the agent's last recorded cycles, the candidate runs the same cycle again,
//! from the consciousness the cycle began with and the events it woke for, with no effects:
//! in a data plane of its own ([`sandbox`]), its tools answered from the record
//! ([`replay`]). Its decision is compared with the recorded one ([`crate::rehearsals`]): replied or not
//! and where, the tool calls (names and arguments), steps, tokens and time. The agent's
//! inbox, consciousness, notes, spaces, budget and tools are only read.
//!
//! | file | what it holds |
//! |---|---|
//! | `mod.rs` | [`Rehearsal`] and its run over the records |
//! | `sandbox.rs` | one recorded cycle run again, in a data plane of its own |
//! | `replay.rs` | the candidate's tools, answered from the record |
//! | `table.rs` | the report as a table for a terminal |
//! | `command.rs` | `agentfleet rehearse`, and a Rehearsal's Job |

pub mod command;
mod replay;
mod sandbox;
pub mod table;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use crate::rehearsals::Recorded;
pub use crate::rehearsals::{Criteria, CycleResult, Decision, Report, Summary, MAX_CYCLES};

use crate::crd::Agent;
use crate::cycles::{CycleOutcome, CycleRecord};
use crate::identity::{AgentKey, SpaceKey};
use crate::model::Model;
use crate::store::{Store, StoreError};
use crate::worker::tools::ListedTool;

/// Where async tools would post results: never called (nothing is).
const NO_CALLBACK: &str = "http://rehearsal.invalid";

/// A rehearsal to run: the candidate on the agent's last recorded cycles.
pub struct Rehearsal {
    /// The agent as the data plane names it (whose records are replayed).
    pub key: AgentKey,
    /// The candidate: the agent's manifest with the change (model, instructions, tools).
    pub candidate: Agent,
    /// The candidate's model, called with its key.
    pub model: Arc<dyn Model>,
    /// How many of the last recorded cycles (1 to [`MAX_CYCLES`]).
    pub cycles: usize,
    /// What it must show to pass.
    pub criteria: Criteria,
}

/// Why a rehearsal could not run at all (its cycles' own troubles are in its report).
#[derive(Debug)]
pub enum RehearsalError {
    /// The data plane could not be read.
    Store(StoreError),
    /// The agent has no records to replay.
    NoRecords(AgentKey),
    /// The rehearsal's own metrics could not be made.
    Metrics(prometheus::Error),
}

impl std::fmt::Display for RehearsalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RehearsalError::Store(e) => write!(f, "{e}"),
            RehearsalError::NoRecords(key) => write!(
                f,
                "{key} has no cycle records to rehearse (yet, or spec.cycle.records.keep is 0)"
            ),
            RehearsalError::Metrics(e) => write!(f, "cannot set up the rehearsal's metrics: {e}"),
        }
    }
}

impl std::error::Error for RehearsalError {}

impl From<StoreError> for RehearsalError {
    fn from(e: StoreError) -> Self {
        RehearsalError::Store(e)
    }
}

/// The checkpoint `record`'s cycle began from, if it can tell: what it says, or for a
/// committed cycle recorded before records said it, the checkpoint before its own.
fn began_from(record: &CycleRecord) -> Option<u64> {
    record.from_checkpoint.or(match record.outcome {
        Some(CycleOutcome::Committed) => record.checkpoint.map(|c| c.saturating_sub(1)),
        _ => None,
    })
}

impl Rehearsal {
    /// Runs it over the agent's records in `source` (only read), reporting each cycle to
    /// `progress` as it is done.
    pub async fn run(
        &self,
        source: &dyn Store,
        mut progress: impl FnMut(&CycleResult),
    ) -> Result<Report, RehearsalError> {
        let key = &self.key;
        // The notes first: a cycle committed between the two reads is then not among the
        // records, and undoing a change the notes do not hold yet is harmless.
        let now = crate::store::all_notes(source, key).await?;
        let records = last_records(source, key, self.cycles.clamp(1, MAX_CYCLES)).await?;
        if records.is_empty() {
            return Err(RehearsalError::NoRecords(key.clone()));
        }
        let start = self.start(source).await?;
        let notes = notes_at_each(now, &records);
        let mut cycles = Vec::with_capacity(records.len());
        let mut spent = 0u64;
        let mut ended = None;
        for (record, notes) in records.iter().zip(notes) {
            let result = self.one(source, &start, record, notes).await?;
            let (result, failed) = result;
            spent += result.candidate.as_ref().map_or(0, |d| d.tokens);
            progress(&result);
            cycles.push(result);
            if let Some(e) = failed {
                ended = Some(format!(
                    "the candidate's model failed in place of cycle {}: {e}",
                    record.seq
                ));
                break;
            }
            if let Some(max) = self.criteria.max_tokens.filter(|&max| spent > max) {
                ended = Some(format!(
                    "the candidate spent {spent} tokens by cycle {}, over the rehearsal's ceiling of {max}",
                    record.seq
                ));
                break;
            }
        }
        let summary = Summary::of(&cycles, &self.criteria, ended.as_deref());
        Ok(Report { cycles, summary })
    }

    /// What every rehearsed cycle starts from besides its own consciousness and events.
    async fn start(&self, source: &dyn Store) -> Result<sandbox::Start, RehearsalError> {
        let key = &self.key;
        let mut spaces = Vec::new();
        for name in &self.candidate.spec.spaces {
            let space = SpaceKey::new(key.namespace.clone(), name.clone());
            if let Some(record) = source.space(&space).await? {
                spaces.push((name.clone(), record));
            }
        }
        // Recorded by the worker; unreadable (a newer or damaged entry) is no tool at all,
        // which the report shows as calls not replayed.
        let listed: Vec<ListedTool> = source
            .tool_specs(key)
            .await?
            .and_then(|json| serde_json::from_str(&json).ok())
            .unwrap_or_default();
        let mut candidate = self.candidate.clone();
        // The sandbox keeps the cycle's record, whatever the candidate keeps.
        candidate.spec.cycle.records.keep = candidate.spec.cycle.records.keep.max(1);
        let metrics = crate::telemetry::WorkerMetrics::new().map_err(RehearsalError::Metrics)?;
        // Made once: asked only what they offer, never to call (the store is no one's).
        let offered = replay::Offered::new(
            key,
            &candidate.spec.tools,
            &listed,
            &crate::worker::tools::ExternalContext {
                store: Arc::new(crate::store::MemoryStore::new()),
                secrets: Default::default(),
                callback_url: Some(NO_CALLBACK.to_string()),
            },
        );
        Ok(sandbox::Start {
            key: key.clone(),
            candidate,
            model: self.model.clone(),
            spaces,
            offered: Arc::new(offered),
            metrics,
        })
    }

    /// One recorded cycle: rehearsed and compared, or why not; and the candidate model's
    /// failure, if it failed.
    async fn one(
        &self,
        source: &dyn Store,
        start: &sandbox::Start,
        record: &CycleRecord,
        (notes, whole): (Notes, bool),
    ) -> Result<(CycleResult, Option<String>), RehearsalError> {
        if record.party != "members" {
            return Ok((
                CycleResult::skipped(
                    record,
                    "an A2A conversation with a memory of its own is not rehearsed",
                ),
                None,
            ));
        }
        let Some(from) = began_from(record) else {
            return Ok((
                CycleResult::skipped(
                    record,
                    "recorded before records said which checkpoint a cycle began from",
                ),
                None,
            ));
        };
        let Some(window) = source.consciousness_at(&self.key, from).await? else {
            return Ok((
                CycleResult::skipped(
                    record,
                    format!("it began from checkpoint {from}, which is no longer retained"),
                ),
                None,
            ));
        };
        let run = start.run(record, window, notes).await?;
        let mut result = CycleResult::compared(record, Decision::of(&run.record));
        result.replayed = run.replayed.replayed;
        result.not_replayed = run.replayed.not_replayed;
        // `enter_space` shows the space's recent messages, which the rehearsal does not hold.
        let entered = run
            .record
            .steps
            .iter()
            .flat_map(|s| &s.calls)
            .any(|c| c.tool == crate::crd::BuiltinTool::EnterSpace.name());
        result.inexact = run.inexact || run.replayed.cut > 0 || !whole || entered;
        Ok((result, run.failed))
    }
}

/// The agent's notes by kind (key → stored text).
type Notes =
    std::collections::BTreeMap<crate::store::NoteKind, std::collections::BTreeMap<String, String>>;

/// The notes each of `records` (oldest first) began with, from the notes `now`: each
/// record's changes undone, newest first; and whether they are whole (a record that changed
/// notes it could not keep, or was recorded before records kept them, leaves its cycle and
/// the older ones with today's values for those).
fn notes_at_each(now: Notes, records: &[CycleRecord]) -> Vec<(Notes, bool)> {
    use crate::store::NoteKind;
    let changes_notes = |r: &CycleRecord| {
        r.steps
            .iter()
            .flat_map(|s| &s.calls)
            .any(|c| crate::crd::BuiltinTool::from_name(&c.tool).is_some_and(|t| t.long_memory()))
    };
    let mut current = now;
    let mut whole = true;
    let mut out: Vec<(Notes, bool)> = records
        .iter()
        .rev()
        .map(|r| {
            for (kind, keys) in &r.notes_before {
                let Some(kind) = NoteKind::parse(kind) else {
                    whole = false;
                    continue;
                };
                let entries = current.entry(kind).or_default();
                for (key, before) in keys {
                    match before {
                        Some(v) => entries.insert(key.clone(), v.clone()),
                        None => entries.remove(key),
                    };
                }
            }
            let unknown = r.notes_before.is_empty() && r.from_checkpoint.is_none();
            if r.notes_cut > 0 || (unknown && changes_notes(r)) {
                whole = false;
            }
            current.retain(|_, entries| !entries.is_empty());
            (current.clone(), whole)
        })
        .collect();
    out.reverse();
    out
}

/// The agent's last `n` records, oldest first.
async fn last_records(
    source: &dyn Store,
    key: &AgentKey,
    n: usize,
) -> Result<Vec<CycleRecord>, RehearsalError> {
    let heads = source.cycle_heads(key, None, n).await?;
    let mut out = Vec::with_capacity(heads.len());
    for head in heads.iter().rev() {
        let Some(json) = source.cycle_record(key, head.seq).await? else {
            continue;
        };
        let mut record: CycleRecord =
            serde_json::from_str(&json).map_err(|source| StoreError::Decode {
                what: format!("the record of cycle {} of {key}", head.seq),
                source,
            })?;
        record.seq = head.seq;
        out.push(record);
    }
    Ok(out)
}

/// Checks a candidate against the Agent schema, as the API server would: `Err` says every
/// problem in one sentence.
pub fn check_candidate(candidate: &Agent) -> Result<(), String> {
    let json =
        serde_json::to_value(candidate).map_err(|e| format!("the candidate's manifest: {e}"))?;
    let problems = crate::crd::validate::schema_of("Agent")
        .map(|schema| crate::crd::validate::check(schema, &json))
        .unwrap_or_default();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the candidate is not a valid Agent: {}",
            problems.join("; ")
        ))
    }
}

/// What [`in_place`] runs: a candidate's change, named, on so many cycles, against criteria.
pub struct InPlace<'a> {
    /// The name its report is kept under.
    pub name: &'a str,
    /// What the candidate changes of the agent.
    pub change: &'a crate::crd::Candidate,
    /// How many of the last recorded cycles.
    pub cycles: u32,
    /// What it must show to pass.
    pub criteria: &'a Criteria,
}

/// Runs `request` on the recorded cycles of `live` (the agent's manifest as it runs, its model
/// resolved) in `store`, a candidate naming a Model resolved with `models`, its first model
/// asked with the key `api_key` gives it, and keeps the report there (how `agentfleet dev`
/// rehearses in place). `Err` says in a sentence why it could not start.
pub async fn in_place(
    store: &dyn Store,
    live: &Agent,
    request: InPlace<'_>,
    models: &crate::models::Models<'_>,
    api_key: &(dyn Fn(&crate::crd::ModelSettings) -> crate::model::ApiKey + Sync),
) -> Result<Recorded, String> {
    let key = crate::worker::host::key_of(live);
    let mut candidate = live.clone();
    candidate.status = None;
    request.change.apply(&mut candidate.spec);
    let model = &candidate.spec.model;
    if model.model_ref.is_some() && model.provider.is_none() {
        // A candidate naming another Model: resolved as the agent's own was.
        candidate.spec.model = crate::models::resolve(model, models)
            .map_err(|p| format!("the candidate's model: {p}"))?;
    }
    crate::models::first_only(&mut candidate.spec.model);
    check_candidate(&candidate)?;
    let shares = [
        request.criteria.min_reply_agreement,
        request.criteria.min_tool_agreement,
    ];
    if shares.iter().any(|x| !(0.0..=1.0).contains(x)) {
        return Err("criteria: the agreements are shares between 0 and 1".into());
    }
    let first = &candidate.spec.model;
    let model = crate::model::first_of(first, &key.name, api_key(&first.settings))
        .map_err(|e| format!("the candidate's model: {e}"))?;
    let rehearsal = Rehearsal {
        key: key.clone(),
        candidate,
        model: Arc::from(model),
        cycles: request.cycles as usize,
        criteria: request.criteria.clone(),
    };
    let report = rehearsal
        .run(store, |_| {})
        .await
        .map_err(|e| e.to_string())?;
    let recorded = Recorded {
        name: request.name.to_string(),
        uid: live.metadata.uid.clone().unwrap_or_default(),
        generation: 0,
        time_ms: crate::store::now_ms(),
        report: Some(report.shown()),
        error: None,
    };
    let json = serde_json::to_string(&recorded).map_err(|e| e.to_string())?;
    store
        .set_rehearsal_report(&key, request.name, &json, recorded.time_ms)
        .await
        .map_err(|e| format!("the report was not kept: {e}"))?;
    Ok(recorded)
}

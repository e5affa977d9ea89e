//! The cycle's record ([`crate::cycles`]): built as the cycle runs, each text masked with the
//! agent's secrets and cut where it is added, and handed to the step that ends the cycle
//! (its commit, rollback or pause; a model failure's own write).

use std::collections::BTreeMap;
use std::time::Duration;

use tracing::warn;

use super::Cycle;
use crate::cycles::{
    clip, CallTrace, CycleOutcome, CycleRecord, CycleTokens, EventTrace, PostedMessage, StepTrace,
    CALLS_PER_STEP, EVENTS, NOTES, POSTED, TEXT_BYTES,
};
use crate::model::{ToolCall, Turn, Usage};
use crate::party::Party;
use crate::secrets::Redactor;
use crate::store::{InboxEvent, NoteKind, RecordWrite};

/// Every note collection of an agent, by kind (key → stored text).
pub(super) type Notes = BTreeMap<NoteKind, BTreeMap<String, String>>;
use crate::worker::tools::Outcome;

/// A record under way.
pub(super) struct Recorder {
    /// The record so far.
    record: CycleRecord,
    /// The agent's secrets, masked in every text.
    masks: Redactor,
    /// How long the last call made took (read when its result is recorded).
    call_took: Option<Duration>,
    /// The call the cycle waits on a person for, if it does.
    waiting: Option<String>,
    /// The reason the model gave for `skip`, if it did.
    skip_reason: Option<String>,
}

impl Recorder {
    /// The record of a cycle for `party` over `events`, starting now.
    pub(super) fn new(masks: Redactor, party: &Party, events: &[InboxEvent]) -> Self {
        let mut this = Self {
            record: CycleRecord {
                started_ms: crate::store::now_ms(),
                party: match party {
                    Party::Members => "members".to_string(),
                    Party::Conversation(space) => format!("conversation {space}"),
                },
                ..CycleRecord::default()
            },
            masks,
            call_took: None,
            waiting: None,
            skip_reason: None,
        };
        this.events(events);
        this
    }

    /// A text masked and cut: what is kept, and how many bytes were not.
    fn text(&self, text: &str) -> (String, u64) {
        // Cut first (a model's megabyte is never masked whole), with room for what masking
        // may add back.
        let (cut, dropped) = clip(text, TEXT_BYTES);
        let masked = if self.masks.is_empty() {
            cut
        } else {
            self.masks.redact(&cut)
        };
        let (kept, more) = clip(&masked, TEXT_BYTES);
        (kept, dropped + more)
    }

    /// Events the cycle woke for, or took in while it ran.
    pub(super) fn events(&mut self, events: &[InboxEvent]) {
        for e in events {
            if self.record.events.len() >= EVENTS {
                self.record.events_cut += 1;
                continue;
            }
            let body = match (&e.text, &e.data) {
                (Some(text), _) => text.clone(),
                (None, Some(data)) => data.to_string(),
                (None, None) => String::new(),
            };
            let (text, text_cut) = self.text(&body);
            let kind = serde_json::to_value(e.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            let (data, data_cut) = match (&e.text, &e.data) {
                (Some(_), Some(data)) => {
                    let (data, cut) = self.text(&data.to_string());
                    (Some(data), cut)
                }
                _ => (None, 0),
            };
            let sender = e.sender.as_ref();
            self.record.events.push(EventTrace {
                id: e.id.clone(),
                kind,
                space: e.space.clone(),
                from: sender.map(|s| s.name.clone()),
                from_id: sender.filter(|s| s.id != s.name).map(|s| s.id.clone()),
                from_kind: sender.and_then(|s| s.kind),
                time_ms: e.time_ms,
                urgent: e.urgent,
                depth: e.depth,
                text,
                text_cut,
                no_text: e.text.is_none() && e.data.is_some(),
                data,
                data_cut,
            });
        }
    }

    /// A step's model call: when it began (from the cycle's start), how long it took, its
    /// first chunk, and the turn it gave.
    pub(super) fn step(
        &mut self,
        step: u32,
        offset: Duration,
        took: Duration,
        first_chunk: Option<Duration>,
        turn: &Turn,
        model: &str,
    ) {
        let (text, text_cut) = match turn.text.as_deref() {
            Some(t) => {
                let (t, cut) = self.text(t);
                (Some(t), cut)
            }
            None => (None, 0),
        };
        self.record.push_step(StepTrace {
            step,
            offset_ms: offset.as_millis() as u64,
            duration_ms: took.as_millis() as u64,
            first_token_ms: first_chunk.map(|d| d.as_millis() as u64),
            model: Some(model.to_string()),
            tokens: tokens(&turn.usage),
            finish: turn.finish_reason.map(|f| f.as_str().to_string()),
            text,
            text_cut,
            ..StepTrace::default()
        });
    }

    /// The step `step` as recorded (a resumed cycle's first step has no model call here: it
    /// is added, to hold its calls).
    fn step_mut(&mut self, step: u32) -> &mut StepTrace {
        let last = self.record.steps.last().map(|s| s.step);
        if last != Some(step) {
            self.record.push_step(StepTrace {
                step,
                notes: vec!["resumed: its model call was in an earlier run of the cycle".into()],
                ..StepTrace::default()
            });
        }
        let at = self.record.steps.len() - 1;
        &mut self.record.steps[at]
    }

    /// How long the call about to be recorded took.
    pub(super) fn took(&mut self, took: Duration) {
        self.call_took = Some(took);
    }

    /// A call of step `step` and its result (none while it waits for a person); `space` is
    /// where a `send_message` it made posted.
    pub(super) fn call(
        &mut self,
        step: u32,
        call: &ToolCall,
        outcome: Option<&Outcome>,
        space: Option<&str>,
    ) {
        let took = self.call_took.take().unwrap_or_default();
        if outcome.is_none() {
            self.waiting = Some(format!(
                "waits for a person's answer to its call {} of {}",
                call.id, call.name
            ));
        }
        let (arguments, arguments_cut) = self.text(&call.arguments);
        let result = outcome.map(|o| self.text(&o.content));
        if let (Some(o), Some(space)) = (outcome, space) {
            self.posted(call, o, space);
        }
        let s = self.step_mut(step);
        if s.calls.len() >= CALLS_PER_STEP {
            s.calls_cut += 1;
            return;
        }
        let (result, result_cut) = match result {
            Some((r, cut)) => (Some(r), cut),
            None => (None, 0),
        };
        s.calls.push(CallTrace {
            id: call.id.clone(),
            tool: clip(&call.name, 256).0,
            arguments,
            arguments_cut,
            result,
            result_cut,
            ok: outcome.map(|o| o.ok),
            duration_ms: took.as_millis() as u64,
        });
    }

    /// The message a `send_message` call posted, if it did.
    fn posted(&mut self, call: &ToolCall, outcome: &Outcome, space: &str) {
        if call.name != crate::crd::BuiltinTool::SendMessage.name() || !outcome.ok {
            return;
        }
        let id = serde_json::from_str::<serde_json::Value>(&outcome.content)
            .ok()
            .and_then(|v| v["messageId"].as_str().map(str::to_string));
        if let Some(id) = id {
            if self.record.posted.len() < POSTED {
                self.record.posted.push(PostedMessage {
                    space: space.to_string(),
                    id,
                });
            }
        }
    }

    /// The earlier values of the notes the cycle changed: `before` as they were when it
    /// first touched one, `after` as they are now (by kind, key → stored text).
    pub(super) fn notes_changed(&mut self, before: &Notes, after: &Notes) {
        let empty = BTreeMap::new();
        let kinds = before.keys().chain(after.keys());
        let mut kept = 0;
        for kind in kinds.collect::<std::collections::BTreeSet<_>>() {
            let (was, now) = (
                before.get(kind).unwrap_or(&empty),
                after.get(kind).unwrap_or(&empty),
            );
            let keys = was
                .keys()
                .chain(now.keys())
                .collect::<std::collections::BTreeSet<_>>();
            for key in keys.into_iter().filter(|k| was.get(*k) != now.get(*k)) {
                let old = was.get(key);
                let whole = old.is_none_or(|v| v.len() <= TEXT_BYTES);
                if kept >= NOTES || !whole {
                    self.record.notes_cut += 1;
                    continue;
                }
                kept += 1;
                self.record
                    .notes_before
                    .entry(kind.as_str().to_string())
                    .or_default()
                    .insert(key.clone(), old.map(|v| self.masks.redact(v)));
            }
        }
    }

    /// Notes changed that cannot be said (they could not be read).
    pub(super) fn notes_unknown(&mut self) {
        self.record.notes_cut += 1;
    }

    /// A note on the step under way (the last one recorded).
    pub(super) fn note(&mut self, note: impl Into<String>) {
        if let Some(s) = self.record.steps.last_mut() {
            if s.notes.len() < CALLS_PER_STEP {
                s.notes.push(clip(&note.into(), 1024).0);
            }
        }
    }

    /// The record of a batch given up on before any step of its own (its model kept
    /// failing), ended as `outcome` for `reason`.
    pub(super) fn ended(
        &mut self,
        outcome: CycleOutcome,
        reason: Option<String>,
        spec: &crate::crd::CycleRecordsSpec,
    ) -> RecordWrite {
        let mut record = std::mem::take(&mut self.record);
        record.outcome = Some(outcome);
        record.reason = reason
            .or_else(|| self.skip_reason.take())
            .map(|why| self.text(&why).0);
        record.trace_id = super::trace::trace_id();
        RecordWrite {
            record,
            keep: spec.keep,
            max_bytes: spec.max_bytes,
        }
    }

    /// The `skip` calls that rolled the cycle back at `step`; the first reason given is the
    /// cycle's.
    pub(super) fn skipped(&mut self, step: u32, calls: &[ToolCall]) {
        let result = crate::worker::tools::skip_result();
        for call in calls {
            self.call(step, call, Some(&result), None);
            if self.skip_reason.is_none() {
                self.skip_reason = serde_json::from_str::<serde_json::Value>(&call.arguments)
                    .ok()
                    .and_then(|v| v["reason"].as_str().map(str::to_string))
                    .filter(|r| !r.trim().is_empty());
            }
        }
    }

    /// Why the cycle pauses: the call it waits on a person for.
    pub(super) fn waiting(&mut self) -> String {
        self.waiting
            .take()
            .unwrap_or_else(|| "waits for a person's answer".to_string())
    }

    /// Notes the checkpoint the cycle's consciousness was at when it began.
    pub(super) fn began_from(&mut self, checkpoint: u64) {
        self.record.from_checkpoint = Some(checkpoint);
    }

    /// Marks the record as that of a cycle resumed from its journal.
    pub(super) fn resumed(&mut self) {
        self.record.resumed = true;
    }
}

/// Tokens as a record counts them.
fn tokens(usage: &Usage) -> CycleTokens {
    CycleTokens {
        input: usage.input,
        cached: usage.cache_read,
        output: usage.output,
    }
}

impl Cycle<'_> {
    /// The record as the step that ends the cycle keeps it, ended as `outcome` for `reason`.
    /// Notes the notes as they are before the cycle first changes one (once a cycle).
    pub(super) async fn notes_before_change(&mut self) {
        if self.notes_at_start.is_some() || !self.remembers {
            return;
        }
        let agentlet = self.agentlet;
        match crate::store::all_notes(agentlet.store.as_ref(), &agentlet.key).await {
            Ok(notes) => self.notes_at_start = Some(notes),
            Err(e) => {
                warn!(agent = %agentlet.key, error = %e, "the notes before the cycle changed them were not read; its record cannot say them");
                self.recorder.notes_unknown();
            }
        }
    }

    /// Records what the notes the cycle changed were before it (when it changed any).
    pub(super) async fn note_changes(&mut self) {
        let Some(before) = self.notes_at_start.take() else {
            return;
        };
        let agentlet = self.agentlet;
        match crate::store::all_notes(agentlet.store.as_ref(), &agentlet.key).await {
            Ok(after) => self.recorder.notes_changed(&before, &after),
            Err(e) => {
                warn!(agent = %agentlet.key, error = %e, "the notes after the cycle were not read; its record cannot say what it changed");
                self.recorder.notes_unknown();
            }
        }
    }

    pub(super) fn record_write(
        &mut self,
        outcome: CycleOutcome,
        reason: Option<String>,
    ) -> RecordWrite {
        let spec = &self.agentlet.agent.spec.cycle.records;
        let mut write = self.recorder.ended(outcome, reason, spec);
        write.record.duration_ms = self.started.elapsed().as_millis() as u64;
        write.record.tokens = tokens(&self.used);
        write
    }

    /// Keeps the record of a cycle whose model failed (nothing else ends it): a record
    /// that cannot be written is said in the log, and the cycle's outcome stands.
    pub(super) async fn record_failure(&mut self, reason: String) {
        self.note_changes().await;
        let write = self.record_write(CycleOutcome::Failed, Some(reason));
        let agentlet = self.agentlet;
        if let Err(e) = agentlet
            .store
            .record_cycle(&agentlet.key, self.lease, &write)
            .await
        {
            warn!(agent = %agentlet.key, error = %e, "the failed cycle's record was not kept");
        }
    }
}

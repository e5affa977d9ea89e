//! After the last step (seed 000 "After the Cycle"; DESIGN "The think cycle" 4): the cycle's
//! messages join the window, which is compacted when it goes over its size (a summary of
//! what drops out, or a plain sliding window), then the new messages, the token counts and
//! the checkpoint are written in one fenced commit that also acknowledges the events, and
//! the result is kept for the next cycle.

use tracing::{info, warn, Instrument as _};

use super::{Agentlet, Cached, Cycle};
use crate::crd::Compaction;
use crate::cycles::CycleOutcome;
use crate::model::{estimate_tokens, Failure, Message, ModelError, Request, ToolChoice, Usage};
use crate::party::Party;
use crate::store::{
    Checkpoint, Compacted, Consciousness, CycleCommit, InboxEvent, Lease, Receipt, ReceiptOutcome,
    StoreError,
};
use crate::worker::compaction;

impl Cycle<'_> {
    /// Commits the cycle and returns its checkpoint.
    pub(super) async fn commit(mut self) -> Result<Checkpoint, StoreError> {
        let agentlet = self.agentlet;
        let spec = &agentlet.agent.spec.consciousness;
        let all: Vec<Message> = self.history.iter().chain(&self.new).cloned().collect();
        let (compacted, summary) = self.compact(&all).await;
        let first_kept = compacted
            .as_ref()
            .map_or(0, |cp| (cp.start - self.consciousness.start) as usize);
        let tokens = summary.as_deref().map_or(0, estimate_tokens)
            + all
                .iter()
                .skip(first_kept)
                .map(Message::estimate_tokens)
                .sum::<u64>();
        let new_messages = encode(&self.new, "the cycle's messages")?;
        let cycle_tokens = self.used.input + self.used.output;
        let reason = (!self.stops.is_empty()).then(|| {
            let whys: Vec<&str> = self.stops.iter().map(|(_, why)| why.as_str()).collect();
            whys.join("; ")
        });
        self.note_changes().await;
        let record = self.record_write(CycleOutcome::Committed, reason);
        let checkpoint = agentlet
            .store
            .commit_cycle(
                &agentlet.key,
                self.lease,
                &CycleCommit {
                    new_messages: new_messages.clone(),
                    compaction: compacted,
                    tokens,
                    cycle_tokens,
                    checkpoints_retained: spec.checkpoints_retained,
                    failure: None,
                    record: Some(record),
                },
            )
            .await?;
        // What the store now holds, kept for the next cycle.
        let c = self.consciousness;
        let committed = Consciousness {
            cycle: checkpoint.cycle,
            summary,
            messages: c
                .messages
                .into_iter()
                .chain(new_messages)
                .skip(first_kept)
                .collect(),
            start: checkpoint.start,
            tokens,
            digest: checkpoint.digest.clone(),
            tokens_used: c.tokens_used + cycle_tokens,
            last_cycle_ms: Some(checkpoint.time_ms),
            restored: c.restored,
        };
        let history = all.into_iter().skip(first_kept).collect();
        agentlet.remember(self.lease, committed, history).await;
        let [ns, agent] = agentlet.labels();
        agentlet
            .metrics
            .consciousness_tokens
            .with_label_values(&[ns, agent])
            .set(i64::try_from(tokens).unwrap_or(i64::MAX));
        info!(
            cycle = checkpoint.cycle,
            messages = checkpoint.messages,
            tokens,
            elapsed_ms = self.started.elapsed().as_millis() as u64,
            "cycle committed"
        );
        Ok(checkpoint)
    }

    /// Compaction of `all` (the window after this cycle) when it is over its size: where the
    /// window starts now and the summary that replaces what dropped out, or `None` and the
    /// summary as it was. A summary that fails postpones compaction: nothing is dropped
    /// without its summary, the window stays whole (over its size) and the next commit tries
    /// again.
    async fn compact(&mut self, all: &[Message]) -> (Option<Compacted>, Option<String>) {
        let agentlet = self.agentlet;
        let spec = &agentlet.agent.spec.consciousness;
        let previous = self.consciousness.summary.clone();
        let first = self.consciousness.start;
        let summary_tokens = previous.as_deref().map_or(0, estimate_tokens);
        let window = spec.window_tokens;
        let keep = spec.keep_recent_messages as usize;
        let Some(start) = compaction::plan(all, first, summary_tokens, window, keep) else {
            return (None, previous);
        };
        let dropped = &all[..usize::try_from(start - first)
            .unwrap_or(all.len())
            .min(all.len())];
        let summary = match spec.compaction {
            Compaction::SlidingWindow => Ok(None),
            Compaction::Summarize => match self
                .awaiting_model(agentlet.summarize(previous.as_deref(), dropped))
                .await
            {
                Ok((summary, usage)) => {
                    self.used += usage;
                    agentlet.count_tokens(&usage).await;
                    Ok(Some(summary))
                }
                Err(e) => Err(e),
            },
        };
        let [ns, agent] = agentlet.labels();
        match summary {
            Ok(summary) => {
                agentlet
                    .metrics
                    .compactions
                    .with_label_values(&[ns, agent])
                    .inc();
                let compacted = Compacted {
                    start,
                    summary: summary.clone(),
                };
                (Some(compacted), summary)
            }
            Err(e) => {
                agentlet
                    .metrics
                    .compaction_failures
                    .with_label_values(&[ns, agent])
                    .inc();
                warn!(error = %e, window_tokens = window, messages = all.len(), "summary failed; compaction postponed to the next cycle, the window is kept whole");
                (None, previous)
            }
        }
    }
}

impl Agentlet {
    /// A model-written summary of `dropped` (continuing `previous`), and what it cost.
    async fn summarize(
        &self,
        previous: Option<&str>,
        dropped: &[Message],
    ) -> Result<(String, Usage), ModelError> {
        let (system, text) = compaction::summary_prompt(previous, dropped);
        let request = Request {
            system,
            messages: vec![Message::user(text)],
            context: String::new(),
            tools: Vec::new(),
            tool_choice: ToolChoice::None,
        };
        let span = super::trace::summary(self);
        let started = std::time::Instant::now();
        let mut first_chunk = None;
        let turn = self
            .model
            .complete(&request, &mut |_| {
                first_chunk.get_or_insert_with(|| started.elapsed());
            })
            .instrument(span.clone())
            .await;
        super::trace::step_ended(&span, &turn, first_chunk, &self.model_in_use());
        let turn = turn?;
        let summary = turn.text.unwrap_or_default().trim().to_string();
        if summary.is_empty() {
            return Err(ModelError::new(
                Failure::BadResponse,
                "the model wrote an empty summary",
            ));
        }
        Ok((summary, turn.usage))
    }

    /// Keeps `consciousness` (as the store holds it under `lease`) for the next cycle.
    pub(super) async fn remember(
        &self,
        lease: &Lease,
        consciousness: Consciousness,
        history: Vec<Message>,
    ) {
        *self.cache.lock().await = Some(Cached {
            token: lease.token,
            consciousness,
            history,
        });
    }

    /// Commits a batch the model cannot process (after repeated refusals), so the events are
    /// remembered rather than lost or retried forever; the checkpoint, or `None` for a
    /// conversation with a memory of its own (its events are acknowledged as failed, the
    /// agent's memory untouched).
    pub async fn commit_refusal(
        &self,
        lease: &Lease,
        events: &[InboxEvent],
        error: &ModelError,
    ) -> Result<Option<Checkpoint>, StoreError> {
        let party = Party::of_batch(events);
        let mut recorder = super::record::Recorder::new(self.toolbox().masks(), &party, events);
        let record = recorder.ended(
            CycleOutcome::Failed,
            Some(format!("given up after repeated failures: {error}")),
            &self.agent.spec.cycle.records,
        );
        if !party.remembers(self.shares_memory()) {
            let receipt = Receipt::new(ReceiptOutcome::Failed, None, Some(error.to_string()));
            self.store
                .end_cycle_recorded(&self.key, lease, &receipt, Some(&record))
                .await?;
            return Ok(None);
        }
        let spaces = self.spaces(&party).await?;
        let messages = [
            Message::user(self.inbox_text(&spaces, events)),
            Message::Assistant {
                content: Some(format!(
                    "[This cycle failed and was not processed: {error}]"
                )),
                tool_calls: Vec::new(),
            },
        ];
        let new_messages = encode(&messages, "the failed cycle's messages")?;
        let c = self.store.consciousness(&self.key).await?;
        self.store
            .commit_cycle(
                &self.key,
                lease,
                &CycleCommit {
                    new_messages,
                    compaction: None,
                    tokens: c.tokens + messages.iter().map(Message::estimate_tokens).sum::<u64>(),
                    cycle_tokens: 0,
                    checkpoints_retained: self.agent.spec.consciousness.checkpoints_retained,
                    failure: Some(error.to_string()),
                    record: Some(record),
                },
            )
            .await
            .map(Some)
    }
}

/// Messages as consciousness stores them (JSON, one a message).
fn encode(messages: &[Message], what: &str) -> Result<Vec<String>, StoreError> {
    messages
        .iter()
        .map(serde_json::to_string)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| StoreError::Decode {
            what: what.into(),
            source,
        })
}

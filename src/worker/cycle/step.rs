//! The step loop (seed 000 "What Happens Inside", "prepareStep", "Stopping Conditions"):
//! before each step a look at the inbox (urgent events injected and remembered, a transient
//! preview of the rest) and the phase's tools; then the model call, streaming; then the tool
//! calls, whose results feed the next step. It stops when the model answers without tool
//! calls, at `maxSteps`, past the cycle's or the agent's token budget, or after a tool that
//! ends the cycle.

use tracing::{warn, Instrument};

use super::act::Flow;
use super::journal::Entry;
use super::prepare::reply_depth;
use super::stops::Stop;
use super::stream::SendStreams;
use super::{gates, skip, trace, Cycle};
use crate::crd::MidCycleInbox;
use crate::model::{lenient, Message, ModelError, Request, Turn};
use crate::party::Party;
use crate::store::{now_ms, InboxEvent, StoreError};
use crate::worker::prompt;

/// Inbox events a mid-cycle preview shows.
const PREVIEW_EVENTS: usize = 5;

/// How the steps ended.
pub(super) enum End {
    /// The model is done, or a limit or a tool ended the cycle: commit it.
    Done,
    /// `skip` rolls the cycle back.
    Skipped,
    /// The model failed: nothing is committed.
    Failed(ModelError),
    /// A call waits for a human: nothing is committed, the journal keeps the cycle.
    Paused { until_ms: i64 },
}

impl Cycle<'_> {
    /// Runs steps until one ends the cycle.
    pub(super) async fn steps(&mut self) -> Result<End, StoreError> {
        // A cycle resumed from its journal first finishes the step it was in.
        if let Some(unfinished) = self.unfinished.take() {
            let ended = match self.finish(unfinished).await? {
                Flow::Pause { until_ms } => return Ok(End::Paused { until_ms }),
                flow => flow == Flow::End,
            };
            // Events that came meanwhile get a step even so: ending now would acknowledge
            // them unanswered.
            if (ended || self.over_budget().await) && self.late.is_none() {
                return Ok(End::Done);
            }
        }
        self.take_in_late_events();
        for step in self.first_step..self.agentlet.agent.spec.cycle.max_steps {
            let preview = self.look(step).await?;
            let request = self.request(step, preview);
            let turn = match self.think(step, &request).await {
                Ok(turn) => turn,
                Err(e) => return Ok(End::Failed(e)),
            };
            if turn.tool_calls.is_empty() {
                if turn.text.is_some() {
                    self.new.push(turn.message());
                }
                if self.nudged(step) {
                    continue;
                }
                return Ok(End::Done);
            }
            if skip::rolls_back(step, &turn.tool_calls) {
                self.recorder.skipped(step, &turn.tool_calls);
                return Ok(End::Skipped);
            }
            self.new.push(turn.message());
            match self.act(step, &turn, &request.tools).await? {
                Flow::Pause { until_ms } => return Ok(End::Paused { until_ms }),
                Flow::End => return Ok(End::Done),
                Flow::Go => {
                    if self.over_budget().await {
                        return Ok(End::Done);
                    }
                }
            }
        }
        // The model still called tools at its last step.
        let max = self.agentlet.agent.spec.cycle.max_steps;
        let why = format!(
            "{} stopped after {max} steps (cycle.maxSteps) while it was still using tools; what it did is remembered, and a new message lets it go on",
            self.agentlet.key.name
        );
        self.stopped(Stop::MaxSteps, why);
        Ok(End::Done)
    }

    /// The mid-cycle look before a step after the first (`cycle.midCycleInbox`): urgent
    /// events are taken in flight and injected into the cycle's messages (and its replies
    /// are one deeper than the deepest of them); returns a transient preview of what waits
    /// in the inbox, which is shown to this step only and never remembered.
    async fn look(&mut self, step: u32) -> Result<Option<String>, StoreError> {
        let mode = self.agentlet.agent.spec.cycle.mid_cycle_inbox;
        if step == 0 || mode == MidCycleInbox::Off {
            return Ok(None);
        }
        let agentlet = self.agentlet;
        let look = agentlet
            .store
            .mid_cycle(
                &agentlet.key,
                self.lease,
                mode == MidCycleInbox::Urgent,
                PREVIEW_EVENTS,
            )
            .await?;
        // Only this cycle's party's events are taken in or shown: another's wait for their
        // own cycle (the urgent ones go back to the inbox, in their place by time).
        let (urgent, others): (Vec<InboxEvent>, Vec<InboxEvent>) = look
            .urgent
            .into_iter()
            .partition(|e| Party::of(e) == self.party);
        if !others.is_empty() {
            let ids: Vec<String> = others.into_iter().map(|e| e.id).collect();
            agentlet
                .store
                .defer_events(&agentlet.key, self.lease, &ids)
                .await?;
        }
        if !urgent.is_empty() {
            self.recorder.events(&urgent);
            self.depth = self.depth.max(reply_depth(&urgent));
            let message = format!(
                "[URGENT — new events injected mid-cycle]\n{}",
                self.agentlet.inbox_text(&self.spaces, &urgent)
            );
            self.journal_later(Entry::Urgent {
                message: message.clone(),
                depth: self.depth,
                events: urgent.iter().map(|e| e.id.clone()).collect(),
            });
            self.new.push(Message::user(message));
        }
        let previewed = look.preview.len();
        let preview: Vec<InboxEvent> = look
            .preview
            .into_iter()
            .filter(|e| Party::of(e) == self.party)
            .collect();
        // Not even how many of another party's wait: an agent other parties may call counts
        // only what it shows of its own.
        let waiting = if preview.len() < previewed || agentlet.agent.spec.a2a.is_some() {
            preview.len() as u64
        } else {
            look.waiting
        };
        Ok((waiting > 0 && !preview.is_empty()).then(|| {
            self.agentlet
                .toolbox()
                .masks()
                .redact(&prompt::preview_message(&self.spaces, &preview, waiting))
        }))
    }

    /// A resumed cycle takes in the events that arrived after it began (they were drained
    /// with its own when it was redone): after the step it was in, as one message that its
    /// journal keeps, so they are seen (and remembered) before the cycle acknowledges them,
    /// and its replies are one deeper than the deepest of them.
    fn take_in_late_events(&mut self) {
        let Some(late) = self.late.take() else {
            return;
        };
        self.depth = self.depth.max(reply_depth(&late));
        let message = format!(
            "[new events since this cycle began]\n{}",
            self.agentlet.inbox_text(&self.spaces, &late)
        );
        self.journal_later(Entry::Urgent {
            message: message.clone(),
            depth: self.depth,
            events: late.iter().map(|e| e.id.clone()).collect(),
        });
        self.new.push(Message::user(message));
    }

    /// The request of a step: the tools the step's phase offers and the stable system prompt,
    /// the conversation (summary, history, this cycle's messages: it only grows between
    /// compactions), then what is fresh (the context and any preview). So each request
    /// begins with the whole of the one before, as the providers' prompt caches want.
    fn request(&self, step: u32, preview: Option<String>) -> Request {
        let (tools, tool_choice) = gates::offer(&self.agentlet.agent.spec.cycle, step, &self.tools);
        let mut context = match preview {
            Some(p) => format!("{}\n{p}", self.context),
            None => self.context.clone(),
        };
        context.push_str(&self.cue.line(self.progress()));
        Request {
            system: self.system.clone(),
            messages: self
                .summary
                .iter()
                .chain(&self.history)
                .chain(&self.new)
                .cloned()
                .collect(),
            context,
            tools,
            tool_choice,
        }
    }

    /// One model call, streaming `send_message` text to the spaces; counts its tokens (and
    /// the wake latency, on the first step).
    async fn think(&mut self, step: u32, request: &Request) -> Result<Turn, ModelError> {
        let agentlet = self.agentlet;
        let [ns, agent] = agentlet.labels();
        if step == 0 {
            if let Some(oldest) = self.events.iter().map(|e| e.time_ms).min() {
                let latency = (now_ms() - oldest).max(0) as f64 / 1000.0;
                agentlet
                    .metrics
                    .wake_latency
                    .with_label_values(&[ns, agent])
                    .observe(latency);
            }
        }
        let streams = SendStreams::new(&self.spaces, self.active.clone());
        let offset = self.started.elapsed();
        let began = std::time::Instant::now();
        let span = trace::step(agentlet, step);
        let step_id = format!("{}:{step}", self.batch);
        let call = agentlet
            .stream(request, streams, &step_id)
            .instrument(span.clone());
        let (turn, first_chunk) = self.awaiting_model(call).await;
        let model = agentlet.model_in_use();
        trace::step_ended(&span, &turn, first_chunk, &model);
        let switches = agentlet.model.switches();
        let mut turn = turn?;
        let took = began.elapsed();
        self.recorder
            .step(step, offset, took, first_chunk, &turn, &model);
        for switch in &switches {
            self.recorder.note(fallback_note(switch));
        }
        let dropped = super::oversize::bound(&mut turn);
        if dropped > 0 {
            warn!(agent = %agentlet.key, step, dropped, "the model's turn was over what a step keeps; the rest was not kept");
            self.recorder.note(format!(
                "the model's turn was over what a step keeps: {dropped} bytes were not kept"
            ));
        }
        if let Some(reading) = lenient::read(&mut turn) {
            agentlet
                .metrics
                .model_readings
                .with_label_values(&[ns, agent, reading.label()])
                .inc();
            self.recorder.note(format!(
                "the model's output was read leniently ({})",
                reading.label()
            ));
        }
        self.used += turn.usage;
        agentlet.count_tokens(&turn.usage).await;
        for (direction, n) in turn.usage.by_direction() {
            agentlet
                .metrics
                .tokens
                .with_label_values(&[ns, agent, &model, direction])
                .inc_by(n);
        }
        Ok(turn)
    }

    /// Runs `call`, a model call: in a pool, without the cycle's slot (another agent works
    /// meanwhile), which it then takes again.
    pub(super) async fn awaiting_model<T>(&self, call: impl std::future::Future<Output = T>) -> T {
        match self.slot {
            Some(slot) => slot.outside(call).await,
            None => call.await,
        }
    }

    /// Whether the cycle has spent its token budget (`cycle.tokenBudget`: noted, to be said
    /// in the space), or the agent a period's (`spec.budget`, which says so itself).
    async fn over_budget(&mut self) -> bool {
        let used = self.used.input + self.used.output;
        let budget = self.agentlet.agent.spec.cycle.token_budget;
        if used >= budget {
            let why = format!(
                "{} stopped after spending {used} tokens in one cycle (cycle.tokenBudget {budget}); what it did is remembered, and a new message lets it go on",
                self.agentlet.key.name
            );
            self.stopped(Stop::TokenBudget, why);
            return true;
        }
        self.agentlet.budget_spent().await.is_some()
    }
}

/// What a step's record says of a change of the model asked.
fn fallback_note(switch: &crate::model::fallback::Switch) -> String {
    if switch.reason == "recovered" {
        format!("{} answers again: back from {}", switch.to, switch.from)
    } else {
        format!(
            "{} failed ({}): {} answered instead",
            switch.from, switch.reason, switch.to
        )
    }
}

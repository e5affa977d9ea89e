//! One think cycle (seed 000), as a `Cycle` whose `run` reads as the seed's steps:
//! prepare (consciousness, fresh context, the inbox message) → steps (look at the inbox,
//! gate the tools, call the model streaming, run the tools) → skip (roll back) or commit
//! (compaction, tokens, checkpoint, cache).
//!
//! | file | what it holds |
//! |---|---|
//! | `mod.rs` | [`Agentlet`] (one agent's cycles, its cache), `Cycle` and its `run` |
//! | `prepare.rs` | loading consciousness, reading the fresh context, the inbox message |
//! | `step.rs` | the step loop: mid-cycle look, request, model call, tool calls, stop conditions |
//! | `act.rs` | running a step's tool calls in order, each journaled before and after |
//! | `ask.rs` | a call that waits for a human: asking, pausing the cycle, taking the answer |
//! | `journal.rs` | the cycle's effect journal: what a redone step finds, and how it resumes |
//! | `nudge.rs` | the one nudge when a human's cycle would end without a word |
//! | `oversize.rs` | what a step keeps of the model's turn: its text and arguments, bounded |
//! | `gates.rs` | tool phase gates (pure) |
//! | `skip.rs` | what `skip` does, and the rollback |
//! | `stops.rs` | a cycle stopped short (`maxSteps`, `tokenBudget`, `maxChainDepth`): said and counted |
//! | `commit.rs` | compaction, tokens, the fenced commit, the cache; committing a refusal |
//! | `conversation.rs` | an A2A conversation with a memory of its own: its history, its end |
//! | `stream.rs` | streaming `send_message` text to live events |
//! | `partial.rs` | the scanner of streaming JSON arguments |
//! | `trace.rs` | the cycle's spans and their attributes (GenAI semantic conventions) |
//! | `record.rs` | the cycle's record ([`crate::cycles`]), built as it runs |

mod act;
mod ask;
mod commit;
mod conversation;
pub mod gates;
#[cfg(test)]
mod imperfect_tests;
mod journal;
mod nudge;
mod offer;
#[cfg(test)]
mod offer_tests;
#[cfg(test)]
mod once_tests;
mod oversize;
pub mod partial;
mod prepare;
mod record;
#[cfg(test)]
mod record_tests;
pub(super) mod skip;
mod step;
mod stops;
mod stream;
#[cfg(test)]
mod tests;
mod trace;

use std::sync::Arc;
use std::time::Instant;

use tracing::Instrument;

use crate::crd::{Agent, BuiltinTool};
use crate::cycles::CycleOutcome;
use crate::identity::AgentKey;
use crate::model::{Message, Model, ModelError, ToolSpec, Usage};
use crate::store::{
    Checkpoint, Consciousness, InboxEvent, Lease, Sender, SpaceRecord, Store, StoreError,
};
use crate::telemetry::WorkerMetrics;
use crate::worker::slot::Slot;
use crate::worker::tools::{External, Toolbox};
use step::End;

/// How a cycle ended.
#[derive(Debug)]
pub enum Outcome {
    /// Committed, with its checkpoint.
    Completed(Checkpoint),
    /// Rolled back by `skip`: only the events were acknowledged.
    Skipped,
    /// The model failed; nothing was committed and the events stay in flight.
    Failed(ModelError),
    /// A call waits for a human (no later than `until_ms`, ms since the epoch): nothing was
    /// committed, the events stay in flight, and the cycle resumes from its journal once
    /// something new arrives (the answer among it) or that time has passed.
    Paused {
        /// When the earliest wait ends.
        until_ms: i64,
        /// The cycle's record, kept by the step that records the pause.
        record: Box<crate::store::RecordWrite>,
    },
    /// Done in an A2A conversation with a memory of its own: its events are acknowledged
    /// as committed, and the agent's consciousness is as it was (no checkpoint).
    Answered,
}

impl Outcome {
    /// Every value of [`Outcome::label`].
    const LABELS: [&'static str; 4] = ["completed", "skipped", "failed", "paused"];

    /// The `result` label of `agentfleet_cycles_total`.
    fn label(&self) -> &'static str {
        match self {
            Outcome::Completed(_) | Outcome::Answered => "completed",
            Outcome::Skipped => "skipped",
            Outcome::Failed(_) => "failed",
            Outcome::Paused { .. } => "paused",
        }
    }
}

/// Everything one agent's cycles need.
pub struct Agentlet {
    /// The manifest.
    pub agent: Agent,
    /// The agent as the data plane names it (`NS/NAME`).
    pub key: AgentKey,
    /// The data plane.
    pub store: Arc<dyn Store>,
    /// What the agent thinks with: its provider's client, built from `spec.model`.
    pub model: Arc<dyn Model>,
    /// Metrics.
    pub metrics: WorkerMetrics,
    /// The consciousness as this worker last committed it, valid while it holds the lease of
    /// that token (the lease holder is its only writer).
    cache: tokio::sync::Mutex<Option<Cached>>,
    /// How the model answered, as last reported to the data plane.
    pub(crate) model_health: tokio::sync::Mutex<Option<crate::store::ModelHealth>>,
    /// The tools as last reported to the data plane.
    pub(crate) tools_reported: tokio::sync::Mutex<Option<Reported>>,
    /// Every tool the agent has.
    toolbox: Toolbox,
    /// Held by a cycle from start to end, and by whoever reads the agent between cycles.
    pub(crate) gate: tokio::sync::Mutex<()>,
    /// Where its checkpoints are archived, if anywhere.
    archiver: Option<crate::worker::archiver::Archiver>,
    /// The archive as given (its own prefix), to read other agents' checkpoints from (a
    /// fork), even when this agent's are not archived.
    archive: Option<crate::archive::Archive>,
    /// What the agent has spent, as the data plane last counted it.
    pub(crate) spending: crate::worker::budget::Spending,
    /// The longest `send_message` waits for replies.
    max_wait: std::time::Duration,
}

/// The tools as last reported: their status, and the external ones' specs.
pub(crate) type Reported = (
    Vec<crate::store::ToolRecord>,
    Vec<crate::worker::tools::ListedTool>,
);

/// The consciousness as committed under one lease, with its messages parsed.
struct Cached {
    token: u64,
    consciousness: Consciousness,
    history: Vec<Message>,
}

impl Agentlet {
    /// The name of the model asked now: the one of its list that answers, else its own.
    pub(crate) fn model_in_use(&self) -> String {
        self.model
            .in_use()
            .unwrap_or_else(|| self.agent.spec.model.label().to_string())
    }

    /// An agent ready to run cycles.
    pub fn new(
        agent: Agent,
        key: AgentKey,
        store: Arc<dyn Store>,
        model: Arc<dyn Model>,
        metrics: WorkerMetrics,
    ) -> Self {
        let agent_builtin = agent.spec.tools.builtin.clone();
        let this = Self {
            agent,
            key,
            store,
            model,
            metrics,
            cache: tokio::sync::Mutex::new(None),
            model_health: tokio::sync::Mutex::new(None),
            tools_reported: tokio::sync::Mutex::new(None),
            toolbox: Toolbox::new(agent_builtin, Vec::new()),
            gate: tokio::sync::Mutex::new(()),
            archiver: None,
            archive: None,
            spending: Default::default(),
            max_wait: crate::worker::tools::MAX_WAIT,
        };
        zero_counters(
            &this.metrics,
            &this.key,
            this.agent.spec.model.label(),
            this.enabled(),
        );
        this
    }

    /// The same agent with tools outside the worker (its HTTP tools, its MCP servers).
    pub fn with_external(mut self, external: Vec<Arc<dyn External>>) -> Self {
        self.toolbox = Toolbox::new(self.agent.spec.tools.builtin.clone(), external);
        self
    }

    /// The same agent, its checkpoints archived to `archive` (the operator's or `dev`'s
    /// archive; the agent's spec may turn it off or give it its own prefix).
    pub fn with_archive(mut self, archive: &crate::archive::Archive) -> Self {
        let spec = &self.agent.spec.consciousness.archive;
        self.archiver = archive
            .for_agent(spec)
            .map(|a| crate::worker::archiver::Archiver::new(a, spec));
        self.archive = Some(archive.clone());
        if self.archiver.is_some() {
            let [ns, agent] = self.labels();
            for outcome in ["ok", "error"] {
                self.metrics
                    .archive_writes
                    .with_label_values(&[ns, agent, outcome]);
            }
        }
        self
    }

    /// The same agent, waiting at most `max_wait` for replies to its messages (a rehearsal
    /// waits for none: nobody answers there).
    pub fn with_max_wait(mut self, max_wait: std::time::Duration) -> Self {
        self.max_wait = max_wait;
        self
    }

    /// Where its checkpoints are archived, if anywhere.
    pub fn archiver(&self) -> Option<&crate::worker::archiver::Archiver> {
        self.archiver.as_ref()
    }

    /// The archive as given (its own prefix), also when this agent's checkpoints are not
    /// archived: where other agents' checkpoints are read from.
    pub fn archive(&self) -> Option<&crate::archive::Archive> {
        self.archive.as_ref()
    }

    /// Whether the consciousness this process cached is still the agent's under `lease`, which
    /// it then belongs to: this process held the lease just before (the same token, or the
    /// next: tokens grow with every new holder), so nobody has written since.
    pub(crate) async fn carry_over(&self, lease: &Lease) -> bool {
        let mut cache = self.cache.lock().await;
        match cache.as_mut() {
            Some(c) if c.token == lease.token || c.token + 1 == lease.token => {
                c.token = lease.token;
                true
            }
            _ => false,
        }
    }

    /// Every tool the agent has.
    pub fn toolbox(&self) -> &Toolbox {
        &self.toolbox
    }

    /// Drops the cached consciousness (after a restart: the data plane may have changed).
    pub async fn forget_cache(&self) {
        *self.cache.lock().await = None;
    }

    /// The consciousness this process last committed, if it has it (also for tests that
    /// check it against the store).
    #[doc(hidden)]
    pub async fn cached_consciousness(&self) -> Option<Consciousness> {
        self.cache
            .lock()
            .await
            .as_ref()
            .map(|c| c.consciousness.clone())
    }

    /// The agent as a message sender.
    pub fn me(&self) -> Sender {
        Sender {
            groups: Vec::new(),
            id: self.key.name.clone(),
            name: self.key.name.clone(),
            kind: Some(crate::store::MemberKind::Agent),
        }
    }

    /// The built-in tools this agent has.
    pub fn enabled(&self) -> &[BuiltinTool] {
        self.toolbox.builtin()
    }

    /// The `namespace` and `agent` labels of its metrics.
    fn labels(&self) -> [&str; 2] {
        [self.key.namespace.as_str(), self.key.name.as_str()]
    }

    /// Runs one cycle over `events` (already in flight), and counts it.
    pub async fn cycle(&self, lease: &Lease, events: &[InboxEvent]) -> Result<Outcome, StoreError> {
        self.cycle_in(lease, events, None).await
    }

    /// [`Agentlet::cycle`] in a `slot` of a pool, given to another agent while the cycle
    /// waits on its model.
    pub(crate) async fn cycle_in(
        &self,
        lease: &Lease,
        events: &[InboxEvent],
        slot: Option<&Slot>,
    ) -> Result<Outcome, StoreError> {
        let _running = self.gate.lock().await;
        let started = Instant::now();
        let span = trace::cycle(self, events);
        let outcome = async {
            Cycle::prepare(self, lease, events, started, slot)
                .await?
                .run()
                .await
        }
        .instrument(span.clone())
        .await;
        trace::cycle_ended(&span, &outcome);
        let outcome = outcome?;
        let [ns, agent] = self.labels();
        self.metrics
            .cycles
            .with_label_values(&[ns, agent, outcome.label()])
            .inc();
        self.metrics
            .cycle_duration
            .with_label_values(&[ns, agent])
            .observe(started.elapsed().as_secs_f64());
        Ok(outcome)
    }
}

/// Every bounded label set of an agent's counters at 0, so that its rates and ratios exist
/// before the first cycle (a failure ratio of 0 is an answer; a missing series is not).
fn zero_counters(metrics: &WorkerMetrics, key: &AgentKey, model: &str, builtin: &[BuiltinTool]) {
    let [ns, agent] = [key.namespace.as_str(), key.name.as_str()];
    for tool in builtin {
        for outcome in ["ok", "error"] {
            metrics
                .tool_calls
                .with_label_values(&[ns, agent, tool.name(), outcome]);
        }
    }
    for result in Outcome::LABELS {
        metrics.cycles.with_label_values(&[ns, agent, result]);
    }
    for reason in stops::Stop::LABELS {
        metrics.cycle_stops.with_label_values(&[ns, agent, reason]);
    }
    for (direction, _) in crate::model::Usage::default().by_direction() {
        metrics
            .tokens
            .with_label_values(&[ns, agent, model, direction]);
    }
    metrics.compactions.with_label_values(&[ns, agent]);
    metrics.cycle_nudges.with_label_values(&[ns, agent]);
    for reading in crate::model::lenient::Reading::ALL {
        metrics
            .model_readings
            .with_label_values(&[ns, agent, reading.label()]);
    }
    metrics.compaction_failures.with_label_values(&[ns, agent]);
    for failure in crate::model::Failure::ALL {
        metrics
            .model_errors
            .with_label_values(&[ns, agent, failure.as_str()]);
    }
    for reason in crate::worker::RESTART_REASONS {
        metrics
            .agent_restarts
            .with_label_values(&[ns, agent, reason]);
    }
}

/// One think cycle under way: what it started from, and what it has added so far.
struct Cycle<'a> {
    /// The agent thinking.
    agentlet: &'a Agentlet,
    /// Its slot of a pool, if it runs in one: given to another while it waits on its model.
    slot: Option<&'a Slot>,
    /// Its lease: every write of the cycle is fenced by it.
    lease: &'a Lease,
    /// The events the cycle handles (in flight until it ends).
    events: &'a [InboxEvent],
    /// When the cycle started.
    started: Instant,
    /// The consciousness the cycle started from, and its messages.
    consciousness: Consciousness,
    history: Vec<Message>,
    /// The agent's spaces as the cycle started, the stable system prompt, the fresh context
    /// (the last message of every request, never stored), the summary of what was compacted
    /// away (as the conversation's first message).
    spaces: Vec<(String, Option<SpaceRecord>)>,
    system: String,
    context: String,
    /// The line after the context: what the cycle woke for and what is due at this step.
    cue: crate::worker::cue::Cue,
    summary: Option<Message>,
    /// The agent's tools, in their stable order (a step offers them or its phase's part).
    tools: Vec<ToolSpec>,
    /// The built-ins this cycle has (a conversation with a memory of its own has none of
    /// the long memory's).
    builtin: Vec<BuiltinTool>,
    /// Who the cycle answers: every event of it is this party's, and nothing of another's
    /// reaches it ([`crate::party`]).
    party: crate::party::Party,
    /// Whether it reads and extends the agent's long memory; else (a conversation with a
    /// memory of its own) it commits nothing to it, its history being the conversation's.
    remembers: bool,
    /// A stable id of the batch of events (tool idempotency keys, stream ids).
    batch: String,
    /// What the cycle adds to consciousness: the inbox message, urgent injections, the
    /// model's turns and the tools' results.
    new: Vec<Message>,
    /// The active space (where `send_message` goes by default; tools change it).
    active: Option<String>,
    /// The causal depth of what the cycle posts (urgent events can deepen it).
    depth: u32,
    /// Tokens spent so far (steps and compaction's summary).
    used: Usage,
    /// The depth the cycle began with (its journal records it).
    start_depth: u32,
    /// Whether the journal holds the cycle's beginning yet.
    journaled: bool,
    /// Entries to journal with the next write.
    unjournaled: Vec<journal::Entry>,
    /// The first step to run (later than 0 for a cycle resumed from its journal).
    first_step: u32,
    /// A step to finish first (a resumed cycle stopped in it).
    unfinished: Option<journal::Unfinished>,
    /// Events a resumed cycle has not taken in yet (they arrived after it began).
    late: Option<Vec<InboxEvent>>,
    /// Why the cycle stopped short, if it did: said in the space once it is committed.
    stops: Vec<(stops::Stop, String)>,
    /// Whether the model was told its text reached nobody ([`nudge`]).
    nudged: bool,
    /// The cycle's record so far.
    recorder: record::Recorder,
    /// The agent's notes as they were before the cycle first changed one (none until then).
    notes_at_start: Option<record::Notes>,
}

impl Cycle<'_> {
    /// The cycle: steps until the model is done (or a limit), then a rollback when it
    /// skipped, else a commit. A model failure ends it with nothing committed and the events
    /// still in flight; a data-plane error likewise, as an error.
    async fn run(mut self) -> Result<Outcome, StoreError> {
        let agentlet = self.agentlet;
        agentlet.activity(self.active.as_deref(), "thinking").await;
        let end = self.steps().await?;
        // Idle once the cycle is over (committed, rolled back, paused or failed): an A2A
        // task of the cycle's events is over then, and its watchers look at its receipt.
        let mut idle: Vec<String> = self.active.iter().cloned().collect();
        for space in self.events.iter().filter_map(|e| e.space.as_ref()) {
            if crate::identity::is_conversation(space) && !idle.contains(space) {
                idle.push(space.clone());
            }
        }
        let outcome = match end {
            End::Failed(e) => {
                self.record_failure(e.to_string()).await;
                Ok(Outcome::Failed(e))
            }
            End::Paused { until_ms } => {
                self.note_changes().await;
                let reason = self.recorder.waiting();
                Ok(Outcome::Paused {
                    until_ms,
                    record: Box::new(self.record_write(CycleOutcome::Paused, Some(reason))),
                })
            }
            End::Skipped => self.roll_back().await.map(|()| Outcome::Skipped),
            End::Done if !self.remembers => {
                let told = self.take_told();
                self.end_answered().await?;
                if let Some(told) = told {
                    agentlet.tell_stopped(told).await;
                }
                Ok(Outcome::Answered)
            }
            End::Done => {
                let told = self.take_told();
                match self.commit().await {
                    Ok(checkpoint) => {
                        if let Some(told) = told {
                            agentlet.tell_stopped(told).await;
                        }
                        Ok(Outcome::Completed(checkpoint))
                    }
                    Err(e) => Err(e),
                }
            }
        };
        for space in &idle {
            agentlet.activity(Some(space), "idle").await;
        }
        outcome
    }
}

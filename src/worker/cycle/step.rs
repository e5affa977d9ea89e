//! The step loop (seed 000 "What Happens Inside", "prepareStep", "Stopping Conditions"):
//! before each step a look at the inbox (urgent events injected and remembered, a transient
//! preview of the rest) and the phase's tools; then the model call, streaming; then the tool
//! calls, whose results feed the next step. It stops when the model answers without tool
//! calls, at `maxSteps`, past the token budget, or after a tool that ends the cycle.

use tracing::{debug, info_span, Instrument};

use super::prepare::reply_depth;
use super::stream::SendStreams;
use super::{gates, skip, Agentlet, Cycle};
use crate::crd::MidCycleInbox;
use crate::model::{Message, ModelError, Request, ToolCall, ToolSpec, Turn};
use crate::store::{now_ms, StoreError};
use crate::worker::prompt;
use crate::worker::tools::{self, ExternalCall, ToolEnv};

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
}

impl Cycle<'_> {
    /// Runs steps until one ends the cycle.
    pub(super) async fn steps(&mut self) -> Result<End, StoreError> {
        for step in 0..self.agentlet.agent.spec.cycle.max_steps {
            let preview = self.look(step).await?;
            let request = self.request(step, preview);
            let turn = match self.think(step, &request).await {
                Ok(turn) => turn,
                Err(e) => return Ok(End::Failed(e)),
            };
            if turn.tool_calls.is_empty() {
                self.new.push(turn.message());
                return Ok(End::Done);
            }
            if skip::rolls_back(step, &turn.tool_calls) {
                return Ok(End::Skipped);
            }
            self.new.push(turn.message());
            let ended = self.act(step, &turn.tool_calls, &request.tools).await;
            if ended || self.over_budget() {
                return Ok(End::Done);
            }
        }
        Ok(End::Done)
    }

    /// The mid-cycle look before a step after the first (`cycle.midCycleInbox`): urgent
    /// events are taken in flight and injected into the cycle's messages (and its replies
    /// are one deeper than the deepest of them); returns a transient preview of what waits
    /// in the inbox, which is shown to this step only and never remembered.
    async fn look(&mut self, step: u32) -> Result<Option<Message>, StoreError> {
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
        if !look.urgent.is_empty() {
            self.depth = self.depth.max(reply_depth(&look.urgent));
            self.new.push(Message::user(format!(
                "[URGENT — new events injected mid-cycle]\n{}",
                prompt::inbox_message(&self.spaces, &look.urgent)
            )));
        }
        Ok((look.waiting > 0 && !look.preview.is_empty()).then(|| {
            Message::user(prompt::preview_message(
                &self.spaces,
                &look.preview,
                look.waiting,
            ))
        }))
    }

    /// The request of a step: the stable system prompt, the conversation (summary, history,
    /// this cycle's messages, the preview) and the tools the step's phase offers.
    fn request(&self, step: u32, preview: Option<Message>) -> Request {
        let (tools, tool_choice) = gates::offer(&self.agentlet.agent.spec.cycle, step, &self.tools);
        Request {
            system: self.system.clone(),
            messages: self
                .summary
                .iter()
                .chain(&self.history)
                .chain(&self.new)
                .cloned()
                .chain(preview)
                .collect(),
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
        let turn = agentlet
            .stream(request, streams, &format!("{}:{step}", self.batch))
            .instrument(info_span!("step", step))
            .await?;
        self.used.input += turn.usage.input;
        self.used.output += turn.usage.output;
        let tokens = &agentlet.metrics.tokens;
        tokens
            .with_label_values(&[ns, agent, "input"])
            .inc_by(turn.usage.input);
        tokens
            .with_label_values(&[ns, agent, "output"])
            .inc_by(turn.usage.output);
        Ok(turn)
    }

    /// Runs a step's tool calls in order, each result into the cycle's messages: a call its
    /// phase gates gets an error result, `skip` ends the cycle, the rest run (shown in the
    /// active space as "running <tool>"). Whether a call ended the cycle.
    async fn act(&mut self, step: u32, calls: &[ToolCall], offered: &[ToolSpec]) -> bool {
        let agentlet = self.agentlet;
        let mut env = ToolEnv {
            store: agentlet.store.as_ref(),
            agent: &agentlet.key,
            lease: self.lease,
            me: agentlet.me(),
            spaces: &self.spaces,
            active: self.active.take(),
            enabled: agentlet.enabled(),
            depth: self.depth,
            metrics: &agentlet.metrics,
        };
        let mut ended = false;
        for (i, call) in calls.iter().enumerate() {
            let outcome = if let Some(refusal) = gates::refusal(&call.name, offered, &self.tools) {
                tools::Outcome::error(refusal)
            } else if let Some(outcome) = skip::ends_cycle(call) {
                ended = true;
                outcome
            } else {
                agentlet
                    .tool_activity(env.active.as_deref(), &call.name)
                    .await;
                let idempotency = format!("{}:{}:{step}:{i}", agentlet.key, self.batch);
                let started = std::time::Instant::now();
                let outcome = match agentlet.toolbox().external(&call.name) {
                    Some(external) => {
                        external
                            .call(&ExternalCall {
                                agent: &agentlet.key,
                                name: &call.name,
                                arguments: &call.arguments,
                                idempotency_key: &idempotency,
                                space: env.active.as_deref(),
                            })
                            .await
                    }
                    None => env.run(call, &idempotency).await,
                };
                time_tool(agentlet, call, started.elapsed());
                outcome
            };
            count_tool(agentlet, call, outcome.ok);
            self.new.push(Message::Tool {
                tool_call_id: call.id.clone(),
                content: outcome.content,
            });
        }
        self.active = env.active;
        ended
    }

    /// Whether the cycle has spent its token budget (`cycle.tokenBudget`).
    fn over_budget(&self) -> bool {
        self.used.input + self.used.output >= self.agentlet.agent.spec.cycle.token_budget
    }
}

/// The tool label of a call: its name, or `unknown` for a name the agent has no tool of (so
/// the model cannot grow the label set).
fn tool_label<'a>(agentlet: &Agentlet, call: &'a ToolCall) -> &'a str {
    let known = agentlet.enabled().iter().any(|t| t.name() == call.name)
        || agentlet.toolbox().external(&call.name).is_some();
    if known {
        call.name.as_str()
    } else {
        "unknown"
    }
}

/// Observes how long a tool call took.
fn time_tool(agentlet: &Agentlet, call: &ToolCall, took: std::time::Duration) {
    let [ns, agent] = agentlet.labels();
    agentlet
        .metrics
        .tool_duration
        .with_label_values(&[ns, agent, tool_label(agentlet, call)])
        .observe(took.as_secs_f64());
}

/// Counts a tool call by tool (`unknown` for a name the agent has no tool of) and outcome.
fn count_tool(agentlet: &Agentlet, call: &ToolCall, ok: bool) {
    let [ns, agent] = agentlet.labels();
    let tool = tool_label(agentlet, call);
    let outcome = if ok { "ok" } else { "error" };
    agentlet
        .metrics
        .tool_calls
        .with_label_values(&[ns, agent, tool, outcome])
        .inc();
    debug!(tool = %call.name, ok, "tool call");
}

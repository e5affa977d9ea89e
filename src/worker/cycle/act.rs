//! Running a step's tool calls (seed 000 "What Happens Inside"), in order, each result into
//! the cycle's messages and its journal: a call its phase gates gets an error result, `skip`
//! ends the cycle, built-ins run in the worker (their effects carry idempotency keys), tools
//! outside the worker are marked in the journal before they run, so a crash during one never
//! makes it twice unless the tool says that is harmless.

use std::time::Instant;

use tracing::{debug, Instrument};

use super::ask::Answered;
use super::journal::{Entry, Unfinished};
use super::{gates, skip, trace, Agentlet, Cycle};
use crate::model::{Message, ToolCall, ToolSpec, Turn};
use crate::store::StoreError;
use crate::worker::tools::{ExternalCall, Outcome, ToolEnv};

/// Calls one step makes; the model is told that any beyond were not made (a model that
/// fans out to hundreds of calls at once must not fan its tools out with it). Far above
/// what one batch asks of a working agent: a catch-up batch after an outage may hold dozens
/// of jobs, each a call or two.
pub(super) const MAX_CALLS_PER_STEP: usize = 256;

/// Whether `call` posts to a space (an effect a redone step must not make anew).
fn posts(call: &ToolCall) -> bool {
    call.name == crate::crd::BuiltinTool::SendMessage.name()
}

/// How a call is to be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Attempt {
    /// For the first time.
    First,
    /// Again after a crash: it was marked as started and has no result.
    Unknown,
}

/// How a step's calls ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Flow {
    /// Every call has its result: the next step follows.
    Go,
    /// A call ended the cycle.
    End,
    /// A call waits for a human (no later than `until_ms`): the cycle pauses.
    Pause { until_ms: i64 },
}

impl Cycle<'_> {
    /// Runs the calls of a step's turn. A step that calls a tool outside the worker, or posts
    /// (`send_message`), journals its turn first, then a mark before and the result after each
    /// call outside the worker (and pauses at one that waits for a human): a step redone after
    /// a crash is the same step, so its post goes out again under the same idempotency key (and
    /// is dropped as a duplicate) and the model sees what it already said. A step of other
    /// built-ins (reads, notes; harmless to redo) journals its turn and results once, after
    /// them.
    pub(super) async fn act(
        &mut self,
        step: u32,
        turn: &Turn,
        offered: &[ToolSpec],
    ) -> Result<Flow, StoreError> {
        let calls = &turn.tool_calls;
        let turn_entry = Entry::Turn {
            step,
            message: turn.message(),
            usage: turn.usage,
        };
        if calls.iter().any(|c| self.is_outside(c) || posts(c)) {
            self.journal(vec![turn_entry]).await?;
            let fresh = Unfinished {
                step,
                calls: calls.clone(),
                ..Unfinished::default()
            };
            return self.run_calls(fresh, offered).await;
        }
        let mut later = vec![turn_entry];
        let mut ended = false;
        for (index, call) in calls.iter().enumerate() {
            let (outcome, ends) = self.call(step, index, call, offered, Attempt::First).await;
            ended |= ends;
            later.push(self.remember(step, index, call, outcome));
        }
        self.journal(later).await?;
        Ok(if ended { Flow::End } else { Flow::Go })
    }

    /// Finishes a step the cycle was in when it stopped (resumed from its journal).
    pub(super) async fn finish(&mut self, unfinished: Unfinished) -> Result<Flow, StoreError> {
        // Offered as the phase offered then (a gate is a pure function of the step).
        let (offered, _) = gates::offer(
            &self.agentlet.agent.spec.cycle,
            unfinished.step,
            &self.tools,
        );
        self.run_calls(unfinished, &offered).await
    }

    /// The calls of a step that has a tool outside the worker, each journaled: calls with a
    /// result are not made again; a call marked as started has an unknown outcome and is made
    /// again only when its tool is idempotent; a call asked of a human runs once approved,
    /// or takes the human's answer, denial or timeout as its result, or pauses the cycle
    /// while there is none; a call that needs a human and was not asked yet is asked, and
    /// the cycle pauses; the rest run.
    async fn run_calls(
        &mut self,
        unfinished: Unfinished,
        offered: &[ToolSpec],
    ) -> Result<Flow, StoreError> {
        let Unfinished {
            step,
            calls,
            done,
            started,
            asked,
        } = unfinished;
        let mut ended = calls
            .iter()
            .enumerate()
            .any(|(i, c)| done.contains(&i) && skip::ends_cycle(c).is_some());
        for (index, call) in calls.iter().enumerate() {
            if done.contains(&index) {
                continue;
            }
            let attempt = if started.contains(&index) {
                Attempt::Unknown
            } else {
                Attempt::First
            };
            if attempt == Attempt::First {
                let instead = if let Some(asked) = asked.get(&index) {
                    match self.answer(asked, call) {
                        Answered::Run => None,
                        Answered::Instead(outcome) => Some(outcome),
                        Answered::Waiting => {
                            self.recorder.call(step, call, None, None);
                            return Ok(Flow::Pause {
                                until_ms: asked.expires_ms,
                            });
                        }
                    }
                } else if let Some(ask) = self.asks(call) {
                    match gates::refusal(&call.name, offered, &self.tools) {
                        Some(refusal) => Some(Outcome::error(refusal)),
                        None => match self.ask(step, index, call, ask).await? {
                            Ok(asked) => {
                                self.recorder.call(step, call, None, None);
                                return Ok(Flow::Pause {
                                    until_ms: asked.expires_ms,
                                });
                            }
                            Err(outcome) => Some(outcome),
                        },
                    }
                } else {
                    None
                };
                if let Some(outcome) = instead {
                    let result = self.remember(step, index, call, outcome);
                    self.journal(vec![result]).await?;
                    continue;
                }
                if self.is_outside(call) {
                    self.journal(vec![Entry::Started { step, index }]).await?;
                }
            }
            let (outcome, ends) = self.call(step, index, call, offered, attempt).await;
            ended |= ends;
            let result = self.remember(step, index, call, outcome);
            self.journal(vec![result]).await?;
        }
        Ok(if ended { Flow::End } else { Flow::Go })
    }

    /// Whether `call` is of a tool outside the worker.
    fn is_outside(&self, call: &ToolCall) -> bool {
        self.agentlet.toolbox().external(&call.name).is_some()
    }

    /// One call, in its span: its outcome, and whether it ends the cycle.
    async fn call(
        &mut self,
        step: u32,
        index: usize,
        call: &ToolCall,
        offered: &[ToolSpec],
        attempt: Attempt,
    ) -> (Outcome, bool) {
        let span = trace::tool(step, call, tool_label(self.agentlet, call));
        let started = Instant::now();
        let (outcome, ends) = self
            .make(step, index, call, offered, attempt)
            .instrument(span.clone())
            .await;
        self.recorder.took(started.elapsed());
        trace::tool_ended(&span, outcome.ok, ends);
        (outcome, ends)
    }

    /// Makes one call: its outcome, and whether it ends the cycle.
    async fn make(
        &mut self,
        step: u32,
        index: usize,
        call: &ToolCall,
        offered: &[ToolSpec],
        attempt: Attempt,
    ) -> (Outcome, bool) {
        if index >= MAX_CALLS_PER_STEP {
            return (
                Outcome::error(format!(
                    "not made: a step makes at most {MAX_CALLS_PER_STEP} tool calls; make this one in a later step"
                )),
                false,
            );
        }
        if let Some(refusal) = super::oversize::refusal(&call.arguments) {
            return (Outcome::error(refusal), false);
        }
        let agentlet = self.agentlet;
        // Only calls of tools outside the worker are marked as started. One whose outcome is
        // unknown is decided first, before any lookup: its tool may be unknown now (its MCP
        // server not back yet), and it must still not be made again, nor be called unknown.
        let retry = || {
            agentlet
                .toolbox()
                .external(&call.name)
                .is_some_and(|e| e.idempotent(&call.name))
        };
        if attempt == Attempt::Unknown && !retry() {
            return (
                Outcome::error(format!(
                    "the outcome of this call of {} is unknown: the worker stopped while it ran, and it was not repeated because the tool is not idempotent (or not available to say it is); check its effect before calling it again",
                    call.name
                )),
                false,
            );
        }
        if let Some(refusal) = gates::refusal(&call.name, offered, &self.tools) {
            return (Outcome::error(refusal), false);
        }
        if let Some(outcome) = skip::ends_cycle(call) {
            return (outcome, true);
        }
        if let Some(refusal) = self.chain_refusal(call) {
            return (refusal, false);
        }
        let idempotency = format!("{}:{}:{step}:{index}", agentlet.key, self.batch);
        let started = Instant::now();
        let outcome = match agentlet.toolbox().external(&call.name) {
            Some(external) => {
                agentlet
                    .tool_activity(self.active.as_deref(), &call.name)
                    .await;
                external
                    .call(&ExternalCall {
                        agent: &agentlet.key,
                        name: &call.name,
                        arguments: &call.arguments,
                        idempotency_key: &idempotency,
                        // A conversation's cycle always speaks there (its result is that
                        // conversation's too), even if its record went missing meanwhile.
                        space: self.active.as_deref().or(self.party.conversation()),
                        depth: self.depth,
                    })
                    .await
            }
            None => {
                agentlet
                    .tool_activity(self.active.as_deref(), &call.name)
                    .await;
                if changes_notes(&call.name) {
                    self.notes_before_change().await;
                }
                let mut env = ToolEnv {
                    store: agentlet.store.as_ref(),
                    agent: &agentlet.key,
                    lease: self.lease,
                    me: agentlet.me(),
                    spaces: &self.spaces,
                    active: self.active.take(),
                    enabled: &self.builtin,
                    depth: self.depth,
                    metrics: &agentlet.metrics,
                    max_wait: agentlet.max_wait,
                };
                let outcome = env.run(call, &idempotency).await;
                self.active = env.active;
                outcome
            }
        };
        time_tool(agentlet, call, started.elapsed());
        (outcome, false)
    }

    /// Puts a call's result into the cycle's messages and counts it; the journal entry of it.
    fn remember(&mut self, step: u32, index: usize, call: &ToolCall, outcome: Outcome) -> Entry {
        count_tool(self.agentlet, call, outcome.ok);
        let posted_to = posts(call).then_some(self.active.as_deref()).flatten();
        self.recorder.call(step, call, Some(&outcome), posted_to);
        self.new.push(Message::Tool {
            tool_call_id: call.id.clone(),
            content: outcome.content.clone(),
        });
        Entry::Result {
            step,
            index,
            content: outcome.content,
            ok: outcome.ok,
        }
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

/// Whether a built-in changes the agent's notes (its record keeps what they were).
fn changes_notes(tool: &str) -> bool {
    crate::crd::BuiltinTool::from_name(tool).is_some_and(|t| t.long_memory())
}

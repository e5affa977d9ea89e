//! One think cycle (seed 000): drain → build the request → multi-step loop with tools →
//! commit (compaction, checkpoint, acknowledgement) — or a full rollback on `skip`.

use std::sync::Arc;
use std::time::Instant;

use sha2::{Digest, Sha256};
use tracing::{debug, info, info_span, warn, Instrument};

use super::compaction;
use super::prompt::{self, PromptInput};
use super::tools::{self, partial_text, ToolEnv};
use crate::crd::{Agent, BuiltinTool, Compaction, MidCycleInbox, PhaseToolChoice};
use crate::membership::SpaceKey;
use crate::model::{Delta, Message, Model, ModelError, Request, ToolChoice, Usage};
use crate::store::{
    now_ms, AgentKey, Checkpoint, Compacted, Consciousness, CycleCommit, InboxEvent, Lease,
    LiveEvent, Sender, SpaceRecord, Store, StoreError,
};
use crate::telemetry::WorkerMetrics;

/// How a cycle ended.
#[derive(Debug)]
pub enum Outcome {
    /// Committed, with its checkpoint.
    Completed(Checkpoint),
    /// Rolled back by `skip`: only the events were acknowledged.
    Skipped,
    /// The model failed; nothing was committed and the events stay in flight.
    Failed(ModelError),
}

/// Everything one agent's cycles need.
pub struct Agentlet {
    /// The manifest.
    pub agent: Agent,
    /// Its key.
    pub key: AgentKey,
    /// The data plane.
    pub store: Arc<dyn Store>,
    /// The model.
    pub model: Arc<dyn Model>,
    /// Metrics.
    pub metrics: WorkerMetrics,
    /// The consciousness as this worker last committed it, valid while it holds the lease of
    /// that token (the lease holder is its only writer).
    cache: tokio::sync::Mutex<Option<Cached>>,
    /// How the model answered, as last reported to the data plane.
    pub(crate) model_health: tokio::sync::Mutex<Option<crate::store::ModelHealth>>,
}

struct Cached {
    token: u64,
    consciousness: Consciousness,
    history: Vec<Message>,
}

impl Agentlet {
    /// An agent ready to run cycles.
    pub fn new(
        agent: Agent,
        key: AgentKey,
        store: Arc<dyn Store>,
        model: Arc<dyn Model>,
        metrics: WorkerMetrics,
    ) -> Self {
        Self {
            agent,
            key,
            store,
            model,
            metrics,
            cache: tokio::sync::Mutex::new(None),
            model_health: tokio::sync::Mutex::new(None),
        }
    }

    /// Drops the cached consciousness (after a restart: the data plane may have changed).
    pub async fn forget_cache(&self) {
        *self.cache.lock().await = None;
    }

    /// The cached consciousness, if any (for tests that check it against the store).
    #[doc(hidden)]
    pub async fn cached_consciousness(&self) -> Option<Consciousness> {
        self.cache
            .lock()
            .await
            .as_ref()
            .map(|c| c.consciousness.clone())
    }

    /// The consciousness and its parsed messages: from the cache when it is this lease's,
    /// else read from the store.
    async fn load(&self, lease: &Lease) -> Result<(Consciousness, Vec<Message>), StoreError> {
        if let Some(c) = self
            .cache
            .lock()
            .await
            .take()
            .filter(|c| c.token == lease.token)
        {
            return Ok((c.consciousness, c.history));
        }
        let c = self.store.consciousness(&self.key).await?;
        let history = c
            .messages
            .iter()
            .map(|j| {
                serde_json::from_str(j).unwrap_or_else(|e| {
                    warn!(error = %e, "unreadable message in consciousness; kept as a placeholder");
                    Message::user("[unreadable message]")
                })
            })
            .collect();
        Ok((c, history))
    }
    /// The agent as a message sender.
    pub fn me(&self) -> Sender {
        Sender {
            id: self.key.name.clone(),
            name: self.key.name.clone(),
            kind: Some(crate::crd::MemberKind::Agent),
        }
    }

    fn labels(&self) -> [&str; 2] {
        [self.key.namespace.as_str(), self.key.name.as_str()]
    }

    async fn spaces(&self) -> Result<Vec<(String, Option<SpaceRecord>)>, StoreError> {
        let reads = self.agent.spec.spaces.iter().map(|s| async move {
            let record = self
                .store
                .space(&SpaceKey::new(self.key.namespace.clone(), s.clone()))
                .await?;
            Ok::<_, StoreError>((s.clone(), record))
        });
        futures::future::try_join_all(reads).await
    }

    /// Runs one cycle over `events` (already in flight).
    pub async fn cycle(&self, lease: &Lease, events: &[InboxEvent]) -> Result<Outcome, StoreError> {
        let started = Instant::now();
        let (c, history) = self.load(lease).await?;
        let span =
            info_span!("cycle", agent = %self.key, cycle = c.cycle + 1, events = events.len());
        let outcome = self
            .run_cycle(lease, events, c, history, started)
            .instrument(span)
            .await?;
        let result = match &outcome {
            Outcome::Completed(_) => "completed",
            Outcome::Skipped => "skipped",
            Outcome::Failed(_) => "failed",
        };
        let [ns, agent] = self.labels();
        self.metrics
            .cycles
            .with_label_values(&[ns, agent, result])
            .inc();
        self.metrics
            .cycle_duration
            .with_label_values(&[ns, agent])
            .observe(started.elapsed().as_secs_f64());
        Ok(outcome)
    }

    async fn run_cycle(
        &self,
        lease: &Lease,
        events: &[InboxEvent],
        c: Consciousness,
        history: Vec<Message>,
        started: Instant,
    ) -> Result<Outcome, StoreError> {
        let spec = &self.agent.spec;
        let [ns, agent_name] = self.labels();
        let (spaces, memories, goals, plans, plan_marks) = tokio::try_join!(
            self.spaces(),
            self.store.memories(&self.key),
            self.store.goals(&self.key),
            self.store.plans(&self.key),
            self.store.plan_marks(&self.key)
        )?;
        let now = k8s_openapi::jiff::Timestamp::now();
        let system = prompt::system_prompt(&PromptInput {
            agent: &self.agent,
            spaces: &spaces,
            memories: &memories,
            goals: &goals,
            plans: &plans,
            plan_marks: &plan_marks,
            now_ms: now.as_millisecond(),
        });
        let summary = c
            .summary
            .as_ref()
            .map(|s| Message::user(format!("[SUMMARY of the earlier conversation]\n{s}")));
        let mut new = vec![Message::user(prompt::inbox_message(&spaces, events))];

        let batch = batch_id(events);
        let active = events
            .iter()
            .find_map(|e| e.space.clone())
            .filter(|s| spec.spaces.contains(s));
        let mut env = ToolEnv {
            store: self.store.as_ref(),
            agent: &self.key,
            lease,
            me: self.me(),
            spaces: &spaces,
            active,
            enabled: &spec.tools.builtin,
            depth: reply_depth(events),
            metrics: &self.metrics,
        };
        let tool_specs = tools::specs(&spec.tools.builtin);
        self.activity(env.active.as_deref(), "thinking").await;

        let mut used = Usage::default();
        let mut skipped = false;
        for step in 0..spec.cycle.max_steps {
            let mut transient = None;
            if step > 0 && spec.cycle.mid_cycle_inbox != MidCycleInbox::Off {
                let look = self
                    .store
                    .mid_cycle(
                        &self.key,
                        lease,
                        spec.cycle.mid_cycle_inbox == MidCycleInbox::Urgent,
                        5,
                    )
                    .await?;
                if !look.urgent.is_empty() {
                    env.depth = env.depth.max(reply_depth(&look.urgent));
                    new.push(Message::user(format!(
                        "[URGENT — new events injected mid-cycle]\n{}",
                        prompt::inbox_message(&spaces, &look.urgent)
                    )));
                }
                if look.waiting > 0 && !look.preview.is_empty() {
                    transient = Some(Message::user(prompt::preview_message(
                        &spaces,
                        &look.preview,
                        look.waiting,
                    )));
                }
            }
            let messages: Vec<Message> = summary
                .iter()
                .chain(history.iter())
                .chain(new.iter())
                .chain(transient.iter())
                .cloned()
                .collect();
            let phase = spec.cycle.phase(step);
            let (tools_now, tool_choice) = match phase {
                None => (tool_specs.clone(), ToolChoice::Auto),
                Some(p) => (
                    tool_specs
                        .iter()
                        .filter(|t| {
                            p.active_tools
                                .as_ref()
                                .is_none_or(|active| active.contains(&t.name))
                        })
                        .cloned()
                        .collect(),
                    match p.tool_choice {
                        PhaseToolChoice::Auto => ToolChoice::Auto,
                        PhaseToolChoice::Required => ToolChoice::Required,
                        PhaseToolChoice::None => ToolChoice::None,
                    },
                ),
            };
            let request = Request {
                system: system.clone(),
                messages,
                tools: tools_now.clone(),
                tool_choice,
            };
            if step == 0 {
                if let Some(oldest) = events.iter().map(|e| e.time_ms).min() {
                    let latency = (now_ms() - oldest).max(0) as f64 / 1000.0;
                    self.metrics
                        .wake_latency
                        .with_label_values(&[ns, agent_name])
                        .observe(latency);
                }
            }
            let turn = match self
                .stream_step(
                    &request,
                    env.active.clone(),
                    &spaces,
                    &format!("{batch}:{step}"),
                )
                .instrument(info_span!("step", step))
                .await
            {
                Ok(t) => t,
                Err(e) => {
                    self.activity(env.active.as_deref(), "idle").await;
                    return Ok(Outcome::Failed(e));
                }
            };
            used.input += turn.usage.input;
            used.output += turn.usage.output;
            self.metrics
                .tokens
                .with_label_values(&[ns, agent_name, "input"])
                .inc_by(turn.usage.input);
            self.metrics
                .tokens
                .with_label_values(&[ns, agent_name, "output"])
                .inc_by(turn.usage.output);
            if turn.tool_calls.is_empty() {
                new.push(turn.message());
                break;
            }
            if step == 0 && turn.tool_calls.iter().all(|c| c.name == "skip") {
                skipped = true;
                break;
            }
            new.push(turn.message());
            let mut ends = false;
            for (i, call) in turn.tool_calls.iter().enumerate() {
                let gated = !tools_now.iter().any(|t| t.name == call.name)
                    && tool_specs.iter().any(|t| t.name == call.name);
                let outcome = if gated {
                    tools::Outcome {
                        content: serde_json::json!({"error": format!(
                            "tool {:?} is not available at this step; available now: {}",
                            call.name,
                            tools_now.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")
                        )})
                        .to_string(),
                        ok: false,
                    }
                } else if call.name == "skip" {
                    ends = true;
                    tools::Outcome {
                        content:
                            serde_json::json!({"skipped": true, "note": "the cycle ends here"})
                                .to_string(),
                        ok: true,
                    }
                } else {
                    // Visible in the space as "running <tool>" (skip never is: it leaves
                    // no trace).
                    self.tool_activity(env.active.as_deref(), &call.name).await;
                    env.run(call, &format!("{}:{batch}:{step}:{i}", self.key))
                        .await
                };
                let tool_label = if spec.tools.builtin.iter().any(|t| t.name() == call.name) {
                    call.name.as_str()
                } else {
                    "unknown"
                };
                self.metrics
                    .tool_calls
                    .with_label_values(&[
                        ns,
                        agent_name,
                        tool_label,
                        if outcome.ok { "ok" } else { "error" },
                    ])
                    .inc();
                debug!(tool = %call.name, ok = outcome.ok, "tool call");
                new.push(Message::Tool {
                    tool_call_id: call.id.clone(),
                    content: outcome.content,
                });
            }
            if ends || used.input + used.output >= spec.cycle.token_budget {
                break;
            }
        }
        self.activity(env.active.as_deref(), "idle").await;

        if skipped {
            self.store.ack_cycle(&self.key, lease).await?;
            // Nothing changed: the loaded state stays valid.
            *self.cache.lock().await = Some(Cached {
                token: lease.token,
                consciousness: c,
                history,
            });
            info!(
                elapsed_ms = started.elapsed().as_millis() as u64,
                "skipped: rolled back"
            );
            return Ok(Outcome::Skipped);
        }

        // Compaction over the whole window after this cycle.
        let all: Vec<Message> = history.iter().chain(new.iter()).cloned().collect();
        let summary_tokens = c
            .summary
            .as_deref()
            .map_or(0, crate::model::estimate_tokens);
        let window = spec.consciousness.window_tokens;
        let keep = spec.consciousness.keep_recent_messages as usize;
        let mut summary_text = c.summary.clone();
        let compaction = match compaction::plan(&all, c.start, summary_tokens, window, keep) {
            None => None,
            Some(start) => {
                let dropped = &all[..usize::try_from(start - c.start)
                    .unwrap_or(all.len())
                    .min(all.len())];
                let summary = match spec.consciousness.compaction {
                    Compaction::SlidingWindow => Ok(None),
                    Compaction::Summarize => {
                        match self.summarize(c.summary.as_deref(), dropped).await {
                            Ok((s, usage)) => {
                                used.input += usage.input;
                                used.output += usage.output;
                                Ok(Some(s))
                            }
                            Err(e) => Err(e),
                        }
                    }
                };
                match summary {
                    Ok(summary) => {
                        self.metrics
                            .compactions
                            .with_label_values(&[ns, agent_name])
                            .inc();
                        summary_text = summary.clone();
                        Some(Compacted { start, summary })
                    }
                    // Nothing is dropped without its summary: the window stays whole (over
                    // its size) and the next commit tries again.
                    Err(e) => {
                        self.metrics
                            .compaction_failures
                            .with_label_values(&[ns, agent_name])
                            .inc();
                        warn!(error = %e, window_tokens = window, messages = all.len(), "summary failed; compaction postponed to the next cycle, the window is kept whole");
                        None
                    }
                }
            }
        };
        let first_kept = compaction
            .as_ref()
            .map_or(0, |cp| (cp.start - c.start) as usize);
        let tokens = summary_text
            .as_deref()
            .map_or(0, crate::model::estimate_tokens)
            + all
                .iter()
                .skip(first_kept)
                .map(Message::estimate_tokens)
                .sum::<u64>();
        let new_messages = new
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| StoreError::Decode {
                what: "the cycle's messages".into(),
                source,
            })?;
        let checkpoint = self
            .store
            .commit_cycle(
                &self.key,
                lease,
                &CycleCommit {
                    new_messages: new_messages.clone(),
                    compaction,
                    tokens,
                    cycle_tokens: used.input + used.output,
                    checkpoints_retained: spec.consciousness.checkpoints_retained,
                },
            )
            .await?;
        // What the store now holds, kept for the next cycle.
        let messages: Vec<String> = c
            .messages
            .into_iter()
            .chain(new_messages)
            .skip(first_kept)
            .collect();
        *self.cache.lock().await = Some(Cached {
            token: lease.token,
            consciousness: Consciousness {
                cycle: checkpoint.cycle,
                summary: summary_text.clone(),
                messages,
                start: checkpoint.start,
                tokens,
                digest: checkpoint.digest.clone(),
                tokens_used: c.tokens_used + used.input + used.output,
                last_cycle_ms: Some(checkpoint.time_ms),
            },
            history: all.into_iter().skip(first_kept).collect(),
        });
        self.metrics
            .consciousness_tokens
            .with_label_values(&[ns, agent_name])
            .set(i64::try_from(tokens).unwrap_or(i64::MAX));
        info!(
            cycle = checkpoint.cycle,
            messages = checkpoint.messages,
            tokens,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "cycle committed"
        );
        Ok(Outcome::Completed(checkpoint))
    }

    /// One model call, streaming `send_message` text to the space's live events.
    async fn stream_step(
        &self,
        request: &Request,
        active: Option<String>,
        spaces: &[(String, Option<SpaceRecord>)],
        step_id: &str,
    ) -> Result<crate::model::Turn, ModelError> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, String, String)>();
        let forward = {
            let store = self.store.clone();
            let ns = self.key.namespace.clone();
            let me = self.me();
            tokio::spawn(async move {
                while let Some((space, stream_id, delta)) = rx.recv().await {
                    let event = LiveEvent::Delta {
                        stream_id,
                        sender: me.clone(),
                        delta,
                    };
                    if let Err(e) = store
                        .publish_live(&SpaceKey::new(ns.clone(), space), &event)
                        .await
                    {
                        debug!(error = %e, "live delta not published");
                    }
                }
            })
        };
        // Per tool call: its arguments so far, and the text already streamed from them.
        let mut buffers: Vec<(String, String)> = Vec::new();
        let key = self.key.to_string();
        let mut on_delta = |d: Delta| {
            let Delta::ToolArguments { index, name, delta } = d else {
                return;
            };
            if name != "send_message" {
                return;
            }
            while buffers.len() <= index {
                buffers.push((String::new(), String::new()));
            }
            let (buf, sent) = &mut buffers[index];
            buf.push_str(&delta);
            let Some(text) = partial_text(buf) else {
                return;
            };
            let space = field_value(buf, "space")
                .and_then(|s| crate::membership::resolve(spaces, &s).map(str::to_string))
                .or_else(|| active.clone());
            // Only ever an extension of what was streamed (the decoded prefix only grows).
            let piece = text.strip_prefix(sent.as_str()).filter(|p| !p.is_empty());
            if let (Some(space), Some(piece)) = (space, piece) {
                let piece = piece.to_string();
                *sent = text;
                let _ = tx.send((space, format!("{key}:{step_id}:{index}"), piece));
            }
        };
        let result = self.model.complete(request, &mut on_delta).await;
        drop(tx);
        let _ = forward.await;
        result
    }

    async fn summarize(
        &self,
        previous: Option<&str>,
        dropped: &[Message],
    ) -> Result<(String, Usage), ModelError> {
        let (system, text) = compaction::summary_prompt(previous, dropped);
        let turn = self
            .model
            .complete(
                &Request {
                    system,
                    messages: vec![Message::user(text)],
                    tools: Vec::new(),
                    tool_choice: ToolChoice::None,
                },
                &mut |_| {},
            )
            .await?;
        let summary = turn.text.unwrap_or_default().trim().to_string();
        if summary.is_empty() {
            return Err(ModelError::new(
                crate::model::Failure::BadResponse,
                "the model wrote an empty summary",
            ));
        }
        Ok((summary, turn.usage))
    }

    /// Commits a batch the model cannot process (after repeated refusals), so the events are
    /// remembered rather than lost or retried forever.
    pub async fn commit_refusal(
        &self,
        lease: &Lease,
        events: &[InboxEvent],
        error: &ModelError,
    ) -> Result<Checkpoint, StoreError> {
        let spaces = self.spaces().await?;
        let messages = [
            Message::user(prompt::inbox_message(&spaces, events)),
            Message::Assistant {
                content: Some(format!(
                    "[This cycle failed and was not processed: {error}]"
                )),
                tool_calls: Vec::new(),
            },
        ];
        let new_messages = messages
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| StoreError::Decode {
                what: "the failed cycle's messages".into(),
                source,
            })?;
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
                },
            )
            .await
    }

    async fn activity(&self, space: Option<&str>, activity: &str) {
        self.publish_activity(space, activity, None, None).await;
    }

    async fn tool_activity(&self, space: Option<&str>, tool: &str) {
        self.publish_activity(space, "tool", Some(tool.to_string()), None)
            .await;
    }

    /// The built-in tools this agent has.
    pub fn enabled(&self) -> &[BuiltinTool] {
        &self.agent.spec.tools.builtin
    }
}

/// The causal depth of what an agent posts in answer to `events`: one more than the deepest
/// of them (a human's message, a webhook or a plan is 0, so the answer is 1).
fn reply_depth(events: &[InboxEvent]) -> u32 {
    events
        .iter()
        .map(|e| e.depth)
        .max()
        .unwrap_or(0)
        .saturating_add(1)
}

/// A stable id of a batch of events (the same batch redelivered after a crash has the same
/// id, so the tool calls of its re-run are deduplicated).
fn batch_id(events: &[InboxEvent]) -> String {
    let mut h = Sha256::new();
    for e in events {
        h.update(e.id.as_bytes());
        h.update(b"\n");
    }
    crate::hex(&h.finalize()[..8])
}

/// A complete string field of a (possibly partial) JSON object text.
fn field_value(json: &str, field: &str) -> Option<String> {
    let needle = format!("\"{field}\"");
    let start = json.find(&needle)? + needle.len();
    let rest = json[start..]
        .trim_start()
        .strip_prefix(':')?
        .trim_start()
        .strip_prefix('"')?;
    let end = rest.find('"')?;
    Some(rest[..end].to_string())
}

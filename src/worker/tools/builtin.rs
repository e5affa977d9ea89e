//! The built-in tools. Every space access checks membership; bad arguments, unknown tools and
//! refused operations come back as an error result the model sees, never as a worker failure.

use super::{skip_result, Outcome};

use std::time::Duration;

use futures::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::crd::{BuiltinTool, PlanSpec};
use crate::identity::AgentKey;
use crate::identity::SpaceKey;
use crate::model::ToolCall;
use crate::plans;
use crate::store::{
    parse_message_id, Lease, LiveEvent, MemberKind, NewMessage, Plan, ReadQuery, Sender,
    SpaceRecord, Store,
};

/// The most bytes of messages one `read_messages` (or `enter_space`) result holds: what a
/// model reads at once, as an MCP tool's result (one message at least, so it always moves on).
pub const TOOL_PAGE_BYTES: usize = 64 * 1024;

/// Longest `wait` of `send_message`.
pub const MAX_WAIT: Duration = Duration::from_secs(120);

/// What tools act on, for one cycle.
pub struct ToolEnv<'a> {
    /// The data plane.
    pub store: &'a dyn Store,
    /// Whose cycle it is (the agent whose notes and spaces the tools touch).
    pub agent: &'a AgentKey,
    /// The lease this cycle runs under: fenced writes fail once it is lost.
    pub lease: &'a Lease,
    /// The agent as a message sender.
    pub me: Sender,
    /// The agent's spaces as the cycle started.
    pub spaces: &'a [(String, Option<SpaceRecord>)],
    /// The active space.
    pub active: Option<String>,
    /// Enabled built-ins.
    pub enabled: &'a [BuiltinTool],
    /// Causal depth of the messages this cycle posts (see [`NewMessage::depth`]).
    pub depth: u32,
    /// Metrics (the loop guard's).
    pub metrics: &'a crate::telemetry::WorkerMetrics,
    /// The longest `send_message` waits for replies ([`MAX_WAIT`]; none in a rehearsal,
    /// where nobody answers).
    pub max_wait: Duration,
}

fn ok(v: Value) -> Outcome {
    Outcome {
        content: v.to_string(),
        ok: true,
    }
}

fn err(msg: impl Into<String>) -> Outcome {
    Outcome::error(msg)
}

impl ToolEnv<'_> {
    /// The space `arg` names (by name, or display name ignoring case), else the active one,
    /// checked to be one the agent is a member of right now.
    async fn space(&self, arg: Option<&str>) -> Result<(String, SpaceRecord), String> {
        let wanted = self.resolve(arg)?;
        let key = SpaceKey::new(self.agent.namespace.clone(), wanted.clone());
        let record = self
            .store
            .space(&key)
            .await
            .map_err(|e| format!("cannot read space {wanted}: {e}"))?
            .filter(|r| r.admits(&self.me))
            .ok_or_else(|| format!("you are not a member of space {wanted}"))?;
        Ok((wanted, record))
    }

    /// The name of the space `arg` names among the agent's spaces (else the active one),
    /// without reading the data plane.
    fn resolve(&self, arg: Option<&str>) -> Result<String, String> {
        let wanted = match arg.map(str::trim).filter(|s| !s.is_empty()) {
            Some(a) => crate::membership::resolve(self.spaces, a)
                .map(str::to_string)
                .ok_or_else(|| {
                    let known: Vec<&str> = self.spaces.iter().map(|(n, _)| n.as_str()).collect();
                    format!(
                        "you are not a member of a space called {a:?}; your spaces: {}",
                        known.join(", ")
                    )
                })?,
            None => self
                .active
                .clone()
                .ok_or("no active space: name one with `space`, or call enter_space first")?,
        };
        Ok(wanted)
    }

    /// Runs one tool call (`skip` is the cycle's: see [`super::cycle`]). `idempotency` makes a
    /// re-run of the same call (after a crash) post nothing twice.
    pub async fn run(&mut self, call: &ToolCall, idempotency: &str) -> Outcome {
        let Some(tool) = BuiltinTool::from_name(&call.name) else {
            return err(format!(
                "unknown tool {:?}; available: {}",
                call.name,
                self.available()
            ));
        };
        if !self.enabled.contains(&tool) {
            return err(format!(
                "tool {:?} is not enabled for this agent; available: {}",
                call.name,
                self.available()
            ));
        }
        let args: Value = match serde_json::from_str(if call.arguments.trim().is_empty() {
            "{}"
        } else {
            &call.arguments
        }) {
            Ok(v) => v,
            Err(e) => {
                return err(format!(
                    "invalid arguments for {}: not JSON ({e})",
                    call.name
                ))
            }
        };
        let result = match tool {
            BuiltinTool::SendMessage => self.send_message(args, idempotency).await,
            BuiltinTool::EnterSpace => self.enter_space(args).await,
            BuiltinTool::ReadMessages => self.read_messages(args).await,
            BuiltinTool::SetMemories => self.set_memories(args).await,
            BuiltinTool::DeleteMemories => self.delete_memories(args).await,
            BuiltinTool::SetGoals => self.set_goals(args).await,
            BuiltinTool::SetPlans => self.set_plans(args).await,
            // The cycle answers skip itself (it ends or rolls back the cycle).
            BuiltinTool::Skip => return skip_result(),
        };
        match result {
            Ok(v) => ok(v),
            Err(e) => err(e),
        }
    }

    fn available(&self) -> String {
        self.enabled
            .iter()
            .map(|t| t.name())
            .collect::<Vec<_>>()
            .join(", ")
    }

    async fn send_message(&mut self, args: Value, idempotency: &str) -> Result<Value, String> {
        #[derive(Deserialize)]
        struct Args {
            text: String,
            space: Option<String>,
            mention: Option<String>,
            wait: Option<Wait>,
        }
        #[derive(Deserialize)]
        struct Wait {
            #[serde(rename = "for")]
            conditions: Vec<Condition>,
            timeout: Option<f64>,
        }
        #[derive(Deserialize)]
        struct Condition {
            #[serde(rename = "type")]
            kind: String,
            #[serde(rename = "entityId")]
            entity_id: Option<String>,
        }
        let a: Args = serde_json::from_value(args)
            .map_err(|e| format!("invalid arguments for send_message: {e}"))?;
        if a.text.trim().is_empty() {
            return Err("invalid arguments for send_message: text is empty".into());
        }
        // The post itself checks membership against the current record; names and mentions
        // resolve against the spaces as the cycle started.
        let space = self.resolve(a.space.as_deref())?;
        let mut mention = a.mention.clone();
        let mut note = None;
        if let Some(m) = &a.mention {
            let known = self
                .spaces
                .iter()
                .find(|(n, _)| *n == space)
                .and_then(|(_, r)| r.as_ref());
            let human = known.is_some_and(|r| {
                r.members.iter().any(|h| {
                    h.kind == MemberKind::Human
                        && (h.id == *m || h.name.eq_ignore_ascii_case(m.trim_start_matches('@')))
                })
            });
            if human {
                // Addressing a person, as small models do: humans see every message, so it
                // is posted without the mention, and the model is told.
                mention = None;
                note = Some(format!(
                    "{m} is a human member and sees every message; mention names an agent to wake, so the message was posted without it"
                ));
            } else if !known.is_some_and(|r| r.has_agent(m)) {
                return Err(format!("{m} is not an agent member of space {space}"));
            }
        }
        if let Some(w) = &a.wait {
            if w.conditions.is_empty() {
                return Err(
                    "invalid arguments for send_message: wait.for needs at least one condition"
                        .into(),
                );
            }
            for c in &w.conditions {
                match (c.kind.as_str(), &c.entity_id) {
                    ("any" | "agent" | "human", _) | ("entity", Some(_)) => {}
                    ("entity", None) => {
                        return Err("wait condition type entity needs entityId".into())
                    }
                    (other, _) => {
                        return Err(format!(
                            "unknown wait condition type {other:?} (any, agent, human, entity)"
                        ))
                    }
                }
            }
        }
        let key = SpaceKey::new(self.agent.namespace.clone(), space.clone());
        // Subscribe before posting so a fast reply is not missed.
        let mut live = match &a.wait {
            Some(_) => Some(
                self.store
                    .subscribe_live(&key)
                    .await
                    .map_err(|e| format!("cannot wait for replies: {e}"))?,
            ),
            None => None,
        };
        let posted = self
            .store
            .post_message(
                &key,
                &NewMessage {
                    sender: self.me.clone(),
                    text: a.text.clone(),
                    mention,
                    idempotency_key: Some(idempotency.to_string()),
                    urgent: false,
                    depth: self.depth,
                },
            )
            .await
            .map_err(|e| match e {
                crate::store::StoreError::NotMember { .. } => {
                    format!("you are not a member of space {space}")
                }
                e => format!("message not sent: {e}"),
            })?;
        self.active = Some(space.clone());
        let status = match posted.guarded {
            None => "delivered".to_string(),
            Some(g) => {
                self.metrics
                    .loop_guard
                    .with_label_values(&[self.agent.namespace.as_str(), space.as_str(), g.as_str()])
                    .inc();
                // Once per chain for the depth; the rate holds for the rest of a minute.
                match g {
                    crate::store::Guard::Depth => {
                        tracing::warn!(agent = %self.agent, space = %space, depth = self.depth, "loop guard (depth): the message wakes no other agent")
                    }
                    crate::store::Guard::Rate => {
                        tracing::info!(agent = %self.agent, space = %space, "loop guard (rate): the message wakes no other agent")
                    }
                }
                format!("posted, but not delivered to other agents: the space's loop guard ({}) stops agents talking in circles; humans see it", g.as_str())
            }
        };
        let noted = |mut result: Value| {
            if let (Some(note), Some(o)) = (&note, result.as_object_mut()) {
                o.insert("note".into(), json!(note));
            }
            result
        };
        let (Some(wait), Some(live)) = (a.wait, live.as_mut()) else {
            return Ok(noted(
                json!({"success": true, "messageId": posted.id, "status": status}),
            ));
        };
        let timeout = Duration::from_secs_f64(
            wait.timeout
                .unwrap_or(60.0)
                .clamp(0.0, self.max_wait.as_secs_f64()),
        );
        let me = self.me.id.clone();
        let matched = tokio::time::timeout(timeout, async {
            while let Some(event) = live.next().await {
                let LiveEvent::Message { message } = event else {
                    continue;
                };
                if message.sender.id == me {
                    continue;
                }
                let hit = wait.conditions.iter().any(|c| match c.kind.as_str() {
                    "any" => true,
                    "agent" => message.sender.kind == Some(MemberKind::Agent),
                    "human" => message.sender.kind == Some(MemberKind::Human),
                    _ => c.entity_id.as_deref() == Some(message.sender.id.as_str()),
                });
                if hit {
                    return Some(message);
                }
            }
            None
        })
        .await
        .ok()
        .flatten();
        Ok(noted(match matched {
            Some(reply) => {
                json!({"messageId": posted.id, "sent": true, "timedOut": false, "reply": {
                    "text": reply.text, "entityId": reply.sender.id, "entityName": reply.sender.name,
                    "entityType": match reply.sender.kind { Some(MemberKind::Agent) => "agent", Some(MemberKind::Human) => "human", None => "service" },
                }})
            }
            None => json!({"messageId": posted.id, "sent": true, "timedOut": true, "reply": null}),
        }))
    }

    async fn enter_space(&mut self, args: Value) -> Result<Value, String> {
        let space = args
            .get("space")
            .and_then(Value::as_str)
            .ok_or("invalid arguments for enter_space: space is required")?;
        let (space, record) = self.space(Some(space)).await?;
        let key = SpaceKey::new(self.agent.namespace.clone(), space.clone());
        let (recent, _) = self.recent(&key, 15, None).await?;
        self.active = Some(space.clone());
        Ok(
            json!({"space": space, "displayName": record.display_name, "members": record.members, "recentMessages": recent}),
        )
    }

    async fn read_messages(&mut self, args: Value) -> Result<Value, String> {
        let limit = args
            .get("limit")
            .and_then(Value::as_u64)
            .unwrap_or(15)
            .clamp(1, 50) as usize;
        let before = match args.get("before") {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) if parse_message_id(id).is_some() => Some(id.clone()),
            Some(_) => {
                return Err(
                    "invalid arguments for read_messages: before must be a message id from a previous result".into(),
                )
            }
        };
        let (space, _) = self
            .space(args.get("space").and_then(Value::as_str))
            .await?;
        let key = SpaceKey::new(self.agent.namespace.clone(), space.clone());
        let (messages, older) = self.recent(&key, limit, before).await?;
        let mut result = json!({"space": space, "messages": messages});
        if let (Some(older), Some(o)) = (older, result.as_object_mut()) {
            o.insert("before".into(), json!(older));
        }
        Ok(result)
    }

    /// The newest `limit` messages (older than `before`), oldest first, at most
    /// [`TOOL_PAGE_BYTES`] of them; and the id to read on from when there are older ones.
    async fn recent(
        &self,
        key: &SpaceKey,
        limit: usize,
        before: Option<String>,
    ) -> Result<(Vec<Value>, Option<String>), String> {
        let page = self
            .store
            .read_page(
                key,
                &ReadQuery {
                    limit,
                    before,
                    after: None,
                    max_bytes: TOOL_PAGE_BYTES,
                },
            )
            .await
            .map_err(|e| format!("cannot read space {}: {e}", key.name))?;
        let older = page.next().map(str::to_string);
        Ok((
            page.messages
                .into_iter()
                .rev()
                .map(|m| json!({"id": m.id, "sender": m.sender.name, "senderId": m.sender.id, "text": m.text, "timeMs": m.time_ms}))
                .collect(),
            older,
        ))
    }

    async fn set_memories(&mut self, args: Value) -> Result<Value, String> {
        let (memories, forget) = super::note_args::memories(&args)?;
        if !memories.is_empty() {
            self.store
                .set_memories(self.agent, self.lease, &memories)
                .await
                .map_err(|e| format!("memories not stored: {e}"))?;
        }
        let forgotten = if forget.is_empty() {
            0
        } else {
            self.store
                .delete_memories(self.agent, self.lease, &forget)
                .await
                .map_err(|e| format!("memories not forgotten: {e}"))?
        };
        Ok(json!({"stored": memories.keys().collect::<Vec<_>>(), "forgotten": forgotten}))
    }

    async fn delete_memories(&mut self, args: Value) -> Result<Value, String> {
        let keys: Vec<String> = serde_json::from_value(
            args.get("keys").cloned().unwrap_or(Value::Null),
        )
        .map_err(|e| {
            format!("invalid arguments for delete_memories: keys must be a list of strings ({e})")
        })?;
        let deleted = self
            .store
            .delete_memories(self.agent, self.lease, &keys)
            .await
            .map_err(|e| format!("memories not deleted: {e}"))?;
        Ok(json!({"deleted": deleted}))
    }

    async fn set_goals(&mut self, args: Value) -> Result<Value, String> {
        let goals = super::note_args::goals(&args)?;
        self.store
            .set_goals(self.agent, self.lease, &goals)
            .await
            .map_err(|e| format!("goals not stored: {e}"))?;
        Ok(json!({"stored": goals.iter().map(|g| g.id.as_str()).collect::<Vec<_>>()}))
    }

    async fn set_plans(&mut self, args: Value) -> Result<Value, String> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Args {
            #[serde(default)]
            plans: Vec<PlanSpec>,
            #[serde(default)]
            cancel: Vec<String>,
        }
        let now = crate::store::now_ms();
        let args = super::note_args::plans(args, now)?;
        let args: Args = serde_json::from_value(args).map_err(|e| {
            format!("invalid arguments for set_plans: expected {{plans: [{{name, instruction, in or at or schedule, timeZone}}], cancel: [name]}} ({e})")
        })?;
        let mut stored = Vec::new();
        for p in &args.plans {
            let valid_name = !p.name.is_empty()
                && p.name.len() <= 63
                && p.name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !p.name.starts_with('-')
                && !p.name.ends_with('-');
            if !valid_name {
                return Err(format!(
                    "plan name {:?}: use 1-63 lowercase letters, digits and dashes",
                    p.name
                ));
            }
            if p.instruction.trim().is_empty() || p.instruction.len() > 4096 {
                return Err(format!(
                    "plan {}: instruction must be 1-4096 characters",
                    p.name
                ));
            }
            let schedule = plans::schedule(p)?;
            if let plans::Schedule::Once(at) = schedule {
                if at < now - 60_000 {
                    return Err(format!(
                        "plan {}: {} has passed",
                        p.name,
                        plans::rfc3339(at)
                    ));
                }
            }
            let next = schedule.next_after(now - 1).map(plans::rfc3339);
            stored.push(json!({"name": p.name, "next": next}));
        }
        let existing = self
            .store
            .plans(self.agent)
            .await
            .map_err(|e| format!("plans not stored: {e}"))?;
        let mut names: std::collections::BTreeSet<&str> =
            existing.iter().map(|p| p.name.as_str()).collect();
        for n in &args.cancel {
            names.remove(n.as_str());
        }
        names.extend(args.plans.iter().map(|p| p.name.as_str()));
        if names.len() > plans::MAX_AGENT_PLANS {
            return Err(format!(
                "at most {} plans of your own; cancel some first",
                plans::MAX_AGENT_PLANS
            ));
        }
        let cancelled = if args.cancel.is_empty() {
            0
        } else {
            self.store
                .cancel_plans(self.agent, self.lease, &args.cancel)
                .await
                .map_err(|e| format!("plans not cancelled: {e}"))?
        };
        if !args.plans.is_empty() {
            let plans: Vec<Plan> = args.plans.iter().map(Plan::from).collect();
            self.store
                .set_plans(self.agent, self.lease, &plans)
                .await
                .map_err(|e| format!("plans not stored: {e}"))?;
        }
        Ok(json!({"stored": stored, "cancelled": cancelled}))
    }
}

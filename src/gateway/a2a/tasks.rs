//! A2A tasks as the data plane already knows them, with no task table of their own.
//!
//! - A **conversation** (`contextId`) is a space of its own: the agent and the caller, named
//!   from the agent, the caller and the `contextId` ([`SpaceKey::conversation`]), so one
//!   caller never reaches another's conversation, even with the same `contextId`.
//! - A **task** is a message the caller posted there: its id is the conversation's digest
//!   and the message's id (`HEX-MILLIS-SEQ`), so a task id names where to look.
//! - Its **state** follows from what the data plane holds: the message's receipt (written in
//!   the step that acknowledges its cycle: committed → `COMPLETED`, skipped → `REJECTED`,
//!   failed → `FAILED`), a cancel notice in the conversation (`CANCELED`), a call of the
//!   agent waiting for an answer in the conversation (`INPUT_REQUIRED`), the agent thinking
//!   (`WORKING`), else `SUBMITTED`.
//! - Its **artifacts** are the agent's messages after it, up to the caller's next message.
//!
//! So a task survives a worker's kill -9 and a gateway's restart: there is nothing else.

use crate::a2a::{
    now_timestamp, A2aError, Artifact, Message, Part, PartContent, Role, Task, TaskState,
    TaskStatus,
};
use crate::identity::{AgentKey, SpaceKey, CONVERSATION_PREFIX};
use crate::party::{Outside, Principal};
use crate::store::{
    parse_message_id, MemberKind, NewMessage, ReadQuery, Receipt, ReceiptOutcome, Sender,
    SpaceMessage, SpaceRecord, Store, StoreError,
};

use super::super::auth::Entity;

/// The most messages of a conversation one task's view reads after its message.
const VIEW_MESSAGES: usize = 200;

/// The most messages a conversation keeps.
const CONVERSATION_MESSAGES: u64 = 1000;

/// The longest `contextId` accepted, in bytes.
const MAX_CONTEXT_ID: usize = 200;

/// A data-plane failure as the protocol says it.
pub(super) fn unavailable(e: &StoreError) -> A2aError {
    A2aError::Internal(format!("the data plane is unavailable: {e}"))
}

/// The caller as an outside party of `agent` (what is theirs, see [`Outside`]).
pub(super) fn outside<'a>(agent: &'a AgentKey, caller: &'a Principal) -> Outside<'a> {
    Outside { agent, caller }
}

/// The caller as a member of its conversations.
pub(super) fn caller_sender(caller: &Entity) -> Sender {
    caller.principal().caller()
}

/// The conversation `context_id` of `caller` with `agent`.
pub(super) fn conversation(agent: &AgentKey, caller: &Entity, context_id: &str) -> SpaceKey {
    outside(agent, &caller.principal()).conversation(context_id)
}

/// A `contextId` as a client may give it.
pub(super) fn check_context_id(id: &str) -> Result<(), A2aError> {
    if id.is_empty() || id.len() > MAX_CONTEXT_ID || id.chars().any(char::is_control) {
        return Err(A2aError::InvalidParams(format!(
            "contextId: 1 to {MAX_CONTEXT_ID} bytes without control characters"
        )));
    }
    Ok(())
}

/// Who owns a conversation, as the agent's index of conversations names them.
pub(super) fn owner(caller: &Entity) -> String {
    format!("{}:{}", caller.kind.as_str(), caller.id)
}

/// The conversation's record, made when it is new (to last `lasts_s` seconds from now).
pub(super) async fn open_conversation(
    store: &dyn Store,
    agent: &AgentKey,
    caller: &Entity,
    context_id: &str,
    lasts_s: u64,
) -> Result<(SpaceKey, SpaceRecord), A2aError> {
    let who = caller.principal();
    let outsider = outside(agent, &who);
    let key = outsider.conversation(context_id);
    if let Some(record) = store.space(&key).await.map_err(|e| unavailable(&e))? {
        return Ok((key, record));
    }
    let record = outsider.new_conversation(context_id, CONVERSATION_MESSAGES);
    store
        .apply_space(&key, &record)
        .await
        .map_err(|e| unavailable(&e))?;
    keep_conversation(store, agent, caller, &key, lasts_s, None).await?;
    Ok((key, record))
}

/// Keeps the conversation `space` until its time (`lasts_s` from now when it is new): after
/// every post (`message`, the caller's), so that its log, made by the first, and the post's
/// idempotency key expire with the rest.
pub(super) async fn keep_conversation(
    store: &dyn Store,
    agent: &AgentKey,
    caller: &Entity,
    space: &SpaceKey,
    lasts_s: u64,
    message: Option<&Message>,
) -> Result<(), A2aError> {
    let posted =
        message.and_then(|m| caller_post(caller, m, String::new(), 0).scoped_idempotency_key());
    let lasts_ms = i64::try_from(lasts_s.saturating_mul(1000)).unwrap_or(i64::MAX);
    let until = crate::store::now_ms().saturating_add(lasts_ms);
    store
        .keep_conversation(agent, &owner(caller), space, until, posted.as_deref())
        .await
        .map_err(|e| unavailable(&e))?;
    Ok(())
}

/// A task's id: the conversation's digest, then the message's id.
pub(super) fn task_id(space: &SpaceKey, message_id: &str) -> String {
    let digest = space
        .name
        .strip_prefix(CONVERSATION_PREFIX)
        .unwrap_or(&space.name);
    format!("{digest}-{message_id}")
}

/// Where a task id points: its conversation (in the agent's namespace) and its message.
fn parse_task_id(agent: &AgentKey, id: &str) -> Option<(SpaceKey, String)> {
    let (digest, message) = id.split_once('-')?;
    let valid = digest.len() == 24 && digest.bytes().all(|b| b.is_ascii_hexdigit());
    (valid && parse_message_id(message).is_some()).then(|| {
        (
            SpaceKey::new(
                agent.namespace.clone(),
                format!("{CONVERSATION_PREFIX}{digest}"),
            ),
            message.to_string(),
        )
    })
}

/// The message id just before `id`, to read from `id` on (reads are after an id).
fn before(id: &str) -> Option<String> {
    let (ms, seq) = parse_message_id(id)?;
    Some(match seq.checked_sub(1) {
        Some(s) => format!("{ms}-{s}"),
        None => format!("{}-{}", ms.checked_sub(1)?, u64::MAX),
    })
}

/// The text the agent gets of an A2A message: its text parts, and its data parts as JSON.
pub(super) fn inbound_text(message: &Message) -> Result<String, A2aError> {
    let mut out = Vec::new();
    for part in &message.parts {
        match &part.content {
            PartContent::Text(t) => out.push(t.clone()),
            PartContent::Data(d) => out.push(d.to_string()),
            PartContent::Raw(_) | PartContent::Url(_) => {
                return Err(A2aError::ContentTypeNotSupported(
                    "this agent reads text and data parts, not files".into(),
                ))
            }
        }
    }
    let text = out.join("\n");
    if text.trim().is_empty() {
        return Err(A2aError::InvalidParams(
            "message.parts: give at least one part with text or data".into(),
        ));
    }
    Ok(text)
}

/// Posts the caller's message in its conversation at causal `depth` (see
/// [`crate::party::depth`]): a new task (the same one again for a `messageId` sent before).
pub(super) async fn post(
    store: &dyn Store,
    space: &SpaceKey,
    caller: &Entity,
    message: &Message,
    text: String,
    depth: u32,
) -> Result<String, A2aError> {
    let posted = store
        .post_message(space, &caller_post(caller, message, text, depth))
        .await
        .map_err(|e| match e {
            // The parts' text is more than the conversation takes.
            StoreError::TooLarge { bytes, max, .. } => A2aError::InvalidParams(format!(
                "message.parts: their text is {bytes} bytes, more than the {max} bytes a message may have; shorten it or send it in parts"
            )),
            e => unavailable(&e),
        })?;
    Ok(task_id(space, &posted.id))
}

/// The post of the caller's `message` (its `messageId` its idempotency key).
fn caller_post(caller: &Entity, message: &Message, text: String, depth: u32) -> NewMessage {
    NewMessage {
        sender: caller_sender(caller),
        text,
        mention: None,
        idempotency_key: Some(format!("a2a:{}", message.message_id)),
        urgent: false,
        depth,
    }
}

/// The causal depth a message claims (`agentfleet.dev/depth` in its metadata, from an
/// agentfleet agent calling over A2A), if it claims one: a whole number (as a JSON number;
/// a protobuf `Struct` carries it as `3.0`), else the message is refused.
pub(super) fn claimed_depth(message: &Message) -> Result<Option<u64>, A2aError> {
    let Some(claim) = message
        .metadata
        .as_ref()
        .and_then(|m| m.get(crate::a2a::DEPTH_KEY))
    else {
        return Ok(None);
    };
    claim
        .as_u64()
        .or_else(|| {
            claim
                .as_f64()
                .filter(|f| *f >= 0.0 && f.fract() == 0.0)
                // Saturates: a claim past u64 is past any bound.
                .map(|f| f as u64)
        })
        .map(Some)
        .ok_or_else(|| {
            A2aError::InvalidParams(format!(
                "metadata {}: a whole number of agents the chain went through",
                crate::a2a::DEPTH_KEY
            ))
        })
}

/// The text of the notice that cancels a task.
fn cancel_notice(task: &str, caller: &str) -> String {
    format!("Task {task} was canceled by {caller}.")
}

/// What the data plane holds of one task.
pub(super) struct TaskView {
    /// The task as the protocol shows it (full history and artifacts).
    pub task: Task,
    /// Its conversation.
    pub space: SpaceKey,
    /// The call it waits for (`INPUT_REQUIRED`).
    pub waiting: Option<crate::store::RegisteredCall>,
}

/// Reads one task of `caller` with `agent`; `TaskNotFound` when it is not the caller's.
pub(super) async fn view(
    store: &dyn Store,
    agent: &AgentKey,
    caller: &Entity,
    id: &str,
) -> Result<TaskView, A2aError> {
    let not_found = || {
        A2aError::TaskNotFound(format!(
            "no task {} (or its conversation expired)",
            super::quote(id)
        ))
    };
    let (space, message_id) = parse_task_id(agent, id).ok_or_else(not_found)?;
    let record = store
        .space(&space)
        .await
        .map_err(|e| unavailable(&e))?
        .filter(|r| outside(agent, &caller.principal()).owns(r))
        .ok_or_else(not_found)?;
    let messages = store
        .read_messages(
            &space,
            &ReadQuery {
                limit: VIEW_MESSAGES,
                before: None,
                after: before(&message_id),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| unavailable(&e))?;
    let Some((request, later)) = messages.split_first().filter(|(m, _)| m.id == message_id) else {
        return Err(not_found());
    };
    let receipt = store
        .receipt(agent, &format!("msg:{}:{}", space.name, message_id))
        .await
        .map_err(|e| unavailable(&e))?;
    let state = Facts {
        agent,
        caller: &caller_sender(caller),
        id,
        later,
        receipt: receipt.as_ref(),
    };
    let waiting = if receipt.is_none() && !state.canceled() {
        waiting_call(store, agent, &space).await?
    } else {
        None
    };
    let thinking =
        receipt.is_none() && store.inflight(agent).await.map_err(|e| unavailable(&e))? > 0;
    let context_id = record.context_id.clone().unwrap_or_default();
    Ok(TaskView {
        task: state.task(
            request,
            &context_id,
            waiting
                .as_ref()
                .map(|c| (question(c), asks_the_caller(c, &space, &record, caller))),
            thinking,
        ),
        space,
        waiting,
    })
}

/// A call of the agent in `space` waiting for a person's answer.
async fn waiting_call(
    store: &dyn Store,
    agent: &AgentKey,
    space: &SpaceKey,
) -> Result<Option<crate::store::RegisteredCall>, A2aError> {
    let calls = store
        .human_calls(agent)
        .await
        .map_err(|e| unavailable(&e))?;
    Ok(calls
        .into_iter()
        .find(|c| !c.done && c.record.space.as_deref() == Some(space.name.as_str())))
}

/// Whether the call a task waits for is its caller's to answer (`INPUT_REQUIRED`), by the
/// rule of every route ([`crate::party::may_answer`]): an interactive tool's that names no one
/// else; an approval never is (the task is `WORKING` until one of the agent's approvers
/// decides).
fn asks_the_caller(
    call: &crate::store::RegisteredCall,
    space: &SpaceKey,
    record: &SpaceRecord,
    caller: &Entity,
) -> bool {
    crate::party::may_answer(&call.record, &space.name, Some(record), &caller.principal()).is_ok()
}

/// What a task waiting for a call says: the call, and how to answer it (or who does).
fn question(call: &crate::store::RegisteredCall) -> String {
    let r = &call.record;
    let arguments = r
        .arguments
        .as_ref()
        .map_or_else(String::new, |a| format!(" with {a}"));
    match r.kind {
        crate::store::CallKind::Interactive => format!(
            "The agent asks you to answer the tool {}{arguments} (call {}): reply on this task with a data part holding the result{}.",
            r.tool,
            call.id,
            r.result_schema
                .as_ref()
                .map_or_else(String::new, |s| format!(" matching {s}"))
        ),
        _ => format!(
            "The agent waits for an approval to call {}{arguments} (call {}) by {}.",
            r.tool,
            call.id,
            crate::party::answers::approvers_text(r, "the agent's members")
        ),
    }
}

/// What decides a task's state.
struct Facts<'a> {
    agent: &'a AgentKey,
    caller: &'a Sender,
    id: &'a str,
    /// Messages after the task's, oldest first.
    later: &'a [SpaceMessage],
    receipt: Option<&'a Receipt>,
}

impl Facts<'_> {
    /// The agent's messages that answer the task: after it, up to the caller's next.
    fn answers(&self) -> impl Iterator<Item = &SpaceMessage> {
        self.later
            .iter()
            .take_while(|m| m.sender != *self.caller)
            .filter(|m| m.sender.kind == Some(MemberKind::Agent) && m.sender.id == self.agent.name)
    }

    fn canceled(&self) -> bool {
        let notice = cancel_notice(self.id, "");
        let prefix = notice.trim_end_matches('.');
        self.later
            .iter()
            .any(|m| m.sender.kind.is_none() && m.text.starts_with(prefix))
    }

    /// The task; `waiting`: what the call it waits for says, and whether its caller answers
    /// it.
    fn task(
        &self,
        request: &SpaceMessage,
        context_id: &str,
        waiting: Option<(String, bool)>,
        thinking: bool,
    ) -> Task {
        let answers: Vec<&SpaceMessage> = self.answers().collect();
        let last_time = answers.last().map_or(request.time_ms, |m| m.time_ms);
        let agent_message = |text: String, message_id: String| Message {
            message_id,
            context_id: Some(context_id.to_string()),
            task_id: Some(self.id.to_string()),
            role: Role::Agent,
            parts: vec![Part::text(text)],
            metadata: None,
            extensions: Vec::new(),
            reference_task_ids: Vec::new(),
        };
        let (state, message, time) = if self.canceled() {
            (TaskState::Canceled, None, last_time)
        } else if let Some(r) = self.receipt {
            let said = answers
                .last()
                .map(|m| agent_message(m.text.clone(), m.id.clone()));
            match r.outcome {
                ReceiptOutcome::Committed => (TaskState::Completed, said, r.time_ms),
                ReceiptOutcome::Skipped => (
                    TaskState::Rejected,
                    Some(agent_message(
                        "The agent chose not to answer this message.".into(),
                        format!("{}-status", self.id),
                    )),
                    r.time_ms,
                ),
                ReceiptOutcome::Failed => (
                    TaskState::Failed,
                    Some(agent_message(
                        format!(
                            "The agent's cycle failed: {}",
                            r.reason.as_deref().unwrap_or("no reason given")
                        ),
                        format!("{}-status", self.id),
                    )),
                    r.time_ms,
                ),
            }
        } else if let Some((question, theirs)) = waiting {
            (
                if theirs {
                    TaskState::InputRequired
                } else {
                    TaskState::Working
                },
                Some(agent_message(question, format!("{}-question", self.id))),
                last_time,
            )
        } else if thinking {
            (TaskState::Working, None, last_time)
        } else {
            (TaskState::Submitted, None, request.time_ms)
        };
        let mut history = vec![Message {
            message_id: request.id.clone(),
            context_id: Some(context_id.to_string()),
            task_id: Some(self.id.to_string()),
            role: Role::User,
            parts: vec![Part::text(request.text.clone())],
            metadata: None,
            extensions: Vec::new(),
            reference_task_ids: Vec::new(),
        }];
        history.extend(
            answers
                .iter()
                .map(|m| agent_message(m.text.clone(), m.id.clone())),
        );
        Task {
            id: self.id.to_string(),
            context_id: Some(context_id.to_string()),
            status: TaskStatus {
                state,
                message,
                timestamp: Some(now_timestamp(time)),
            },
            artifacts: answers.iter().map(|m| artifact(m)).collect(),
            history,
            metadata: None,
        }
    }
}

/// One message of the agent as an artifact of the task.
pub(super) fn artifact(m: &SpaceMessage) -> Artifact {
    Artifact {
        artifact_id: m.id.clone(),
        name: Some("message".into()),
        description: None,
        parts: vec![Part::text(m.text.clone())],
        metadata: None,
        extensions: Vec::new(),
    }
}

/// Cancels a task that is not over: a notice in its conversation says so (the agent may
/// still answer there; the task no longer waits for it).
pub(super) async fn cancel(
    store: &dyn Store,
    agent: &AgentKey,
    caller: &Entity,
    id: &str,
) -> Result<(), A2aError> {
    let current = view(store, agent, caller, id).await?;
    let state = current.task.status.state;
    if state.is_terminal() {
        return Err(A2aError::TaskNotCancelable(format!(
            "task {} is over ({})",
            super::quote(id),
            state.as_str()
        )));
    }
    store
        .post_notice(
            &current.space,
            &cancel_notice(id, &caller.name),
            Some(&format!("a2a-cancel:{id}")),
        )
        .await
        .map_err(|e| unavailable(&e))?;
    Ok(())
}

/// Trims a task for an answer: at most `history` messages of history (`None`: all), and
/// its artifacts only when `artifacts`.
pub(super) fn trimmed(mut task: Task, history: Option<i32>, artifacts: bool) -> Task {
    if let Some(n) = history {
        let keep = usize::try_from(n.max(0)).unwrap_or(0);
        let drop = task.history.len().saturating_sub(keep);
        task.history.drain(..drop);
    }
    if !artifacts {
        task.artifacts.clear();
    }
    task
}

/// The tasks of one conversation, newest first: their ids.
pub(super) async fn ids_in(
    store: &dyn Store,
    space: &SpaceKey,
    caller: &Entity,
    limit: usize,
) -> Result<Vec<String>, A2aError> {
    let me = caller_sender(caller);
    let messages = store
        .read_messages(
            space,
            &ReadQuery {
                limit,
                before: None,
                after: None,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| unavailable(&e))?;
    Ok(messages
        .iter()
        .filter(|m| m.sender == me)
        .map(|m| task_id(space, &m.id))
        .collect())
}

/// Where a task id sorts among the caller's tasks: by its message's time and sequence.
pub(super) fn sent_order(id: &str) -> Option<(i64, u64)> {
    parse_message_id(id.split_once('-')?.1)
}

/// Whether a task has settled: over, or waiting for its caller (a stream closes then).
pub(super) fn is_settled(task: &Task) -> bool {
    task.status.state.is_terminal() || task.status.state.is_interrupted()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_ids_name_their_conversation_and_message() {
        let agent = AgentKey::new("ops", "oncall");
        let space = SpaceKey::conversation(&agent, "human", "husam", "ctx-1");
        let id = task_id(&space, "1732712345123-7");
        assert_eq!(
            parse_task_id(&agent, &id),
            Some((space, "1732712345123-7".to_string()))
        );
        for bad in [
            "",
            "x-1-2",
            "0123456789abcdef01234567",
            "0123456789abcdef01234567-x",
        ] {
            assert_eq!(parse_task_id(&agent, bad), None, "{bad}");
        }
    }

    #[test]
    fn reading_from_a_message_starts_just_before_it() {
        assert_eq!(before("100-3").as_deref(), Some("100-2"));
        assert_eq!(
            before("100-0").as_deref(),
            Some(format!("99-{}", u64::MAX).as_str())
        );
    }

    fn said(id: &str, sender: Sender, text: &str) -> SpaceMessage {
        SpaceMessage {
            id: id.into(),
            space: "a2a_x".into(),
            sender,
            text: text.into(),
            time_ms: 1_000,
            mention: None,
            depth: 0,
        }
    }

    #[test]
    fn a_tasks_state_follows_from_its_receipt_notices_and_calls() {
        let agent = AgentKey::new("ops", "oncall");
        let caller = Sender {
            groups: Vec::new(),
            id: "husam".into(),
            name: "Husam".into(),
            kind: Some(MemberKind::Human),
        };
        let me = Sender {
            groups: Vec::new(),
            id: "oncall".into(),
            name: "oncall".into(),
            kind: Some(MemberKind::Agent),
        };
        let request = said("1-0", caller.clone(), "help");
        let later = [
            said("2-0", me.clone(), "on it"),
            said("3-0", caller.clone(), "next task"),
            said("4-0", me.clone(), "about the next task"),
        ];
        let state = |receipt: Option<&Receipt>,
                     later: &[SpaceMessage],
                     waiting: Option<(String, bool)>,
                     thinking| {
            Facts {
                agent: &agent,
                caller: &caller,
                id: "t-1-0",
                later,
                receipt,
            }
            .task(&request, "ctx", waiting, thinking)
        };
        let committed = Receipt::new(ReceiptOutcome::Committed, Some(3), None);
        let done = state(Some(&committed), &later, None, false);
        assert_eq!(done.status.state, TaskState::Completed);
        // Its answers are the agent's messages up to the caller's next one.
        let answers: Vec<_> = done
            .artifacts
            .iter()
            .map(|a| a.artifact_id.as_str())
            .collect();
        assert_eq!(answers, ["2-0"]);
        assert_eq!(done.history.len(), 2);
        let failed = Receipt::new(
            ReceiptOutcome::Failed,
            Some(3),
            Some("the model refused".into()),
        );
        let f = state(Some(&failed), &later, None, false);
        assert_eq!(f.status.state, TaskState::Failed);
        assert!(f
            .status
            .message
            .unwrap()
            .text()
            .contains("the model refused"));
        let skipped = Receipt::new(ReceiptOutcome::Skipped, None, None);
        assert_eq!(
            state(Some(&skipped), &[], None, false).status.state,
            TaskState::Rejected
        );
        let asks = state(None, &[], Some(("which colour?".into(), true)), true);
        assert_eq!(asks.status.state, TaskState::InputRequired);
        // An approval is never the caller's: the task works on until an approver decides.
        let gated = state(None, &[], Some(("waits for dana".into(), false)), true);
        assert_eq!(gated.status.state, TaskState::Working);
        assert!(gated.status.message.unwrap().text().contains("dana"));
        assert_eq!(
            state(None, &[], None, true).status.state,
            TaskState::Working
        );
        assert_eq!(
            state(None, &[], None, false).status.state,
            TaskState::Submitted
        );
        let canceled = [said(
            "2-0",
            Sender::system(),
            &cancel_notice("t-1-0", "Husam"),
        )];
        assert_eq!(
            state(None, &canceled, None, true).status.state,
            TaskState::Canceled
        );
        // Another task's cancel notice is not this one's.
        let other = [said(
            "2-0",
            Sender::system(),
            &cancel_notice("t-1-00", "Husam"),
        )];
        assert_eq!(
            state(None, &other, None, false).status.state,
            TaskState::Submitted
        );
    }

    #[test]
    fn two_callers_with_one_context_id_have_two_conversations() {
        let agent = AgentKey::new("ops", "oncall");
        let a = SpaceKey::conversation(&agent, "human", "husam", "same");
        let b = SpaceKey::conversation(&agent, "service", "husam", "same");
        let c = SpaceKey::conversation(&agent, "human", "dana", "same");
        assert!(a != b && a != c && b != c);
        assert!(a.is_conversation());
    }
}

//! The six A2A methods, one binding-free call each: what they read, post and answer.

use std::pin::Pin;
use std::time::Duration;

use futures::Stream;
use serde_json::Value;
use tokio::time::Instant;

use crate::a2a::{
    A2aError, CancelTaskRequest, GetTaskRequest, JsonRpcRequest, ListTasksRequest,
    ListTasksResponse, SendMessageRequest, SendMessageResponse, StreamResponse,
    SubscribeToTaskRequest, Task, TaskState,
};
use crate::identity::AgentKey;
use crate::party::depth;
use crate::store::A2aRecord;

use super::super::auth::Entity;
use super::super::streams::Slot;
use super::super::Gateway;
use super::tasks;
use super::watch::Watch;

/// The most tasks a page of `ListTasks` holds, and its default.
const MAX_PAGE: usize = 100;
const DEFAULT_PAGE: usize = 50;

/// How long before the request timeout a blocking `SendMessage` answers with the task as it
/// is (the client then follows it with `GetTask` or `SubscribeToTask`).
const BLOCKING_MARGIN: Duration = Duration::from_secs(1);

/// One call, whichever binding carried it.
pub enum Call {
    /// `SendMessage`.
    Send(SendMessageRequest),
    /// `SendStreamingMessage`.
    Stream(SendMessageRequest),
    /// `GetTask`.
    Get { id: String, history: Option<i32> },
    /// `ListTasks`.
    List(ListTasksRequest),
    /// `CancelTask`.
    Cancel(String),
    /// `SubscribeToTask`.
    Subscribe(String),
}

impl Call {
    /// The call a JSON-RPC request makes.
    pub fn parse(request: &JsonRpcRequest) -> Result<Self, A2aError> {
        Ok(match request.method.as_str() {
            "SendMessage" => Call::Send(request.params()?),
            "SendStreamingMessage" => Call::Stream(request.params()?),
            "GetTask" => {
                let p: GetTaskRequest = request.params()?;
                Call::Get {
                    id: p.id,
                    history: p.history_length,
                }
            }
            "ListTasks" => Call::List(request.params()?),
            "CancelTask" => Call::Cancel(request.params::<CancelTaskRequest>()?.id),
            "SubscribeToTask" => Call::Subscribe(request.params::<SubscribeToTaskRequest>()?.id),
            "CreateTaskPushNotificationConfig"
            | "GetTaskPushNotificationConfig"
            | "ListTaskPushNotificationConfigs"
            | "DeleteTaskPushNotificationConfig" => {
                return Err(A2aError::PushNotificationNotSupported(
                    "this gateway sends no push notifications; stream or subscribe instead".into(),
                ))
            }
            "GetExtendedAgentCard" => {
                return Err(A2aError::UnsupportedOperation(
                    "there is no extended card: the public card is the whole card".into(),
                ))
            }
            other => {
                return Err(A2aError::MethodNotFound(format!(
                    "no method {}",
                    super::quote(other)
                )))
            }
        })
    }
}

/// What a call answers: one value, or a stream of updates.
pub enum Answer {
    /// The result (JSON-RPC `result`, or the HTTP+JSON body).
    One(Value),
    /// Server-sent events.
    Stream(Pin<Box<dyn Stream<Item = Result<StreamResponse, A2aError>> + Send>>),
}

fn json<T: serde::Serialize>(value: &T) -> Result<Value, A2aError> {
    serde_json::to_value(value).map_err(|e| A2aError::Internal(format!("encoding the answer: {e}")))
}

/// Runs `call` for `caller` on `agent` (served as `record` says).
pub async fn run(
    gw: &Gateway,
    agent: &AgentKey,
    record: &A2aRecord,
    caller: &Entity,
    call: Call,
) -> Result<Answer, A2aError> {
    let store = gw.inner.store.as_ref();
    match call {
        Call::Send(request) => {
            let history = request
                .configuration
                .as_ref()
                .and_then(|c| c.history_length);
            let immediately = request
                .configuration
                .as_ref()
                .is_some_and(|c| c.return_immediately);
            let (watch, first) = match send(gw, agent, record, caller, &request).await? {
                Sent::Watch(watch, first) => (*watch, first),
                Sent::Rejected(task) => {
                    return Ok(Answer::One(json(&SendMessageResponse::Task(task))?))
                }
            };
            let task = if immediately {
                first
            } else {
                let until = Instant::now()
                    + gw.inner
                        .limits
                        .request_timeout
                        .saturating_sub(BLOCKING_MARGIN);
                Watch {
                    until: Some(until),
                    ..watch
                }
                .settled(first)
                .await?
            };
            Ok(Answer::One(json(&SendMessageResponse::Task(
                tasks::trimmed(task, history, true),
            ))?))
        }
        Call::Stream(request) => {
            let slot = stream_slot(gw, caller)?;
            Ok(match send(gw, agent, record, caller, &request).await? {
                Sent::Watch(watch, first) => held(slot, watch.updates(first)),
                Sent::Rejected(task) => held(
                    slot,
                    futures::stream::once(async move { Ok(StreamResponse::Task(task)) }),
                ),
            })
        }
        Call::Get { id, history } => {
            let view = tasks::view(store, agent, caller, &id).await?;
            Ok(Answer::One(json(&tasks::trimmed(
                view.task, history, true,
            ))?))
        }
        Call::List(request) => Ok(Answer::One(json(
            &list(gw, agent, caller, &request).await?,
        )?)),
        Call::Cancel(id) => {
            tasks::cancel(store, agent, caller, &id).await?;
            let view = tasks::view(store, agent, caller, &id).await?;
            Ok(Answer::One(json(&view.task)?))
        }
        Call::Subscribe(id) => {
            let slot = stream_slot(gw, caller)?;
            let view = tasks::view(store, agent, caller, &id).await?;
            if view.task.status.state.is_terminal() {
                return Err(A2aError::UnsupportedOperation(format!(
                    "task {} is over ({}): read it with GetTask",
                    super::quote(&id),
                    view.task.status.state.as_str()
                )));
            }
            let live = subscribe(gw, &view.space).await?;
            let watch = Watch::new(gw, agent, caller, id, live);
            Ok(held(slot, watch.updates(view.task)))
        }
    }
}

/// A place among the caller's open streams (see [`super::super::streams`]).
fn stream_slot(gw: &Gateway, caller: &Entity) -> Result<Slot, A2aError> {
    gw.inner
        .streams
        .open(caller)
        .map_err(|full| A2aError::RateLimited(full.message()))
}

/// The answer streaming `updates`, holding `slot` until the stream is dropped.
fn held<S>(slot: Slot, updates: S) -> Answer
where
    S: Stream<Item = Result<StreamResponse, A2aError>> + Send + 'static,
{
    use futures::StreamExt as _;
    Answer::Stream(Box::pin(updates.map(move |item| {
        let _held = &slot;
        item
    })))
}

/// The live events of a conversation (for a watch).
async fn subscribe(
    gw: &Gateway,
    space: &crate::identity::SpaceKey,
) -> Result<super::super::sse::Subscription, A2aError> {
    let store = gw.inner.store.as_ref();
    let record = store
        .space(space)
        .await
        .map_err(|e| tasks::unavailable(&e))?
        .ok_or_else(|| A2aError::TaskNotFound("the task's conversation is gone".into()))?;
    gw.inner
        .hub
        .subscribe(space, &record)
        .await
        .map_err(|e| tasks::unavailable(&e))
}

/// What a `SendMessage` did.
enum Sent {
    /// Posted (or answered a question): the watch of its task (live events subscribed before
    /// the post, so nothing is missed) and the task as it is now.
    Watch(Box<Watch>, Task),
    /// Refused before anything was posted (a spent budget): a `REJECTED` task saying why, kept
    /// nowhere.
    Rejected(Task),
}

/// Posts the message of a `SendMessage` in its conversation.
async fn send(
    gw: &Gateway,
    agent: &AgentKey,
    served: &A2aRecord,
    caller: &Entity,
    request: &SendMessageRequest,
) -> Result<Sent, A2aError> {
    let store = gw.inner.store.as_ref();
    let message = &request.message;
    message.validate()?;
    if message.message_id.len() > 200 {
        return Err(A2aError::InvalidParams(
            "message.messageId: 1 to 200 characters".into(),
        ));
    }
    let context_id = match (&message.task_id, &message.context_id) {
        (Some(task), context) if !task.is_empty() => {
            // A message on an existing task: an answer to its question, or refused.
            let view = tasks::view(store, agent, caller, task).await?;
            let state = view.task.status.state;
            if let Some(c) = context.as_deref().filter(|c| !c.is_empty()) {
                if Some(c) != view.task.context_id.as_deref() {
                    return Err(A2aError::InvalidParams(format!(
                        "contextId {} is not the context of task {}",
                        super::quote(c),
                        super::quote(task)
                    )));
                }
            }
            // A call the task waits for: answered by the rule of every route (an approval
            // is refused: never the caller's own).
            if let Some(call) = &view.waiting {
                let live = subscribe(gw, &view.space).await?;
                super::answers::answer(store, call, &view.space, &caller.principal(), message)
                    .await?;
                let now = tasks::view(store, agent, caller, task).await?.task;
                let watch = Watch::new(gw, agent, caller, task.clone(), live);
                return Ok(Sent::Watch(Box::new(watch), now));
            }
            return Err(if state.is_terminal() {
                A2aError::UnsupportedOperation(format!(
                    "task {} is over ({}): send a new message without taskId",
                    super::quote(task),
                    state.as_str()
                ))
            } else {
                A2aError::UnsupportedOperation(format!(
                    "task {} is still {}: send a new message without taskId (same contextId)",
                    super::quote(task),
                    state.as_str()
                ))
            });
        }
        (_, Some(c)) if !c.is_empty() => {
            tasks::check_context_id(c)?;
            c.clone()
        }
        // A new conversation, named after the message: sent again (a retry), it is the same
        // conversation, where the same messageId is the same task.
        _ => new_context_id(caller, &message.message_id),
    };
    let text = tasks::inbound_text(message)?;
    // Depth is ours: a claim continues a chain within the agent's bound, never lowers the one
    // its calls of remote agents under way are in, and never jumps past it.
    let outbound = store
        .outbound_depth(agent)
        .await
        .map_err(|e| tasks::unavailable(&e))?;
    let depth = depth::inbound(
        tasks::claimed_depth(message)?,
        outbound,
        served.max_chain_depth,
    )
    .map_err(|e| A2aError::InvalidParams(e.to_string()))?;
    if let Some(spent) = spent_budget(gw, agent).await? {
        return Ok(Sent::Rejected(rejected(
            &context_id,
            &message.message_id,
            &spent,
        )));
    }
    let lasts = served.conversation_seconds;
    let (space, record) =
        tasks::open_conversation(store, agent, caller, &context_id, lasts).await?;
    let live = gw
        .inner
        .hub
        .subscribe(&space, &record)
        .await
        .map_err(|e| tasks::unavailable(&e))?;
    let task_id = tasks::post(store, &space, caller, message, text, depth).await?;
    tasks::keep_conversation(store, agent, caller, &space, lasts, Some(message)).await?;
    let first = tasks::view(store, agent, caller, &task_id).await?.task;
    let watch = Watch::new(gw, agent, caller, task_id, live);
    Ok(Sent::Watch(Box::new(watch), first))
}

/// The `contextId` of the conversation a message without one starts: a digest of its
/// caller and its `messageId`.
fn new_context_id(caller: &Entity, message_id: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for part in [caller.kind.as_str(), caller.id.as_str(), message_id] {
        h.update(part.len().to_le_bytes());
        h.update(part.as_bytes());
    }
    format!("ctx-{}", crate::hex(&h.finalize()[..16]))
}

/// The agent's spent budget, if one is: it would not answer before the period rolls over.
async fn spent_budget(
    gw: &Gateway,
    agent: &AgentKey,
) -> Result<Option<crate::crd::Exhausted>, A2aError> {
    let facts = gw
        .inner
        .store
        .facts(agent)
        .await
        .map_err(|e| tasks::unavailable(&e))?;
    let budget = facts.map(|f| f.budget()).unwrap_or_default();
    if !budget.is_set() {
        return Ok(None);
    }
    let periods = crate::periods::Periods::at(crate::store::now_ms());
    let spend = gw
        .inner
        .store
        .record_tokens(agent, &periods, &crate::model::Usage::default())
        .await
        .map_err(|e| tasks::unavailable(&e))?;
    Ok(budget.exhausted(spend.spent(&periods), &periods))
}

/// The `REJECTED` task of a message refused for a spent budget.
fn rejected(context_id: &str, message_id: &str, spent: &crate::crd::Exhausted) -> Task {
    let id = format!("rejected-{message_id}");
    Task {
        id: id.clone(),
        context_id: Some(context_id.to_string()),
        status: crate::a2a::TaskStatus {
            state: TaskState::Rejected,
            message: Some(crate::a2a::Message {
                message_id: format!("{id}-status"),
                context_id: Some(context_id.to_string()),
                task_id: Some(id),
                role: crate::a2a::Role::Agent,
                parts: vec![crate::a2a::Part::text(format!(
                    "Not delivered: {}.",
                    spent.message()
                ))],
                metadata: None,
                extensions: Vec::new(),
                reference_task_ids: Vec::new(),
            }),
            timestamp: Some(crate::a2a::now_timestamp(crate::store::now_ms())),
        },
        artifacts: Vec::new(),
        history: Vec::new(),
        metadata: None,
    }
}

/// `ListTasks`: the caller's tasks with the agent, newest first (by when they were sent), a
/// page at a time (the page token is the number of tasks before the page). Only the page's
/// tasks are read in full, unless a filter on their state or time needs every one read.
async fn list(
    gw: &Gateway,
    agent: &AgentKey,
    caller: &Entity,
    request: &ListTasksRequest,
) -> Result<ListTasksResponse, A2aError> {
    let store = gw.inner.store.as_ref();
    let size = match request.page_size {
        None => DEFAULT_PAGE,
        Some(n) if (1..=MAX_PAGE as i32).contains(&n) => n as usize,
        Some(_) => {
            return Err(A2aError::InvalidParams(format!(
                "pageSize: 1 to {MAX_PAGE}"
            )))
        }
    };
    let skip = match request.page_token.as_deref().filter(|t| !t.is_empty()) {
        None => 0,
        Some(t) => t
            .parse::<usize>()
            .map_err(|_| A2aError::InvalidParams("pageToken: not one this server gave".into()))?,
    };
    let after_ms = request
        .status_timestamp_after
        .as_deref()
        .map(|t| {
            crate::a2a::timestamp_millis(t).ok_or_else(|| {
                A2aError::InvalidParams("statusTimestampAfter: an RFC 3339 time".into())
            })
        })
        .transpose()?;
    let spaces = match request.context_id.as_deref().filter(|c| !c.is_empty()) {
        Some(c) => vec![tasks::conversation(agent, caller, c)],
        None => store
            .conversations(agent, &tasks::owner(caller))
            .await
            .map_err(|e| tasks::unavailable(&e))?,
    };
    let mut ids = Vec::new();
    for space in &spaces {
        ids.extend(tasks::ids_in(store, space, caller, 1000).await?);
    }
    // Newest first: a task's id ends with its message's, which orders by time.
    ids.sort_by_cached_key(|id| std::cmp::Reverse(tasks::sent_order(id)));
    let filtered = request.status.is_some() || after_ms.is_some();
    let (total, chosen) = if filtered {
        let mut matching = Vec::new();
        for id in &ids {
            let task = tasks::view(store, agent, caller, id).await?.task;
            let time = task
                .status
                .timestamp
                .as_deref()
                .and_then(crate::a2a::timestamp_millis)
                .unwrap_or(0);
            if request.status.is_some_and(|s| s != task.status.state)
                || after_ms.is_some_and(|a| time < a)
            {
                continue;
            }
            matching.push(task);
        }
        let total = matching.len();
        (total, matching.into_iter().skip(skip).take(size).collect())
    } else {
        let mut page = Vec::new();
        for id in ids.iter().skip(skip).take(size) {
            page.push(tasks::view(store, agent, caller, id).await?.task);
        }
        (ids.len(), page)
    };
    let artifacts = request.include_artifacts.unwrap_or(false);
    let page: Vec<Task> = chosen
        .into_iter()
        .map(|t| tasks::trimmed(t, request.history_length, artifacts))
        .collect();
    let next = skip + page.len();
    Ok(ListTasksResponse {
        page_size: page.len() as i32,
        tasks: page,
        next_page_token: if next < total {
            next.to_string()
        } else {
            String::new()
        },
        total_size: i32::try_from(total).unwrap_or(i32::MAX),
    })
}

/// `ListTasks` from the HTTP+JSON binding's query.
pub fn list_from_query(query: &str) -> Result<ListTasksRequest, A2aError> {
    let mut map = serde_json::Map::new();
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        let value = match k.as_ref() {
            "pageSize" | "historyLength" => Value::String(v.into_owned()),
            "includeArtifacts" => Value::Bool(v == "true"),
            _ => Value::String(v.into_owned()),
        };
        map.insert(k.into_owned(), value);
    }
    map.remove(crate::a2a::VERSION_HEADER);
    serde_json::from_value(Value::Object(map))
        .map_err(|e| A2aError::InvalidParams(format!("the query does not fit ListTasks: {e}")))
}

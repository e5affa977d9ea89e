//! A task's updates as they happen: the task first, then a status update at every change of
//! state and an artifact update for every message the agent says in it, until it settles
//! (a terminal or interrupted state). Woken by the conversation's live events (the agent's
//! messages, and its `idle` once the cycle is over), with a slow look as the fallback for a
//! live event lost on the way.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use futures::stream::{self, Stream};
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use crate::a2a::{A2aError, StreamResponse, Task, TaskArtifactUpdateEvent, TaskStatusUpdateEvent};
use crate::identity::AgentKey;

use super::super::auth::Entity;
use super::super::sse::{Item, Subscription};
use super::super::Gateway;
use super::tasks;

/// How often a task is looked at when no live event came.
const FALLBACK_LOOK: Duration = Duration::from_secs(1);

/// What a watch needs to look at its task again.
pub(super) struct Watch {
    pub gw: Gateway,
    pub agent: AgentKey,
    pub caller: Entity,
    pub task_id: String,
    pub live: Subscription,
    /// When to stop watching (the task is returned as it is then).
    pub until: Option<Instant>,
}

struct State {
    watch: Watch,
    queue: VecDeque<StreamResponse>,
    sent: HashSet<String>,
    last: Option<Task>,
    done: bool,
}

impl Watch {
    /// A watch of task `task_id` of `caller` with `agent`, woken by `live` (the task's
    /// conversation), with no deadline.
    pub fn new(
        gw: &Gateway,
        agent: &AgentKey,
        caller: &Entity,
        task_id: String,
        live: Subscription,
    ) -> Self {
        Self {
            gw: gw.clone(),
            agent: agent.clone(),
            caller: caller.clone(),
            task_id,
            live,
            until: None,
        }
    }

    /// The updates, starting with `first` (the task as just read): every item is what the
    /// stream sends; the stream ends after the task settles, at `until`, or when the
    /// gateway shuts down. A data-plane error ends it with the error.
    pub fn updates(
        self,
        first: Task,
    ) -> impl Stream<Item = Result<StreamResponse, A2aError>> + Send + 'static {
        let mut state = State {
            watch: self,
            queue: VecDeque::new(),
            sent: first
                .artifacts
                .iter()
                .map(|a| a.artifact_id.clone())
                .collect(),
            last: None,
            done: tasks::is_settled(&first),
        };
        state.queue.push_back(StreamResponse::Task(first.clone()));
        state.last = Some(first);
        stream::unfold(state, |mut s| async move {
            loop {
                if let Some(item) = s.queue.pop_front() {
                    return Some((Ok(item), s));
                }
                if s.done {
                    return None;
                }
                if !s.wait().await {
                    return None;
                }
                match tasks::view(
                    s.watch.gw.inner.store.as_ref(),
                    &s.watch.agent,
                    &s.watch.caller,
                    &s.watch.task_id,
                )
                .await
                {
                    Ok(view) => s.changed(view.task),
                    Err(e) => {
                        s.done = true;
                        return Some((Err(e), s));
                    }
                }
            }
        })
    }

    /// The task once it settles (or as it is at `until`), read whole.
    pub async fn settled(self, first: Task) -> Result<Task, A2aError> {
        use futures::StreamExt as _;
        let (gw, agent, caller, id) = (
            self.gw.clone(),
            self.agent.clone(),
            self.caller.clone(),
            self.task_id.clone(),
        );
        let updates = self.updates(first);
        futures::pin_mut!(updates);
        while let Some(item) = updates.next().await {
            item?;
        }
        Ok(tasks::view(gw.inner.store.as_ref(), &agent, &caller, &id)
            .await?
            .task)
    }
}

impl State {
    /// Waits for a reason to look again; `false` when the watch is over.
    async fn wait(&mut self) -> bool {
        let until = self.watch.until;
        let mut shutdown = self.watch.gw.inner.shutdown.clone();
        let deadline = async move {
            match until {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = self.next_change() => r || {
                // The live stream ended: fall back to looking now and then.
                tokio::time::sleep(FALLBACK_LOOK).await;
                true
            },
            () = tokio::time::sleep(FALLBACK_LOOK) => true,
            () = deadline => false,
            _ = async move { shutdown.wait_for(|s| *s).await.is_ok() } => false,
        }
    }

    /// Waits for a live event that may change the task: any but the agent's streamed text
    /// (a `delta` per piece, which changes neither its state nor its artifacts, so the task
    /// is not read again for each). `false` when the live stream ended.
    async fn next_change(&mut self) -> bool {
        loop {
            match self.watch.live.rx.recv().await {
                Ok(Item::Frame(f)) if f.event == "delta" => continue,
                Err(RecvError::Closed) => return false,
                _ => return true,
            }
        }
    }

    /// Queues what changed between the last look and `task`.
    fn changed(&mut self, task: Task) {
        let ids = (task.id.clone(), task.context_id.clone().unwrap_or_default());
        for a in &task.artifacts {
            if self.sent.insert(a.artifact_id.clone()) {
                self.queue
                    .push_back(StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
                        task_id: ids.0.clone(),
                        context_id: ids.1.clone(),
                        artifact: a.clone(),
                        append: false,
                        last_chunk: true,
                        metadata: None,
                    }));
            }
        }
        let moved = self
            .last
            .as_ref()
            .is_none_or(|l| l.status.state != task.status.state);
        if moved {
            self.queue
                .push_back(StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
                    task_id: ids.0,
                    context_id: ids.1,
                    status: task.status.clone(),
                    metadata: None,
                }));
        }
        self.done = tasks::is_settled(&task);
        self.last = Some(task);
    }
}

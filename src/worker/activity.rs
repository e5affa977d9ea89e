//! Telling people what an agent is doing, and what goes wrong: activity in its spaces (what
//! `chat` shows as "is thinking…", "is using …", or an error with what happens next), and the
//! model's health in the data plane, from which the operator writes the Agent's
//! `ModelAvailable` condition.

use std::time::Duration;

use tracing::{debug, warn};

use super::cycle::Agentlet;
use crate::identity::SpaceKey;
use crate::model::ModelError;
use crate::store::{now_ms, InboxEvent, LiveEvent, ModelHealth, ToolRecord};

/// What happens after a failed cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// The same events are tried again after this long.
    RetryIn(Duration),
    /// The model refused them repeatedly: they are recorded as failed and not retried.
    GaveUp,
}

impl Agentlet {
    /// Shows `activity` ("thinking", "idle") in `space`.
    pub(crate) async fn activity(&self, space: Option<&str>, activity: &str) {
        self.publish_activity(space, activity, None, None).await;
    }

    /// Shows in `space` that the agent is running `tool`.
    pub(crate) async fn tool_activity(&self, space: Option<&str>, tool: &str) {
        self.publish_activity(space, "tool", Some(tool.to_string()), None)
            .await;
    }

    /// Publishes what the agent is doing in `space` (nothing without a space).
    pub(crate) async fn publish_activity(
        &self,
        space: Option<&str>,
        activity: &str,
        tool: Option<String>,
        detail: Option<String>,
    ) {
        let Some(space) = space else { return };
        let event = LiveEvent::Activity {
            sender: self.me(),
            activity: activity.into(),
            tool,
            detail,
        };
        if let Err(e) = self
            .store
            .publish_live(
                &SpaceKey::new(self.key.namespace.clone(), space.to_string()),
                &event,
            )
            .await
        {
            debug!(error = %e, "activity not published");
        }
    }

    /// Where what happened to a cycle over `events` is said: the spaces of its events, else
    /// its `active` space, else the agent's first space.
    pub(crate) fn told_in(&self, events: &[InboxEvent], active: Option<&str>) -> Vec<String> {
        let mut spaces: Vec<String> = events.iter().filter_map(|e| e.space.clone()).collect();
        spaces.sort_unstable();
        spaces.dedup();
        if spaces.is_empty() {
            spaces.extend(
                active
                    .or_else(|| self.agent.spec.spaces.first().map(String::as_str))
                    .map(str::to_string),
            );
        }
        spaces
    }

    /// Says in the spaces of `events` (else the agent's first space) that the cycle failed and
    /// what happens next; counts it; records the model's health when it changed.
    pub async fn report_failure(&self, error: &ModelError, events: &[InboxEvent], next: Next) {
        let (ns, name) = (self.key.namespace.as_str(), self.key.name.as_str());
        self.metrics
            .model_errors
            .with_label_values(&[ns, name, error.failure.as_str()])
            .inc();
        let then = match next {
            Next::RetryIn(d) => format!("retrying in {}s", d.as_secs().max(1)),
            Next::GaveUp => "gave up on these messages after repeated refusals".to_string(),
        };
        let detail = format!("{error}; {then}");
        for space in self.told_in(events, None) {
            self.publish_activity(Some(&space), "error", None, Some(detail.clone()))
                .await;
        }
        self.record_model(ModelHealth {
            available: false,
            reason: error.failure.reason().into(),
            message: error.to_string(),
            since_ms: now_ms(),
        })
        .await;
    }

    /// Records that the model answered (after a failure, or for the first time).
    pub async fn report_success(&self) {
        self.record_model(ModelHealth {
            available: true,
            reason: "Available".into(),
            message: "the model answered the last cycle".into(),
            since_ms: now_ms(),
        })
        .await;
    }

    /// Reports the tools the agent has now (`status.tools`, `ToolsReady`) when they differ
    /// from what was last reported.
    pub async fn report_tools(&self) {
        let tools: Vec<ToolRecord> = self
            .toolbox()
            .status()
            .iter()
            .map(ToolRecord::from)
            .collect();
        let listed = self.toolbox().listed();
        let mut last = self.tools_reported.lock().await;
        if last.as_ref() == Some(&(tools.clone(), listed.clone())) {
            return;
        }
        if let Err(e) = self.store.set_tools(&self.key, &tools).await {
            warn!(agent = %self.key, error = %e, "tools not reported");
            return;
        }
        // What a rehearsal offers of them: kept when it fits its bound, else said.
        match serde_json::to_string(&listed) {
            Ok(json) if json.len() <= crate::store::TOOL_SPECS_BYTES => {
                if let Err(e) = self.store.set_tool_specs(&self.key, &json).await {
                    warn!(agent = %self.key, error = %e, "tool specs not recorded");
                    return;
                }
            }
            Ok(json) => {
                // None rather than an outdated list: a rehearsal then says its calls were not
                // replayed.
                warn!(agent = %self.key, bytes = json.len(), "tool specs not recorded for rehearsals: over 1 MiB");
                if let Err(e) = self.store.set_tool_specs(&self.key, "[]").await {
                    warn!(agent = %self.key, error = %e, "tool specs not recorded");
                    return;
                }
            }
            Err(e) => warn!(agent = %self.key, error = %e, "tool specs not recorded"),
        }
        *last = Some((tools, listed));
    }

    /// Writes the model's health when it differs from what was last written (the time of a
    /// change is kept while nothing changes).
    async fn record_model(&self, health: ModelHealth) {
        let mut last = self.model_health.lock().await;
        let same = last.as_ref().is_some_and(|l| {
            l.available == health.available
                && l.reason == health.reason
                && l.message == health.message
        });
        if same {
            return;
        }
        match self.store.set_model_health(&self.key, &health).await {
            Ok(()) => *last = Some(health),
            Err(e) => warn!(agent = %self.key, error = %e, "model health not recorded"),
        }
    }
}

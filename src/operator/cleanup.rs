//! A deleted Agent (under the Agent controller's finalizer): its data-plane state (inbox,
//! consciousness, checkpoints, memories, goals, plans, lease, registration) and its archived
//! checkpoints are removed, or with `consciousness.retainOnDelete` only its registration. A
//! data plane or an archive that cannot be reached holds the deletion for at most the cleanup
//! timeout (a `DataPlaneCleanup` condition says why); after it the Agent goes and a Warning
//! Event names what is left behind.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::ResourceExt;
use tracing::{info, instrument, warn};

use super::agent::write_status;
use super::context::{Context, Error};
use super::status::{self, Cond};
use crate::archive::Archive;
use crate::crd::Agent;
use crate::identity::AgentKey;

/// Condition while a deleted Agent's data-plane state cannot be removed.
pub const DATA_PLANE_CLEANUP: &str = "DataPlaneCleanup";

/// How long one attempt to remove an agent's data-plane state may take.
const CLEANUP_ATTEMPT: Duration = Duration::from_secs(10);

/// What one attempt removed.
struct Removal {
    /// Why the data-plane state is not removed, if it is not.
    data_plane: Option<String>,
    /// The archived checkpoints removed, or why not; none without an archive (or when kept).
    archived: Option<Result<usize, String>>,
    /// Where the agent's archived checkpoints are, with an archive.
    archive_url: Option<String>,
}

impl Removal {
    /// Why the archived checkpoints at their URL are not removed, if they are not.
    fn archive_failure(&self) -> Option<(&str, &str)> {
        match (&self.archived, &self.archive_url) {
            (Some(Err(e)), Some(url)) => Some((url.as_str(), e.as_str())),
            _ => None,
        }
    }
}

/// Removes a deleted Agent's state (see the module's documentation).
#[instrument(skip_all, fields(agent = %agent.name_any(), namespace = agent.namespace().unwrap_or_default()))]
pub async fn cleanup(agent: Arc<Agent>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = agent
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let key = AgentKey::new(ns, agent.name_any());
    let retain = agent.spec.consciousness.retain_on_delete;
    let archive = ctx
        .archive
        .as_ref()
        .and_then(|a| a.for_agent(&agent.spec.consciousness.archive));
    let removal = remove(&ctx, &key, retain, archive.as_ref()).await;
    if removal.data_plane.is_none() && removal.archive_failure().is_none() {
        ctx.scaler.forget(&key);
        deleted(&agent, &ctx, &key, retain, &removal).await;
        return Ok(Action::await_change());
    }
    not_removed(&agent, &ctx, &key, &removal).await
}

/// Removes the state in the data plane and in the archive at once, each attempt bounded.
async fn remove(ctx: &Context, key: &AgentKey, retain: bool, archive: Option<&Archive>) -> Removal {
    let data_plane = async {
        let attempt = async {
            if retain {
                ctx.store.unregister_agent(key).await.map(|_| ())
            } else {
                ctx.store.purge_agent(key).await
            }
        };
        match tokio::time::timeout(CLEANUP_ATTEMPT, attempt).await {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some(format!(
                "the data plane did not answer within {}s",
                CLEANUP_ATTEMPT.as_secs()
            )),
        }
    };
    let archived = async {
        let archive = archive.filter(|_| !retain)?;
        Some(
            match tokio::time::timeout(CLEANUP_ATTEMPT, archive.purge(key)).await {
                Ok(Ok(n)) => Ok(n),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!(
                    "object storage did not answer within {}s",
                    CLEANUP_ATTEMPT.as_secs()
                )),
            },
        )
    };
    let (data_plane, archived) = tokio::join!(data_plane, archived);
    Removal {
        data_plane,
        archived,
        archive_url: archive.map(|a| a.agent_url(key)),
    }
}

/// Says what was removed (or kept) once everything is done.
async fn deleted(agent: &Agent, ctx: &Context, key: &AgentKey, retain: bool, removal: &Removal) {
    let (reason, note) = if retain {
        let kept = removal
            .archive_url
            .as_ref()
            .map(|url| format!(", and its archived checkpoints at {url},"))
            .unwrap_or_default();
        (
            "DataPlaneRetained",
            format!("consciousness, inbox and checkpoints of {key}{kept} kept (consciousness.retainOnDelete)"),
        )
    } else {
        let removed = match (&removal.archived, &removal.archive_url) {
            (Some(Ok(n)), Some(url)) => format!(", and its {n} archived checkpoint(s) at {url},"),
            _ => String::new(),
        };
        (
            "DataPlaneRemoved",
            format!(
                "inbox, consciousness, checkpoints, memories, goals and plans of {key}{removed} removed"
            ),
        )
    };
    info!(%key, reason, "agent deleted");
    ctx.publish(agent, EventType::Normal, reason, "Delete", note)
        .await;
}

/// What could not be removed: retried (the deletion held, a `DataPlaneCleanup` condition
/// says why) until the cleanup timeout, then given up with a Warning naming what is left.
async fn not_removed(
    agent: &Agent,
    ctx: &Context,
    key: &AgentKey,
    removal: &Removal,
) -> Result<Action, Error> {
    let mut failures = Vec::new();
    let mut left = Vec::new();
    if let Some(failure) = &removal.data_plane {
        failures.push(format!("cannot remove the data-plane state: {failure}"));
        left.push(ctx.store.agent_data(key));
    }
    if let Some((url, failure)) = removal.archive_failure() {
        failures.push(format!(
            "cannot remove the archived checkpoints at {url}: {failure}"
        ));
        left.push(format!("the archived checkpoints at {url}"));
    }
    let failure = failures.join("; ");
    let since = agent
        .metadata
        .deletion_timestamp
        .as_ref()
        .map_or_else(Timestamp::now, |t| t.0);
    let waited = Timestamp::now().duration_since(since);
    let limit = ctx.scaler.cleanup_timeout();
    if waited.as_secs() >= i64::try_from(limit.as_secs()).unwrap_or(i64::MAX) {
        ctx.scaler.forget(key);
        warn!(%key, error = %failure, "giving up removing the agent's state");
        let note = format!(
            "gave up removing the agent's state after {}s ({failure}); {} are left behind",
            limit.as_secs(),
            left.join(" and ")
        );
        ctx.publish(
            agent,
            EventType::Warning,
            "DataPlaneCleanupAbandoned",
            "Delete",
            note,
        )
        .await;
        return Ok(Action::await_change());
    }
    let message = format!(
        "{failure}; retrying for up to {}s after deletion, then the Agent is deleted and the state left behind",
        limit.as_secs()
    );
    let reason = if removal.data_plane.is_some() {
        "DataPlaneUnreachable"
    } else {
        "ArchiveUnreachable"
    };
    let previous = agent.status.clone().unwrap_or_default();
    let mut own = status::reconcile_part(&previous);
    let cond = Cond::fail(DATA_PLANE_CLEANUP, reason, message.clone());
    own.conditions = status::merge(
        &previous.conditions,
        std::slice::from_ref(&cond),
        agent.metadata.generation,
        Timestamp::now(),
    );
    if own != status::reconcile_part(&previous) {
        ctx.publish(agent, EventType::Warning, reason, "Delete", message.clone())
            .await;
        write_status(ctx, &key.namespace, &key.name, &own).await?;
    }
    Err(Error::CleanupPending(message))
}

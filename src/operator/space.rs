//! The Space controller: membership in the data plane and `status.members`.
//!
//! Members are derived by [`crate::membership::derive`] from the Agents in the cache; the
//! controller also runs when an Agent changes, so adding a space to an Agent updates the data
//! plane and the Space's status within seconds. A finalizer removes the membership from the
//! data plane when the Space is deleted.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{finalizer, Event as Finalizer};
use kube::{Api, ResourceExt};
use tracing::{info, instrument, warn};

use super::build::FIELD_MANAGER;
use super::context::{Context, Error};
use super::status::{self, Cond};
use crate::crd::{Agent, MemberKind, Space, SpaceStatus};
use crate::identity::SpaceKey;
use crate::membership::{self};

/// Finalizer that removes a deleted Space's membership from the data plane.
pub const FINALIZER: &str = "agentfleet.dev/membership";

/// How long a deleted Space waits for an unreachable data plane before it is let go (the
/// orphan sweep removes the leftover membership later).
const CLEANUP_GIVE_UP: Duration = Duration::from_secs(120);

/// Reconciles one Space.
#[instrument(skip_all, fields(space = %space.name_any(), namespace = space.namespace().unwrap_or_default()))]
pub async fn reconcile(space: Arc<Space>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = space
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let api: Api<Space> = Api::namespaced(ctx.client.clone(), &ns);
    finalizer(&api, FINALIZER, space, |event| async {
        match event {
            Finalizer::Apply(space) => apply(space, &ctx).await,
            Finalizer::Cleanup(space) => cleanup(space, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

async fn apply(space: Arc<Space>, ctx: &Context) -> Result<Action, Error> {
    let key = SpaceKey::of(&space);
    // Never derive from a half-filled cache: that would drop members from the data plane.
    ctx.caches_synced().await?;
    let agents = ctx.agents.state();
    let agent_refs: Vec<&Agent> = agents
        .iter()
        .map(Arc::as_ref)
        .filter(|a| a.namespace().as_deref() == Some(key.namespace.as_str()))
        .collect();
    let members = membership::derive(&agent_refs, &[&space])
        .remove(&key)
        .unwrap_or_default();

    let previous = space.status.clone().unwrap_or_default();
    let people = membership::people(&space);
    let valid = if people.refused.is_empty() {
        Cond::ok(
            "MembersValid",
            "MembersValid",
            "every member names someone".to_string(),
        )
    } else {
        Cond::fail("MembersValid", "InvalidMember", people.refused.join("; "))
    };
    let record = membership::record(&space, &members);
    let applied = ctx.store.apply_space(&key, &record).await;
    let ready = match &applied {
        Ok(_) => Cond::ok(
            "Ready",
            "MembershipApplied",
            format!("{} member(s) in the data plane", members.len()),
        ),
        Err(e) => Cond::fail(
            "Ready",
            "StoreUnavailable",
            format!("membership not applied: {e}"),
        ),
    };
    let status = SpaceStatus {
        observed_generation: space.metadata.generation,
        member_count: u32::try_from(members.len()).unwrap_or(u32::MAX),
        groups: people.groups,
        conditions: status::merge(
            &previous.conditions,
            &[ready.clone(), valid.clone()],
            space.metadata.generation,
            Timestamp::now(),
        ),
        members: members.clone(),
    };
    if Some(&status) != space.status.as_ref() {
        let api: Api<Space> = Api::namespaced(ctx.client.clone(), &key.namespace);
        let patch = serde_json::json!({
            "apiVersion": "agentfleet.dev/v1alpha1",
            "kind": "Space",
            "status": status,
        });
        api.patch_status(
            &space.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(patch),
        )
        .await
        .map_err(Error::Kube)?;
    }
    let was_valid = status::find(&previous.conditions, "MembersValid").map(|c| c.message.as_str());
    if !people.refused.is_empty() && was_valid != Some(valid.message.as_str()) {
        ctx.publish(
            &*space,
            EventType::Warning,
            "InvalidMember",
            "ApplyMembership",
            valid.message.clone(),
        )
        .await;
    }
    let was_ready = status::find(&previous.conditions, "Ready").map(|c| c.reason.as_str());
    match applied {
        Ok(changed) => {
            if changed || was_ready == Some("StoreUnavailable") {
                let names: Vec<String> = members
                    .iter()
                    .map(|m| match m.kind {
                        MemberKind::Agent => format!("agent {}", m.id),
                        MemberKind::Human => format!("human {}", m.id),
                    })
                    .collect();
                info!(members = members.len(), "membership applied");
                ctx.publish(
                    &*space,
                    EventType::Normal,
                    "MembershipApplied",
                    "ApplyMembership",
                    if names.is_empty() {
                        "no members".to_string()
                    } else {
                        format!("members: {}", names.join(", "))
                    },
                )
                .await;
            }
            Ok(Action::requeue(Duration::from_secs(300)))
        }
        Err(e) => {
            if was_ready != Some("StoreUnavailable") {
                ctx.publish(
                    &*space,
                    EventType::Warning,
                    "StoreUnavailable",
                    "ApplyMembership",
                    ready.message,
                )
                .await;
            }
            Err(Error::Store(e))
        }
    }
}

async fn cleanup(space: Arc<Space>, ctx: &Context) -> Result<Action, Error> {
    let key = SpaceKey::of(&space);
    match ctx.store.remove_space(&key).await {
        Ok(_) => {
            info!("membership removed from the data plane");
            Ok(Action::await_change())
        }
        Err(e) => {
            let deleting_for = space
                .metadata
                .deletion_timestamp
                .as_ref()
                .and_then(|t| Timestamp::now().duration_since(t.0).try_into().ok())
                .unwrap_or(Duration::ZERO);
            if deleting_for < CLEANUP_GIVE_UP {
                return Err(Error::Store(e));
            }
            warn!(error = %crate::report::chain(&e), "data plane unreachable; letting the Space go, the orphan sweep removes its membership later");
            ctx.publish(
                &*space,
                EventType::Warning,
                "MembershipNotRemoved",
                "RemoveMembership",
                format!(
                    "data plane unreachable for {}s: {e}",
                    deleting_for.as_secs()
                ),
            )
            .await;
            Ok(Action::await_change())
        }
    }
}

/// Removes from the data plane the membership of spaces that no longer exist (left behind
/// when a Space was deleted while the data plane was unreachable), never an A2A
/// conversation's. Returns how many.
pub async fn sweep_orphans(ctx: &Context) -> Result<usize, Error> {
    ctx.caches_synced().await?;
    let existing: std::collections::BTreeSet<SpaceKey> =
        ctx.spaces.state().iter().map(|s| SpaceKey::of(s)).collect();
    let mut removed = 0;
    for key in ctx.store.spaces().await? {
        // An A2A conversation has no Space object: the gateway made it, and it is kept.
        if !existing.contains(&key) && !key.is_conversation() {
            ctx.store.remove_space(&key).await?;
            info!(space = %key, "removed orphaned space membership");
            removed += 1;
        }
    }
    Ok(removed)
}

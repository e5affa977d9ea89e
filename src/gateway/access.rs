//! Who may do what to an agent itself — read its consciousness, its calls, restore it —
//! decided by the cluster's RBAC with a `SubjectAccessReview` on the Agent: a verb on a
//! subresource of `agents` (`get agents/consciousness`, `update agents/consciousness`,
//! `get agents/calls`) that a Role grants, so "who may read or restore an agent's memory" is
//! a Role in Git. Only a Kubernetes identity is reviewed; in `agentfleet dev` (no cluster,
//! one person's machine) every signed-in person may.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::Api;
use tracing::warn;

use super::auth::{Entity, EntityKind, TokenHash};
use super::error::{quote, ApiError};
use crate::identity::AgentKey;

/// What is done to an agent, as RBAC names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// `get agents/consciousness`: read its consciousness, memories, goals, checkpoints.
    ReadConsciousness,
    /// `update agents/consciousness`: restore it to a checkpoint.
    Restore,
    /// `get agents/calls`: read the calls it waits on.
    ReadCalls,
}

impl Operation {
    /// The verb and the subresource of `agents`.
    pub fn rbac(self) -> (&'static str, &'static str) {
        match self {
            Operation::ReadConsciousness => ("get", "consciousness"),
            Operation::Restore => ("update", "consciousness"),
            Operation::ReadCalls => ("get", "calls"),
        }
    }
}

/// How the gateway decides.
pub enum Access {
    /// With the cluster's RBAC.
    Rbac(kube::Client),
    /// Every signed-in person (`agentfleet dev`).
    Everyone,
}

impl Access {
    /// Whether `caller` (who presented `token`) may do `op` to `agent`: a 403 that says which
    /// verb on which subresource is missing, or a 503 when the API server cannot say.
    pub async fn check(
        &self,
        caller: &Entity,
        token: &TokenHash,
        op: Operation,
        agent: &AgentKey,
    ) -> Result<(), ApiError> {
        let (verb, subresource) = op.rbac();
        let client = match self {
            Access::Everyone if caller.kind == EntityKind::Human => return Ok(()),
            Access::Everyone => {
                return Err(ApiError::forbidden(
                    "a service may not inspect or restore agents",
                ))
            }
            Access::Rbac(client) => client,
        };
        let TokenHash::Kubernetes { user, .. } = token else {
            return Err(ApiError::forbidden(format!(
                "to {verb} agents/{subresource} sign in with a Kubernetes token: RBAC decides who may, and a token of the gateway's token file is no Kubernetes identity"
            )));
        };
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.clone()),
                groups: Some(caller.groups.clone()),
                resource_attributes: Some(ResourceAttributes {
                    group: Some("agentfleet.dev".into()),
                    resource: Some("agents".into()),
                    subresource: Some(subresource.into()),
                    verb: Some(verb.into()),
                    namespace: Some(agent.namespace.clone()),
                    name: Some(agent.name.clone()),
                    ..ResourceAttributes::default()
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(client.clone());
        let params = PostParams::default();
        let asked = tokio::time::timeout(
            super::kubernetes::REVIEW_DEADLINE,
            api.create(&params, &review),
        );
        let answer = asked
            .await
            .map_err(|_| {
                warn!("an access review could not be asked: the API server did not answer in time");
                ApiError::unavailable_auth()
            })?
            .map_err(|e| {
                let why = match &e {
                    kube::Error::Api(status) => format!(
                        "the API server answered {} {} (may the gateway's ServiceAccount create subjectaccessreviews?)",
                        status.code, status.reason
                    ),
                    _ => "the API server could not be reached".to_string(),
                };
                warn!(why, "an access review could not be asked");
                ApiError::unavailable_auth()
            })?;
        if answer.status.is_some_and(|s| s.allowed) {
            return Ok(());
        }
        Err(ApiError::forbidden(format!(
            "{} may not {verb} agents/{subresource} of {} (a Role granting it, in the Agent's namespace, would allow it)",
            quote(user),
            quote(&agent.to_string())
        )))
    }
}

#[cfg(test)]
mod tests;

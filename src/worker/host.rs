//! What the agents of one process are made with, and making one from its manifest: its
//! model client, its tools (with the Secrets of its namespace), its archive. One rule for the
//! dedicated worker, `agentfleet dev` and the pools.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Context as _;

use crate::crd::Agent;
use crate::identity::AgentKey;
use crate::store::Store;
use crate::telemetry::WorkerMetrics;
use crate::worker::cycle::Agentlet;
use crate::worker::tools::{self, secrets::Secrets};

/// What every agent of a process is made with.
#[derive(Clone)]
pub struct Host {
    /// The data plane.
    pub store: Arc<dyn Store>,
    /// The process's metrics.
    pub metrics: WorkerMetrics,
    /// The model API key of every agent (`AGENTFLEET_MODEL_API_KEY`: a dedicated worker's,
    /// `dev`'s); none: each agent's own, read from its `apiKeySecretRef` in [`Host::secrets`]
    /// (a pool's).
    pub api_key: Option<String>,
    /// The Secrets of each namespace that tools may read (`headersFrom`).
    pub secrets: BTreeMap<String, Secrets>,
    /// The gateway's base URL for async tools' results.
    pub callback_url: Option<String>,
    /// Where checkpoints are archived.
    pub archive: Option<crate::archive::Archive>,
}

/// The key of the agent `agent` describes (`default` namespace when none is given).
pub fn key_of(agent: &Agent) -> AgentKey {
    AgentKey::new(
        agent
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        agent.metadata.name.clone().unwrap_or_default(),
    )
}

impl Host {
    /// The agent `agent` describes, ready to run cycles.
    pub fn agentlet(&self, agent: &Agent) -> anyhow::Result<Agentlet> {
        let key = key_of(agent);
        let secrets = self
            .secrets
            .get(&key.namespace)
            .cloned()
            .unwrap_or_default();
        let api_key = match (&self.api_key, &agent.spec.model.api_key_secret_ref) {
            (Some(k), _) => Some(k.clone()),
            (None, Some(r)) => Some(
                secrets
                    .get(&r.name)
                    .map_err(anyhow::Error::msg)?
                    .remove(&r.key)
                    .with_context(|| {
                        format!(
                            "Secret {:?} has no key {:?} (model.apiKeySecretRef)",
                            r.name, r.key
                        )
                    })?,
            ),
            (None, None) => None,
        };
        let model = crate::model::from_spec(&agent.spec.model, &key.name, api_key)
            .with_context(|| format!("agent {key}: model"))?;
        let external = tools::external(
            &key,
            &agent.spec.tools,
            &tools::ExternalContext {
                store: self.store.clone(),
                secrets,
                callback_url: self.callback_url.clone(),
            },
        );
        let agentlet = Agentlet::new(
            agent.clone(),
            key,
            self.store.clone(),
            Arc::from(model),
            self.metrics.clone(),
        )
        .with_external(external);
        Ok(match &self.archive {
            Some(archive) => agentlet.with_archive(archive),
            None => agentlet,
        })
    }
}

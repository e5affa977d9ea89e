//! What the agents of one process are made with, and making one from its manifest: its
//! model client, its tools (with the Secrets of its namespace), its archive. One rule for the
//! dedicated worker, `agentfleet dev` and the pools.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Context as _;

use crate::crd::{Agent, ModelSettings};
use crate::identity::AgentKey;
use crate::model::ApiKey;
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
    /// Which model of each fallback list answers, shared by the agents that ask it.
    pub lists: crate::model::fallback::Lists,
}

/// The key of the `index`th model of an agent's list: its Secret's, read at each request (a
/// rotated key is used without a restart); for the first model, the process's own (`given`,
/// `AGENTFLEET_MODEL_API_KEY` outside a pod) when it names no Secret it can read. A model
/// never gets another's key.
pub fn model_key(
    given: Option<&str>,
    secrets: &Secrets,
    index: usize,
    settings: &ModelSettings,
) -> ApiKey {
    let given = given.filter(|_| index == 0).map(str::to_string);
    let Some(r) = settings.api_key_secret_ref.clone() else {
        return given.map_or(ApiKey::None, ApiKey::Given);
    };
    let secrets = secrets.clone();
    ApiKey::Read(Arc::new(move || match secrets.value(&r.name, &r.key) {
        Ok(key) => Ok(key),
        Err(e) => given
            .clone()
            .ok_or_else(|| format!("{e} (apiKeySecretRef)")),
    }))
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
    /// The Secrets the agents of `namespace` may read.
    fn secrets_of(&self, namespace: &str) -> Secrets {
        self.secrets.get(namespace).cloned().unwrap_or_default()
    }

    /// The model `agent` thinks with (its list resolved, see [`crate::models`]), each model
    /// with its own key, every change of the model in use counted and logged.
    pub fn model(&self, agent: &Agent) -> anyhow::Result<Box<dyn crate::model::Model>> {
        let key = key_of(agent);
        let secrets = self.secrets_of(&key.namespace);
        let given = self.api_key.as_deref();
        let switched = self.metrics.model_fallbacks.clone();
        let who = key.clone();
        let on_switch: crate::model::fallback::OnSwitch = Box::new(move |s| {
            switched
                .with_label_values(&[&who.namespace, &who.name, &s.to, s.reason])
                .inc();
            tracing::warn!(agent = %who, from = %s.from, to = %s.to, reason = s.reason, "the agent's model changed");
        });
        // The same list in the same namespace (its settings included) is one list.
        let list = serde_json::to_string(&agent.spec.model).unwrap_or_default();
        let shared = (!agent.spec.model.fallback.is_empty())
            .then(|| self.lists.state(&format!("{}\n{list}", key.namespace)));
        crate::model::from_spec(
            &agent.spec.model,
            &key.name,
            &|i, settings| model_key(given, &secrets, i, settings),
            on_switch,
            shared,
        )
        .with_context(|| format!("agent {key}: model"))
    }

    /// The agent `agent` describes, ready to run cycles.
    pub fn agentlet(&self, agent: &Agent) -> anyhow::Result<Agentlet> {
        let key = key_of(agent);
        let secrets = self.secrets_of(&key.namespace);
        let model = self.model(agent)?;
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

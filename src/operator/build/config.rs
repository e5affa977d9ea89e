//! The worker's configuration: the rendered Agent manifest, its ConfigMap, and the hash of
//! everything that shapes the pod (a changed hash rolls it).

use super::*;
use crate::crd::ScalingSpec;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RenderedAgent<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: RenderedMeta<'a>,
    spec: &'a AgentSpec,
}

#[derive(Serialize)]
struct RenderedMeta<'a> {
    name: &'a str,
    namespace: &'a str,
    uid: &'a str,
    /// The spec's generation (archived with each checkpoint); it moves only with the spec.
    #[serde(skip_serializing_if = "Option::is_none")]
    generation: Option<i64>,
}

/// The Agent manifest the worker reads: apiVersion, kind, identity and the spec with every
/// default filled in. Deterministic: the same Agent renders to the same bytes.
pub fn render_manifest(agent: &Agent) -> Result<String, serde_yaml::Error> {
    render(agent, agent.metadata.generation, &agent.spec)
}

/// The configuration hash of an Agent's own worker: what the worker reads of its manifest and
/// what else shapes its pod ([`config_hash`]). Left out, so that changing them never replaces
/// a running worker: `spec.scaling` (read by the operator alone, which scales the Deployment),
/// `metadata.generation` (it moves with every spec change, also those left out; a change
/// the worker reads changes the spec's bytes anyway), and what a Model says
/// ([`model_as_named`]).
pub fn agent_config_hash(
    agent: &Agent,
    defaults: &WorkerDefaults,
) -> Result<String, serde_yaml::Error> {
    let spec = AgentSpec {
        scaling: ScalingSpec::default(),
        model: model_as_named(&agent.spec.model),
        ..agent.spec.clone()
    };
    let read = render(agent, None, &spec)?;
    Ok(config_hash(
        &read,
        defaults,
        &super::deployment::mounted_secrets(&agent.spec),
    ))
}

/// What of a (resolved) model rolls the worker: all of an inline model; only the name of a
/// Model it names. The worker follows its manifest in place, so a Model's change (endpoint,
/// key, fallbacks, the overrides beside `ref`) reaches it at its next cycle without a restart;
/// a new Secret to mount changes the mounted Secrets, which roll it.
fn model_as_named(model: &crate::crd::ModelSpec) -> crate::crd::ModelSpec {
    match &model.model_ref {
        Some(name) => crate::crd::ModelSpec {
            model_ref: Some(name.clone()),
            ..Default::default()
        },
        None => model.clone(),
    }
}

fn render(
    agent: &Agent,
    generation: Option<i64>,
    spec: &AgentSpec,
) -> Result<String, serde_yaml::Error> {
    let name = agent.name_any();
    let namespace = agent.namespace().unwrap_or_default();
    let uid = agent.uid().unwrap_or_default();
    serde_yaml::to_string(&RenderedAgent {
        api_version: "agentfleet.dev/v1alpha1",
        kind: "Agent",
        metadata: RenderedMeta {
            name: &name,
            namespace: &namespace,
            uid: &uid,
            generation,
        },
        spec,
    })
}

/// A short, stable hash of a rendered manifest and what else shapes the pod: the worker
/// defaults (the archive's environment as a digest: a new value is only read at the worker's
/// start, so it must roll the pod) and the names of the Secrets mounted in it (never their
/// values: a changed value reaches the worker in place, through the mounted files).
pub fn config_hash(manifest: &str, defaults: &WorkerDefaults, secrets: &[&str]) -> String {
    let mut h = Sha256::new();
    h.update(manifest.as_bytes());
    h.update(b"\0");
    h.update(defaults.image.as_bytes());
    h.update(b"\0");
    h.update(defaults.redis.fingerprint().as_bytes());
    for (name, value) in &defaults.redis_env {
        h.update(b"\0");
        h.update(name.as_bytes());
        h.update(b"=");
        h.update(value.as_bytes());
    }
    h.update(b"\0");
    h.update(
        defaults
            .callback_url
            .as_deref()
            .unwrap_or_default()
            .as_bytes(),
    );
    if let Some(archive) = &defaults.archive {
        h.update(b"\0");
        h.update(archive.fingerprint().as_bytes());
    }
    for name in secrets {
        h.update(b"\0secret:");
        h.update(name.as_bytes());
    }
    let digest = h.finalize();
    crate::hex(&digest[..8])
}

/// The ConfigMap holding the rendered manifest.
pub fn configmap(agent: &Agent, owner: &OwnerReference, manifest: &str) -> ConfigMap {
    let name = agent.name_any();
    ConfigMap {
        metadata: child_meta(agent, configmap_name(&name), owner),
        data: Some(BTreeMap::from([(
            AGENT_FILE_KEY.to_string(),
            manifest.to_string(),
        )])),
        ..ConfigMap::default()
    }
}

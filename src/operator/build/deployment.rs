//! An Agent's worker Deployment (its pod in `pod.rs`).

use super::*;

/// `--log-format`'s value for `format`.
pub(super) fn log_format_value(format: LogFormat) -> &'static str {
    match format {
        LogFormat::Text => "text",
        LogFormat::Json => "json",
    }
}

pub(super) fn selector_labels(agent: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".into(), "agentfleet-worker".into()),
        (AGENT_LABEL.into(), agent.into()),
    ])
}

/// The volume of ConfigMap `configmap`'s rendered manifest, and its mount at [`AGENT_DIR`]
/// (read-only): where a worker, or a rehearsal's Job, reads its Agent.
pub(super) fn manifest_volume(configmap: String) -> (Volume, VolumeMount) {
    (
        Volume {
            name: "agent".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: configmap,
                items: Some(vec![KeyToPath {
                    key: AGENT_FILE_KEY.into(),
                    path: AGENT_FILE_KEY.into(),
                    ..KeyToPath::default()
                }]),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        },
        VolumeMount {
            name: "agent".into(),
            mount_path: AGENT_DIR.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        },
    )
}

/// The Secrets of the keys of `spec`'s models (resolved) that its tools do not mount too.
fn key_secrets(spec: &AgentSpec) -> Vec<&str> {
    let tools = spec.tools.secrets();
    crate::models::key_secrets(&spec.model)
        .into_iter()
        .filter(|s| !tools.contains(s))
        .collect()
}

/// The Secrets a worker of `spec` (its model resolved) mounts at
/// `/etc/agentfleet/secrets/NAME`: its models' keys (read at each request, so that a rotated
/// key is used without a restart) and its tools' `headersFrom`.
pub fn mounted_secrets(spec: &AgentSpec) -> Vec<&str> {
    let mut names = crate::models::key_secrets(&spec.model);
    names.extend(spec.tools.secrets());
    names.sort_unstable();
    names.dedup();
    names
}

/// The worker Deployment: one pod running `agentfleet worker --agent /etc/agentfleet/agent/agent.yaml`,
/// strategy `Recreate` (two workers of one agent never overlap), non-root, read-only root
/// filesystem, no service-account token, each Secret of its models' keys and of the tools'
/// `headersFrom` mounted read-only at `/etc/agentfleet/secrets/NAME`, and
/// with an archive its Secret's variables as environment.
pub fn deployment(
    agent: &Agent,
    owner: &OwnerReference,
    defaults: &WorkerDefaults,
    config_hash: &str,
    replicas: Option<i32>,
) -> Deployment {
    let name = agent.name_any();
    let spec = &agent.spec;
    let config = manifest_volume(configmap_name(&name));
    let pod = pod::pod_spec(
        pod::Pod {
            base: &deployment_name(&name),
            worker: &spec.worker,
            args: vec![
                "worker".into(),
                "--agent".into(),
                AGENT_FILE.into(),
                "--metrics-addr".into(),
                format!("0.0.0.0:{WORKER_METRICS_PORT}"),
            ],
            env: Vec::new(),
            config,
            secrets: spec.tools.secrets(),
            secrets_optional: false,
            optional_secrets: key_secrets(spec),
            default_resources: pod::default_resources(),
        },
        defaults,
    );

    Deployment {
        metadata: child_meta(agent, deployment_name(&name), owner),
        spec: Some(DeploymentSpec {
            replicas,
            selector: LabelSelector {
                match_labels: Some(selector_labels(&name)),
                ..LabelSelector::default()
            },
            strategy: Some(DeploymentStrategy {
                type_: Some("Recreate".into()),
                ..DeploymentStrategy::default()
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels(&name)),
                    annotations: Some(BTreeMap::from([(
                        CONFIG_HASH_ANNOTATION.to_string(),
                        config_hash.to_string(),
                    )])),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

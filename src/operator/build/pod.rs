//! The pod every worker runs in, a dedicated worker's or a pool's: the operator's environment
//! (Redis, logs, traces, the pod's name, the gateway), the container (non-root, read-only root
//! filesystem, no privilege, the metrics port), the Secrets mounted read-only at
//! `/etc/agentfleet/secrets/NAME`, and the pod (no service-account token, seccomp, time for the
//! cycles under way to finish).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    ObjectFieldSelector, PodSecurityContext, PodSpec, ResourceRequirements, SeccompProfile,
    SecretVolumeSource, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::{
    archive, log_format_value, secret_volume_name, WorkerDefaults, CALLBACK_URL_ENV,
    LOG_FORMAT_ENV, OTLP_ENDPOINT_ENV, SECRETS_DIR, WORKER_METRICS_PORT, WORKER_UID,
};
use crate::crd::WorkerSpec;

/// What differs between the pods of a dedicated worker and of a pool.
pub(super) struct Pod<'a> {
    /// The Deployment's name, which the Secrets beside it are named after (the managed Redis
    /// URL, the archive).
    pub base: &'a str,
    /// The pod's part of the spec (image, resources, environment, placement).
    pub worker: &'a WorkerSpec,
    /// The container's arguments.
    pub args: Vec<String>,
    /// Environment of its own (after the operator's, before the spec's).
    pub env: Vec<EnvVar>,
    /// The configuration's volume and where it is mounted.
    pub config: (Volume, VolumeMount),
    /// The Secrets mounted at `SECRETS_DIR/NAME`.
    pub secrets: Vec<&'a str>,
    /// Whether the pod starts without them (a pool's: one agent's missing Secret must not
    /// keep the others from running).
    pub secrets_optional: bool,
    /// More Secrets mounted at `SECRETS_DIR/NAME`, the pod starting without them (models'
    /// keys: read at each request, a missing one fails only its model, which a fallback
    /// stands in for; one created later is mounted in place).
    pub optional_secrets: Vec<&'a str>,
    /// The resources unless the spec sets them.
    pub default_resources: ResourceRequirements,
}

/// The pod of a worker (see the module's doc).
pub(super) fn pod_spec(pod: Pod<'_>, defaults: &WorkerDefaults) -> PodSpec {
    let Pod {
        base: name,
        worker,
        args,
        env: own,
        config: (config_volume, config_mount),
        secrets,
        secrets_optional,
        optional_secrets,
        default_resources,
    } = pod;
    let mut env = vec![defaults.redis.env(name)];
    env.extend(defaults.redis_env.iter().map(|(name, value)| EnvVar {
        name: name.clone(),
        value: Some(value.clone()),
        ..EnvVar::default()
    }));
    env.extend([
        EnvVar {
            name: LOG_FORMAT_ENV.into(),
            value: Some(log_format_value(defaults.log_format).into()),
            ..EnvVar::default()
        },
        EnvVar {
            name: "AGENTFLEET_POD_NAME".into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    // Spelled out as the API server defaults it: a field it has to default
                    // makes every server-side apply a write (a new resourceVersion), and every
                    // write a new reconcile.
                    api_version: Some("v1".into()),
                    field_path: "metadata.name".into(),
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        },
    ]);
    env.extend(own);
    if let Some(url) = &defaults.callback_url {
        env.push(EnvVar {
            name: CALLBACK_URL_ENV.into(),
            value: Some(url.clone()),
            ..EnvVar::default()
        });
    }
    if let Some(endpoint) = defaults
        .otlp_endpoint
        .as_ref()
        .filter(|_| !worker.env.iter().any(|e| e.name == OTLP_ENDPOINT_ENV))
    {
        env.push(EnvVar {
            name: OTLP_ENDPOINT_ENV.into(),
            value: Some(endpoint.clone()),
            ..EnvVar::default()
        });
    }
    let (mut secret_volumes, mut secret_mounts) = secret_volumes(&secrets, secrets_optional);
    let (more_volumes, more_mounts) = self::secret_volumes(&optional_secrets, true);
    secret_volumes.extend(more_volumes);
    secret_mounts.extend(more_mounts);
    env.extend(worker.env.iter().cloned().map(|mut e| {
        // The API server's default, spelled out (see AGENTFLEET_POD_NAME above).
        if let Some(f) = e.value_from.as_mut().and_then(|v| v.field_ref.as_mut()) {
            f.api_version.get_or_insert_with(|| "v1".into());
        }
        e
    }));

    let container = Container {
        name: "worker".into(),
        image: Some(
            worker
                .image
                .clone()
                .unwrap_or_else(|| defaults.image.clone()),
        ),
        image_pull_policy: defaults.image_pull_policy.clone(),
        args: Some(args),
        env: Some(env),
        env_from: defaults
            .archive
            .as_ref()
            .map(|_| vec![archive::archive_env_from(name)]),
        ports: Some(vec![ContainerPort {
            name: Some("metrics".into()),
            container_port: WORKER_METRICS_PORT,
            protocol: Some("TCP".into()),
            ..ContainerPort::default()
        }]),
        resources: Some(worker.resources.clone().unwrap_or(default_resources)),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                ..Capabilities::default()
            }),
            ..SecurityContext::default()
        }),
        volume_mounts: Some(
            [
                config_mount,
                VolumeMount {
                    name: "tmp".into(),
                    mount_path: "/tmp".into(),
                    ..VolumeMount::default()
                },
            ]
            .into_iter()
            .chain(secret_mounts)
            .collect(),
        ),
        ..Container::default()
    };

    PodSpec {
        containers: vec![container],
        automount_service_account_token: Some(false),
        service_account_name: worker.service_account_name.clone(),
        node_selector: (!worker.node_selector.is_empty()).then(|| worker.node_selector.clone()),
        tolerations: (!worker.tolerations.is_empty()).then(|| worker.tolerations.clone()),
        // A cycle in flight is finished on SIGTERM; give it time.
        termination_grace_period_seconds: Some(120),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(WORKER_UID),
            run_as_group: Some(WORKER_UID),
            fs_group: Some(WORKER_UID),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                ..SeccompProfile::default()
            }),
            ..PodSecurityContext::default()
        }),
        volumes: Some(
            [
                config_volume,
                Volume {
                    name: "tmp".into(),
                    empty_dir: Some(EmptyDirVolumeSource {
                        size_limit: Some(Quantity("64Mi".into())),
                        ..EmptyDirVolumeSource::default()
                    }),
                    ..Volume::default()
                },
            ]
            .into_iter()
            .chain(secret_volumes)
            .collect(),
        ),
        ..PodSpec::default()
    }
}

/// A read-only volume and its mount for each Secret the tools take headers from (required:
/// a dedicated worker whose Secret is missing does not start, and `ToolsConfigured` says why;
/// a pool's are optional).
fn secret_volumes(secrets: &[&str], optional: bool) -> (Vec<Volume>, Vec<VolumeMount>) {
    secrets
        .iter()
        .map(|name| {
            let volume = secret_volume_name(name);
            (
                Volume {
                    name: volume.clone(),
                    secret: Some(SecretVolumeSource {
                        secret_name: Some((*name).to_string()),
                        optional: Some(optional),
                        ..SecretVolumeSource::default()
                    }),
                    ..Volume::default()
                },
                VolumeMount {
                    name: volume,
                    mount_path: format!("{SECRETS_DIR}/{name}"),
                    read_only: Some(true),
                    ..VolumeMount::default()
                },
            )
        })
        .unzip()
}

pub(super) fn default_resources() -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".into(), Quantity("10m".into())),
            ("memory".into(), Quantity("32Mi".into())),
        ])),
        limits: Some(BTreeMap::from([(
            "memory".into(),
            Quantity("256Mi".into()),
        )])),
        ..ResourceRequirements::default()
    }
}

//! Pure builders: from an Agent (or a Pool) to the objects the operator applies, one file per
//! object: `config.rs` the rendered manifest and its ConfigMap, `deployment.rs` and `pod.rs`
//! the worker, `secrets.rs` the Secrets beside it (`archive.rs` the archive's), `pool.rs` a
//! Pool's, `rehearsal.rs` a Rehearsal's Job. Here: the names, labels and defaults they share. No client, no I/O; unit tested
//! from YAML fixtures.

mod archive;
mod config;
mod deployment;
mod pod;
mod pool;
mod rehearsal;
mod secrets;

pub use self::archive::{archive_secret, archive_secret_name, WorkerArchive};
pub use self::config::{agent_config_hash, config_hash, configmap, render_manifest};
use self::deployment::log_format_value;
pub use self::deployment::{deployment, mounted_secrets};
pub use self::pool::{
    pool_configmap, pool_configmap_name, pool_deployment, pool_deployment_name,
    pool_network_policy, pool_pdb, pool_secrets, shard, PoolPods, MAX_SHARDS, POOL_AGENTS_DIR,
    POOL_LABEL, SHARD_LIMIT,
};
pub use self::rehearsal::{rehearsal_base, rehearsal_job_name, rehearsal_objects, REHEARSAL_LABEL};
use self::secrets::secret_env;
pub use self::secrets::{
    agent_worker_secrets, redis_secret, redis_secret_name, secret_volume_name, worker_secrets,
    RedisUrlSource, REDIS_SECRET_KEY,
};

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, EnvVar, EnvVarSource, KeyToPath, PodTemplateSpec, Secret,
    SecretKeySelector, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::ResourceExt;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::crd::{Agent, AgentSpec};
use crate::telemetry::LogFormat;

/// Field manager of every server-side apply the operator makes.
pub const FIELD_MANAGER: &str = "agentfleet-operator";
/// Value of `app.kubernetes.io/managed-by` on every child object.
pub const MANAGED_BY: &str = "agentfleet-operator";
/// Label naming the Agent a child belongs to.
pub const AGENT_LABEL: &str = "agentfleet.dev/agent";
/// Pod-template annotation carrying the rendered configuration's hash, so a change rolls the pod.
pub const CONFIG_HASH_ANNOTATION: &str = "agentfleet.dev/config-hash";
/// Where the rendered Agent manifest's ConfigMap is mounted (a directory of its own, so the
/// Secrets can be mounted beside it).
pub const AGENT_DIR: &str = "/etc/agentfleet/agent";
/// Where the worker finds the rendered Agent manifest.
pub const AGENT_FILE: &str = "/etc/agentfleet/agent/agent.yaml";
/// Where each Secret of the tools' `headersFrom` is mounted, as `SECRETS_DIR/NAME/KEY`.
pub use crate::secrets::MOUNT_DIR as SECRETS_DIR;
/// Key of the rendered manifest in the ConfigMap.
pub const AGENT_FILE_KEY: &str = "agent.yaml";
/// Port of the worker's `/metrics`.
pub const WORKER_METRICS_PORT: i32 = 9090;
/// Environment variable that carries the model API key.
pub const API_KEY_ENV: &str = crate::model::API_KEY_ENV;
/// Environment variable that carries the Redis URL.
pub const REDIS_URL_ENV: &str = "AGENTFLEET_REDIS_URL";
/// Environment variable that carries the gateway's URL that async tools' results are posted to.
pub const CALLBACK_URL_ENV: &str = "AGENTFLEET_CALLBACK_URL";
/// Environment variable that says how the worker writes its log lines.
pub const LOG_FORMAT_ENV: &str = "AGENTFLEET_LOG_FORMAT";
/// The standard OpenTelemetry variable naming where traces go.
pub const OTLP_ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// The user and group the worker runs as.
const WORKER_UID: i64 = 65532;

/// What the operator's own configuration contributes to every worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerDefaults {
    /// Image used when the Agent names none.
    pub image: String,
    /// Pull policy of the worker image; the cluster's default when unset.
    pub image_pull_policy: Option<String>,
    /// Where the workers get their Redis URL.
    pub redis: RedisUrlSource,
    /// The operator's Redis settings the workers share, as environment (name, value): its
    /// CA (certificates are public), the replicas writes wait for ([`crate::store::RedisArgs::worker_env`]).
    pub redis_env: Vec<(String, String)>,
    /// The gateway's base URL, where the services of async tools post their results (none:
    /// the workers offer no async tools).
    pub callback_url: Option<String>,
    /// How the workers write their log lines (`AGENTFLEET_LOG_FORMAT`).
    pub log_format: LogFormat,
    /// Where the workers export traces (`OTEL_EXPORTER_OTLP_ENDPOINT`, unless an Agent sets
    /// its own in `spec.worker.env`); none: no traces.
    pub otlp_endpoint: Option<String>,
    /// The archive of checkpoints (`--archive`), given to every worker in a Secret beside it
    /// ([`archive_secret`]); none: the workers archive nothing.
    pub archive: Option<WorkerArchive>,
}

/// Name of the worker Deployment of an Agent.
pub fn deployment_name(agent: &str) -> String {
    format!("{agent}-worker")
}

/// Name of the ConfigMap holding an Agent's rendered manifest.
pub fn configmap_name(agent: &str) -> String {
    format!("{agent}-agent")
}

/// Labels of every child of an Agent.
pub fn labels(agent: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".into(), "agentfleet-worker".into()),
        ("app.kubernetes.io/instance".into(), agent.into()),
        ("app.kubernetes.io/component".into(), "worker".into()),
        ("app.kubernetes.io/part-of".into(), "agentfleet".into()),
        ("app.kubernetes.io/managed-by".into(), MANAGED_BY.into()),
        (AGENT_LABEL.into(), agent.into()),
    ])
}

/// Metadata of a child object of an Agent: its namespace, labels and controller reference.
pub(super) fn child_meta(agent: &Agent, name: String, owner: &OwnerReference) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: agent.namespace(),
        labels: Some(labels(&agent.name_any())),
        owner_references: Some(vec![owner.clone()]),
        ..ObjectMeta::default()
    }
}

#[cfg(test)]
mod tests {
    use super::pod::default_resources;
    use super::*;
    use k8s_openapi::api::core::v1::Container;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use kube::Resource;

    pub(super) fn fixture(name: &str) -> Agent {
        let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
        serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
    }

    pub(super) fn defaults() -> WorkerDefaults {
        WorkerDefaults {
            image: "ghcr.io/agentfleet/agentfleet:0.1.0".into(),
            image_pull_policy: None,
            redis: RedisUrlSource::Value("redis://redis:6379".into()),
            redis_env: Vec::new(),
            callback_url: None,
            log_format: LogFormat::Json,
            otlp_endpoint: None,
            archive: None,
        }
    }

    /// The worker container of `deploy`.
    pub(super) fn worker_container(deploy: &Deployment) -> &Container {
        &deploy
            .spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
            .containers[0]
    }

    /// The Secret and key env var `var` of the worker container reads, asserting it is not inline.
    pub(super) fn secret_ref(deploy: &Deployment, var: &str) -> (String, String) {
        let env = worker_container(deploy)
            .env
            .as_ref()
            .unwrap()
            .iter()
            .find(|e| e.name == var)
            .unwrap();
        assert!(env.value.is_none(), "{var} is inline");
        let sel = env
            .value_from
            .as_ref()
            .unwrap()
            .secret_key_ref
            .as_ref()
            .unwrap();
        (sel.name.clone(), sel.key.clone())
    }

    #[test]
    fn redis_url_from_a_secret_never_inlines_it() {
        let agent = fixture("agent-scripted.yaml");
        let mut d = defaults();
        let inline = config_hash("m", &d, &[]);
        d.redis = RedisUrlSource::Secret {
            name: "redis-url".into(),
            key: "url".into(),
        };
        assert_ne!(
            inline,
            config_hash("m", &d, &[]),
            "switching the source rolls the workers"
        );
        let deploy = deployment(&agent, &owner(&agent), &d, "h", Some(1));
        assert_eq!(
            secret_ref(&deploy, REDIS_URL_ENV),
            ("redis-url".into(), "url".into())
        );
    }

    #[test]
    fn the_operators_redis_settings_reach_every_worker_and_a_change_rolls_them() {
        let agent = fixture("agent-scripted.yaml");
        let mut d = defaults();
        let none = config_hash("m", &d, &[]);
        let redis = |args: &[&str]| {
            use clap::Parser as _;
            #[derive(clap::Parser)]
            struct Cli {
                #[command(flatten)]
                redis: crate::store::RedisArgs,
            }
            let mut all = vec!["x"];
            all.extend(args);
            Cli::parse_from(all).redis
        };
        d.redis_env = redis(&["--redis-ca-pem", "PEM", "--redis-wait-replicas", "1"]).worker_env();
        let with = config_hash("m", &d, &[]);
        assert_ne!(none, with);
        let deploy = deployment(&agent, &owner(&agent), &d, "h", Some(1));
        let env = deploy.spec.unwrap().template.spec.unwrap().containers[0]
            .env
            .clone()
            .unwrap();
        let value = |name: &str| {
            env.iter()
                .find(|e| e.name == name)
                .and_then(|e| e.value.clone())
        };
        assert_eq!(value(crate::store::REDIS_CA_ENV).as_deref(), Some("PEM"));
        assert_eq!(
            value("AGENTFLEET_REDIS_WAIT_REPLICAS").as_deref(),
            Some("1")
        );
        assert_eq!(
            value("AGENTFLEET_REDIS_WAIT_TIMEOUT_MS").as_deref(),
            Some("1000")
        );
        d.redis_env = redis(&["--redis-ca-pem", "PEM"]).worker_env();
        assert_ne!(with, config_hash("m", &d, &[]));
        assert_eq!(redis(&[]).worker_env(), Vec::<(String, String)>::new());
    }

    #[test]
    fn a_managed_redis_url_goes_in_a_secret_beside_the_worker_and_nowhere_else() {
        const URL: &str = "redis://:s3cret-pass@agentfleet-redis.agentfleet.svc:6379/0";
        let agent = fixture("agent-scripted.yaml");
        let mut d = defaults();
        d.redis = RedisUrlSource::Managed(URL.into());
        let name = agent.name_any();
        let secret = agent_worker_secrets(&agent, &owner(&agent), &d).remove(0);
        assert_eq!(
            secret.metadata.name.as_deref(),
            Some("echo-worker-redis"),
            "the name it always had"
        );
        assert_eq!(secret.metadata.namespace, agent.namespace());
        assert_eq!(
            secret.metadata.owner_references.as_ref().unwrap()[0].name,
            name
        );
        assert_eq!(
            secret.data.as_ref().unwrap()["url"].0,
            URL.as_bytes().to_vec()
        );
        let deploy = deployment(&agent, &owner(&agent), &d, "h", Some(1));
        assert_eq!(
            secret_ref(&deploy, REDIS_URL_ENV),
            (redis_secret_name(&deployment_name(&name)), "url".into())
        );
        // The password is nowhere in the Deployment, the ConfigMap or the hash's input.
        let shown = format!(
            "{}{}{}",
            serde_json::to_string(&deploy).unwrap(),
            serde_json::to_string(&configmap(&agent, &owner(&agent), "m")).unwrap(),
            d.redis.fingerprint()
        );
        assert!(!shown.contains("s3cret-pass"), "{shown}");
        // A new URL (a rotated password) rolls the workers.
        let before = config_hash("m", &d, &[]);
        d.redis = RedisUrlSource::Managed(URL.replace("s3cret", "n3w"));
        assert_ne!(before, config_hash("m", &d, &[]));
    }

    pub(super) fn owner(agent: &Agent) -> OwnerReference {
        agent.controller_owner_ref(&()).unwrap()
    }

    #[test]
    fn deployment_runs_the_worker_safely_with_the_key_mounted_from_the_secret() {
        let agent = fixture("agent-openai.yaml");
        let d = deployment(&agent, &owner(&agent), &defaults(), "abc123", Some(1));
        assert_eq!(d.metadata.name.as_deref(), Some("assistant-worker"));
        assert_eq!(d.metadata.namespace.as_deref(), Some("family"));
        let owner_ref = &d.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner_ref.kind.as_str(), owner_ref.name.as_str()),
            ("Agent", "assistant")
        );
        assert_eq!(owner_ref.controller, Some(true));

        let spec = d.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(1));
        assert_eq!(
            spec.strategy.as_ref().unwrap().type_.as_deref(),
            Some("Recreate")
        );
        let template = &spec.template;
        let annotations = template
            .metadata
            .as_ref()
            .unwrap()
            .annotations
            .as_ref()
            .unwrap();
        assert_eq!(annotations[CONFIG_HASH_ANNOTATION], "abc123");
        // The selector picks the template's labels.
        let tl = template.metadata.as_ref().unwrap().labels.as_ref().unwrap();
        for (k, v) in spec.selector.match_labels.as_ref().unwrap() {
            assert_eq!(tl.get(k), Some(v));
        }

        let pod = template.spec.as_ref().unwrap();
        assert_eq!(pod.automount_service_account_token, Some(false));
        assert_eq!(pod.service_account_name.as_deref(), Some("assistant-sa"));
        assert_eq!(
            pod.security_context.as_ref().unwrap().run_as_non_root,
            Some(true)
        );
        assert_eq!(pod.node_selector.as_ref().unwrap()["pool"], "agents");
        assert_eq!(pod.tolerations.as_ref().unwrap().len(), 1);
        let c = &pod.containers[0];
        assert_eq!(c.image.as_deref(), Some("registry.local/agentfleet:dev"));
        assert_eq!(
            c.args.as_ref().unwrap()[..3],
            ["worker".to_string(), "--agent".into(), AGENT_FILE.into()]
        );
        let sc = c.security_context.as_ref().unwrap();
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        let env = c.env.as_ref().unwrap();
        assert!(
            env.iter().all(|e| e.name != API_KEY_ENV),
            "the key is never in the environment: it is read from its mounted Secret"
        );
        let mounts = c.volume_mounts.as_ref().unwrap();
        assert!(
            mounts
                .iter()
                .any(|m| m.mount_path == format!("{SECRETS_DIR}/openai-key")
                    && m.read_only == Some(true)),
            "the key's Secret is mounted (read at each request: rotated without a restart)"
        );
        assert!(env
            .iter()
            .any(|e| e.name == "TZ" && e.value.as_deref() == Some("Asia/Amman")));
        assert_eq!(
            c.resources.as_ref().unwrap().limits.as_ref().unwrap()["memory"],
            Quantity("512Mi".into())
        );
        let mounts = c.volume_mounts.as_ref().unwrap();
        assert!(mounts
            .iter()
            .any(|m| m.mount_path == AGENT_DIR && m.read_only == Some(true)));
        assert!(AGENT_FILE.starts_with(AGENT_DIR));
    }

    #[test]
    fn the_tools_secrets_are_mounted_read_only_one_volume_each() {
        let agent = fixture("agent-tools.yaml");
        let d = deployment(&agent, &owner(&agent), &defaults(), "h", Some(1));
        let pod = d.spec.unwrap().template.spec.unwrap();
        let volumes = pod.volumes.unwrap();
        let secrets: Vec<(&str, &str, Option<bool>)> = volumes
            .iter()
            .filter_map(|v| {
                let s = v.secret.as_ref()?;
                Some((v.name.as_str(), s.secret_name.as_deref()?, s.optional))
            })
            .collect();
        assert_eq!(
            secrets,
            [
                ("secret-2cfba74e5b2e7dc9", "grafana.mcp-token", Some(false)),
                ("secret-tracker-token", "tracker-token", Some(false)),
            ],
            "each Secret once (two tools share tracker-token), required"
        );
        let mounts = pod.containers[0].volume_mounts.clone().unwrap();
        for (volume, secret, _) in &secrets {
            let m = mounts.iter().find(|m| m.name == *volume).unwrap();
            assert_eq!(m.mount_path, format!("/etc/agentfleet/secrets/{secret}"));
            assert_eq!(m.read_only, Some(true));
        }
        let env = pod.containers[0].env.clone().unwrap();
        assert!(
            env.iter().all(|e| e.name != CALLBACK_URL_ENV),
            "no gateway configured: no callback URL"
        );
        let names: Vec<String> = volumes.iter().map(|v| v.name.clone()).collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(names.len(), unique.len(), "{names:?}");
    }

    #[test]
    fn secret_volume_names_are_dns_labels() {
        assert_eq!(secret_volume_name("tracker-token"), "secret-tracker-token");
        for name in ["a.b", &"x".repeat(57), &"y".repeat(253)] {
            let v = secret_volume_name(name);
            assert!(v.len() <= 63 && !v.contains('.'), "{v}");
            assert_ne!(secret_volume_name(&format!("{name}z")), v);
        }
    }

    #[test]
    fn workers_export_traces_where_the_operator_says_unless_the_agent_says_otherwise() {
        let mut agent = fixture("agent-openai.yaml");
        let endpoints = |agent: &Agent, defaults: &WorkerDefaults| -> Vec<String> {
            let d = deployment(agent, &owner(agent), defaults, "h", Some(1));
            d.spec.unwrap().template.spec.unwrap().containers[0]
                .env
                .clone()
                .unwrap()
                .into_iter()
                .filter(|e| e.name == OTLP_ENDPOINT_ENV)
                .filter_map(|e| e.value)
                .collect()
        };
        assert!(
            endpoints(&agent, &defaults()).is_empty(),
            "no traces unless asked"
        );
        let mut d = defaults();
        d.otlp_endpoint = Some("http://otel-collector.observability:4318".into());
        assert_eq!(
            endpoints(&agent, &d),
            ["http://otel-collector.observability:4318"]
        );
        agent.spec.worker.env = serde_yaml::from_str(
            "[{name: OTEL_EXPORTER_OTLP_ENDPOINT, value: 'http://team-collector:4318'}]",
        )
        .unwrap();
        assert_eq!(
            endpoints(&agent, &d),
            ["http://team-collector:4318"],
            "the Agent's own wins"
        );
    }

    #[test]
    fn workers_write_json_lines_unless_the_operator_says_text() {
        let agent = fixture("agent-openai.yaml");
        let format = |defaults: &WorkerDefaults| {
            let d = deployment(&agent, &owner(&agent), defaults, "h", Some(1));
            let env = d.spec.unwrap().template.spec.unwrap().containers[0]
                .env
                .clone()
                .unwrap();
            let set: Vec<_> = env.iter().filter(|e| e.name == LOG_FORMAT_ENV).collect();
            assert_eq!(set.len(), 1, "{env:?}");
            set[0].value.clone().unwrap()
        };
        assert_eq!(format(&defaults()), "json");
        let text = WorkerDefaults {
            log_format: LogFormat::Text,
            ..defaults()
        };
        assert_eq!(format(&text), "text");
        // What the worker's --log-format (AGENTFLEET_LOG_FORMAT) takes.
        for f in [LogFormat::Text, LogFormat::Json] {
            let value = clap::ValueEnum::to_possible_value(&f).unwrap();
            assert_eq!(value.get_name(), log_format_value(f));
        }
    }

    #[test]
    fn the_gateway_url_reaches_the_worker_as_its_callback_url() {
        let agent = fixture("agent-tools.yaml");
        let mut d = defaults();
        d.callback_url = Some("http://agentfleet-gateway.agentfleet.svc:80".into());
        let deploy = deployment(&agent, &owner(&agent), &d, "h", Some(1));
        let env = deploy.spec.unwrap().template.spec.unwrap().containers[0]
            .env
            .clone()
            .unwrap();
        let callback = env.iter().find(|e| e.name == CALLBACK_URL_ENV).unwrap();
        assert_eq!(
            callback.value.as_deref(),
            Some("http://agentfleet-gateway.agentfleet.svc:80")
        );
        assert_ne!(
            config_hash("m", &defaults(), &[]),
            config_hash("m", &d, &[]),
            "a new gateway URL rolls the workers"
        );
    }

    #[test]
    fn the_hash_follows_the_set_of_secrets_not_their_values() {
        let agent = fixture("agent-tools.yaml");
        let manifest = render_manifest(&agent).unwrap();
        let secrets = agent.spec.tools.secrets();
        assert_eq!(secrets, ["grafana.mcp-token", "tracker-token"]);
        let h = config_hash(&manifest, &defaults(), &secrets);
        assert_eq!(h, config_hash(&manifest, &defaults(), &secrets));
        assert_ne!(h, config_hash(&manifest, &defaults(), &secrets[..1]));
        assert_ne!(
            h,
            config_hash(&manifest, &defaults(), &["other", "tracker-token"])
        );
        // Another Secret named in the spec is another manifest, and another set.
        let mut other = agent.clone();
        other.spec.tools.http[0].headers_from = Some(crate::crd::HeadersFrom {
            secret_name: "tracker-token-v2".into(),
        });
        assert_ne!(
            h,
            config_hash(
                &render_manifest(&other).unwrap(),
                &defaults(),
                &other.spec.tools.secrets()
            )
        );
    }

    #[test]
    fn the_configmap_carries_the_secrets_names_only() {
        let agent = fixture("agent-tools.yaml");
        let manifest = render_manifest(&agent).unwrap();
        assert!(manifest.contains("secretName: tracker-token"), "{manifest}");
        let cm = configmap(&agent, &owner(&agent), &manifest);
        let text = serde_json::to_string(&cm).unwrap();
        assert!(
            !text.contains("stringData") && !text.contains("Bearer"),
            "{text}"
        );
    }

    #[test]
    fn minimal_agent_gets_defaults_and_no_key() {
        let agent = fixture("agent-scripted.yaml");
        let d = deployment(&agent, &owner(&agent), &defaults(), "h", Some(1));
        let pod = d.spec.unwrap().template.spec.unwrap();
        let c = &pod.containers[0];
        assert_eq!(
            c.image.as_deref(),
            Some("ghcr.io/agentfleet/agentfleet:0.1.0")
        );
        assert!(c
            .env
            .as_ref()
            .unwrap()
            .iter()
            .all(|e| e.name != API_KEY_ENV));
        assert_eq!(c.resources, Some(default_resources()));
        assert!(pod.node_selector.is_none());
    }

    #[test]
    fn env_field_refs_carry_the_server_default() {
        let mut agent = fixture("agent-scripted.yaml");
        agent.spec.worker.env = serde_yaml::from_str(
            "[{name: NODE, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}]",
        )
        .unwrap();
        let d = deployment(&agent, &owner(&agent), &defaults(), "h", Some(0));
        let env = serde_json::to_value(&d).unwrap()["spec"]["template"]["spec"]["containers"][0]
            ["env"]
            .clone();
        for e in env.as_array().unwrap() {
            if let Some(f) = e["valueFrom"].get("fieldRef") {
                assert_eq!(f["apiVersion"], "v1", "{e}: else every apply is a write");
            }
        }
    }

    #[test]
    fn external_scaling_never_writes_replicas() {
        let agent = fixture("agent-scripted.yaml");
        let d = deployment(&agent, &owner(&agent), &defaults(), "h", None);
        let json = serde_json::to_value(&d).unwrap();
        assert!(
            json["spec"].get("replicas").is_none(),
            "external scaling: replicas never written"
        );
    }

    #[test]
    fn manifest_renders_with_defaults_and_round_trips() {
        let agent = fixture("agent-scripted.yaml");
        let manifest = render_manifest(&agent).unwrap();
        let back: Agent = serde_yaml::from_str(&manifest).unwrap();
        assert_eq!(back.spec, agent.spec);
        assert_eq!(back.name_any(), "echo");
        assert!(manifest.contains("maxSteps: 20"), "{manifest}");
        assert!(!manifest.contains("status"));
        let cm = configmap(&agent, &owner(&agent), &manifest);
        assert_eq!(cm.metadata.name.as_deref(), Some("echo-agent"));
        assert_eq!(cm.data.unwrap()[AGENT_FILE_KEY], manifest);
    }

    #[test]
    fn config_hash_changes_with_the_spec_only() {
        let agent = fixture("agent-scripted.yaml");
        let a = agent_config_hash(&agent, &defaults()).unwrap();
        assert_eq!(a, agent_config_hash(&agent, &defaults()).unwrap());
        let mut changed = agent.clone();
        changed.spec.instructions.push_str(" Be brief.");
        assert_ne!(a, agent_config_hash(&changed, &defaults()).unwrap());
        let mut with_status = agent.clone();
        with_status.status = Some(crate::crd::AgentStatus {
            cycles: Some(7),
            ..Default::default()
        });
        assert_eq!(a, agent_config_hash(&with_status, &defaults()).unwrap());
        assert_eq!(a.len(), 16);
    }

    /// The pod template of `agent`'s Deployment, built as the reconcile builds it.
    fn template(agent: &Agent) -> serde_json::Value {
        let hash = agent_config_hash(agent, &defaults()).unwrap();
        let d = deployment(agent, &owner(agent), &defaults(), &hash, Some(1));
        serde_json::to_value(d.spec.unwrap().template).unwrap()
    }

    #[test]
    fn a_change_the_worker_does_not_read_keeps_its_pod() {
        // Seen on a real cluster: patching `idleSeconds` of an agent kept up by
        // `minReplicas: 1` replaced its running worker (the Deployment is `Recreate`).
        let mut agent = fixture("agent-scripted.yaml");
        agent.spec.scaling.min_replicas = 1;
        let before = template(&agent);
        let mut scaled = agent.clone();
        scaled.spec.scaling.idle_seconds += 60;
        scaled.spec.scaling.min_replicas = 0;
        scaled.metadata.generation = agent.metadata.generation.map(|g| g + 1);
        assert_eq!(
            before,
            template(&scaled),
            "same pod: the worker keeps running"
        );
        // The ConfigMap still tells the truth about the Agent.
        let manifest = render_manifest(&scaled).unwrap();
        assert!(manifest.contains("generation: 2"), "{manifest}");

        let mut instructed = scaled.clone();
        instructed.spec.instructions.push_str(" Be brief.");
        instructed.metadata.generation = scaled.metadata.generation.map(|g| g + 1);
        assert_ne!(
            before["metadata"]["annotations"][CONFIG_HASH_ANNOTATION],
            template(&instructed)["metadata"]["annotations"][CONFIG_HASH_ANNOTATION],
            "a change the worker reads rolls it"
        );
    }
}

//! The Secrets beside a worker the operator writes (the managed Redis URL; the archive's is
//! in `archive.rs`), where a worker's Redis URL comes from, and how a Secret is mounted or read
//! into the environment.

use super::*;

/// Where a worker's Redis URL comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RedisUrlSource {
    /// Inline in the Deployment (for URLs without a password).
    Value(String),
    /// A key of a Secret in the Agent's namespace (for URLs with a password).
    Secret {
        /// Name of the Secret.
        name: String,
        /// Key within the Secret.
        key: String,
    },
    /// This URL, written by the operator into a Secret beside each worker
    /// ([`redis_secret`]), owned by its Agent: a URL with a password reaches workers in any
    /// namespace without anyone creating Secrets there.
    Managed(String),
}

impl RedisUrlSource {
    pub(super) fn env(&self, base: &str) -> EnvVar {
        match self {
            RedisUrlSource::Value(url) => EnvVar {
                name: REDIS_URL_ENV.into(),
                value: Some(url.clone()),
                ..EnvVar::default()
            },
            RedisUrlSource::Secret { name, key } => secret_env(REDIS_URL_ENV, name, key),
            RedisUrlSource::Managed(_) => {
                secret_env(REDIS_URL_ENV, &redis_secret_name(base), REDIS_SECRET_KEY)
            }
        }
    }

    /// What changes the workers' pods when it changes (a managed URL only as a digest: the
    /// configuration hash is shown in the status).
    pub(super) fn fingerprint(&self) -> String {
        match self {
            RedisUrlSource::Value(url) => format!("value:{url}"),
            RedisUrlSource::Secret { name, key } => format!("secret:{name}/{key}"),
            RedisUrlSource::Managed(url) => {
                format!("managed:{}", crate::hex(&Sha256::digest(url.as_bytes())))
            }
        }
    }
}

/// Key of the Redis URL in a managed worker Secret.
pub const REDIS_SECRET_KEY: &str = "url";

/// Name of the Secret holding the Redis URL of the workers of Deployment `base` when the
/// operator manages it (`NAME-worker-redis` for an Agent, `NAME-pool-redis` for a Pool).
pub fn redis_secret_name(base: &str) -> String {
    format!("{base}-redis")
}

/// The Secret holding the workers' Redis URL ([`RedisUrlSource::Managed`]), with `metadata`
/// (named by [`redis_secret_name`], owned by the Agent or Pool so that it goes with it).
pub fn redis_secret(metadata: ObjectMeta, url: &str) -> Secret {
    Secret {
        metadata,
        data: Some(BTreeMap::from([(
            REDIS_SECRET_KEY.to_string(),
            k8s_openapi::ByteString(url.as_bytes().to_vec()),
        )])),
        type_: Some("Opaque".into()),
        ..Secret::default()
    }
}

/// The Secrets the operator writes beside the workers of Deployment `base`: the managed Redis
/// URL and the archive's environment, as the operator's configuration has them; `meta` gives
/// each its metadata (owner, labels) from its name.
pub fn worker_secrets(
    base: &str,
    meta: impl Fn(String) -> ObjectMeta,
    defaults: &WorkerDefaults,
) -> Vec<Secret> {
    let redis = match &defaults.redis {
        RedisUrlSource::Managed(url) => Some(redis_secret(meta(redis_secret_name(base)), url)),
        _ => None,
    };
    let archive = defaults
        .archive
        .as_ref()
        .map(|a| archive_secret(meta(archive_secret_name(base)), a));
    redis.into_iter().chain(archive).collect()
}

/// The Secrets beside an Agent's worker ([`worker_secrets`]), owned by the Agent.
pub fn agent_worker_secrets(
    agent: &Agent,
    owner: &OwnerReference,
    defaults: &WorkerDefaults,
) -> Vec<Secret> {
    worker_secrets(
        &deployment_name(&agent.name_any()),
        |name| child_meta(agent, name, owner),
        defaults,
    )
}

/// The volume holding Secret `name`: `secret-NAME` when that is a valid volume name (a DNS
/// label), else `secret-` and a hash of the name (Secret names may hold dots and 253
/// characters).
pub fn secret_volume_name(name: &str) -> String {
    let plain = format!("secret-{name}");
    if plain.len() <= 63 && !name.contains('.') {
        return plain;
    }
    let digest = Sha256::digest(name.as_bytes());
    format!("secret-{}", crate::hex(&digest[..8]))
}

/// An environment variable read from a key of a Secret that must exist.
pub(super) fn secret_env(var: &str, secret: &str, key: &str) -> EnvVar {
    EnvVar {
        name: var.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.into(),
                key: key.into(),
                optional: Some(false),
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

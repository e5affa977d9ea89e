//! The flags that name the data plane (`--redis` and its TLS and replication settings), shared
//! by every command that reaches Redis — `operator`, `gateway`, `worker`, `pool`, the data-plane
//! tools and `dev`'s optional ones — declared once, below the roles.

use super::{RedisOptions, RedisStore, WaitReplicas};
use crate::store::StoreError;

/// The data plane's address: the `--redis` flag (env `AGENTFLEET_REDIS_URL`) and its TLS and
/// `WAIT` settings; `dev`'s are optional (see [`RedisArgs::optional`]).
#[derive(clap::Args, Debug, Clone)]
pub struct RedisArgs {
    /// Redis URL of the data plane.
    #[arg(
        id = "redis",
        long = "redis",
        value_name = "REDIS",
        env = "AGENTFLEET_REDIS_URL",
        default_value = "redis://127.0.0.1:6379/"
    )]
    pub url: String,
    /// PEM file of the certificate authorities that sign Redis's TLS certificates (`rediss://`
    /// URLs), trusted instead of the system's.
    #[arg(
        long = "redis-ca",
        value_name = "FILE",
        env = "AGENTFLEET_REDIS_CA_FILE"
    )]
    pub ca_file: Option<std::path::PathBuf>,
    /// The same certificates as PEM text, where a file is awkward (the operator gives its own
    /// to every worker this way; certificates are public). `--redis-ca` wins.
    #[arg(long = "redis-ca-pem", value_name = "PEM", env = REDIS_CA_ENV, hide = true)]
    pub ca_pem: Option<String>,
    /// Acknowledge posts, pushes and commits only once this many replicas of their node have
    /// them (Redis `WAIT`): a failover then loses no acknowledged post. Costs a replica's
    /// round trip per write; a post not replicated in time fails (retry it with the same
    /// key), a commit not replicated is logged. 0: as soon as the primary has them.
    #[arg(
        long = "redis-wait-replicas",
        value_name = "N",
        env = REDIS_WAIT_REPLICAS_ENV,
        default_value_t = 0
    )]
    pub wait_replicas: u32,
    /// How long a write waits for `--redis-wait-replicas`.
    #[arg(
        long = "redis-wait-timeout-ms",
        value_name = "MS",
        env = REDIS_WAIT_TIMEOUT_ENV,
        default_value_t = 1000
    )]
    pub wait_timeout_ms: u64,
}

/// The environment variable of [`RedisArgs::ca_pem`].
pub const REDIS_CA_ENV: &str = "AGENTFLEET_REDIS_CA";
/// The environment variable of [`RedisArgs::wait_replicas`].
const REDIS_WAIT_REPLICAS_ENV: &str = "AGENTFLEET_REDIS_WAIT_REPLICAS";
/// The environment variable of [`RedisArgs::wait_timeout_ms`].
const REDIS_WAIT_TIMEOUT_ENV: &str = "AGENTFLEET_REDIS_WAIT_TIMEOUT_MS";

impl RedisArgs {
    /// The flags as a command whose data plane is optional declares them, with
    /// `#[command(flatten)] redis: Option<RedisArgs>` and
    /// `#[command(mut_args(|a| RedisArgs::optional(a, HELP)))]`: `--redis` gets no environment
    /// variable and no default, so that leaving it out means no Redis (`None`), and `help`
    /// says what it replaces; the other Redis flags are read from the command line only, so
    /// that an environment set up for a real data plane (`AGENTFLEET_REDIS_CA_FILE`, ...)
    /// does not make the command want `--redis`. Other flags are left as they are.
    pub fn optional(arg: clap::Arg, help: &'static str) -> clap::Arg {
        if arg.get_id() == "redis" {
            return arg.env(None).default_value(None).help(help);
        }
        if arg.get_long().is_some_and(|l| l.starts_with("redis-")) {
            return arg.env(None);
        }
        arg
    }

    /// The store these settings name (nothing contacted yet).
    pub fn store(&self) -> Result<RedisStore, StoreError> {
        RedisStore::with_options(&self.url, &self.options()?)
    }

    /// The TLS roots to trust, as PEM: `--redis-ca`'s file, else `AGENTFLEET_REDIS_CA`.
    pub fn options(&self) -> Result<RedisOptions, StoreError> {
        let ca = match (&self.ca_file, &self.ca_pem) {
            (Some(path), _) => Some(std::fs::read(path).map_err(|e| {
                StoreError::InvalidUrl(format!(
                    "cannot read the Redis CA file {}: {e}",
                    path.display()
                ))
            })?),
            (None, Some(pem)) => Some(pem.clone().into_bytes()),
            (None, None) => None,
        };
        let wait = (self.wait_replicas > 0).then(|| WaitReplicas {
            replicas: self.wait_replicas,
            timeout: std::time::Duration::from_millis(self.wait_timeout_ms),
        });
        Ok(RedisOptions { ca, wait })
    }

    /// What the workers get of these settings, as environment (the URL aside, which has its
    /// own way): the CA as PEM text, the replicas to wait for.
    pub fn worker_env(&self) -> Vec<(String, String)> {
        let mut env = Vec::new();
        // Read once already, loudly, for the operator's own store.
        if let Some(ca) = self.options().ok().and_then(|o| o.ca) {
            env.push((
                REDIS_CA_ENV.to_string(),
                String::from_utf8_lossy(&ca).into_owned(),
            ));
        }
        if self.wait_replicas > 0 {
            env.push((
                REDIS_WAIT_REPLICAS_ENV.into(),
                self.wait_replicas.to_string(),
            ));
            env.push((
                REDIS_WAIT_TIMEOUT_ENV.into(),
                self.wait_timeout_ms.to_string(),
            ));
        }
        env
    }
}

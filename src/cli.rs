//! Operator tools on the data plane: `agentfleet space …`, `agentfleet consciousness …`, and
//! answering paused tool calls (`agentfleet approve|deny|answer|calls`, [`CallCommand`]).

mod calls;
mod consciousness;

use std::io::Write;

use anyhow::{bail, Context as _};
use k8s_openapi::jiff::Timestamp;

use crate::membership::SpaceKey;
use crate::names;
use crate::store::prelude::*;
use crate::store::{
    redact_url, AgentKey, Consciousness, NewMessage, ReadQuery, RedisOptions, RedisStore, Sender,
    SpaceRecord, Store, WaitReplicas,
};
use crate::terminal::{sanitize, Breaks};
pub use calls::{calls, Answering, CallCommand};
pub use consciousness::{consciousness, ConsciousnessCommand};

/// The data plane's address: the `--redis` flag (env `AGENTFLEET_REDIS_URL`) of every
/// command that reaches Redis — `operator`, `gateway`, `worker`, the tools here, and `dev`'s
/// optional ones (see [`Redis::optional`]) — declared once.
#[derive(clap::Args, Debug, Clone)]
pub struct Redis {
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

/// The environment variable of [`Redis::ca_pem`].
pub const REDIS_CA_ENV: &str = "AGENTFLEET_REDIS_CA";
/// The environment variable of [`Redis::wait_replicas`].
const REDIS_WAIT_REPLICAS_ENV: &str = "AGENTFLEET_REDIS_WAIT_REPLICAS";
/// The environment variable of [`Redis::wait_timeout_ms`].
const REDIS_WAIT_TIMEOUT_ENV: &str = "AGENTFLEET_REDIS_WAIT_TIMEOUT_MS";

/// Said when nothing listens at the data plane's address: the usual cause is an
/// `agentfleet dev` without `--redis`, whose data no other process can reach.
const DEV_HINT: &str = "hint: `agentfleet dev` without --redis keeps its data in its own memory, where this command cannot reach it; run `agentfleet dev DIR --redis URL` and pass the same --redis URL (or AGENTFLEET_REDIS_URL) here";

impl Redis {
    /// The flags as a command whose data plane is optional declares them, with
    /// `#[command(flatten)] redis: Option<Redis>` and
    /// `#[command(mut_args(|a| Redis::optional(a, HELP)))]`: `--redis` gets no environment
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
    pub fn store(&self) -> Result<RedisStore, crate::store::StoreError> {
        RedisStore::with_options(&self.url, &self.options()?)
    }

    /// The TLS roots to trust, as PEM: `--redis-ca`'s file, else `AGENTFLEET_REDIS_CA`.
    pub fn options(&self) -> Result<RedisOptions, crate::store::StoreError> {
        let ca = match (&self.ca_file, &self.ca_pem) {
            (Some(path), _) => Some(std::fs::read(path).map_err(|e| {
                crate::store::StoreError::InvalidUrl(format!(
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

    /// The data plane, once it answers; when it does not, the error says where it was looked
    /// for (and, when nothing listens there, where `agentfleet dev` keeps its data).
    async fn connect(&self) -> anyhow::Result<RedisStore> {
        let store = self.store()?;
        match store.ping().await {
            Ok(()) => Ok(store),
            Err(e) => {
                let at = format!("cannot reach the data plane at {}", redact_url(&self.url));
                if e.is_connection_refused() {
                    bail!("{at}: {e}\n{DEV_HINT}");
                }
                Err(anyhow::Error::new(e).context(at))
            }
        }
    }
}

/// `agentfleet space …`
#[derive(clap::Subcommand, Debug, Clone)]
pub enum SpaceCommand {
    /// Post a message as a member of the space (delivered to its agents like any message).
    Post {
        /// The space, `NAMESPACE/NAME`.
        space: String,
        /// Entity id of the member posting (a human's id or an agent's name).
        #[arg(long = "from")]
        from: String,
        /// The text.
        text: String,
        /// Deliver to the agents as an urgent event.
        #[arg(long)]
        urgent: bool,
        #[command(flatten)]
        redis: Redis,
    },
    /// Print the space's recent messages, oldest first.
    Read {
        /// The space, `NAMESPACE/NAME`.
        space: String,
        /// How many recent messages.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// One JSON object a line.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        redis: Redis,
    },
}

/// A space named on the command line, refused unless both names are valid Kubernetes names
/// (before anything is asked of the data plane or the gateway). Parsed here rather than by
/// clap, whose error would echo the argument unescaped.
pub(crate) fn space_arg(s: &str) -> anyhow::Result<SpaceKey> {
    let (ns, name) = names::parse_namespaced("the space", s).map_err(anyhow::Error::msg)?;
    Ok(SpaceKey::new(ns, name))
}

/// An agent named on the command line, as [`space_arg`].
fn agent_arg(s: &str) -> anyhow::Result<AgentKey> {
    let (ns, name) = names::parse_namespaced("the agent", s).map_err(anyhow::Error::msg)?;
    Ok(AgentKey::new(ns, name))
}

/// The space's record; an error when the data plane has no such space.
async fn space_record(store: &dyn Store, key: &SpaceKey) -> anyhow::Result<SpaceRecord> {
    store.space(key).await?.with_context(|| {
        format!("space {key} does not exist in the data plane (is the Space applied, and the operator or `agentfleet dev` running?)")
    })
}

/// An error unless the data plane knows the agent: registered (by the operator or
/// `agentfleet dev`), or with a consciousness or checkpoints of its own.
async fn require_agent(store: &dyn Store, key: &AgentKey) -> anyhow::Result<()> {
    if store.agent_registered(key).await?
        || store.consciousness(key).await? != Consciousness::default()
        || !store.checkpoints(key).await?.is_empty()
    {
        return Ok(());
    }
    bail!("agent {key} does not exist in the data plane (is the Agent applied, and the operator or `agentfleet dev` running?)")
}

fn time(ms: i64) -> String {
    Timestamp::from_millisecond(ms)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| ms.to_string())
}

/// Runs `agentfleet space …`.
pub async fn space(cmd: SpaceCommand) -> anyhow::Result<()> {
    let out = &mut std::io::stdout();
    match cmd {
        SpaceCommand::Post {
            space,
            from,
            text,
            urgent,
            redis,
        } => {
            let key = space_arg(&space)?;
            let store = redis.connect().await?;
            let record = space_record(&store, &key).await?;
            let member = record
                .members
                .iter()
                .find(|m| m.id == from)
                .with_context(|| format!("{from} is not a member of space {key}"))?;
            let posted = store
                .post_message(
                    &key,
                    &NewMessage {
                        sender: Sender {
                            id: member.id.clone(),
                            name: member.name.clone(),
                            kind: Some(member.kind),
                        },
                        text,
                        mention: None,
                        idempotency_key: None,
                        urgent,
                        depth: 0,
                    },
                )
                .await?;
            writeln!(
                out,
                "posted {} to {key}; delivered to {}",
                posted.id,
                if posted.delivered.is_empty() {
                    "no agent".to_string()
                } else {
                    posted.delivered.join(", ")
                }
            )?;
        }
        SpaceCommand::Read {
            space,
            limit,
            json,
            redis,
        } => {
            let space = space_arg(&space)?;
            let store = redis.connect().await?;
            space_record(&store, &space).await?;
            let mut messages = store
                .read_messages(
                    &space,
                    &ReadQuery {
                        limit,
                        ..Default::default()
                    },
                )
                .await?;
            messages.reverse();
            for m in messages {
                if json {
                    writeln!(out, "{}", serde_json::to_string(&m)?)?;
                } else {
                    say(
                        out,
                        &format!("{}  {}: {}", time(m.time_ms), m.sender.name, m.text),
                        2,
                    )?;
                }
            }
        }
    }
    Ok(())
}

/// Writes a line of text that agents and people wrote (continuation lines indented by
/// `indent`), escaped as on every terminal output.
fn say(out: &mut impl Write, text: &str, indent: usize) -> std::io::Result<()> {
    writeln!(out, "{}", sanitize(text, Breaks::Indent(indent)))
}

#[cfg(test)]
mod tests {
    use clap::{Args as _, Command, FromArgMatches as _};

    use super::Redis;

    #[test]
    fn the_redis_flag_has_its_env_and_default() {
        let cmd = Redis::augment_args(Command::new("x"));
        let arg = cmd.get_arguments().find(|a| a.get_id() == "redis").unwrap();
        assert_eq!(arg.get_long(), Some("redis"));
        assert_eq!(
            arg.get_env().and_then(|e| e.to_str()),
            Some("AGENTFLEET_REDIS_URL")
        );
        assert_eq!(arg.get_default_values(), ["redis://127.0.0.1:6379/"]);
        let given = cmd
            .try_get_matches_from(["x", "--redis", "redis://r:1/"])
            .unwrap();
        assert_eq!(Redis::from_arg_matches(&given).unwrap().url, "redis://r:1/");
    }
}

//! Operator tools on the data plane: `agentfleet space …`, `agentfleet consciousness …`,
//! `agentfleet trace …`, and
//! answering paused tool calls (`agentfleet approve|deny|answer|calls`, [`CallCommand`]).

mod answers;
mod consciousness;
pub(crate) mod kubeconfig;
mod remote;
mod trace;

use std::io::Write;

use anyhow::{bail, Context as _};
use k8s_openapi::jiff::Timestamp;

use crate::identity::AgentKey;
use crate::identity::SpaceKey;
use crate::store::prelude::*;
use crate::store::{
    redact_url, NewMessage, ReadQuery, RedisArgs, RedisStore, Sender, SpaceRecord, Store,
};
use crate::terminal::{sanitize, Breaks};
pub use answers::{calls, Answering, CallCommand};
pub use consciousness::{consciousness, ConsciousnessCommand};
pub use trace::{trace, TraceCommand};

/// Said when nothing listens at the data plane's address: the usual cause is an
/// `agentfleet dev` without `--redis`, whose data no other process can reach.
const DEV_HINT: &str = "hint: `agentfleet dev` without --redis keeps its data in its own memory, where this command cannot reach it; run `agentfleet dev DIR --redis URL` and pass the same --redis URL (or AGENTFLEET_REDIS_URL) here";

/// The data plane, once it answers; when it does not, the error says where it was looked
/// for (and, when nothing listens there, where `agentfleet dev` keeps its data).
pub(crate) async fn connect(redis: &RedisArgs) -> anyhow::Result<RedisStore> {
    let store = redis.store()?;
    match store.ping().await {
        Ok(()) => Ok(store),
        Err(e) => {
            let at = format!("cannot reach the data plane at {}", redact_url(&redis.url));
            if e.is_connection_refused() {
                bail!("{at}: {e}\n{DEV_HINT}");
            }
            Err(anyhow::Error::new(e).context(at))
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
        /// What to post, as plain text.
        text: String,
        /// Deliver to the agents as an urgent event.
        #[arg(long)]
        urgent: bool,
        #[command(flatten)]
        redis: RedisArgs,
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
        /// Through the gateway, as your own identity (a member of the space).
        #[command(flatten)]
        via: remote::Via,
        #[command(flatten)]
        redis: RedisArgs,
    },
}

/// A space named on the command line, refused unless both names are valid Kubernetes names
/// (before anything is asked of the data plane or the gateway). Parsed here rather than by
/// clap, whose error would echo the argument unescaped.
fn space_arg(s: &str) -> anyhow::Result<SpaceKey> {
    SpaceKey::named(s).map_err(anyhow::Error::msg)
}

/// An agent named on the command line, as [`space_arg`].
fn agent_arg(s: &str) -> anyhow::Result<AgentKey> {
    AgentKey::named(s).map_err(anyhow::Error::msg)
}

/// The space's record; an error when the data plane has no such space.
async fn space_record(store: &dyn Store, key: &SpaceKey) -> anyhow::Result<SpaceRecord> {
    store.space(key).await?.with_context(|| {
        format!("space {key} does not exist in the data plane (is the Space applied, and the operator or `agentfleet dev` running?)")
    })
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
            let store = connect(&redis).await?;
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
                            groups: Vec::new(),
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
            via,
            redis,
        } => {
            let space = space_arg(&space)?;
            if let Some(remote) = remote::Remote::of(&via).await? {
                let page: crate::api::MessagePage = remote
                    .get(&format!(
                        "/v1/spaces/{}/{}/messages?limit={}",
                        space.namespace,
                        space.name,
                        limit.clamp(1, 500)
                    ))
                    .await?;
                for m in page.messages.iter().rev() {
                    if json {
                        writeln!(out, "{}", serde_json::to_string(m)?)?;
                    } else {
                        say(
                            out,
                            &format!("{}  {}: {}", time(m.time_ms), m.sender.name, m.text),
                            2,
                        )?;
                    }
                }
                return Ok(());
            }
            let store = connect(&redis).await?;
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

    use crate::store::RedisArgs;

    #[test]
    fn the_redis_flag_has_its_env_and_default() {
        let cmd = RedisArgs::augment_args(Command::new("x"));
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
        assert_eq!(
            RedisArgs::from_arg_matches(&given).unwrap().url,
            "redis://r:1/"
        );
    }
}

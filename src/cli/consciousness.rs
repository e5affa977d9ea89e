//! `agentfleet consciousness show|restore`: an agent's consciousness in the data plane, or an
//! archived checkpoint (`--from URL`) read straight from object storage.

use std::io::Write;

use anyhow::{bail, Context as _};

use super::remote::{Remote, Via};
use super::{agent_arg, connect, say, time};

use crate::api::{ConsciousnessView, RestoreRequest, Restored};
use crate::archive::{self, Document};
use crate::inspect::{self, Restore};
use crate::model::Message;
use crate::store::{Checkpoint, Goal, NoteKind, RedisArgs, Snapshot};

/// `agentfleet consciousness …`
#[derive(clap::Subcommand, Debug, Clone)]
pub enum ConsciousnessCommand {
    /// Show an agent's consciousness (summary, messages, memories, goals, checkpoints, its
    /// archive), or an archived checkpoint with `--from URL`.
    Show {
        /// The agent, `NAMESPACE/NAME` (not with `--from`).
        #[arg(required_unless_present = "from")]
        agent: Option<String>,
        /// An archived checkpoint (`s3://…`, `file:///…`; `status.checkpoint.storageRef`),
        /// read with the store's standard environment (`AWS_ACCESS_KEY_ID`, …).
        #[arg(long, value_name = "URL", conflicts_with = "agent")]
        from: Option<String>,
        /// As one JSON document.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        via: Via,
        #[command(flatten)]
        redis: RedisArgs,
    },
    /// Make the consciousness what it was after a retained checkpoint's cycle (`--cycle`), or
    /// what an archived checkpoint holds (`--from URL`: its messages, summary, memories, goals
    /// and plans; verified first). Only while no worker runs the agent.
    Restore {
        /// The agent, `NAMESPACE/NAME`.
        agent: String,
        /// The cycle of a checkpoint the data plane retains.
        #[arg(long, required_unless_present = "from", conflicts_with = "from")]
        cycle: Option<u64>,
        /// An archived checkpoint of this agent (`status.checkpoint.storageRef`): read with
        /// your object-storage credentials and written to the data plane directly (not
        /// through the gateway; `spec.consciousness.restore` on the Agent is the way in Git).
        #[arg(long, value_name = "URL")]
        from: Option<String>,
        #[command(flatten)]
        via: Via,
        #[command(flatten)]
        redis: RedisArgs,
    },
}

/// How an archived checkpoint that was read was verified: with the signing key in the
/// environment its signature was checked (an unsigned or wrongly signed one is refused), else
/// only its content digest.
fn verified() -> String {
    let signed = std::env::var(archive::SIGNING_KEY_ENV).is_ok_and(|v| !v.is_empty());
    if signed {
        "signature and content digest (signed with this fleet's key, intact)".into()
    } else {
        format!("content digest only (intact, but not proven written by this fleet: set {} to check signatures)", archive::SIGNING_KEY_ENV)
    }
}

/// Runs `agentfleet consciousness …`.
pub async fn consciousness(cmd: ConsciousnessCommand) -> anyhow::Result<()> {
    let out = &mut std::io::stdout();
    match cmd {
        ConsciousnessCommand::Show {
            agent: _,
            from: Some(url),
            json,
            ..
        } => {
            let doc = archive::fetch(&url)
                .await
                .with_context(|| format!("reading {url}"))?;
            show(out, &archived(doc, url), json)?;
        }
        ConsciousnessCommand::Show {
            agent,
            json,
            via,
            redis,
            ..
        } => {
            let key = agent_arg(agent.as_deref().unwrap_or_default())?;
            let view = match Remote::of(&via).await? {
                Some(remote) => {
                    remote
                        .get(&format!(
                            "/v1/agents/{}/{}/consciousness",
                            key.namespace, key.name
                        ))
                        .await?
                }
                None => inspect::view(&connect(&redis).await?, &key).await?,
            };
            show(out, &view, json)?;
        }
        ConsciousnessCommand::Restore {
            agent,
            cycle,
            from,
            via,
            redis,
        } => {
            let key = agent_arg(&agent)?;
            if via.gateway.is_some() && from.is_some() {
                bail!("restore --from reads object storage with your own credentials and writes the data plane directly: run it without --gateway (break-glass), or set spec.consciousness.restore on the Agent");
            }
            // Read and verify the archived checkpoint before anything is touched.
            let what = match &from {
                Some(url) => {
                    let doc = archive::fetch(url)
                        .await
                        .with_context(|| format!("reading {url}"))?;
                    archive::expect(&doc, &key, None, url).map_err(|e| {
                        anyhow::anyhow!("{e}\nhint: to start an agent from another agent's checkpoint, give the new Agent spec.consciousness.seedFrom")
                    })?;
                    Restore::Snapshot(Box::new(doc.snapshot))
                }
                None => Restore::Cycle(cycle.unwrap_or_default()),
            };
            let restored: Restored = match (Remote::of(&via).await?, what) {
                (Some(remote), Restore::Cycle(cycle)) => {
                    remote
                        .post(
                            &format!(
                                "/v1/agents/{}/{}/consciousness/restore",
                                key.namespace, key.name
                            ),
                            &RestoreRequest { cycle },
                        )
                        .await?
                }
                (_, what) => {
                    let store = connect(&redis).await?;
                    let holder = format!("agentfleet-cli-{}", std::process::id());
                    let cp = inspect::restore(&store, &key, &holder, what).await?;
                    Restored::from(&cp)
                }
            };
            writeln!(
                out,
                "restored {key} to cycle {} ({} messages, {} tokens, {}){}",
                restored.cycle,
                restored.messages,
                restored.tokens,
                restored.digest,
                from.map(|u| format!(" from {u}")).unwrap_or_default()
            )?;
        }
    }
    Ok(())
}

/// An archived document as `show` prints it.
fn archived(doc: Document, url: String) -> ConsciousnessView {
    let Snapshot {
        consciousness,
        notes,
        ..
    } = doc.snapshot;
    let mut goals: Vec<Goal> = notes
        .get(&NoteKind::Goals)
        .into_iter()
        .flatten()
        .filter_map(|(_, g)| serde_json::from_str(g).ok())
        .collect();
    goals.sort_by(|a, b| a.id.cmp(&b.id));
    let checkpoint = Checkpoint {
        cycle: consciousness.cycle,
        start: consciousness.start,
        end: consciousness.start + consciousness.messages.len() as u64,
        summary_cycle: None,
        digest: consciousness.digest.clone(),
        messages: consciousness.messages.len() as u64,
        tokens: consciousness.tokens,
        time_ms: consciousness.last_cycle_ms.unwrap_or_default(),
        // A replaced or shown consciousness used no tokens of its own.
        used: 0,
    };
    ConsciousnessView {
        memories: notes.get(&NoteKind::Memories).cloned().unwrap_or_default(),
        goals,
        checkpoints: vec![checkpoint],
        archive: vec![
            ("Archived at:".into(), url),
            ("Generation:".into(), doc.generation.to_string()),
            ("Verified:".into(), verified()),
        ],
        ..inspect::of(&doc.agent, consciousness)
    }
}

fn show(out: &mut impl Write, s: &ConsciousnessView, json: bool) -> anyhow::Result<()> {
    if json {
        let archive: serde_json::Map<String, serde_json::Value> = s
            .archive
            .iter()
            .map(|(k, v)| {
                let k = k.trim_end_matches(':').to_lowercase().replace(' ', "_");
                (k, serde_json::Value::String(v.clone()))
            })
            .collect();
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "agent": s.agent, "cycle": s.cycle, "tokens": s.tokens, "tokensUsed": s.tokens_used,
                "digest": s.digest, "summary": s.summary, "messages": s.messages,
                "memories": s.memories, "goals": s.goals, "checkpoints": s.checkpoints,
                "restored": s.restored, "archive": archive,
            }))?
        )?;
        return Ok(());
    }
    let (key, c) = (&s.agent, s);
    writeln!(out, "Agent:        {key}")?;
    writeln!(out, "Cycles:       {}", c.cycle)?;
    writeln!(
        out,
        "Last cycle:   {}",
        c.last_cycle_ms.map_or("never".into(), time)
    )?;
    writeln!(
        out,
        "Tokens:       {} in consciousness, {} used over its life",
        c.tokens, c.tokens_used
    )?;
    writeln!(
        out,
        "Digest:       {}",
        if c.digest.is_empty() { "-" } else { &c.digest }
    )?;
    for (label, value) in &s.archive {
        say(out, &format!("{label:<13} {value}"), 14)?;
    }
    if let Some(summary) = &c.summary {
        writeln!(out, "\nSummary of earlier conversation:")?;
        say(out, &format!("  {summary}"), 2)?;
    }
    writeln!(out, "\nMessages ({}):", c.messages.len())?;
    for m in &c.messages {
        match serde_json::from_value::<Message>(m.clone()) {
            Ok(Message::User { content }) => say(out, &format!("  [user] {content}"), 9)?,
            Ok(Message::Assistant {
                content,
                tool_calls,
            }) => {
                if let Some(t) = content {
                    say(out, &format!("  [assistant] {t}"), 4)?;
                }
                for call in tool_calls {
                    say(
                        out,
                        &format!("  [assistant → {}] {}", call.name, call.arguments),
                        4,
                    )?;
                }
            }
            Ok(Message::Tool { content, .. }) => say(out, &format!("  [tool] {content}"), 4)?,
            Err(_) => say(out, &format!("  [unreadable] {m}"), 4)?,
        }
    }
    writeln!(out, "\nMemories ({}):", s.memories.len())?;
    for (k, v) in &s.memories {
        say(out, &format!("  {k}: {v}"), 4)?;
    }
    writeln!(out, "\nGoals ({}):", s.goals.len())?;
    for g in &s.goals {
        say(
            out,
            &format!("  [{}] {}: {}", g.status, g.id, g.description),
            4,
        )?;
    }
    writeln!(out, "\nCheckpoints ({}):", s.checkpoints.len())?;
    writeln!(
        out,
        "  {:>6}  {:>8}  {:>7}  {:<25}  DIGEST",
        "CYCLE", "MESSAGES", "TOKENS", "TIME"
    )?;
    for cp in &s.checkpoints {
        writeln!(
            out,
            "  {:>6}  {:>8}  {:>7}  {:<25}  {}",
            cp.cycle,
            cp.messages,
            cp.tokens,
            time(cp.time_ms),
            cp.digest
        )?;
    }
    Ok(())
}

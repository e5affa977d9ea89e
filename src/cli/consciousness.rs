//! `agentfleet consciousness show|restore`: an agent's consciousness in the data plane, or an
//! archived checkpoint (`--from URL`) read straight from object storage.

use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Context as _};

use super::{agent_arg, connect, require_agent, say, time};

use crate::archive::{self, Document};
use crate::identity::AgentKey;
use crate::model::Message;
use crate::store::prelude::*;
use crate::store::{Checkpoint, Consciousness, Goal, Memories, NoteKind, RedisArgs, Snapshot};

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
        /// An archived checkpoint of this agent (`status.checkpoint.storageRef`).
        #[arg(long, value_name = "URL")]
        from: Option<String>,
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

/// What `show` prints, wherever it comes from.
struct Shown {
    agent: AgentKey,
    consciousness: Consciousness,
    memories: Memories,
    goals: Vec<Goal>,
    checkpoints: Vec<Checkpoint>,
    /// Where it was read from (an archived object's URL), or its archive and restores.
    lines: Vec<(&'static str, String)>,
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
            agent, json, redis, ..
        } => {
            let key = agent_arg(agent.as_deref().unwrap_or_default())?;
            let store = connect(&redis).await?;
            require_agent(&store, &key).await?;
            let seen = store.observe(std::slice::from_ref(&key)).await?.pop();
            let mut lines = Vec::new();
            if let Some(a) = seen.as_ref().and_then(|s| s.archive.as_ref()) {
                let at = match (a.cycle, &a.url) {
                    (Some(c), Some(u)) => format!("cycle {c} at {u}"),
                    _ => "nothing yet".into(),
                };
                let state = if a.ok {
                    String::new()
                } else {
                    format!(" ({}: {})", a.reason, a.message)
                };
                lines.push(("Archived:", format!("{at}{state}")));
            }
            if let Some(r) = seen.as_ref().and_then(|s| s.restore.as_ref()) {
                if let Some(applied) = &r.applied {
                    lines.push((
                        "Restored:",
                        format!(
                            "{} of cycle {} from {}",
                            applied.reason, applied.cycle, applied.storage_ref
                        ),
                    ));
                }
                if !r.ok {
                    lines.push(("Last restore:", format!("{}: {}", r.reason, r.message)));
                }
            }
            let shown = Shown {
                consciousness: store.consciousness(&key).await?,
                memories: store.memories(&key).await?,
                goals: store.goals(&key).await?,
                checkpoints: store.checkpoints(&key).await?,
                agent: key,
                lines,
            };
            show(out, &shown, json)?;
        }
        ConsciousnessCommand::Restore {
            agent,
            cycle,
            from,
            redis,
        } => {
            let key = agent_arg(&agent)?;
            // Read and verify the archived checkpoint before anything is touched.
            let doc = match &from {
                Some(url) => {
                    let doc = archive::fetch(url)
                        .await
                        .with_context(|| format!("reading {url}"))?;
                    archive::expect(&doc, &key, None, url).map_err(|e| {
                        anyhow::anyhow!("{e}\nhint: to start an agent from another agent's checkpoint, give the new Agent spec.consciousness.seedFrom")
                    })?;
                    Some(doc)
                }
                None => None,
            };
            let store = connect(&redis).await?;
            require_agent(&store, &key).await?;
            let holder = format!("agentfleet-cli-{}", std::process::id());
            let lease = store
                .acquire_lease(&key, &holder, Duration::from_secs(30))
                .await?
                .with_context(|| format!("agent {key} is thinking (a worker holds its lease); try again once it sleeps, or pause the Agent (spec.paused: true) first"))?;
            let restored = match doc {
                Some(doc) => {
                    let mut snapshot = doc.snapshot;
                    // The spec's restore request stays applied: this is not one.
                    snapshot.consciousness.restored = store.consciousness(&key).await?.restored;
                    store
                        .replace_consciousness(&key, &lease, &snapshot)
                        .await
                        .map(Some)
                }
                None => {
                    store
                        .restore_checkpoint(&key, &lease, cycle.unwrap_or_default(), None)
                        .await
                }
            };
            store.release_lease(&key, &lease).await?;
            match restored? {
                Some(cp) => writeln!(
                    out,
                    "restored {key} to cycle {} ({} messages, {} tokens, {}){}",
                    cp.cycle,
                    cp.messages,
                    cp.tokens,
                    cp.digest,
                    from.map(|u| format!(" from {u}")).unwrap_or_default()
                )?,
                None => {
                    let kept: Vec<String> = store
                        .checkpoints(&key)
                        .await?
                        .iter()
                        .map(|c| c.cycle.to_string())
                        .collect();
                    bail!(
                        "agent {key} has no checkpoint for cycle {}; retained: {}",
                        cycle.unwrap_or_default(),
                        if kept.is_empty() {
                            "none".into()
                        } else {
                            kept.join(", ")
                        }
                    );
                }
            }
        }
    }
    Ok(())
}

/// An archived document as `show` prints it.
fn archived(doc: Document, url: String) -> Shown {
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
    Shown {
        agent: doc.agent,
        memories: notes.get(&NoteKind::Memories).cloned().unwrap_or_default(),
        goals,
        checkpoints: vec![checkpoint],
        lines: vec![
            ("Archived at:", url),
            ("Generation:", doc.generation.to_string()),
            ("Verified:", verified()),
        ],
        consciousness,
    }
}

fn show(out: &mut impl Write, s: &Shown, json: bool) -> anyhow::Result<()> {
    let (key, c) = (&s.agent, &s.consciousness);
    if json {
        let messages: Vec<serde_json::Value> = c
            .messages
            .iter()
            .map(|m| serde_json::from_str(m).unwrap_or(serde_json::Value::String(m.clone())))
            .collect();
        let extra: serde_json::Map<String, serde_json::Value> = s
            .lines
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
                "agent": key.to_string(), "cycle": c.cycle, "tokens": c.tokens, "tokensUsed": c.tokens_used,
                "digest": c.digest, "summary": c.summary, "messages": messages,
                "memories": s.memories, "goals": s.goals, "checkpoints": s.checkpoints,
                "restored": c.restored, "archive": extra,
            }))?
        )?;
        return Ok(());
    }
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
    for (label, value) in &s.lines {
        say(out, &format!("{label:<13} {value}"), 14)?;
    }
    if let Some(summary) = &c.summary {
        writeln!(out, "\nSummary of earlier conversation:")?;
        say(out, &format!("  {summary}"), 2)?;
    }
    writeln!(out, "\nMessages ({}):", c.messages.len())?;
    for m in &c.messages {
        match serde_json::from_str::<Message>(m) {
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

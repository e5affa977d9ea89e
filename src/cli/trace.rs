//! `agentfleet trace NS/AGENT [CYCLE]`: an agent's cycles (the newest, one line each) or one
//! cycle's record — what it woke for, each step's tokens and times, the model's private
//! text, its calls and their results, how it ended and why — in a terminal, through the
//! gateway (those who may read the agent's consciousness) or on the data plane
//! (break-glass). What the records hold is text a model or a tool wrote: shown, never obeyed
//! (control characters made visible).

use std::io::Write;

use super::remote::{Remote, Via};
use super::{agent_arg, connect, say, time};
use crate::cycles::read::{self, PAGE_MAX};
use crate::cycles::{CycleHead, CyclePage, CycleRecord, CycleView};
use crate::store::RedisArgs;
use crate::terminal::{sanitize, Breaks};

/// `agentfleet trace …`
#[derive(clap::Args, Debug, Clone)]
pub struct TraceCommand {
    /// The agent, `NAMESPACE/NAME`.
    agent: String,
    /// A cycle's record number (the first column of the list); without it, the list.
    cycle: Option<u64>,
    /// How many cycles the list shows (1 to 100), newest first.
    #[arg(long, default_value_t = 20)]
    limit: usize,
    /// As JSON (the gateway's answer).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    via: Via,
    #[command(flatten)]
    redis: RedisArgs,
}

/// Runs `agentfleet trace …`.
pub async fn trace(cmd: TraceCommand) -> anyhow::Result<()> {
    let key = agent_arg(&cmd.agent)?;
    let limit = cmd.limit.clamp(1, PAGE_MAX);
    let remote = Remote::of(&cmd.via).await?;
    let base = format!("/v1/agents/{}/{}/cycles", key.namespace, key.name);
    let out = &mut std::io::stdout().lock();
    match cmd.cycle {
        None => {
            let page: CyclePage = match &remote {
                Some(r) => r.get(&format!("{base}?limit={limit}")).await?,
                None => read::page(&connect(&cmd.redis).await?, &key, None, limit, None).await?,
            };
            if cmd.json {
                writeln!(out, "{}", serde_json::to_string_pretty(&page)?)?;
            } else if page.cycles.is_empty() {
                writeln!(
                    out,
                    "{key} has no cycle records (yet, or spec.cycle.records.keep is 0)"
                )?;
            } else {
                list(out, &page.cycles)?;
            }
        }
        Some(seq) => {
            let view: CycleView = match &remote {
                Some(r) => r.get(&format!("{base}/{seq}")).await?,
                None => {
                    let (record, bytes) =
                        read::record(&connect(&cmd.redis).await?, &key, seq).await?;
                    CycleView {
                        record,
                        bytes,
                        trace_url: None,
                    }
                }
            };
            if cmd.json {
                writeln!(out, "{}", serde_json::to_string_pretty(&view)?)?;
            } else {
                show(out, &view)?;
            }
        }
    }
    Ok(())
}

/// One line per cycle, newest first.
fn list(out: &mut impl Write, heads: &[CycleHead]) -> std::io::Result<()> {
    writeln!(
        out,
        "{:>6}  {:<24}  {:<9}  {:>8}  {:>5}  {:>5}  {:>8}  REASON",
        "CYCLE", "STARTED", "OUTCOME", "TOOK", "STEPS", "CALLS", "TOKENS"
    )?;
    for h in heads {
        let outcome = h.outcome.map_or("?", |o| o.as_str());
        let reason = h.reason.as_deref().unwrap_or_default();
        writeln!(
            out,
            "{:>6}  {:<24}  {:<9}  {:>8}  {:>5}  {:>5}  {:>8}  {}",
            h.seq,
            time(h.started_ms),
            outcome,
            format!("{} ms", h.duration_ms),
            h.steps,
            h.calls,
            h.tokens.input + h.tokens.output,
            sanitize(reason, Breaks::Visible)
        )?;
    }
    Ok(())
}

/// `n bytes cut` when `n` is not 0.
fn cut(n: u64, what: &str) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(" [{n} {what} not kept]")
    }
}

/// One cycle's record.
fn show(out: &mut impl Write, view: &CycleView) -> std::io::Result<()> {
    let r: &CycleRecord = &view.record;
    let outcome = r.outcome.map_or("?", |o| o.as_str());
    writeln!(
        out,
        "Cycle {} ({outcome}){}",
        r.seq,
        r.checkpoint
            .map(|c| format!(", checkpoint {c}"))
            .unwrap_or_default()
    )?;
    if let Some(reason) = &r.reason {
        write!(out, "Why:      ")?;
        say(out, reason, 10)?;
    }
    writeln!(
        out,
        "Started:  {}, took {} ms{}",
        time(r.started_ms),
        r.duration_ms,
        if r.resumed {
            ", resumed from its journal"
        } else {
            ""
        }
    )?;
    writeln!(out, "Party:    {}", sanitize(&r.party, Breaks::Visible))?;
    writeln!(
        out,
        "Tokens:   {} in ({} cached), {} out",
        r.tokens.input, r.tokens.cached, r.tokens.output
    )?;
    match (&view.trace_url, &r.trace_id) {
        (Some(url), _) => writeln!(out, "Trace:    {}", sanitize(url, Breaks::Visible))?,
        (None, Some(id)) => writeln!(out, "Trace:    {id}")?,
        _ => {}
    }
    writeln!(out, "\nWoke for:{}", cut(r.events_cut, "events"))?;
    for e in &r.events {
        let from = e.from.as_deref().unwrap_or("-");
        let space = e.space.as_deref().unwrap_or("-");
        write!(
            out,
            "  [{}] {} in {} from {}: ",
            time(e.time_ms),
            sanitize(&e.kind, Breaks::Visible),
            sanitize(space, Breaks::Visible),
            sanitize(from, Breaks::Visible)
        )?;
        say(out, &format!("{}{}", e.text, cut(e.text_cut, "bytes")), 4)?;
    }
    for s in &r.steps {
        let first = s
            .first_token_ms
            .map(|f| format!(", first token at {f} ms"))
            .unwrap_or_default();
        writeln!(
            out,
            "\nStep {} at +{} ms: model {} ms{first}, {} in ({} cached), {} out{}",
            s.step,
            s.offset_ms,
            s.duration_ms,
            s.tokens.input,
            s.tokens.cached,
            s.tokens.output,
            s.finish
                .as_deref()
                .map(|f| format!(", {}", sanitize(f, Breaks::Visible)))
                .unwrap_or_default()
        )?;
        if let Some(text) = &s.text {
            write!(out, "  Thought: ")?;
            say(out, &format!("{text}{}", cut(s.text_cut, "bytes")), 4)?;
        }
        for c in &s.calls {
            let state = match c.ok {
                Some(true) => "ok",
                Some(false) => "error",
                None => "waiting",
            };
            write!(
                out,
                "  Call {} ({state}, {} ms): ",
                sanitize(&c.tool, Breaks::Visible),
                c.duration_ms
            )?;
            say(
                out,
                &format!("{}{}", c.arguments, cut(c.arguments_cut, "bytes")),
                4,
            )?;
            if let Some(result) = &c.result {
                write!(out, "    Result: ")?;
                say(out, &format!("{result}{}", cut(c.result_cut, "bytes")), 6)?;
            }
        }
        if s.calls_cut > 0 {
            writeln!(out, "  [{} more calls not kept]", s.calls_cut)?;
        }
        for n in &s.notes {
            write!(out, "  Note: ")?;
            say(out, n, 4)?;
        }
    }
    if r.steps_cut > 0 {
        writeln!(out, "\n[{} steps not kept]", r.steps_cut)?;
    }
    if !r.posted.is_empty() {
        writeln!(out, "\nPosted:")?;
        for p in &r.posted {
            writeln!(
                out,
                "  {} in {}",
                sanitize(&p.id, Breaks::Visible),
                sanitize(&p.space, Breaks::Visible)
            )?;
        }
    }
    Ok(())
}

//! A rehearsal's report as a table for a terminal: one line per recorded cycle (what it
//! decided, what the candidate did in its place, whether they agree), then the summary.
//! The texts in it come from models and tools: shown, never obeyed (control characters made
//! visible).

use std::io::Write;

use super::{CycleResult, Decision, Report};
use crate::terminal::{sanitize, Breaks};

/// What a decision shows in a column: its outcome, where it posted, its tools.
fn cell(d: &Decision) -> String {
    let mut out = d.outcome.clone();
    if !d.to.is_empty() {
        out.push_str(&format!(" {}", d.to.join(",")));
    }
    let names = d.tool_names();
    if !names.is_empty() {
        out.push_str(&format!(" [{}]", names.join(",")));
    }
    sanitize(&out, Breaks::Visible)
}

/// `yes`, `no` or `-` (not compared).
fn agrees(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "yes",
        Some(false) => "NO",
        None => "-",
    }
}

/// One line of the table.
pub fn line(out: &mut impl Write, c: &CycleResult) -> std::io::Result<()> {
    let (candidate, steps, tokens) = match &c.candidate {
        Some(d) => (cell(d), d.steps.to_string(), d.tokens.to_string()),
        None => (
            format!(
                "not rehearsed: {}",
                sanitize(c.not_rehearsed.as_deref().unwrap_or(""), Breaks::Visible)
            ),
            "-".into(),
            "-".into(),
        ),
    };
    let mut notes = Vec::new();
    if c.not_replayed > 0 {
        notes.push(format!("{} not replayed", c.not_replayed));
    }
    if c.inexact {
        notes.push("inexact".to_string());
    }
    writeln!(
        out,
        "{:>6}  {:<32}  {:<32}  {:>5}  {:>5}  {:>7}  {:>7}  {:>11}  {}",
        c.seq,
        cell(&c.recorded),
        candidate,
        agrees(c.reply_agrees),
        agrees(c.tools_agree),
        format!("{}/{}", c.recorded.steps, steps),
        c.recorded.tokens,
        tokens,
        notes.join(", ")
    )
}

/// The table's header.
pub fn header(out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{:>6}  {:<32}  {:<32}  {:>5}  {:>5}  {:>7}  {:>7}  {:>11}  NOTES",
        "CYCLE", "RECORDED", "CANDIDATE", "REPLY", "TOOLS", "STEPS", "TOKENS", "CAND.TOKENS"
    )
}

/// The summary under the table.
pub fn summary(out: &mut impl Write, report: &Report) -> std::io::Result<()> {
    let s = &report.summary;
    writeln!(
        out,
        "\n{} rehearsed, {} not; replies agree in {:.0}%, tool calls in {:.0}% of {} compared; tokens {} (recorded {}); calls replayed {}, not replayed {}",
        s.rehearsed,
        s.not_rehearsed,
        s.reply_agreement * 100.0,
        s.tool_agreement * 100.0,
        s.compared,
        s.candidate_tokens,
        s.recorded_tokens,
        s.replayed,
        s.not_replayed
    )?;
    let verdict = if s.passed { "PASSED" } else { "FAILED" };
    writeln!(out, "{verdict}: {}", sanitize(&s.verdict, Breaks::Visible))
}

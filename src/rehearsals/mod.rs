//! What a rehearsal finds (docs/rehearsals.md), shared by whoever runs one (the worker's
//! `agentfleet rehearse`, a Rehearsal's Job) and whoever shows it (the operator's status,
//! the console): what a cycle decided, read from its record; how a candidate's decision
//! compares with the recorded one (replied or not and where, the tool calls it made with
//! their arguments, its steps, tokens and time); the summary against the criteria; the
//! report as a run records it in the data plane.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::cycles::{CycleOutcome, CycleRecord};

/// The most recorded cycles one rehearsal replays.
pub const MAX_CYCLES: usize = 100;
/// Recorded cycles a rehearsal replays unless told.
pub const DEFAULT_CYCLES: u32 = 20;
/// The most a Rehearsal may take unless told, in seconds.
pub const DEFAULT_TIMEOUT_SECONDS: u32 = 1800;

/// Arguments as compared: the JSON re-written with its keys in order (the text as it is
/// when it is not JSON).
pub fn canonical(arguments: &str) -> String {
    serde_json::from_str::<serde_json::Value>(arguments)
        .map(|v| v.to_string())
        .unwrap_or_else(|_| arguments.trim().to_string())
}

/// What a rehearsal found.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Each recorded cycle, oldest first, and what the candidate did in its place.
    pub cycles: Vec<CycleResult>,
    /// The figures and the verdict.
    pub summary: Summary,
}

/// Longest call (its tool and arguments) or reason a report keeps for showing.
const SHOWN_BYTES: usize = 512;
/// Calls a decision keeps for showing.
const SHOWN_CALLS: usize = 16;

impl Report {
    /// The report as it is kept for showing (a Rehearsal's status, the data plane): each
    /// call and reason cut to 512 bytes, at most 16 calls a decision (the last entry then
    /// says how many more). The comparison was made on the whole of them.
    pub fn shown(mut self) -> Self {
        let clip = |text: &mut String| {
            let (kept, cut) = crate::cycles::clip(text, SHOWN_BYTES);
            if cut > 0 {
                *text = format!("{kept}…");
            }
        };
        for c in &mut self.cycles {
            for d in std::iter::once(&mut c.recorded).chain(c.candidate.as_mut()) {
                if d.calls.len() > SHOWN_CALLS {
                    let more = d.calls.len() - (SHOWN_CALLS - 1);
                    d.calls.truncate(SHOWN_CALLS - 1);
                    d.calls.push(format!("… and {more} more"));
                }
                d.calls.iter_mut().for_each(clip);
                if let Some(r) = d.reason.as_mut() {
                    clip(r);
                }
            }
            if let Some(r) = c.not_rehearsed.as_mut() {
                clip(r);
            }
        }
        clip(&mut self.summary.verdict);
        self
    }
}

impl Report {
    /// The report as a Rehearsal's status keeps it, for those who may read Rehearsals but
    /// not the agent's records: each decision's outcome, where it posted, the names of the
    /// tools it called, its steps, tokens and time — not the calls' arguments nor the
    /// reasons, which hold what the agent's cycles saw (the gateway shows those under the
    /// records' rule). At most [`MAX_CYCLES`] cycles.
    pub fn for_status(mut self) -> Self {
        self.cycles.truncate(MAX_CYCLES);
        for c in &mut self.cycles {
            for d in std::iter::once(&mut c.recorded).chain(c.candidate.as_mut()) {
                d.calls = d.tool_names().into_iter().map(str::to_string).collect();
                d.calls.truncate(SHOWN_CALLS);
                d.reason = None;
            }
        }
        self
    }
}

/// A rehearsal's outcome as its run records it in the data plane for the operator.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Recorded {
    /// The Rehearsal's name.
    #[serde(default)]
    pub name: String,
    /// The Rehearsal's uid (a Rehearsal made again under the same name has another).
    pub uid: String,
    /// The Rehearsal's generation it ran for.
    pub generation: i64,
    /// When it ended (ms since the epoch).
    #[serde(default)]
    pub time_ms: i64,
    /// The report, when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<Report>,
    /// Why it could not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The built-ins that speak rather than act: compared as "replied or not, and where", not
/// as calls (their texts are the model's own words, which differ from model to model).
const SPEAKING: [&str; 2] = ["send_message", "skip"];

/// What one cycle decided.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// `replied` (posted a message), `silent` (committed without posting), `skipped`,
    /// `waits` (paused for a person's answer) or `failed`.
    pub outcome: String,
    /// The spaces it posted to, in order, once each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub to: Vec<String>,
    /// Its calls of tools other than `send_message` and `skip`: the tool and its arguments
    /// (JSON with its keys in order), in the order made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<String>,
    /// Model requests it made.
    pub steps: u64,
    /// Model tokens it spent (prompt and completion).
    pub tokens: u64,
    /// How long it took (ms).
    pub duration_ms: u64,
    /// Why it ended so, when it says (a failure, a stop, the call it waits on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Decision {
    /// The decision a record tells of.
    pub fn of(record: &CycleRecord) -> Self {
        let mut to: Vec<String> = Vec::new();
        for p in &record.posted {
            if !to.contains(&p.space) {
                to.push(p.space.clone());
            }
        }
        let outcome = match record.outcome {
            Some(CycleOutcome::Skipped) => "skipped",
            Some(CycleOutcome::Paused) => "waits",
            Some(CycleOutcome::Failed) | None => "failed",
            Some(CycleOutcome::Committed) if to.is_empty() => "silent",
            Some(CycleOutcome::Committed) => "replied",
        };
        let calls = record
            .steps
            .iter()
            .flat_map(|s| &s.calls)
            .filter(|c| !SPEAKING.contains(&c.tool.as_str()))
            .map(|c| format!("{} {}", c.tool, canonical(&c.arguments)))
            .collect();
        Decision {
            outcome: outcome.to_string(),
            to,
            calls,
            steps: record.steps.len() as u64 + record.steps_cut,
            tokens: record.tokens.input + record.tokens.output,
            duration_ms: record.duration_ms,
            reason: record.reason.clone(),
        }
    }

    /// Whether it answered: posted somewhere.
    fn replied(&self) -> bool {
        self.outcome == "replied"
    }

    /// Whether `other` replied or stayed quiet as this did, and where: both posted to the
    /// same spaces, both waited for a person, or neither posted (skipped or silent).
    pub fn reply_agrees(&self, other: &Decision) -> bool {
        match (self.replied(), other.replied()) {
            (true, true) => sorted(&self.to) == sorted(&other.to),
            (false, false) => (self.outcome == "waits") == (other.outcome == "waits"),
            _ => false,
        }
    }

    /// Whether `other` made the same calls, names and arguments, in any order.
    pub fn tools_agree(&self, other: &Decision) -> bool {
        sorted(&self.calls) == sorted(&other.calls)
    }

    /// The tool names of its calls.
    pub fn tool_names(&self) -> Vec<&str> {
        self.calls
            .iter()
            .map(|c| c.split_once(' ').map_or(c.as_str(), |(name, _)| name))
            .collect()
    }
}

fn sorted(v: &[String]) -> Vec<&String> {
    let mut out: Vec<&String> = v.iter().collect();
    out.sort();
    out
}

/// One recorded cycle, and what the candidate did in its place.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CycleResult {
    /// The recorded cycle's number (`agentfleet trace NS/AGENT SEQ`).
    pub seq: u64,
    /// When it ran (ms since the epoch).
    pub started_ms: i64,
    /// What it decided.
    pub recorded: Decision,
    /// What the candidate decided in its place; none when it was not rehearsed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate: Option<Decision>,
    /// Why it was not rehearsed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_rehearsed: Option<String>,
    /// The candidate's calls answered with the recorded result.
    #[serde(default)]
    pub replayed: u32,
    /// The candidate's calls answered "not replayed" (the recorded cycle made no such call).
    #[serde(default)]
    pub not_replayed: u32,
    /// Whether what it was rebuilt from was whole: an event, or a result replayed, that the
    /// record had cut makes the rehearsed cycle differ from the recorded one in that.
    #[serde(default)]
    pub inexact: bool,
    /// Whether the candidate replied or stayed quiet as recorded, and where (none when not
    /// compared: not rehearsed, or the recorded cycle failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_agrees: Option<bool>,
    /// Whether it made the same tool calls, names and arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools_agree: Option<bool>,
}

impl CycleResult {
    /// A cycle compared: `candidate` in place of what `record` decided.
    pub fn compared(record: &CycleRecord, candidate: Decision) -> Self {
        let recorded = Decision::of(record);
        let compared = recorded.outcome != "failed";
        Self {
            seq: record.seq,
            started_ms: record.started_ms,
            reply_agrees: compared.then(|| recorded.reply_agrees(&candidate)),
            tools_agree: compared.then(|| recorded.tools_agree(&candidate)),
            recorded,
            candidate: Some(candidate),
            ..Self::default()
        }
    }

    /// A recorded cycle that could not be rehearsed, and why.
    pub fn skipped(record: &CycleRecord, why: impl Into<String>) -> Self {
        Self {
            seq: record.seq,
            started_ms: record.started_ms,
            recorded: Decision::of(record),
            not_rehearsed: Some(why.into()),
            ..Self::default()
        }
    }
}

/// What a rehearsal must show to pass.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Criteria {
    /// The least share (0 to 1) of compared cycles in which the candidate replied or stayed
    /// quiet as recorded, and where.
    #[serde(default = "default_agreement")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub min_reply_agreement: f64,
    /// The least share (0 to 1) of compared cycles in which it made the same tool calls
    /// (names and arguments).
    #[serde(default = "default_agreement")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub min_tool_agreement: f64,
    /// The most model tokens the rehearsal may spend; past it the rehearsal ends, failed.
    /// Unset: no ceiling beyond each cycle's own `cycle.tokenBudget`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_tokens: Option<u64>,
}

fn default_agreement() -> f64 {
    0.9
}

impl Default for Criteria {
    fn default() -> Self {
        Self {
            min_reply_agreement: default_agreement(),
            min_tool_agreement: default_agreement(),
            max_tokens: None,
        }
    }
}

/// A rehearsal's outcome in figures, and its verdict.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Recorded cycles the candidate ran in place of.
    pub rehearsed: u32,
    /// Recorded cycles it could not (each says why).
    pub not_rehearsed: u32,
    /// Cycles compared (rehearsed, and the recorded one did not fail).
    pub compared: u32,
    /// Share of compared cycles that agree on replying or not, and where (0 to 1).
    pub reply_agreement: f64,
    /// Share of compared cycles that agree on tool calls (0 to 1).
    pub tool_agreement: f64,
    /// Tokens the recorded cycles spent, of those rehearsed.
    pub recorded_tokens: u64,
    /// Tokens the candidate spent.
    pub candidate_tokens: u64,
    /// Calls answered with a recorded result.
    pub replayed: u32,
    /// Calls answered "not replayed".
    pub not_replayed: u32,
    /// Whether it passed its criteria.
    pub passed: bool,
    /// Why it passed or failed, in a sentence.
    pub verdict: String,
}

impl Summary {
    /// The summary of `cycles` against `criteria`; `ended` is why the rehearsal stopped
    /// before its last cycle, if it did (it fails then).
    pub fn of(cycles: &[CycleResult], criteria: &Criteria, ended: Option<&str>) -> Self {
        let rehearsed: Vec<&CycleResult> =
            cycles.iter().filter(|c| c.candidate.is_some()).collect();
        let compared: Vec<&CycleResult> = rehearsed
            .iter()
            .copied()
            .filter(|c| c.reply_agrees.is_some())
            .collect();
        let share = |agree: fn(&CycleResult) -> bool| {
            if compared.is_empty() {
                return 0.0;
            }
            compared.iter().filter(|c| agree(c)).count() as f64 / compared.len() as f64
        };
        let mut s = Summary {
            rehearsed: rehearsed.len() as u32,
            not_rehearsed: (cycles.len() - rehearsed.len()) as u32,
            compared: compared.len() as u32,
            reply_agreement: share(|c| c.reply_agrees == Some(true)),
            tool_agreement: share(|c| c.tools_agree == Some(true)),
            recorded_tokens: rehearsed.iter().map(|c| c.recorded.tokens).sum(),
            candidate_tokens: rehearsed
                .iter()
                .filter_map(|c| c.candidate.as_ref())
                .map(|d| d.tokens)
                .sum(),
            replayed: cycles.iter().map(|c| c.replayed).sum(),
            not_replayed: cycles.iter().map(|c| c.not_replayed).sum(),
            passed: false,
            verdict: String::new(),
        };
        let percent = |x: f64| format!("{:.0}%", x * 100.0);
        let failure = if let Some(why) = ended {
            Some(why.to_string())
        } else if s.compared == 0 {
            Some("no recorded cycle could be compared".to_string())
        } else if s.reply_agreement < criteria.min_reply_agreement {
            Some(format!(
                "the candidate replied or stayed quiet as recorded in {} of {} cycles ({}), below the {} asked",
                compared.iter().filter(|c| c.reply_agrees == Some(true)).count(),
                s.compared,
                percent(s.reply_agreement),
                percent(criteria.min_reply_agreement)
            ))
        } else if s.tool_agreement < criteria.min_tool_agreement {
            Some(format!(
                "the candidate made the recorded tool calls in {} of {} cycles ({}), below the {} asked",
                compared.iter().filter(|c| c.tools_agree == Some(true)).count(),
                s.compared,
                percent(s.tool_agreement),
                percent(criteria.min_tool_agreement)
            ))
        } else {
            None
        };
        s.passed = failure.is_none();
        s.verdict = failure.unwrap_or_else(|| {
            format!(
                "over {} cycles the candidate agreed on replies in {} and on tool calls in {}, with {} tokens (recorded: {})",
                s.compared,
                percent(s.reply_agreement),
                percent(s.tool_agreement),
                s.candidate_tokens,
                s.recorded_tokens
            )
        });
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cycles::{CallTrace, PostedMessage, StepTrace};

    fn record(outcome: CycleOutcome, posted: &[&str], calls: &[(&str, &str)]) -> CycleRecord {
        CycleRecord {
            seq: 7,
            outcome: Some(outcome),
            posted: posted
                .iter()
                .map(|s| PostedMessage {
                    space: s.to_string(),
                    id: "1-0".into(),
                })
                .collect(),
            steps: vec![StepTrace {
                calls: calls
                    .iter()
                    .map(|(tool, arguments)| CallTrace {
                        tool: tool.to_string(),
                        arguments: arguments.to_string(),
                        ..CallTrace::default()
                    })
                    .collect(),
                ..StepTrace::default()
            }],
            ..CycleRecord::default()
        }
    }

    #[test]
    fn a_decision_reads_replies_and_calls_from_its_record() {
        let d = Decision::of(&record(
            CycleOutcome::Committed,
            &["desk", "desk", "ops"],
            &[
                ("send_message", r#"{"text":"hi"}"#),
                ("weather", r#"{ "unit": "C", "city": "Oslo" }"#),
            ],
        ));
        assert_eq!(d.outcome, "replied");
        assert_eq!(d.to, ["desk", "ops"]);
        assert_eq!(d.calls, [r#"weather {"city":"Oslo","unit":"C"}"#]);
        assert_eq!(d.tool_names(), ["weather"]);
        let quiet = Decision::of(&record(CycleOutcome::Committed, &[], &[]));
        assert_eq!(quiet.outcome, "silent");
        assert!(quiet.reply_agrees(&Decision::of(&record(CycleOutcome::Skipped, &[], &[]))));
        assert!(!quiet.reply_agrees(&d));
        assert!(!quiet.reply_agrees(&Decision::of(&record(CycleOutcome::Paused, &[], &[]))));
    }

    #[test]
    fn tool_calls_agree_by_name_and_arguments_in_any_order() {
        let a = Decision::of(&record(
            CycleOutcome::Committed,
            &[],
            &[("a", r#"{"x":1}"#), ("b", "{}")],
        ));
        let same = Decision::of(&record(
            CycleOutcome::Committed,
            &[],
            &[("b", "{}"), ("a", r#"{ "x": 1 }"#)],
        ));
        let other = Decision::of(&record(
            CycleOutcome::Committed,
            &[],
            &[("a", r#"{"x":2}"#), ("b", "{}")],
        ));
        assert!(a.tools_agree(&same));
        assert!(!a.tools_agree(&other));
    }

    #[test]
    fn a_status_keeps_no_arguments_nor_reasons() {
        let mut r = record(
            CycleOutcome::Committed,
            &["desk"],
            &[("lookup", r#"{"who":"the secret plan"}"#)],
        );
        r.reason = Some("Husam's words".into());
        let report = Report {
            cycles: vec![CycleResult::compared(&r, Decision::of(&r))],
            summary: Summary::default(),
        };
        let shown = serde_json::to_string(&report.for_status()).unwrap();
        assert!(
            !shown.contains("secret") && !shown.contains("Husam"),
            "{shown}"
        );
        assert!(shown.contains(r#""calls":["lookup"]"#), "{shown}");
    }

    #[test]
    fn the_summary_fails_below_its_criteria_and_says_why() {
        let replied = record(CycleOutcome::Committed, &["desk"], &[]);
        let skipped = record(CycleOutcome::Skipped, &[], &[]);
        let same = |r: &CycleRecord| CycleResult::compared(r, Decision::of(r));
        let cycles = vec![
            same(&replied),
            same(&skipped),
            CycleResult::compared(&replied, Decision::of(&skipped)),
            CycleResult::skipped(&replied, "checkpoint 3 is no longer retained"),
        ];
        let s = Summary::of(&cycles, &Criteria::default(), None);
        assert_eq!((s.rehearsed, s.not_rehearsed, s.compared), (3, 1, 3));
        assert!(!s.passed);
        assert!(
            s.verdict
                .contains("in 2 of 3 cycles (67%), below the 90% asked"),
            "{}",
            s.verdict
        );
        let lenient = Criteria {
            min_reply_agreement: 0.6,
            ..Criteria::default()
        };
        let s = Summary::of(&cycles, &lenient, None);
        assert!(s.passed, "{}", s.verdict);
        let s = Summary::of(&cycles, &lenient, Some("the candidate's model failed"));
        assert!(!s.passed);
        assert_eq!(s.verdict, "the candidate's model failed");
        assert!(!Summary::of(&[], &lenient, None).passed);
    }
}

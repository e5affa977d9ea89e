//! Plans: scheduled triggers of an agent — declared in its spec (they live in Git) or made by
//! the agent itself with `set_plans` (they live in the data plane).
//!
//! The operator fires them: at a plan's due time it puts a `plan` event with the instruction
//! in the agent's inbox, which wakes an agent scaled to zero. The store records, per plan, the
//! last due time handled, atomically with the push ([`crate::store::Inbox::mark_plan`]), so a
//! due time fires at most once — also when two operators race across a leader change.
//!
//! A plan seen for the first time does not fire for due times before it was seen (a new
//! `0 6 * * *` plan created at noon waits for tomorrow); a one-shot plan whose time has passed
//! fires once. After downtime, only the latest missed due time of a recurring plan fires.

use std::sync::Arc;
use std::time::Duration;

use jiff::tz::TimeZone;
use jiff::Timestamp;
use serde_json::json;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::crd::PlanSpec;
use crate::identity::AgentKey;
use crate::store::{now_ms, AgentObservation, EventKind, InboxEvent, Sender, Store, StoreError};

/// Where a plan is declared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// The Agent's `spec.plans`.
    Spec,
    /// Made by the agent with `set_plans`.
    Agent,
}

impl Source {
    /// `spec` or `agent`.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Spec => "spec",
            Source::Agent => "agent",
        }
    }
}

/// The plan's identity in the data plane (`spec/NAME` or `agent/NAME`): the key of its
/// handled due times.
pub fn plan_id(source: Source, name: &str) -> String {
    format!("{}/{name}", source.as_str())
}

/// The most plans an agent may make itself.
pub const MAX_AGENT_PLANS: usize = 20;

/// A plan's parsed schedule.
#[derive(Clone, Debug)]
pub enum Schedule {
    /// Recurring.
    Cron(Box<cronexpr::Crontab>),
    /// Once, at this time (ms since the epoch).
    Once(i64),
}

/// What a plan needs now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Due {
    /// Fire for this due time (ms).
    Fire(i64),
    /// First sight of a recurring plan: record this time as handled, fire nothing.
    Baseline(i64),
    /// Nothing to do before this time (ms).
    Wait(i64),
    /// A one-shot plan that has fired.
    Done,
}

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;

/// Parses and checks a plan: exactly one of `schedule` and `at`, a five-field cron
/// expression (or a macro), a known time zone.
pub fn schedule(plan: &PlanSpec) -> Result<Schedule, String> {
    match (&plan.schedule, &plan.at) {
        (Some(_), Some(_)) => Err(format!(
            "plan {}: set either schedule or at, not both",
            plan.name
        )),
        (None, None) => Err(format!("plan {}: set schedule or at", plan.name)),
        (None, Some(at)) => {
            if plan.time_zone.is_some() {
                return Err(format!(
                    "plan {}: timeZone applies to schedule only (at carries its own offset)",
                    plan.name
                ));
            }
            Ok(Schedule::Once(at.0.as_millisecond()))
        }
        (Some(expr), None) => {
            let expr = expr.trim();
            let fields = match expr {
                "@hourly" => "0 * * * *",
                "@daily" | "@midnight" => "0 0 * * *",
                "@weekly" => "0 0 * * 0",
                "@monthly" => "0 0 1 * *",
                "@yearly" | "@annually" => "0 0 1 1 *",
                other => other,
            };
            let n = fields.split_whitespace().count();
            if n != 5 {
                return Err(format!(
                    "plan {}: schedule {expr:?} has {n} fields; a cron schedule has five (minute hour day-of-month month day-of-week)",
                    plan.name
                ));
            }
            let tz = plan.time_zone.as_deref().unwrap_or("UTC");
            TimeZone::get(tz)
                .map_err(|_| format!("plan {}: unknown time zone {tz:?}", plan.name))?;
            let crontab = cronexpr::parse_crontab(&format!("{fields} {tz}"))
                .map_err(|e| format!("plan {}: schedule {expr:?}: {e}", plan.name))?;
            Ok(Schedule::Cron(Box::new(crontab)))
        }
    }
}

impl Schedule {
    /// The first due time strictly after `ms`.
    pub fn next_after(&self, ms: i64) -> Option<i64> {
        match self {
            Schedule::Once(at) => (*at > ms).then_some(*at),
            Schedule::Cron(c) => {
                let from = cronexpr::MakeTimestamp::from_millisecond(ms).ok()?;
                let next = c.find_next(from).ok()?;
                Some(next.timestamp().as_millisecond())
            }
        }
    }

    /// The latest due time in `(after, now]`.
    fn latest_in(&self, after: i64, now: i64) -> Option<i64> {
        // Look back over growing windows, so a minutely plan after long downtime costs a few
        // dozen steps, not one per missed minute.
        for back in [HOUR_MS, DAY_MS, 32 * DAY_MS, 367 * DAY_MS, i64::MAX] {
            let start = after.max(now.saturating_sub(back));
            match self.next_after(start) {
                Some(mut t) if t <= now => {
                    while let Some(n) = self.next_after(t).filter(|n| *n <= now) {
                        t = n;
                    }
                    return Some(t);
                }
                _ if start == after => return None,
                _ => {}
            }
        }
        None
    }

    /// What the plan needs at `now`, given the last due time handled (`mark`).
    pub fn due(&self, mark: Option<i64>, now: i64) -> Due {
        match (self, mark) {
            (Schedule::Once(at), Some(m)) if m >= *at => Due::Done,
            (Schedule::Once(at), _) if *at <= now => Due::Fire(*at),
            (Schedule::Once(at), _) => Due::Wait(*at),
            (Schedule::Cron(_), None) => Due::Baseline(now),
            (Schedule::Cron(_), Some(m)) => match self.latest_in(m, now) {
                Some(t) => Due::Fire(t),
                None => self.next_after(m.max(now)).map_or(Due::Done, Due::Wait),
            },
        }
    }
}

/// RFC 3339 of a time in ms (the ms as a number if out of range).
pub fn rfc3339(ms: i64) -> String {
    Timestamp::from_millisecond(ms).map_or_else(|_| ms.to_string(), |t| t.to_string())
}

/// The inbox event of a plan due at `due_ms`. Its id names the plan and the due time, so a
/// repeated push of the same firing is dropped by the inbox too.
pub fn event(source: Source, plan: &PlanSpec, due_ms: i64, now_ms: i64) -> InboxEvent {
    InboxEvent {
        id: format!("plan:{}:{due_ms}", plan_id(source, &plan.name)),
        kind: EventKind::Plan,
        time_ms: now_ms,
        urgent: false,
        space: None,
        sender: Some(Sender {
            groups: Vec::new(),
            id: plan_id(source, &plan.name),
            name: format!("plan {}", plan.name),
            kind: None,
        }),
        text: Some(plan.instruction.clone()),
        depth: 0,
        data: Some(json!({
            "plan": plan.name,
            "source": source.as_str(),
            "due": rfc3339(due_ms),
        })),
    }
}

/// The plans of one agent that need something now — its spec's, then its own — and the
/// earliest due time of the others. A plan that does not parse is left out (the reconcile
/// reports a spec plan; the agent's own were checked when it made them).
pub fn pending(
    spec_plans: &[PlanSpec],
    seen: &AgentObservation,
    now_ms: i64,
) -> (Vec<(Source, PlanSpec, Due)>, Option<i64>) {
    let mut todo = Vec::new();
    let mut next: Option<i64> = None;
    let own: Vec<PlanSpec> = seen.plans.iter().map(PlanSpec::from).collect();
    let all = spec_plans
        .iter()
        .map(|p| (Source::Spec, p))
        .chain(own.iter().map(|p| (Source::Agent, p)));
    for (source, p) in all {
        let Ok(s) = schedule(p) else {
            continue;
        };
        let mark = seen.plan_marks.get(&plan_id(source, &p.name)).copied();
        match s.due(mark, now_ms) {
            Due::Wait(t) => next = Some(next.map_or(t, |n| n.min(t))),
            Due::Done => {}
            due => todo.push((source, p.clone(), due)),
        }
    }
    (todo, next)
}

/// Acts on a pending plan: fires it (records the due time and pushes its event, once) or
/// records its baseline. Returns whether an event was pushed.
pub async fn fire(
    store: &dyn Store,
    agent: &AgentKey,
    source: Source,
    plan: &PlanSpec,
    due: Due,
) -> Result<bool, StoreError> {
    let id = plan_id(source, &plan.name);
    let (at, event) = match due {
        Due::Fire(at) => (at, Some(event(source, plan, at, now_ms()))),
        Due::Baseline(at) => (at, None),
        Due::Wait(_) | Due::Done => return Ok(false),
    };
    let pushed = store.mark_plan(agent, &id, at, event.as_ref()).await?;
    let fired = pushed.is_some() && event.is_some();
    if fired {
        info!(%agent, plan = %plan.name, source = source.as_str(), due = %rfc3339(at), "plan fired");
    }
    Ok(fired)
}

/// Fires the plans of `agents` until `stop`, counting each fired in `fired` (by source, as
/// `agentfleet_plans_fired_total`): what `agentfleet dev` runs in place of the operator (whose
/// data-plane loop does the same beside scaling).
pub async fn run(
    store: Arc<dyn Store>,
    agents: Vec<(AgentKey, Vec<PlanSpec>)>,
    fired: prometheus::IntCounterVec,
    mut stop: watch::Receiver<bool>,
) {
    const LOOK: Duration = Duration::from_secs(5);
    let keys: Vec<AgentKey> = agents.iter().map(|(k, _)| k.clone()).collect();
    loop {
        let mut wait = LOOK;
        match store.observe(&keys).await {
            Ok(seen) => {
                let now = now_ms();
                for ((key, spec_plans), o) in agents.iter().zip(&seen) {
                    let (todo, next) = pending(spec_plans, o, now);
                    for (source, plan, due) in todo {
                        match fire(store.as_ref(), key, source, &plan, due).await {
                            Ok(true) => fired.with_label_values(&[source.as_str()]).inc(),
                            Ok(false) => {}
                            Err(e) => {
                                warn!(agent = %key, plan = %plan.name, error = %crate::report::chain(&e), "cannot fire plan")
                            }
                        }
                    }
                    if let Some(t) = next {
                        let until = Duration::from_millis(u64::try_from(t - now).unwrap_or(0));
                        wait = wait.min(until);
                    }
                }
            }
            Err(e) => {
                warn!(error = %crate::report::chain(&e), "cannot read plans from the data plane")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.wait_for(|v| *v) => return,
        }
    }
}

/// One line of the fresh context about a plan.
pub fn describe(plan: &PlanSpec, source: Source, mark: Option<i64>, now_ms: i64) -> String {
    let when = match (&plan.schedule, &plan.at) {
        (Some(s), _) => format!("{s} ({})", plan.time_zone.as_deref().unwrap_or("UTC")),
        (None, Some(at)) => format!("once at {}", at.0),
        (None, None) => "no schedule".into(),
    };
    let state = match schedule(plan) {
        Err(e) => format!("invalid: {e}"),
        Ok(s) => match s.due(mark, now_ms) {
            Due::Done => "done".into(),
            Due::Fire(_) => "due now".into(),
            Due::Wait(t) => format!("next {}", rfc3339(t)),
            Due::Baseline(_) => s.next_after(now_ms).map_or_else(
                || "no further due time".into(),
                |t| format!("next {}", rfc3339(t)),
            ),
        },
    };
    let by = match source {
        Source::Spec => "from your manifest",
        Source::Agent => "yours",
    };
    format!(
        "- {} [{by}] {when}, {state}: \"{}\"",
        plan.name, plan.instruction
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(yaml: &str) -> PlanSpec {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn ms(s: &str) -> i64 {
        s.parse::<Timestamp>().unwrap().as_millisecond()
    }

    #[test]
    fn cron_plans_fire_the_latest_due_time_once_and_never_before_first_sight() {
        let s = schedule(&plan(
            "{name: report, schedule: '0 6 * * *', instruction: go}",
        ))
        .unwrap();
        let seen = ms("2026-11-23T12:00:00Z");
        assert_eq!(s.due(None, seen), Due::Baseline(seen));
        assert_eq!(
            s.due(Some(seen), ms("2026-11-24T05:59:59Z")),
            Due::Wait(ms("2026-11-24T06:00:00Z"))
        );
        let six = ms("2026-11-24T06:00:00Z");
        assert_eq!(s.due(Some(seen), six), Due::Fire(six));
        assert_eq!(
            s.due(Some(six), six + 1),
            Due::Wait(ms("2026-11-25T06:00:00Z"))
        );
        // After three days down, only the latest missed one.
        assert_eq!(
            s.due(Some(six), ms("2026-11-27T09:00:00Z")),
            Due::Fire(ms("2026-11-27T06:00:00Z"))
        );
    }

    #[test]
    fn minutely_plans_after_long_downtime_are_cheap_and_exact() {
        let s = schedule(&plan(
            "{name: tick, schedule: '* * * * *', instruction: go}",
        ))
        .unwrap();
        let mark = ms("2026-01-01T00:00:00Z");
        let now = ms("2026-11-23T10:30:30Z");
        assert_eq!(
            s.due(Some(mark), now),
            Due::Fire(ms("2026-11-23T10:30:00Z"))
        );
    }

    #[test]
    fn time_zones_and_macros() {
        let s = schedule(&plan(
            "{name: r, schedule: '0 6 * * *', timeZone: Europe/Berlin, instruction: go}",
        ))
        .unwrap();
        assert_eq!(
            s.next_after(ms("2026-11-23T00:00:00Z")),
            Some(ms("2026-11-23T05:00:00Z"))
        );
        let d = schedule(&plan("{name: r, schedule: '@daily', instruction: go}")).unwrap();
        assert_eq!(
            d.next_after(ms("2026-11-23T00:00:00Z")),
            Some(ms("2026-11-24T00:00:00Z"))
        );
    }

    #[test]
    fn one_shot_plans_fire_once_even_when_first_seen_late() {
        let s = schedule(&plan(
            "{name: once, at: '2026-12-24T18:00:00Z', instruction: go}",
        ))
        .unwrap();
        let at = ms("2026-12-24T18:00:00Z");
        assert_eq!(s.due(None, at - 1), Due::Wait(at));
        assert_eq!(s.due(None, at + 60_000), Due::Fire(at));
        assert_eq!(s.due(Some(at), at + 60_000), Due::Done);
    }

    #[test]
    fn bad_plans_are_explained() {
        for (yaml, needle) in [
            ("{name: a, instruction: x}", "set schedule or at"),
            (
                "{name: a, schedule: '* * * * *', at: '2026-01-01T00:00:00Z', instruction: x}",
                "not both",
            ),
            (
                "{name: a, schedule: '0 6 * *', instruction: x}",
                "has 4 fields",
            ),
            (
                "{name: a, schedule: '0 25 * * *', instruction: x}",
                "schedule \"0 25 * * *\"",
            ),
            (
                "{name: a, schedule: '0 6 * * *', timeZone: Mars/Olympus, instruction: x}",
                "unknown time zone",
            ),
            (
                "{name: a, at: '2026-01-01T00:00:00Z', timeZone: UTC, instruction: x}",
                "timeZone applies to schedule only",
            ),
        ] {
            let e = schedule(&plan(yaml)).unwrap_err();
            assert!(e.contains(needle), "{yaml}: {e}");
        }
    }

    #[test]
    fn events_name_the_plan_and_due_time() {
        let p = plan("{name: report, schedule: '0 6 * * *', instruction: Post the report}");
        let e = event(Source::Spec, &p, ms("2026-11-24T06:00:00Z"), 1);
        assert_eq!(
            e.id,
            format!("plan:spec/report:{}", ms("2026-11-24T06:00:00Z"))
        );
        assert_eq!(e.kind, EventKind::Plan);
        assert_eq!(e.text.as_deref(), Some("Post the report"));
        assert_eq!(e.data.unwrap()["due"], "2026-11-24T06:00:00Z");
        let line = describe(
            &p,
            Source::Spec,
            Some(ms("2026-11-23T12:00:00Z")),
            ms("2026-11-23T12:00:00Z"),
        );
        assert!(line.contains("next 2026-11-24T06:00:00Z"), "{line}");
    }
}

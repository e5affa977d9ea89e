//! The Agent's status, assembled. The reconcile and the data-plane loop own disjoint status
//! fields, each written under its own server-side apply field manager: the reconcile writes
//! its conditions, available replicas and the configuration hash ([`reconcile_part`]); the loop
//! writes phase, replicas, inbox depth, cycles, tokens, last cycle time, the checkpoint, where
//! the consciousness was restored from, the tools and the conditions of what the worker
//! reports, `ModelAvailable`, `ToolsReady`, `CheckpointArchived` and `Restored` ([`data_part`],
//! built from the data plane by [`data_status`]).
//!
//! Conditions are merged with the previous set ([`merge`]), so `lastTransitionTime` only moves
//! when a condition's status flips, and nothing here changes from one pass to the next unless
//! what it says changed.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::EventType;

use crate::crd::{AgentPhase, AgentStatus, PendingCallStatus, ToolStatus};
use crate::store::AgentObservation;

mod budget;
mod consciousness;
mod tools;

use self::budget::budget_condition;
pub use self::budget::{remaining, spent, BUDGET_EXHAUSTED};
use self::consciousness::{archived_condition, checkpoint, restored_condition, restored_from};
pub use self::consciousness::{CHECKPOINT_ARCHIVED, RESTORED};
use self::tools::shown_tools;
pub use self::tools::{approvals_condition, tools_condition, APPROVERS_MATCH_TOOLS, TOOLS_READY};

/// Condition: the agent's model answers (written from the data plane, where the worker
/// reports it; reasons `Available`, `Unauthorized`, `Unreachable`, `RateLimited`,
/// `ServerError`, `Refused`, `BadResponse`).
pub const MODEL_AVAILABLE: &str = "ModelAvailable";

/// A condition as the reconciler computes it, before it is merged with the previous set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cond {
    /// Condition type, for example `Ready`.
    pub type_: &'static str,
    /// `true` for `"True"`, `false` for `"False"`, `None` for `"Unknown"`.
    pub status: Option<bool>,
    /// CamelCase reason.
    pub reason: &'static str,
    /// Human-readable detail.
    pub message: String,
}

impl Cond {
    /// A `True` condition.
    pub fn ok(type_: &'static str, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            type_,
            status: Some(true),
            reason,
            message: message.into(),
        }
    }

    /// A `False` condition.
    pub fn fail(type_: &'static str, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            type_,
            status: Some(false),
            reason,
            message: message.into(),
        }
    }

    /// An `Unknown` condition.
    pub fn unknown(type_: &'static str, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            type_,
            status: None,
            reason,
            message: message.into(),
        }
    }
}

/// A condition status as the API writes it: `"True"`, `"False"` or `"Unknown"`.
pub fn status_str(status: Option<bool>) -> &'static str {
    match status {
        Some(true) => "True",
        Some(false) => "False",
        None => "Unknown",
    }
}

/// The new condition list: `next` in its order, each keeping the previous
/// `lastTransitionTime` when its status did not change, `now` otherwise.
pub fn merge(
    previous: &[Condition],
    next: &[Cond],
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    next.iter()
        .map(|c| {
            let status = status_str(c.status).to_string();
            let last_transition_time = previous
                .iter()
                .find(|p| p.type_ == c.type_ && p.status == status)
                .map(|p| p.last_transition_time.clone())
                .unwrap_or(Time(now));
            Condition {
                type_: c.type_.to_string(),
                status,
                reason: c.reason.to_string(),
                message: c.message.clone(),
                observed_generation: generation,
                last_transition_time,
            }
        })
        .collect()
}

/// The Event a condition's change deserves, if any: a Warning when it says a problem
/// (`warning`) and its status or reason changed; Normal for any other change of a condition
/// that was there before (a recovery, a new state); none when nothing but its message changed,
/// nor for a condition seen for the first time that says no problem.
pub fn notice(before: Option<&Condition>, after: &Condition, warning: bool) -> Option<EventType> {
    let changed = before.is_none_or(|b| b.reason != after.reason || b.status != after.status);
    if !changed {
        None
    } else if warning {
        Some(EventType::Warning)
    } else {
        before.map(|_| EventType::Normal)
    }
}

/// The Event a change of a condition from the data plane deserves: as [`notice`], a Warning
/// when it is `False`; and every new `Restored` — the first seen, or one of a later time than
/// before — since each restore, fork or recovery is something that happened, not only a
/// state.
pub fn data_notice(before: Option<&Condition>, after: &Condition) -> Option<EventType> {
    // A spent budget is the problem `BudgetExhausted` says by being true.
    let warning = (after.status == "False") != (after.type_ == BUDGET_EXHAUSTED);
    if after.type_ == RESTORED {
        let new = before.is_none_or(|b| {
            b.last_transition_time != after.last_transition_time
                || b.status != after.status
                || b.reason != after.reason
        });
        return new.then_some(if warning {
            EventType::Warning
        } else {
            EventType::Normal
        });
    }
    notice(before, after, warning)
}

/// The previous condition of a type, if any.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// The phase: `Failed` when the spec cannot run, `Thinking` during a cycle, `ScaledToZero`
/// with no worker asked for, `Sleeping` when a worker is up, else `Pending`.
pub fn phase(
    failed: bool,
    replicas: Option<i32>,
    available: i32,
    seen: &AgentObservation,
) -> AgentPhase {
    if failed {
        AgentPhase::Failed
    } else if seen.thinking {
        AgentPhase::Thinking
    } else if replicas == Some(0) {
        AgentPhase::ScaledToZero
    } else if seen.worker || available > 0 {
        AgentPhase::Sleeping
    } else {
        AgentPhase::Pending
    }
}

/// Whether a condition is written by this loop (from the data plane) rather than the reconcile.
fn data_condition(c: &Condition) -> bool {
    [
        MODEL_AVAILABLE,
        TOOLS_READY,
        APPROVERS_MATCH_TOOLS,
        CHECKPOINT_ARCHIVED,
        RESTORED,
        BUDGET_EXHAUSTED,
    ]
    .contains(&c.type_.as_str())
}

/// The status fields the reconcile owns.
pub fn reconcile_part(s: &AgentStatus) -> AgentStatus {
    AgentStatus {
        observed_generation: s.observed_generation,
        conditions: s
            .conditions
            .iter()
            .filter(|c| !data_condition(c))
            .cloned()
            .collect(),
        available_replicas: s.available_replicas,
        config_hash: s.config_hash.clone(),
        rollout: s.rollout.clone(),
        ..AgentStatus::default()
    }
}

/// The status fields this loop owns.
pub fn data_part(s: &AgentStatus) -> AgentStatus {
    AgentStatus {
        phase: s.phase,
        replicas: s.replicas,
        host: s.host.clone(),
        inbox_depth: s.inbox_depth,
        cycles: s.cycles,
        last_cycle_time: s.last_cycle_time.clone(),
        tokens_used: s.tokens_used,
        tokens: s.tokens.clone(),
        checkpoint: s.checkpoint.clone(),
        restored_from: s.restored_from.clone(),
        tools: s.tools.clone(),
        pending_calls: s.pending_calls.clone(),
        conditions: s
            .conditions
            .iter()
            .filter(|c| data_condition(c))
            .cloned()
            .collect(),
        ..AgentStatus::default()
    }
}

/// `ModelAvailable`, from what the worker last reported (none before it reported). Its time
/// is when the model's state changed, so it is the same on every pass.
fn model_condition(seen: &AgentObservation) -> Option<Condition> {
    let m = seen.model.as_ref()?;
    // Written by our worker; anything else is not a valid reason and is not passed on.
    let valid = m.reason == "Available" || crate::model::Failure::from_reason(&m.reason).is_some();
    Some(Condition {
        type_: MODEL_AVAILABLE.into(),
        status: if m.available { "True" } else { "False" }.into(),
        reason: if valid {
            m.reason.clone()
        } else {
            "Unknown".into()
        },
        message: m.message.chars().take(1024).collect(),
        last_transition_time: time(m.since_ms)?,
        observed_generation: None,
    })
}

/// A time in ms as a Kubernetes `Time`, to the second (as the API server keeps it).
pub fn time(ms: i64) -> Option<Time> {
    Timestamp::from_second(ms.div_euclid(1000)).ok().map(Time)
}

/// The data-plane status of an agent (`budget`: the spec's; `generation`: the Agent's, which
/// every condition here observed, as the reconcile's do); `checkpoint_ref` names where the data plane keeps the
/// checkpoint of a cycle (the store says, see [`crate::store::Observe::checkpoint_ref`]; the
/// archived object's URL is shown instead once that cycle is archived). `previous` are the
/// conditions last computed, so that `ToolsReady` keeps its `lastTransitionTime` until its
/// status flips (then it is `now`).
#[allow(clippy::too_many_arguments)] // each is one input of the status; a struct would only rename them
pub fn data_status(
    failed: bool,
    replicas: Option<i32>,
    available: i32,
    budget: Option<&crate::crd::BudgetSpec>,
    tools_spec: Option<&crate::crd::ToolsSpec>,
    generation: Option<i64>,
    seen: &AgentObservation,
    previous: &[Condition],
    now: Timestamp,
    checkpoint_ref: impl Fn(u64) -> String,
) -> AgentStatus {
    let reported: Option<Vec<ToolStatus>> = seen
        .tools
        .as_ref()
        .map(|tools| tools.iter().map(ToolStatus::from).collect());
    let checks: Vec<Cond> = std::iter::once(tools_condition(reported.as_deref()))
        .chain(approvals_condition(tools_spec, reported.as_deref()))
        .collect();
    let tools = merge(previous, &checks, generation, now);
    AgentStatus {
        phase: Some(phase(failed, replicas, available, seen)),
        replicas,
        host: seen.host.clone(),
        inbox_depth: Some(i64::try_from(seen.waiting).unwrap_or(i64::MAX)),
        cycles: Some(seen.cycles),
        tokens_used: Some(seen.tokens_used),
        tokens: budget::tokens(seen, now.as_millisecond()),
        last_cycle_time: seen.last_cycle_ms.and_then(time),
        checkpoint: checkpoint(seen, checkpoint_ref),
        restored_from: restored_from(seen),
        tools: reported.as_deref().map(shown_tools).unwrap_or_default(),
        pending_calls: seen
            .pending
            .iter()
            .map(|c| PendingCallStatus {
                tool: c.record.tool.clone(),
                call_id: c.id.to_string(),
                kind: c.record.kind.name().into(),
                space: c.record.space.clone(),
                since: time(c.record.since_ms),
                expires: time(c.record.expires_ms),
            })
            .collect(),
        conditions: model_condition(seen)
            .into_iter()
            .chain(tools)
            .chain(archived_condition(seen))
            .chain(restored_condition(seen))
            .chain(budget_condition(budget, seen, previous, now))
            .map(|c| Condition {
                observed_generation: generation,
                ..c
            })
            .collect(),
        ..AgentStatus::default()
    }
}

/// A time in ms as a Kubernetes `Time`, to the second (as the API server keeps it); the epoch
/// for a time out of range.
pub fn time_of(ms: i64) -> Timestamp {
    time(ms).map_or(Timestamp::UNIX_EPOCH, |t| t.0)
}

#[cfg(test)]
mod tests {
    /// The data-plane status of an agent whose one worker runs, nothing written before.
    fn running(o: &AgentObservation, key: &AgentKey) -> AgentStatus {
        data_status(
            false,
            Some(1),
            1,
            None,
            None,
            None,
            o,
            &[],
            t0(),
            redis_ref(key),
        )
    }

    use super::*;
    use crate::identity::AgentKey;
    use crate::store::prelude::*;

    fn t0() -> Timestamp {
        Timestamp::from_second(1_795_000_000).unwrap()
    }

    /// Checkpoint references as the Redis store names them.
    fn redis_ref(agent: &AgentKey) -> impl Fn(u64) -> String + '_ {
        let store = crate::store::RedisStore::new("redis://127.0.0.1:1/").unwrap();
        move |cycle| store.checkpoint_ref(agent, cycle)
    }

    #[test]
    fn transition_time_moves_only_when_status_flips() {
        let t0 = Timestamp::from_second(1_000).unwrap();
        let t1 = Timestamp::from_second(2_000).unwrap();
        let first = merge(
            &[],
            &[Cond::fail("Ready", "Starting", "starting")],
            Some(1),
            t0,
        );
        assert_eq!(first[0].last_transition_time, Time(t0));
        assert_eq!(first[0].status, "False");

        let same = merge(
            &first,
            &[Cond::fail("Ready", "StillStarting", "later")],
            Some(2),
            t1,
        );
        assert_eq!(same[0].last_transition_time, Time(t0), "reason change only");
        assert_eq!(same[0].reason, "StillStarting");
        assert_eq!(same[0].observed_generation, Some(2));

        let flipped = merge(&same, &[Cond::ok("Ready", "Ok", "")], Some(2), t1);
        assert_eq!(flipped[0].last_transition_time, Time(t1));
        assert_eq!(flipped[0].status, "True");
        assert_eq!(
            merge(&flipped, &[Cond::unknown("Ready", "X", "")], None, t1)[0].status,
            "Unknown"
        );
    }

    #[test]
    fn phases() {
        let quiet = AgentObservation::default();
        let up = AgentObservation {
            worker: true,
            ..quiet.clone()
        };
        assert_eq!(phase(true, Some(1), 1, &up), AgentPhase::Failed);
        assert_eq!(phase(false, Some(0), 0, &quiet), AgentPhase::ScaledToZero);
        assert_eq!(phase(false, Some(1), 0, &quiet), AgentPhase::Pending);
        assert_eq!(phase(false, Some(1), 0, &up), AgentPhase::Sleeping);
        assert_eq!(phase(false, Some(1), 1, &quiet), AgentPhase::Sleeping);
        assert_eq!(
            phase(
                false,
                Some(0),
                0,
                &AgentObservation {
                    in_flight: 1,
                    thinking: true,
                    ..AgentObservation::default()
                }
            ),
            AgentPhase::Thinking,
            "a worker finishing its cycle after scale-down is still thinking"
        );
        assert_eq!(phase(false, None, 0, &quiet), AgentPhase::Pending);
    }

    #[test]
    fn status_parts_are_disjoint_and_complete() {
        let s: AgentStatus = serde_json::from_value(serde_json::json!({
            "phase": "Sleeping", "observedGeneration": 3, "replicas": 1, "host": "shared-pool-7d9-x2",
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": "2026-11-23T10:00:00Z"},
                {"type": "ModelAvailable", "status": "False", "reason": "Unauthorized", "message": "", "lastTransitionTime": "2026-11-23T10:00:00Z"},
                {"type": "ToolsConfigured", "status": "True", "reason": "SecretsFound", "message": "", "lastTransitionTime": "2026-11-23T10:00:00Z"},
                {"type": "ToolsReady", "status": "True", "reason": "AllReady", "message": "", "lastTransitionTime": "2026-11-23T10:00:00Z"},
                {"type": "CheckpointArchived", "status": "True", "reason": "Archived", "message": "", "lastTransitionTime": "2026-11-23T10:00:00Z"},
                {"type": "Restored", "status": "True", "reason": "Seeded", "message": "", "lastTransitionTime": "2026-11-23T10:00:00Z"},
                {"type": "BudgetExhausted", "status": "False", "reason": "WithinBudget", "message": "", "lastTransitionTime": "2026-11-23T10:00:00Z"}
            ],
            "availableReplicas": 1, "configHash": "h", "inboxDepth": 2, "cycles": 7,
            "lastCycleTime": "2026-11-23T10:00:00Z", "tokensUsed": 99,
            "tokens": {"input": 10, "cacheRead": 80, "cacheWrite": 5, "output": 4, "today": 99, "thisMonth": 99},
            "checkpoint": {"cycle": 7, "storageRef": "r", "digest": "sha256:x", "messages": 4, "tokens": 50, "archivedCycle": 7},
            "restoredFrom": {"reason": "Seed", "storageRef": "s3://b/ops/sre/3", "cycle": 3, "digest": "sha256:y"},
            "tools": [{"name": "skip", "source": "builtin", "ready": true}],
            "pendingCalls": [{"tool": "restart", "callId": "ops.sre.0123", "kind": "approval"}],
            "rollout": {"revision": "0a1b2c3d", "candidate": "4e5f6a7b", "rehearsal": "sre-4e5f6a7b"}
        }))
        .unwrap();
        let r = serde_json::to_value(reconcile_part(&s)).unwrap();
        let d = serde_json::to_value(data_part(&s)).unwrap();
        let mut keys: Vec<String> = r
            .as_object()
            .unwrap()
            .keys()
            .chain(d.as_object().unwrap().keys())
            .cloned()
            .collect();
        keys.sort();
        let mut all: Vec<String> = serde_json::to_value(&s)
            .unwrap()
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        all.sort();
        keys.retain(|k| k != "conditions");
        all.retain(|k| k != "conditions");
        assert_eq!(keys, all, "every field has exactly one writer");
        let types = |v: &serde_json::Value| -> Vec<String> {
            v["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["type"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(
            types(&r),
            ["Ready", "ToolsConfigured"],
            "conditions: one writer per type"
        );
        assert_eq!(
            types(&d),
            [
                "ModelAvailable",
                "ToolsReady",
                "CheckpointArchived",
                "Restored",
                "BudgetExhausted"
            ]
        );
        // Every field of the status is in the sample above: a new field must be given a writer.
        let sample = serde_json::to_value(&s).unwrap();
        let fields = sample.as_object().unwrap().len();
        let schema = serde_json::to_value(schemars::schema_for!(AgentStatus)).unwrap();
        assert_eq!(
            fields,
            schema["properties"].as_object().unwrap().len(),
            "a status field is missing from this test: {sample}"
        );
    }

    #[test]
    fn the_model_condition_comes_from_what_the_worker_reported() {
        let key = AgentKey::new("fam", "assistant");
        let mut o = AgentObservation::default();
        let model = |o: &AgentObservation| {
            running(o, &key)
                .conditions
                .into_iter()
                .filter(|c| c.type_ == MODEL_AVAILABLE)
                .collect::<Vec<_>>()
        };
        assert!(model(&o).is_empty(), "not reported yet");
        o.model = Some(crate::store::ModelHealth {
            available: false,
            reason: "Unauthorized".into(),
            message: "the model refused the credentials: http://m/v1 answered 401: bad key ***"
                .into(),
            since_ms: 1_795_000_000_123,
        });
        let c = model(&o);
        assert_eq!(c.len(), 1);
        assert_eq!(
            (
                c[0].type_.as_str(),
                c[0].status.as_str(),
                c[0].reason.as_str()
            ),
            ("ModelAvailable", "False", "Unauthorized")
        );
        assert_eq!(
            c[0].last_transition_time.0.to_string(),
            "2026-11-18T11:06:40Z"
        );
        let pass = || running(&o, &key);
        assert_eq!(pass(), pass(), "the same on every pass");
        o.model.as_mut().unwrap().reason = "Not a reason!".into();
        assert_eq!(model(&o)[0].reason, "Unknown");
    }

    /// The checkpoint after cycle 7: 14 messages, 900 tokens.
    fn checkpoint7() -> crate::store::Checkpoint {
        crate::store::Checkpoint {
            cycle: 7,
            start: 0,
            end: 14,
            summary_cycle: None,
            digest: "sha256:ab".into(),
            messages: 14,
            tokens: 900,
            time_ms: 1_795_000_000_123,
            used: 0,
        }
    }

    #[test]
    fn data_status_carries_the_checkpoint() {
        let key = AgentKey::new("fam", "assistant");
        let o = AgentObservation {
            waiting: 2,
            cycles: 7,
            tokens_used: 1234,
            last_cycle_ms: Some(1_795_000_000_123),
            checkpoint: Some(checkpoint7()),
            ..AgentObservation::default()
        };
        let s = data_status(
            false,
            Some(0),
            0,
            None,
            None,
            None,
            &o,
            &[],
            t0(),
            redis_ref(&key),
        );
        assert_eq!(s.phase, Some(AgentPhase::ScaledToZero));
        assert_eq!(
            (s.inbox_depth, s.cycles, s.tokens_used),
            (Some(2), Some(7), Some(1234))
        );
        let cp = s.checkpoint.unwrap();
        assert_eq!((cp.cycle, cp.messages, cp.tokens), (7, 14, 900));
        assert_eq!(cp.digest, "sha256:ab");
        assert_eq!(
            cp.storage_ref,
            "redis:agentfleet:{agent:fam/assistant}:checkpoints#cycle=7"
        );
        assert_eq!(
            cp.time.unwrap().0.to_string(),
            "2026-11-18T11:06:40Z",
            "to the second, as the API server keeps it"
        );
    }

    fn condition(type_: &str, status: &str, reason: &str, second: i64) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: Time(Timestamp::from_second(second).unwrap()),
        }
    }

    #[test]
    fn data_plane_events_problems_recoveries_and_every_restore() {
        use kube::runtime::events::EventType::{Normal, Warning};
        let archived = |status, reason, t| condition(CHECKPOINT_ARCHIVED, status, reason, t);
        let ok = archived("True", "Archived", 100);
        let down = archived("False", "StoreUnreachable", 200);
        assert_eq!(data_notice(None, &ok), None, "first seen, no problem");
        assert_eq!(data_notice(Some(&ok), &ok), None);
        assert_eq!(data_notice(Some(&ok), &down), Some(Warning));
        assert_eq!(data_notice(None, &down), Some(Warning));
        assert_eq!(data_notice(Some(&down), &down), None, "once");
        assert_eq!(
            data_notice(Some(&down), &archived("True", "Archived", 300)),
            Some(Normal),
            "recovered"
        );
        // Each restore is news, also the first, also one like the last but later.
        let restored = |status, reason, t| condition(RESTORED, status, reason, t);
        let first = restored("True", "Recovered", 100);
        assert_eq!(data_notice(None, &first), Some(Normal));
        assert_eq!(data_notice(Some(&first), &first), None, "the same one");
        let again = restored("True", "Recovered", 500);
        assert_eq!(data_notice(Some(&first), &again), Some(Normal));
        let refused = restored("False", "CheckpointCorrupt", 600);
        assert_eq!(data_notice(Some(&again), &refused), Some(Warning));
        assert_eq!(data_notice(None, &refused), Some(Warning));
        assert_eq!(data_notice(Some(&refused), &refused), None);
    }

    #[test]
    fn data_status_shows_the_archive_and_the_last_restore() {
        let key = AgentKey::new("fam", "assistant");
        let mut o = AgentObservation {
            cycles: 7,
            checkpoint: Some(checkpoint7()),
            ..AgentObservation::default()
        };
        let types = |s: &AgentStatus| -> Vec<String> {
            s.conditions.iter().map(|c| c.type_.clone()).collect()
        };
        let s = running(&o, &key);
        assert_eq!(types(&s), [TOOLS_READY], "nothing reported: no condition");
        assert_eq!(s.restored_from, None);
        o.archive = Some(crate::store::ArchiveReport {
            cycle: Some(7),
            url: Some("s3://fleet/fam/assistant/7".into()),
            ok: true,
            reason: "Archived".into(),
            message: "cycle 7 archived".into(),
            since_ms: 1_795_000_000_500,
        });
        o.restore = Some(crate::store::RestoreReport {
            v: crate::store::V1,
            ok: true,
            reason: "Recovered".into(),
            message: "the data plane had no consciousness; recovered cycle 5 from the archive"
                .into(),
            since_ms: 1_795_000_000_200,
            request: None,
            applied: Some(crate::store::Restored {
                reason: "Recovery".into(),
                storage_ref: "s3://fleet/fam/assistant/5".into(),
                cycle: 5,
                digest: "sha256:cd".into(),
                request: None,
                time_ms: None,
            }),
        });
        let s = running(&o, &key);
        assert_eq!(
            types(&s),
            [TOOLS_READY, CHECKPOINT_ARCHIVED, RESTORED],
            "in a fixed order"
        );
        let cp = s.checkpoint.as_ref().unwrap();
        assert_eq!(
            (cp.storage_ref.as_str(), cp.archived_cycle),
            ("s3://fleet/fam/assistant/7", Some(7))
        );
        assert_eq!(s.restored_from.as_ref().unwrap().cycle, 5);
        assert_eq!(s, running(&o, &key), "the same on every pass");
        // Written by the loop, not the reconcile.
        assert_eq!(data_part(&s), s);
        assert_eq!(reconcile_part(&s).restored_from, None);
    }
}

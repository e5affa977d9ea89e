//! What the worker reports of the consciousness beyond the data plane: the checkpoint as
//! `status.checkpoint` shows it (the archived object's URL once its cycle is archived), where
//! it was last restored from (`status.restoredFrom`), and the conditions `CheckpointArchived`
//! and `Restored`. Each is absent until the worker has reported (archiving off, or nothing
//! restored yet, is no condition at all).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::time;
use super::tools::{cut, MAX_MESSAGE};
use crate::crd::{CheckpointStatus, RestoredFromStatus};
use crate::store::AgentObservation;

/// Condition: the latest checkpoint is in the archive (object storage): `True` (`Archived`),
/// or `False` with why not (`StoreUnreachable`, …; the worker retries with backoff).
pub const CHECKPOINT_ARCHIVED: &str = "CheckpointArchived";

/// Condition: the last restore, fork or recovery of the consciousness: `True` with reason
/// `Restored` (`spec.consciousness.restore`), `Seeded` (`seedFrom`) or `Recovered` (the data
/// plane had lost it; the latest archived checkpoint was taken), or `False` with why it was
/// refused (`CheckpointNotFound`, `CheckpointCorrupt`, `ForeignCheckpoint`, …: nothing was
/// overwritten).
pub const RESTORED: &str = "Restored";

/// The reasons of a `Restored` that is `True`.
const RESTORED_REASONS: [&str; 3] = ["Restored", "Seeded", "Recovered"];

/// Whether the API server takes `reason` as a condition's reason (CamelCase: a letter, then
/// letters, digits, `_`, `,` or `:`, ending in a letter, digit or `_`; at most 1024). A
/// reason the worker wrote is passed on only then: else the status write would be refused.
fn valid_reason(reason: &str) -> bool {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | ',' | ':');
    reason.len() <= 1024
        && reason.starts_with(|c: char| c.is_ascii_alphabetic())
        && reason.chars().all(ok)
        && !reason.ends_with([',', ':'])
}

/// A condition from a worker's report: its status, reason (`Unknown` when it is not one the
/// API server takes, or not one `allowed` says it may be), message (cut) and time.
fn reported(
    type_: &str,
    ok: bool,
    reason: &str,
    allowed: impl Fn(&str) -> bool,
    message: &str,
    since_ms: i64,
) -> Option<Condition> {
    let valid = valid_reason(reason) && allowed(reason);
    Some(Condition {
        type_: type_.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: if valid { reason } else { "Unknown" }.into(),
        message: cut(message, MAX_MESSAGE),
        last_transition_time: time(since_ms)?,
        observed_generation: None,
    })
}

/// `CheckpointArchived`, from the worker's archive report (none before it archived or tried).
pub(super) fn archived_condition(seen: &AgentObservation) -> Option<Condition> {
    let a = seen.archive.as_ref()?;
    reported(
        CHECKPOINT_ARCHIVED,
        a.ok,
        &a.reason,
        |r| (r == "Archived") == a.ok,
        &a.message,
        a.since_ms,
    )
}

/// `Restored`, from the worker's restore report (none before it restored or tried).
pub(super) fn restored_condition(seen: &AgentObservation) -> Option<Condition> {
    let r = seen.restore.as_ref()?;
    reported(
        RESTORED,
        r.ok,
        &r.reason,
        |reason| RESTORED_REASONS.contains(&reason) == r.ok,
        &r.message,
        r.since_ms,
    )
}

/// `status.checkpoint`: the latest checkpoint, its `storageRef` the archived object's URL
/// once its cycle is archived, else where the data plane keeps it (`store_ref`), and the
/// newest archived cycle.
pub(super) fn checkpoint(
    seen: &AgentObservation,
    store_ref: impl Fn(u64) -> String,
) -> Option<CheckpointStatus> {
    let c = seen.checkpoint.as_ref()?;
    let archive = seen.archive.as_ref();
    let archived_url = archive
        .filter(|a| a.cycle == Some(c.cycle))
        .and_then(|a| a.url.clone());
    Some(CheckpointStatus {
        cycle: c.cycle,
        storage_ref: archived_url.unwrap_or_else(|| store_ref(c.cycle)),
        digest: c.digest.clone(),
        messages: c.messages,
        tokens: c.tokens,
        time: time(c.time_ms),
        archived_cycle: archive.and_then(|a| a.cycle),
    })
}

/// `status.restoredFrom`: what the worker last applied, its time to the second (as the API
/// server keeps it, so the same status is not written again).
pub(super) fn restored_from(seen: &AgentObservation) -> Option<RestoredFromStatus> {
    let applied = seen.restore.as_ref()?.applied.as_ref()?;
    Some(RestoredFromStatus::from(applied))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ArchiveReport, Checkpoint, RestoreReport, Restored};

    fn checkpointed(cycle: u64) -> AgentObservation {
        AgentObservation {
            cycles: cycle,
            checkpoint: Some(Checkpoint {
                cycle,
                start: 0,
                end: 4,
                summary_cycle: None,
                digest: "sha256:ab".into(),
                messages: 4,
                tokens: 90,
                time_ms: 1_795_000_000_123,
                used: 0,
            }),
            ..AgentObservation::default()
        }
    }

    fn archived(cycle: Option<u64>, ok: bool, reason: &str) -> ArchiveReport {
        ArchiveReport {
            cycle,
            url: cycle.map(|c| format!("s3://fleet/prod/ops/sre/{c}")),
            ok,
            reason: reason.into(),
            message: if ok {
                "cycle 7 archived".into()
            } else {
                "object storage: connection refused".into()
            },
            since_ms: 1_795_000_000_999,
        }
    }

    fn store_ref(cycle: u64) -> String {
        format!("redis:agentfleet:{{agent:ops/sre}}:checkpoints#cycle={cycle}")
    }

    #[test]
    fn the_checkpoint_is_the_archived_object_once_its_cycle_is_archived() {
        let mut o = checkpointed(7);
        let cp = checkpoint(&o, store_ref).unwrap();
        assert_eq!(
            (cp.storage_ref.as_str(), cp.archived_cycle),
            (store_ref(7).as_str(), None),
            "no archive: the data plane's"
        );
        o.archive = Some(archived(Some(6), true, "Archived"));
        let cp = checkpoint(&o, store_ref).unwrap();
        assert_eq!(
            (cp.storage_ref.as_str(), cp.archived_cycle),
            (store_ref(7).as_str(), Some(6)),
            "cycle 7 not archived yet"
        );
        o.archive = Some(archived(Some(7), true, "Archived"));
        let cp = checkpoint(&o, store_ref).unwrap();
        assert_eq!(
            (cp.storage_ref.as_str(), cp.archived_cycle),
            ("s3://fleet/prod/ops/sre/7", Some(7))
        );
        assert_eq!((cp.cycle, cp.messages, cp.tokens), (7, 4, 90));
        o.checkpoint = None;
        assert_eq!(checkpoint(&o, store_ref), None);
    }

    #[test]
    fn checkpoint_archived_says_what_the_worker_reported() {
        let mut o = checkpointed(7);
        assert_eq!(archived_condition(&o), None, "no report: no condition");
        o.archive = Some(archived(Some(7), true, "Archived"));
        let c = archived_condition(&o).unwrap();
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
            (CHECKPOINT_ARCHIVED, "True", "Archived")
        );
        assert_eq!(c.last_transition_time.0.to_string(), "2026-11-18T11:06:40Z");
        o.archive = Some(archived(Some(6), false, "StoreUnreachable"));
        let c = archived_condition(&o).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
            (
                "False",
                "StoreUnreachable",
                "object storage: connection refused"
            )
        );
        // A reason the API server would refuse, or one that contradicts the status.
        for (ok, reason) in [
            (false, "Store unreachable!"),
            (false, "Archived"),
            (true, "StoreUnreachable"),
        ] {
            o.archive = Some(archived(Some(6), ok, reason));
            assert_eq!(
                archived_condition(&o).unwrap().reason,
                "Unknown",
                "{reason}"
            );
        }
        o.archive.as_mut().unwrap().message = "x".repeat(5000);
        assert_eq!(
            archived_condition(&o).unwrap().message.chars().count(),
            MAX_MESSAGE
        );
    }

    fn restore(ok: bool, reason: &str) -> RestoreReport {
        RestoreReport {
            v: crate::store::V1,
            ok,
            reason: reason.into(),
            message: format!("{reason}: cycle 40 of s3://fleet/prod/ops/sre/40"),
            since_ms: 1_795_000_100_500,
            request: Some("cycle:40".into()),
            applied: Some(Restored {
                reason: "Restore".into(),
                storage_ref: "s3://fleet/prod/ops/sre/40".into(),
                cycle: 40,
                digest: "sha256:cd".into(),
                request: Some("cycle:40".into()),
                time_ms: Some(1_795_000_100_500),
            }),
        }
    }

    #[test]
    fn restored_says_how_the_last_restore_went_and_restored_from_what_was_applied() {
        let mut o = checkpointed(40);
        assert_eq!(restored_condition(&o), None);
        assert_eq!(restored_from(&o), None);
        for reason in RESTORED_REASONS {
            o.restore = Some(restore(true, reason));
            let c = restored_condition(&o).unwrap();
            assert_eq!(
                (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
                (RESTORED, "True", reason)
            );
        }
        let applied = restored_from(&o).unwrap();
        assert_eq!(
            (
                applied.storage_ref.as_str(),
                applied.cycle,
                applied.reason.as_str()
            ),
            ("s3://fleet/prod/ops/sre/40", 40, "Restore")
        );
        assert_eq!(
            applied.time.unwrap().0.to_string(),
            "2026-11-18T11:08:20Z",
            "to the second, as the API server keeps it"
        );
        // A refused restore: False with why; what was applied before stays.
        o.restore = Some(restore(false, "CheckpointCorrupt"));
        let c = restored_condition(&o).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "CheckpointCorrupt")
        );
        assert_eq!(restored_from(&o).unwrap().cycle, 40);
        o.restore = Some(restore(false, "Restored"));
        assert_eq!(
            restored_condition(&o).unwrap().reason,
            "Unknown",
            "a failure is not a success's reason"
        );
        o.restore = Some(restore(true, "Whatever"));
        assert_eq!(restored_condition(&o).unwrap().reason, "Unknown");
    }

    #[test]
    fn valid_reasons_are_what_the_api_server_takes() {
        for ok in ["Archived", "StoreUnreachable", "A", "Reason_2", "a:b,c"] {
            assert!(valid_reason(ok), "{ok}");
        }
        for bad in [
            "",
            "2Fast",
            "Has space",
            "Trailing:",
            "Trailing,",
            "Dash-ed",
            "Ünïcode",
        ] {
            assert!(!valid_reason(bad), "{bad}");
        }
        assert!(!valid_reason(&"A".repeat(1025)));
    }
}

//! Records as the previous release wrote them (`tests/fixtures/records/`) read unchanged, and
//! are written again byte for byte.

use crate::crd::{MemberKind, PlanSpec, ToolStatus};
use crate::store::{EventKind, InboxEvent, RestoreReport, SpaceMessage, SpaceRecord};

const SPACE: &str = include_str!("../../../tests/fixtures/records/space.json");
const RESTORE: &str = include_str!("../../../tests/fixtures/records/restore-report.json");
const RESTORE_RECOVERY: &str =
    include_str!("../../../tests/fixtures/records/restore-report-recovery.json");
const RESTORE_FAILED: &str =
    include_str!("../../../tests/fixtures/records/restore-report-failed.json");
const TOOLS: &str = include_str!("../../../tests/fixtures/records/tools.json");
const PLAN_SCHEDULE: &str = include_str!("../../../tests/fixtures/records/plan-schedule.json");
const PLAN_AT: &str = include_str!("../../../tests/fixtures/records/plan-at.json");
const EVENT: &str = include_str!("../../../tests/fixtures/records/event.json");
const MESSAGE: &str = include_str!("../../../tests/fixtures/records/message.json");

/// `json` read as a `T`, after checking that writing it again gives the same bytes.
fn read<T: serde::Serialize + serde::de::DeserializeOwned>(json: &str) -> T {
    let json = json.trim_end();
    let value: T = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    assert_eq!(
        serde_json::to_string(&value).unwrap(),
        json,
        "written again byte for byte"
    );
    value
}

#[test]
fn a_space_record_of_the_previous_release_reads_unchanged() {
    let space: SpaceRecord = read(SPACE);
    assert_eq!(space.display_name, "Family");
    assert_eq!(space.max_messages, 500);
    let members: Vec<(MemberKind, &str, &str)> = space
        .members
        .iter()
        .map(|m| (m.kind, m.id.as_str(), m.name.as_str()))
        .collect();
    assert_eq!(
        members,
        [
            (MemberKind::Agent, "assistant", "assistant"),
            (MemberKind::Human, "husam", "Husam"),
        ]
    );
    assert_eq!(
        (
            space.loop_guard.max_depth,
            space.loop_guard.max_agent_messages_per_minute
        ),
        (4, 30)
    );
}

#[test]
fn restore_reports_of_the_previous_release_read_unchanged() {
    let report: RestoreReport = read(RESTORE);
    assert_eq!(
        (report.ok, report.reason.as_str(), report.since_ms),
        (true, "Restored", 1_795_000_100_500)
    );
    assert_eq!(
        report.message,
        "restored cycle 40 from s3://fleet/prod/ops/sre/40"
    );
    assert_eq!(report.request.as_deref(), Some("cycle:40"));
    let applied = report.applied.unwrap();
    assert_eq!(
        (
            applied.reason.as_str(),
            applied.storage_ref.as_str(),
            applied.cycle,
            applied.digest.as_str(),
            applied.request.as_deref()
        ),
        (
            "Restore",
            "s3://fleet/prod/ops/sre/40",
            40,
            "sha256:cd5e",
            Some("cycle:40")
        )
    );
    assert_eq!(
        applied.time.unwrap().0.as_millisecond(),
        1_795_000_100_000,
        "2026-11-18T11:08:20Z"
    );

    let recovery: RestoreReport = read(RESTORE_RECOVERY);
    assert_eq!(recovery.request, None);
    let applied = recovery.applied.unwrap();
    assert_eq!(
        (
            applied.reason.as_str(),
            applied.cycle,
            applied.request,
            applied.time
        ),
        ("Recovery", 5, None, None)
    );

    let failed: RestoreReport = read(RESTORE_FAILED);
    assert_eq!(
        (failed.ok, failed.reason.as_str(), failed.since_ms),
        (false, "DigestMismatch", 1_795_000_200_000)
    );
    assert_eq!((failed.request, failed.applied), (None, None));
}

#[test]
fn reported_tools_of_the_previous_release_read_unchanged() {
    let tools: Vec<ToolStatus> = read(TOOLS);
    let seen: Vec<(&str, &str, bool, Option<&str>, Option<&str>)> = tools
        .iter()
        .map(|t| {
            (
                t.name.as_str(),
                t.source.as_str(),
                t.ready,
                t.last_error.as_deref(),
                t.note.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("send_message", "builtin", true, None, None),
            (
                "search",
                "mcp:docs",
                false,
                Some("connection refused"),
                Some("description cut to 2048 bytes")
            ),
        ]
    );
}

#[test]
fn plans_of_the_previous_release_read_unchanged() {
    let standup: PlanSpec = read(PLAN_SCHEDULE);
    assert_eq!(
        (
            standup.name.as_str(),
            standup.schedule.as_deref(),
            standup.at,
            standup.time_zone.as_deref(),
            standup.instruction.as_str()
        ),
        (
            "standup",
            Some("0 6 * * 1-5"),
            None,
            Some("Europe/Berlin"),
            "Post the stand-up summary in the team space."
        )
    );
    let reminder: PlanSpec = read(PLAN_AT);
    assert_eq!(
        (
            reminder.name.as_str(),
            reminder.schedule,
            reminder.at.map(|t| t.0.as_millisecond()),
            reminder.time_zone,
            reminder.instruction.as_str()
        ),
        (
            "reminder",
            None,
            Some(1_798_135_200_000), // 2026-12-24T18:00:00Z
            None,
            "Remind Husam of the dinner."
        )
    );
}

#[test]
fn senders_of_the_previous_release_read_unchanged() {
    let event: InboxEvent = read(EVENT);
    assert_eq!(event.kind, EventKind::SpaceMessage);
    let sender = event.sender.unwrap();
    assert_eq!(
        (sender.id.as_str(), sender.name.as_str(), sender.kind),
        ("husam", "Husam", Some(MemberKind::Human))
    );
    let message: SpaceMessage = read(MESSAGE);
    assert_eq!(
        (
            message.sender.id.as_str(),
            message.sender.kind,
            message.depth
        ),
        ("assistant", Some(MemberKind::Agent), 1)
    );
}

//! Records as the previous release wrote them (`tests/fixtures/records/`) read unchanged and
//! are written again byte for byte; records round-trip; format versions; conversions.

use crate::store::{
    EventKind, InboxEvent, LoopGuard, Member, MemberKind, Plan, RestoreReport, Restored,
    SpaceMessage, SpaceRecord, ToolRecord, V1,
};

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
        applied.time_ms,
        Some(1_795_000_100_000),
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
            applied.time_ms
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
    let tools: Vec<ToolRecord> = read(TOOLS);
    let seen: Vec<_> = tools
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
    let standup: Plan = read(PLAN_SCHEDULE);
    assert_eq!(
        (
            standup.name.as_str(),
            standup.schedule.as_deref(),
            standup.at_ms,
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
    let reminder: Plan = read(PLAN_AT);
    assert_eq!(
        (
            reminder.name.as_str(),
            reminder.schedule,
            reminder.at_ms,
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

#[test]
fn a_space_record_from_before_the_loop_guard_reads_with_the_defaults_of_then() {
    let old: SpaceRecord =
        serde_json::from_str(r#"{"displayName":"Family","members":[],"maxMessages":10000}"#)
            .unwrap();
    assert_eq!(
        (
            old.loop_guard.max_depth,
            old.loop_guard.max_agent_messages_per_minute
        ),
        (8, 60)
    );
    let partial: SpaceRecord = serde_json::from_str(
        r#"{"displayName":"Family","members":[],"maxMessages":10000,"loopGuard":{"maxDepth":3}}"#,
    )
    .unwrap();
    assert_eq!(
        (
            partial.loop_guard.max_depth,
            partial.loop_guard.max_agent_messages_per_minute
        ),
        (3, 60)
    );
}

#[test]
fn records_round_trip() {
    fn again<T>(value: &T) -> T
    where
        T: serde::Serialize + serde::de::DeserializeOwned,
    {
        serde_json::from_str(&serde_json::to_string(value).unwrap()).unwrap()
    }
    let space = SpaceRecord {
        v: V1,
        display_name: "Ops \"war room\" 🚨".into(),
        members: vec![
            Member {
                kind: MemberKind::Agent,
                id: "sre".into(),
                name: "sre".into(),
            },
            Member {
                kind: MemberKind::Human,
                id: "husam@example.com".into(),
                name: "Husam".into(),
            },
        ],
        groups: Vec::new(),
        max_messages: u64::MAX,
        max_message_bytes: crate::store::DEFAULT_MAX_MESSAGE_BYTES,
        loop_guard: LoopGuard {
            max_depth: 1,
            max_agent_messages_per_minute: 100_000,
        },
        context_id: None,
    };
    assert_eq!(again(&space), space);
    let report = RestoreReport {
        v: V1,
        ok: true,
        reason: "Seeded".into(),
        message: "seeded cycle 12 from sre@latest".into(),
        since_ms: 1_795_000_000_999,
        request: Some("seed:sre@latest".into()),
        applied: Some(Restored {
            reason: "Seed".into(),
            storage_ref: "redis:agentfleet:{agent:ops/sre}:checkpoints#cycle=12".into(),
            cycle: 12,
            digest: "sha256:00ff".into(),
            request: Some("seed:sre@latest".into()),
            time_ms: Some(1_795_000_000_000),
        }),
    };
    assert_eq!(again(&report), report);
    assert_eq!(again(&RestoreReport::default()), RestoreReport::default());
    for plan in [
        Plan {
            v: V1,
            name: "standup".into(),
            schedule: Some("@daily".into()),
            at_ms: None,
            time_zone: Some("Asia/Amman".into()),
            instruction: "line one\nline two".into(),
        },
        Plan {
            v: V1,
            name: "once".into(),
            schedule: None,
            at_ms: Some(0),
            time_zone: None,
            instruction: "at the epoch".into(),
        },
    ] {
        assert_eq!(again(&plan), plan);
    }
    let tools = vec![
        ToolRecord {
            name: "a".into(),
            source: "http".into(),
            ready: true,
            ..ToolRecord::default()
        },
        ToolRecord {
            name: "b".into(),
            source: "mcp:x".into(),
            ready: false,
            last_error: Some("Secret \"x\" not found".into()),
            note: Some("".into()),
            ..ToolRecord::default()
        },
    ];
    assert_eq!(again(&tools), tools);
}

#[test]
fn times_are_written_to_the_second_and_read_from_any_rfc_3339() {
    let at = |ms: i64| Plan {
        v: V1,
        name: "p".into(),
        schedule: None,
        at_ms: Some(ms),
        time_zone: None,
        instruction: "i".into(),
    };
    let json = serde_json::to_string(&at(1_798_135_200_999)).unwrap();
    assert!(json.contains(r#""at":"2026-12-24T18:00:00Z""#), "{json}");
    for written in [
        "2026-12-24T18:00:00Z",
        "2026-12-24T19:00:00+01:00",
        "2026-12-24T18:00:00.000Z",
    ] {
        let plan: Plan = serde_json::from_str(&format!(
            r#"{{"name":"p","at":"{written}","instruction":"i"}}"#
        ))
        .unwrap();
        assert_eq!(plan.at_ms, Some(1_798_135_200_000), "{written}");
    }
    let bad = serde_json::from_str::<Plan>(r#"{"name":"p","at":"tomorrow","instruction":"i"}"#);
    assert!(bad.is_err());
    let none: Plan = serde_json::from_str(r#"{"name":"p","at":null,"instruction":"i"}"#).unwrap();
    assert_eq!(none.at_ms, None);
}

#[test]
fn format_1_is_read_with_or_without_v_and_written_without_it() {
    let with: ToolRecord =
        serde_json::from_str(r#"{"v":1,"name":"a","source":"builtin","ready":true}"#).unwrap();
    let without: ToolRecord =
        serde_json::from_str(r#"{"name":"a","source":"builtin","ready":true}"#).unwrap();
    assert_eq!(with, without);
    assert_eq!(
        serde_json::to_string(&with).unwrap(),
        r#"{"name":"a","source":"builtin","ready":true}"#
    );
    let space: SpaceRecord =
        serde_json::from_str(&SPACE.trim_end().replacen('{', r#"{"v":1,"#, 1)).unwrap();
    assert_eq!(serde_json::to_string(&space).unwrap(), SPACE.trim_end());
}

#[test]
fn a_record_of_a_newer_format_is_refused_naming_its_version() {
    fn refused<T: serde::de::DeserializeOwned + std::fmt::Debug>(json: &str) -> String {
        serde_json::from_str::<T>(json).unwrap_err().to_string()
    }
    let newer = "record format v2 is newer than this release reads (v1)";
    for error in [
        refused::<SpaceRecord>(&SPACE.trim_end().replacen('{', r#"{"v":2,"#, 1)),
        refused::<RestoreReport>(&RESTORE.trim_end().replacen('{', r#"{"v":2,"#, 1)),
        refused::<Vec<ToolRecord>>(&TOOLS.trim_end().replacen('{', r#"{"v":2,"#, 1)),
        refused::<Plan>(&PLAN_AT.trim_end().replacen('{', r#"{"v":2,"#, 1)),
    ] {
        assert!(error.contains(newer), "{error}");
    }
    let none = refused::<Plan>(r#"{"v":0,"name":"p","instruction":"i"}"#);
    assert!(none.contains("record format v0 does not exist"), "{none}");
    let text = refused::<Plan>(r#"{"v":"1","name":"p","instruction":"i"}"#);
    assert!(text.contains("invalid type"), "{text}");
}

/// What the operator and the worker convert at their edge keeps every value.
mod conversions {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::crd;

    #[test]
    fn members_and_loop_guards_take_the_manifests_values() {
        let resolved = crd::ResolvedMember {
            kind: crd::MemberKind::Human,
            id: "husam".into(),
            name: "Husam".into(),
        };
        assert_eq!(
            Member::from(&resolved),
            Member {
                kind: MemberKind::Human,
                id: "husam".into(),
                name: "Husam".into(),
            }
        );
        assert_eq!(MemberKind::from(crd::MemberKind::Agent), MemberKind::Agent);
        let guard = crd::LoopGuardSpec {
            max_depth: 2,
            max_agent_messages_per_minute: 7,
        };
        assert_eq!(
            LoopGuard::from(guard),
            LoopGuard {
                max_depth: 2,
                max_agent_messages_per_minute: 7,
            }
        );
        assert_eq!(
            LoopGuard::from(crd::LoopGuardSpec::default()),
            LoopGuard::default(),
            "the same defaults today"
        );
    }

    #[test]
    fn plans_and_tools_convert_both_ways() {
        let spec: crd::PlanSpec = serde_yaml::from_str(
            "{name: reminder, at: '2026-12-24T18:00:00Z', instruction: Remind Husam.}",
        )
        .unwrap();
        let plan = Plan::from(&spec);
        assert_eq!(plan.at_ms, Some(1_798_135_200_000));
        assert_eq!(crd::PlanSpec::from(&plan), spec);
        let spec: crd::PlanSpec = serde_yaml::from_str(
            "{name: standup, schedule: '0 6 * * 1-5', timeZone: Europe/Berlin, instruction: Go.}",
        )
        .unwrap();
        assert_eq!(crd::PlanSpec::from(&Plan::from(&spec)), spec);

        let status = crd::ToolStatus {
            name: "search".into(),
            source: "mcp:docs".into(),
            ready: false,
            last_error: Some("connection refused".into()),
            note: Some("description cut".into()),
        };
        assert_eq!(crd::ToolStatus::from(&ToolRecord::from(&status)), status);
    }

    #[test]
    fn a_restore_shows_its_time_to_the_second() {
        let restored = Restored {
            reason: "Restore".into(),
            storage_ref: "s3://fleet/prod/ops/sre/40".into(),
            cycle: 40,
            digest: "sha256:cd5e".into(),
            request: Some("cycle:40".into()),
            time_ms: Some(1_795_000_100_500),
        };
        assert_eq!(
            crd::RestoredFromStatus::from(&restored),
            crd::RestoredFromStatus {
                reason: "Restore".into(),
                storage_ref: "s3://fleet/prod/ops/sre/40".into(),
                cycle: 40,
                digest: "sha256:cd5e".into(),
                request: Some("cycle:40".into()),
                time: Some(Time(Timestamp::from_second(1_795_000_100).unwrap())),
            }
        );
        let untimed = Restored {
            time_ms: None,
            ..restored
        };
        assert_eq!(crd::RestoredFromStatus::from(&untimed).time, None);
    }

    /// The records write times as the Kubernetes `Time` of the CRD structs did, so that a
    /// release that still reads them as such reads what this one writes.
    #[test]
    fn times_are_written_as_a_kubernetes_time_writes_them() {
        for ms in [
            -1_500,
            0,
            1_795_000_100_500,
            1_798_135_200_000,
            4_102_444_799_999,
        ] {
            let time = Time(Timestamp::from_millisecond(ms).unwrap());
            let kubernetes = serde_json::to_string(&time).unwrap();
            let ours = serde_json::to_value(Restored {
                time_ms: Some(ms),
                ..Restored::default()
            })
            .unwrap();
            assert_eq!(ours["time"].to_string(), kubernetes, "{ms}");
            let read: crd::RestoredFromStatus = serde_json::from_value(ours).unwrap();
            assert_eq!(
                read.time.map(|t| t.0.as_second()),
                Some(ms.div_euclid(1000))
            );
        }
    }
}

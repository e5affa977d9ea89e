//! What the worker reports of archiving and restoring, through the loop: status, conditions,
//! Events and gauges; and a restore the spec asks for waking the worker until it is tried.

use std::sync::Arc;
use std::time::Duration;

use super::{fast, spec, start, track, until, Call};
use crate::crd::{AgentStatus, RestoredFromStatus};
use crate::identity::AgentKey;
use crate::operator::status::{find, CHECKPOINT_ARCHIVED, RESTORED};
use crate::store::{now_ms, ArchiveReport, MemoryStore, RestoreReport, Restored, Store};

fn events(calls: &[Call]) -> Vec<(bool, String, String)> {
    calls
        .iter()
        .filter_map(|c| match c {
            Call::Event(reason, note) => Some((false, reason.clone(), note.clone())),
            Call::Warning(reason, note) => Some((true, reason.clone(), note.clone())),
            _ => None,
        })
        .collect()
}

fn failed_restore(request: &str) -> RestoreReport {
    RestoreReport {
        v: crate::store::V1,
        ok: false,
        reason: "CheckpointNotFound".into(),
        message: "no checkpoint of cycle 40 in the archive or the data plane".into(),
        since_ms: now_ms(),
        request: Some(request.into()),
        applied: None,
    }
}

#[tokio::test]
async fn a_restore_the_spec_asks_for_wakes_the_worker_until_the_worker_tried_it() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let r = start(store.clone(), fast());
    let sre = AgentKey::new("ops", "sre");
    track(
        &r,
        &sre,
        &spec("scaling: {idleSeconds: 0}, consciousness: {restore: {cycle: 40}}"),
        0,
    );
    until("woken for the restore", || {
        r.cluster.replicas() == [(sre.clone(), 1)]
    })
    .await;
    until("a ScaledUp event saying why", || {
        events(&r.cluster.calls())
            .iter()
            .any(|(warning, reason, note)| {
                !warning && reason == "ScaledUp" && note.contains("consciousness restore")
            })
    })
    .await;
    // Idle, nothing waiting (idleSeconds 0): still up, the restore is not applied.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(r.cluster.replicas(), [(sre.clone(), 1)]);

    // The worker tried and failed: not asked again, and the idle worker goes.
    store
        .set_restore_report(&sre, &failed_restore("cycle:40"))
        .await
        .unwrap();
    until("scaled down", || {
        r.cluster.replicas() == [(sre.clone(), 1), (sre.clone(), 0)]
    })
    .await;
    until("Restored False in the status", || {
        r.cluster.statuses(&sre).last().is_some_and(|s| {
            find(&s.conditions, RESTORED)
                .is_some_and(|c| c.status == "False" && c.reason == "CheckpointNotFound")
        })
    })
    .await;
    until("a Warning event", || {
        events(&r.cluster.calls())
            .iter()
            .any(|(warning, reason, _)| *warning && reason == "CheckpointNotFound")
    })
    .await;
    // Another restore in the spec asks again.
    track(
        &r,
        &sre,
        &spec("scaling: {idleSeconds: 0}, consciousness: {restore: {cycle: 39}}"),
        0,
    );
    until("woken again", || {
        r.cluster.replicas().last() == Some(&(sre.clone(), 1)) && r.cluster.replicas().len() == 3
    })
    .await;
    r.stop().await;
}

/// Gives `agent` a consciousness after `cycle` (its checkpoint the only one), as a restore
/// would.
async fn checkpointed(store: &dyn Store, agent: &AgentKey, cycle: u64) {
    let lease = store
        .acquire_lease(agent, "w", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    let snapshot = crate::archive::tests::doc(agent, cycle).snapshot;
    store
        .replace_consciousness(agent, &lease, &snapshot)
        .await
        .unwrap();
    store.release_lease(agent, &lease).await.unwrap();
}

fn archived(cycle: u64, ok: bool, since_ms: i64) -> ArchiveReport {
    ArchiveReport {
        cycle: Some(cycle),
        url: Some(format!("s3://fleet/prod/ops/sre/{cycle}")),
        ok,
        reason: if ok { "Archived" } else { "StoreUnreachable" }.into(),
        message: if ok {
            format!("cycle {cycle} archived")
        } else {
            "object storage: connection refused; retrying in 8s".into()
        },
        since_ms,
    }
}

#[tokio::test]
async fn what_the_worker_reports_of_the_archive_reaches_status_events_and_gauges() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let sre = AgentKey::new("ops", "sre");
    checkpointed(store.as_ref(), &sre, 7).await;
    let r = start(store.clone(), fast());
    track(&r, &sre, &spec("scaling: {minReplicas: 1}"), 1);
    let last = || r.cluster.statuses(&sre).last().cloned();
    let condition = |s: &AgentStatus, t: &str| find(&s.conditions, t).cloned();
    until("a first status", || last().is_some()).await;
    let first = last().unwrap();
    assert_eq!(
        first.checkpoint.as_ref().unwrap().storage_ref,
        store.checkpoint_ref(&sre, 7),
        "nothing archived: the data plane's reference"
    );
    assert!(condition(&first, CHECKPOINT_ARCHIVED).is_none());
    assert!(condition(&first, RESTORED).is_none());
    let lag = || {
        r.metrics
            .archive_lag
            .with_label_values(&["ops", "sre"])
            .get()
    };
    let failing = || {
        r.metrics
            .archive_failing
            .with_label_values(&["ops", "sre"])
            .get()
    };

    let t0 = now_ms();
    store
        .set_archive_report(&sre, &archived(7, true, t0))
        .await
        .unwrap();
    until("the archived object in the status", || {
        last().is_some_and(|s| {
            s.checkpoint.as_ref().is_some_and(|c| {
                c.storage_ref == "s3://fleet/prod/ops/sre/7" && c.archived_cycle == Some(7)
            })
        })
    })
    .await;
    let s = last().unwrap();
    let c = condition(&s, CHECKPOINT_ARCHIVED).unwrap();
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "Archived"));
    assert!(
        events(&r.cluster.calls()).is_empty(),
        "archiving as it should is no news"
    );
    assert_eq!((lag(), failing()), (0, 0));

    // The store goes away: a Warning, once.
    store
        .set_archive_report(&sre, &archived(7, false, t0 + 2_000))
        .await
        .unwrap();
    until("CheckpointArchived False", || {
        last().is_some_and(|s| {
            condition(&s, CHECKPOINT_ARCHIVED).is_some_and(|c| c.reason == "StoreUnreachable")
        })
    })
    .await;
    until("a failing gauge", || failing() == 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        events(&r.cluster.calls()),
        [(
            true,
            "StoreUnreachable".to_string(),
            "object storage: connection refused; retrying in 8s".to_string()
        )]
    );
    // It comes back: a Normal event.
    store
        .set_archive_report(&sre, &archived(7, true, t0 + 9_000))
        .await
        .unwrap();
    until("recovered, said once", || {
        events(&r.cluster.calls())
            .iter()
            .any(|(warning, reason, _)| !warning && reason == "Archived")
    })
    .await;
    until("not failing", || failing() == 0).await;

    // A recovery after the data plane lost the consciousness: restoredFrom, Restored, an Event.
    let applied = RestoredFromStatus {
        reason: "Recovery".into(),
        storage_ref: "s3://fleet/prod/ops/sre/7".into(),
        cycle: 7,
        digest: format!("sha256:{}", "0".repeat(64)),
        request: None,
        time: None,
    };
    store
        .set_restore_report(
            &sre,
            &RestoreReport {
                v: crate::store::V1,
                ok: true,
                reason: "Recovered".into(),
                message: "the data plane had no consciousness: recovered cycle 7 from s3://fleet/prod/ops/sre/7 (0 cycles lost)".into(),
                since_ms: t0 + 10_000,
                request: None,
                applied: Some(Restored {
                    reason: "Recovery".into(),
                    storage_ref: "s3://fleet/prod/ops/sre/7".into(),
                    cycle: 7,
                    digest: format!("sha256:{}", "0".repeat(64)),
                    request: None,
                    time_ms: None,
                }),
            },
        )
        .await
        .unwrap();
    until("restoredFrom and Restored", || {
        last().is_some_and(|s| {
            s.restored_from.as_ref() == Some(&applied)
                && condition(&s, RESTORED).is_some_and(|c| c.reason == "Recovered")
        })
    })
    .await;
    until("a Normal event saying so", || {
        events(&r.cluster.calls())
            .iter()
            .any(|(warning, reason, note)| {
                !warning && reason == "Recovered" && note.contains("0 cycles lost")
            })
    })
    .await;
    r.stop().await;
}

//! Consciousness: the journal, commits with checkpoints, compaction, snapshots, the checkpoints
//! kept, fencing; memories and goals.

use super::*;

pub(super) async fn the_journal_lasts_until_its_cycle_ends(store: &dyn Store) {
    let a = AgentKey::new("fam", "journaled");
    let w1 = store.acquire_lease(&a, "w1", TTL).await.unwrap().unwrap();
    store
        .push_event(&a, &event("e1", "open a ticket"))
        .await
        .unwrap();
    store.wait_inbox(&a, &w1, TTL).await.unwrap();
    let entries = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    store
        .append_journal(&a, &w1, &entries(&["turn 0", "started 0.0"]))
        .await
        .unwrap();
    store
        .append_journal(&a, &w1, &entries(&["result 0.0"]))
        .await
        .unwrap();
    assert_eq!(
        store.journal(&a).await.unwrap(),
        ["turn 0", "started 0.0", "result 0.0"]
    );
    // The worker dies; the next one finds the journal of the unfinished cycle, and the old
    // one can no longer write to it.
    store.release_lease(&a, &w1).await.unwrap();
    let w2 = store.acquire_lease(&a, "w2", TTL).await.unwrap().unwrap();
    let err = store
        .append_journal(&a, &w1, &entries(&["late"]))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Fenced { .. }), "{err}");
    assert_eq!(store.journal(&a).await.unwrap().len(), 3);
    assert_eq!(store.wait_inbox(&a, &w2, TTL).await.unwrap().len(), 1);
    // A rolled back cycle (skip) ends it …
    store.ack_cycle(&a, &w2).await.unwrap();
    assert!(store.journal(&a).await.unwrap().is_empty());
    // … and so does a commit.
    store.push_event(&a, &event("e2", "again")).await.unwrap();
    store.wait_inbox(&a, &w2, TTL).await.unwrap();
    store
        .append_journal(&a, &w2, &entries(&["turn 0"]))
        .await
        .unwrap();
    store
        .commit_cycle(&a, &w2, &commit(&["inbox: again"], None, 10))
        .await
        .unwrap();
    assert!(store.journal(&a).await.unwrap().is_empty());
}

pub(super) async fn cycles_commit_with_checkpoints_and_acknowledge(store: &dyn Store) {
    let a = AgentKey::new("fam", "assistant");
    assert_eq!(
        store.consciousness(&a).await.unwrap(),
        Consciousness::default()
    );
    let lease = store.acquire_lease(&a, "w1", TTL).await.unwrap().unwrap();
    store
        .push_event(&a, &event("e1", "Find me hotels in Tokyo"))
        .await
        .unwrap();
    store.wait_inbox(&a, &lease, TTL).await.unwrap();
    let c1 = commit(&["inbox: hotels", "assistant: budget?"], None, 10);
    let cp1 = store.commit_cycle(&a, &lease, &c1).await.unwrap();
    assert_eq!(
        (cp1.cycle, cp1.start, cp1.end, cp1.messages, cp1.tokens),
        (1, 0, 2, 2, 20)
    );
    assert_eq!(
        cp1.digest,
        next_digest("", &c1),
        "the digest is the documented chain"
    );
    assert_eq!(
        store.inflight(&a).await.unwrap(),
        0,
        "the commit acknowledges the inbox"
    );
    let c2 = commit(
        &["inbox: $150", "assistant: 3 options", "tool: ok"],
        None,
        10,
    );
    let cp2 = store.commit_cycle(&a, &lease, &c2).await.unwrap();
    assert_eq!((cp2.cycle, cp2.start, cp2.end), (2, 0, 5));
    assert_eq!(cp2.digest, next_digest(&cp1.digest, &c2));
    let now = store.consciousness(&a).await.unwrap();
    assert_eq!(now.cycle, 2);
    assert_eq!(now.messages.len(), 5);
    assert!(now.messages[4].contains("tool: ok"));
    assert_eq!(
        (now.tokens, now.tokens_used, now.digest.as_str()),
        (30, 200, cp2.digest.as_str())
    );
    assert!(now.last_cycle_ms.is_some());
    let cps = store.checkpoints(&a).await.unwrap();
    assert_eq!(cps.iter().map(|c| c.cycle).collect::<Vec<_>>(), [2, 1]);
}

pub(super) async fn compaction_keeps_a_summary_and_checkpoints_restore(store: &dyn Store) {
    let a = AgentKey::new("fam", "assistant");
    let lease = store.acquire_lease(&a, "w1", TTL).await.unwrap().unwrap();
    store
        .commit_cycle(&a, &lease, &commit(&["m0", "m1"], None, 10))
        .await
        .unwrap();
    store
        .commit_cycle(&a, &lease, &commit(&["m2", "m3"], None, 10))
        .await
        .unwrap();
    let compact = Compacted {
        start: 3,
        summary: Some("Husam asked for hotels; budget $150.".into()),
    };
    let cp3 = store
        .commit_cycle(&a, &lease, &commit(&["m4"], Some(compact), 10))
        .await
        .unwrap();
    assert_eq!(
        (cp3.start, cp3.end, cp3.messages, cp3.summary_cycle),
        (3, 5, 2, Some(3))
    );
    let now = store.consciousness(&a).await.unwrap();
    assert_eq!(
        now.summary.as_deref(),
        Some("Husam asked for hotels; budget $150.")
    );
    assert_eq!(now.start, 3);
    assert!(now.messages[0].contains("m3") && now.messages[1].contains("m4"));

    // Each retained checkpoint's consciousness reads as it was, changing nothing.
    let at = async |cycle| store.consciousness_at(&a, cycle).await.unwrap();
    let one = at(1).await.unwrap();
    assert_eq!((one.cycle, one.start, one.summary.clone()), (1, 0, None));
    assert!(one.messages.len() == 2 && one.messages[1].contains("m1"));
    let two = at(2).await.unwrap();
    assert_eq!(two.messages.len(), 4);
    assert!(two.messages[3].contains("m3"));
    let three = at(3).await.unwrap();
    assert_eq!(
        (three.start, three.messages.clone(), three.summary.clone()),
        (now.start, now.messages.clone(), now.summary.clone())
    );
    assert_eq!(three.digest, now.digest);
    assert_eq!(at(0).await, Some(Consciousness::default()));
    assert_eq!(at(9).await, None);
    assert_eq!(store.consciousness(&a).await.unwrap(), now);

    let restored = store
        .restore_checkpoint(&a, &lease, 1, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(restored.cycle, 1);
    let back = store.consciousness(&a).await.unwrap();
    assert_eq!(
        (back.cycle, back.summary.clone(), back.messages.len()),
        (1, None, 2)
    );
    assert_eq!(back.digest, restored.digest);
    assert_eq!(
        store
            .checkpoints(&a)
            .await
            .unwrap()
            .iter()
            .map(|c| c.cycle)
            .collect::<Vec<_>>(),
        [1]
    );
    // Life goes on from the restored point, numbered past the abandoned cycles 2 and 3 (so
    // it never takes the name of their archived checkpoints).
    let cp = store
        .commit_cycle(&a, &lease, &commit(&["m2'"], None, 10))
        .await
        .unwrap();
    assert_eq!((cp.cycle, cp.start, cp.end), (4, 0, 3));
    assert!(store.consciousness(&a).await.unwrap().messages[2].contains("m2'"));
    assert_eq!(
        store.restore_checkpoint(&a, &lease, 9, None).await.unwrap(),
        None
    );
}

pub(super) async fn a_snapshot_replaces_the_consciousness_between_cycles(store: &dyn Store) {
    let a = AgentKey::new("fam", "assistant");
    let lease = store.acquire_lease(&a, "w1", TTL).await.unwrap().unwrap();
    store
        .set_memories(
            &a,
            &lease,
            &Memories::from([("city".into(), "Porto".into())]),
        )
        .await
        .unwrap();
    store
        .commit_cycle(&a, &lease, &commit(&["m0", "m1"], None, 5))
        .await
        .unwrap();
    let compact = Compacted {
        start: 1,
        summary: Some("Husam asked for hotels.".into()),
    };
    store
        .commit_cycle(&a, &lease, &commit(&["m2"], Some(compact), 5))
        .await
        .unwrap();
    let mut taken = crate::store::snapshot(store, &a).await.unwrap();
    assert_eq!(taken.consciousness.cycle, 2);
    assert_eq!(
        taken.consciousness.summary.as_deref(),
        Some("Husam asked for hotels.")
    );
    assert_eq!(taken.notes[&NoteKind::Memories]["city"], "Porto");
    // Life goes on: more cycles, another memory.
    for m in ["m3", "m4"] {
        store
            .commit_cycle(&a, &lease, &commit(&[m], None, 5))
            .await
            .unwrap();
    }
    store
        .set_memories(
            &a,
            &lease,
            &Memories::from([("city".into(), "Lisbon".into())]),
        )
        .await
        .unwrap();
    let used = store.consciousness(&a).await.unwrap().tokens_used;
    taken.consciousness.restored = Some("cycle:2".into());

    let cp = store
        .replace_consciousness(&a, &lease, &taken)
        .await
        .unwrap();
    assert_eq!((cp.cycle, cp.start, cp.end, cp.messages), (2, 1, 3, 2));
    assert_eq!(cp.digest, taken.consciousness.digest);
    let now = store.consciousness(&a).await.unwrap();
    assert_eq!(
        Consciousness {
            tokens_used: taken.consciousness.tokens_used,
            ..now.clone()
        },
        taken.consciousness,
        "the window, summary, digest and request as taken"
    );
    assert_eq!(now.tokens_used, used, "tokens used stay as counted");
    assert_eq!(store.memories(&a).await.unwrap()["city"], "Porto");
    assert_eq!(
        store.checkpoints(&a).await.unwrap(),
        std::slice::from_ref(&cp)
    );
    let seen = observed(store, &a).await;
    assert_eq!(seen.checkpoint, Some(cp.clone()));
    assert_eq!(seen.restored.as_deref(), Some("cycle:2"));
    // The next commit builds on it, chained from its digest, numbered past the cycles 3 and
    // 4 it abandoned.
    let next = commit(&["m3'"], None, 5);
    let cp3 = store.commit_cycle(&a, &lease, &next).await.unwrap();
    assert_eq!((cp3.cycle, cp3.start, cp3.end), (5, 1, 4));
    assert_eq!(cp3.digest, crate::store::next_digest(&cp.digest, &next));
    let after = store.consciousness(&a).await.unwrap();
    assert!(after.messages[2].contains("m3'"));
    assert_eq!(
        after.restored.as_deref(),
        Some("cycle:2"),
        "kept by commits"
    );
    store.forget_restore(&a, &lease).await.unwrap();
    assert_eq!(store.consciousness(&a).await.unwrap().restored, None);

    // Not while a cycle is in flight, and not without the lease: nothing changes.
    store.push_event(&a, &event("e1", "hello")).await.unwrap();
    assert_eq!(store.wait_inbox(&a, &lease, TTL).await.unwrap().len(), 1);
    let before = store.consciousness(&a).await.unwrap();
    assert!(matches!(
        store.replace_consciousness(&a, &lease, &taken).await,
        Err(StoreError::CycleInFlight { .. })
    ));
    assert!(matches!(
        store
            .restore_checkpoint(&a, &lease, 5, Some("cycle:5"))
            .await,
        Err(StoreError::CycleInFlight { .. })
    ));
    assert_eq!(store.consciousness(&a).await.unwrap(), before);
    let other = AgentKey::new("fam", "planner");
    assert!(matches!(
        store.replace_consciousness(&other, &lease, &taken).await,
        Err(StoreError::Fenced { .. })
    ));

    // A fresh agent takes the tokens used of the snapshot (a recovery).
    let lease2 = store
        .acquire_lease(&other, "w2", TTL)
        .await
        .unwrap()
        .unwrap();
    store
        .replace_consciousness(&other, &lease2, &taken)
        .await
        .unwrap();
    let copy = store.consciousness(&other).await.unwrap();
    assert_eq!(copy.tokens_used, taken.consciousness.tokens_used);
    assert_eq!(copy.messages, taken.consciousness.messages);

    // What the worker reports of archiving and restores, as the operator reads it.
    let report = ArchiveReport {
        cycle: Some(2),
        url: Some("file:///a/fam/assistant/2".into()),
        ok: true,
        reason: "Archived".into(),
        message: "cycle 2 archived".into(),
        since_ms: 7,
    };
    store.set_archive_report(&a, &report).await.unwrap();
    let restore = RestoreReport {
        v: V1,
        ok: false,
        reason: "CheckpointCorrupt".into(),
        message: "refused".into(),
        since_ms: 8,
        request: Some("cycle:2".into()),
        applied: None,
    };
    store.set_restore_report(&a, &restore).await.unwrap();
    let seen = observed(store, &a).await;
    assert_eq!(seen.archive, Some(report.clone()));
    assert_eq!(seen.restore, Some(restore));
    store.forget_archive_report(&a).await.unwrap();
    assert_eq!(observed(store, &a).await.archive, None);
    store.set_archive_report(&a, &report).await.unwrap();
    store.purge_agent(&a).await.unwrap();
    let gone = observed(store, &a).await;
    assert_eq!((gone.archive, gone.restore), (None, None));
}

pub(super) async fn only_the_last_checkpoints_are_kept(store: &dyn Store) {
    let a = AgentKey::new("fam", "assistant");
    let lease = store.acquire_lease(&a, "w1", TTL).await.unwrap().unwrap();
    for i in 0..4u64 {
        let compaction = (i > 0).then(|| Compacted {
            start: 2 * i,
            summary: Some(format!("summary {i}")),
        });
        store
            .commit_cycle(&a, &lease, &commit(&["a", "b"], compaction, 2))
            .await
            .unwrap();
    }
    let cps = store.checkpoints(&a).await.unwrap();
    assert_eq!(cps.iter().map(|c| c.cycle).collect::<Vec<_>>(), [4, 3]);
    assert_eq!(
        store.restore_checkpoint(&a, &lease, 2, None).await.unwrap(),
        None,
        "dropped with its log entries"
    );
    store
        .restore_checkpoint(&a, &lease, 3, None)
        .await
        .unwrap()
        .unwrap();
    let back = store.consciousness(&a).await.unwrap();
    assert_eq!((back.cycle, back.start, back.messages.len()), (3, 4, 2));
    assert_eq!(back.summary.as_deref(), Some("summary 2"));
}

pub(super) async fn commits_are_fenced_and_validated(store: &dyn Store) {
    let a = AgentKey::new("fam", "assistant");
    let old = store
        .acquire_lease(&a, "w1", std::time::Duration::from_millis(100))
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let new = store.acquire_lease(&a, "w2", TTL).await.unwrap().unwrap();
    let err = store
        .commit_cycle(&a, &old, &commit(&["stale"], None, 10))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Fenced { .. }), "{err}");
    assert_eq!(
        store.consciousness(&a).await.unwrap().cycle,
        0,
        "a fenced commit changes nothing"
    );
    let bad = commit(
        &["x"],
        Some(Compacted {
            start: 7,
            summary: None,
        }),
        10,
    );
    assert!(matches!(
        store.commit_cycle(&a, &new, &bad).await,
        Err(StoreError::InvalidCommit { .. })
    ));
    assert!(matches!(
        store.restore_checkpoint(&a, &old, 1, None).await,
        Err(StoreError::Fenced { .. })
    ));
    assert!(matches!(
        store.set_memories(&a, &old, &Memories::new()).await,
        Err(StoreError::Fenced { .. })
    ));
}

pub(super) async fn memories_and_goals_are_kept(store: &dyn Store) {
    let a = AgentKey::new("fam", "assistant");
    let lease = store.acquire_lease(&a, "w1", TTL).await.unwrap().unwrap();
    let mut m = Memories::new();
    m.insert(
        "q4_report".into(),
        "waiting for budget. Revenue $2.1M".into(),
    );
    m.insert("tz".into(), "Asia/Amman".into());
    store.set_memories(&a, &lease, &m).await.unwrap();
    let mut update = Memories::new();
    update.insert("tz".into(), "UTC".into());
    store.set_memories(&a, &lease, &update).await.unwrap();
    let got = store.memories(&a).await.unwrap();
    assert_eq!(got["tz"], "UTC");
    assert_eq!(got.len(), 2);
    assert_eq!(
        store
            .delete_memories(&a, &lease, &["q4_report".into(), "nope".into()])
            .await
            .unwrap(),
        1
    );
    assert_eq!(store.memories(&a).await.unwrap().len(), 1);
    let q4 = Goal {
        id: "q4".into(),
        description: "Complete Q4 report".into(),
        status: "active".into(),
    };
    store
        .set_goals(&a, &lease, std::slice::from_ref(&q4))
        .await
        .unwrap();
    store
        .set_goals(
            &a,
            &lease,
            &[Goal {
                status: "completed".into(),
                ..q4.clone()
            }],
        )
        .await
        .unwrap();
    assert_eq!(
        store.goals(&a).await.unwrap(),
        [Goal {
            status: "completed".into(),
            ..q4
        }]
    );
}

//! Cycle records: kept by the step that ends the cycle, numbered, bounded by count and bytes
//! (the newest always kept), fenced, paged, and forgotten with the agent.

use super::*;
use crate::cycles::{CycleOutcome, CycleRecord, StepTrace, RECORD_BYTES};

fn written(outcome: CycleOutcome, text: &str, keep: u32, max_bytes: u64) -> RecordWrite {
    let mut record = CycleRecord {
        outcome: Some(outcome),
        party: "members".into(),
        started_ms: 1,
        ..CycleRecord::default()
    };
    record.push_step(StepTrace {
        text: Some(text.into()),
        ..StepTrace::default()
    });
    RecordWrite {
        record,
        keep,
        max_bytes,
    }
}

async fn kept(store: &dyn Store, a: &AgentKey, seq: u64) -> Option<CycleRecord> {
    store
        .cycle_record(a, seq)
        .await
        .unwrap()
        .map(|json| serde_json::from_str(&json).unwrap())
}

async fn seqs(store: &dyn Store, a: &AgentKey, before: Option<u64>, limit: usize) -> Vec<u64> {
    let heads = store.cycle_heads(a, before, limit).await.unwrap();
    heads.iter().map(|h| h.seq).collect()
}

pub(super) async fn cycle_records_are_kept_by_the_step_that_ends_the_cycle(store: &dyn Store) {
    let a = AgentKey::new("fam", "recorded");
    let lease = store.acquire_lease(&a, "w1", TTL).await.unwrap().unwrap();
    // A committed cycle: the record has the checkpoint its commit made.
    store.push_event(&a, &event("e1", "hello")).await.unwrap();
    store.wait_inbox(&a, &lease, TTL).await.unwrap();
    let mut c = commit(&["hi"], None, 3);
    c.record = Some(written(CycleOutcome::Committed, "thought", 10, 1 << 20));
    let cp = store.commit_cycle(&a, &lease, &c).await.unwrap();
    let first = kept(store, &a, 1).await.unwrap();
    assert_eq!(first.checkpoint, Some(cp.cycle));
    assert_eq!(first.outcome, Some(CycleOutcome::Committed));
    assert_eq!(first.steps[0].text.as_deref(), Some("thought"));
    // A skipped one, with its acknowledgement.
    store.push_event(&a, &event("e2", "noise")).await.unwrap();
    store.wait_inbox(&a, &lease, TTL).await.unwrap();
    let skip = Receipt::new(ReceiptOutcome::Skipped, None, None);
    let w = written(CycleOutcome::Skipped, "nothing to do", 10, 1 << 20);
    store
        .end_cycle_recorded(&a, &lease, &skip, Some(&w))
        .await
        .unwrap();
    assert_eq!(store.inflight(&a).await.unwrap(), 0);
    // A failed one, on its own (its events stay in flight).
    store.push_event(&a, &event("e3", "again")).await.unwrap();
    store.wait_inbox(&a, &lease, TTL).await.unwrap();
    let w = written(CycleOutcome::Failed, "", 10, 1 << 20);
    assert_eq!(store.record_cycle(&a, &lease, &w).await.unwrap(), 3);
    assert_eq!(store.inflight(&a).await.unwrap(), 1);
    // A paused one, once paused.
    let w = written(CycleOutcome::Paused, "asking", 10, 1 << 20);
    assert!(store
        .pause_cycle_recorded(&a, &lease, Some(&w))
        .await
        .unwrap());
    let heads = store.cycle_heads(&a, None, 10).await.unwrap();
    let outcomes: Vec<_> = heads.iter().map(|h| (h.seq, h.outcome)).collect();
    assert_eq!(
        outcomes,
        [
            (4, Some(CycleOutcome::Paused)),
            (3, Some(CycleOutcome::Failed)),
            (2, Some(CycleOutcome::Skipped)),
            (1, Some(CycleOutcome::Committed)),
        ]
    );
    assert_eq!(heads[3].checkpoint, Some(cp.cycle));
    assert!(heads.iter().all(|h| h.bytes > 0 && h.steps == 1));
    // Paged newest first.
    assert_eq!(seqs(store, &a, None, 2).await, [4, 3]);
    assert_eq!(seqs(store, &a, Some(3), 2).await, [2, 1]);
    assert!(seqs(store, &a, Some(1), 2).await.is_empty());
    // Fenced: a worker that lost the lease records nothing.
    store.release_lease(&a, &lease).await.unwrap();
    let other = store.acquire_lease(&a, "w2", TTL).await.unwrap().unwrap();
    let w = written(CycleOutcome::Failed, "late", 10, 1 << 20);
    let err = store.record_cycle(&a, &lease, &w).await.unwrap_err();
    assert!(matches!(err, StoreError::Fenced { .. }), "{err}");
    assert_eq!(seqs(store, &a, None, 10).await.len(), 4);
    // Forgotten with the agent.
    store.release_lease(&a, &other).await.unwrap();
    store.purge_agent(&a).await.unwrap();
    assert!(seqs(store, &a, None, 10).await.is_empty());
    assert!(kept(store, &a, 1).await.is_none());
}

pub(super) async fn cycle_records_are_bounded_by_count_and_bytes(store: &dyn Store) {
    let a = AgentKey::new("fam", "bounded");
    let lease = store.acquire_lease(&a, "w1", TTL).await.unwrap().unwrap();
    for i in 0..7 {
        let w = written(CycleOutcome::Failed, &format!("try {i}"), 5, 1 << 20);
        store.record_cycle(&a, &lease, &w).await.unwrap();
    }
    assert_eq!(seqs(store, &a, None, 100).await, [7, 6, 5, 4, 3]);
    assert!(kept(store, &a, 2).await.is_none());
    // Bytes: three records of ~10 KiB in 25 KiB keep the newest two.
    let big = "x".repeat(10_000);
    for _ in 0..3 {
        let w = written(CycleOutcome::Failed, &big, 5, 25_000);
        store.record_cycle(&a, &lease, &w).await.unwrap();
    }
    assert_eq!(seqs(store, &a, None, 100).await, [10, 9]);
    // A record over its size is cut to fit, saying how much was cut.
    let huge = "y".repeat(2 * RECORD_BYTES);
    let w = written(CycleOutcome::Failed, &huge, 5, 1 << 20);
    store.record_cycle(&a, &lease, &w).await.unwrap();
    assert_eq!(seqs(store, &a, None, 100).await, [11, 10, 9]);
    let heads = store.cycle_heads(&a, None, 1).await.unwrap();
    assert!(heads[0].bytes as usize <= RECORD_BYTES);
    let r = kept(store, &a, 11).await.unwrap();
    let text = r.steps[0].text.as_deref().unwrap();
    assert!(text.len() < RECORD_BYTES);
    assert_eq!(r.steps[0].text_cut as usize + text.len(), huge.len());
    // Keeping none forgets them all; numbers go on growing afterwards.
    let w = written(CycleOutcome::Failed, "off", 0, 1 << 20);
    store.record_cycle(&a, &lease, &w).await.unwrap();
    assert!(seqs(store, &a, None, 100).await.is_empty());
    let w = written(CycleOutcome::Failed, "on", 5, 1 << 20);
    assert_eq!(store.record_cycle(&a, &lease, &w).await.unwrap(), 12);
}

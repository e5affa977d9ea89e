//! Receipts: what became of an event that asked for one, written by the step that
//! acknowledged it, and kept as long as the agent's conversations last.

use super::*;

pub(super) async fn receipts_say_how_the_cycle_of_an_event_ended(store: &dyn Store) {
    let agent = AgentKey::new("fam", "receipts");
    store.register_agent(&agent).await.unwrap();
    let asking = |id: &str| InboxEvent {
        data: Some(serde_json::json!({"messageId": id, "receipt": true})),
        ..event(id, "a task")
    };
    // A text that merely quotes the marker asks for nothing.
    let quoting = event("plain", r#"{"receipt":true}"#);
    let lease = store
        .acquire_lease(&agent, "w", TTL)
        .await
        .unwrap()
        .unwrap();

    // Committed: the receipt names the cycle; no receipt before it, none for the plain event.
    store.push_event(&agent, &asking("t1")).await.unwrap();
    store.push_event(&agent, &quoting).await.unwrap();
    assert_eq!(
        store.wait_inbox(&agent, &lease, SHORT).await.unwrap().len(),
        2
    );
    assert_eq!(
        store.receipt(&agent, "t1").await.unwrap(),
        None,
        "in flight"
    );
    let cp = store
        .commit_cycle(&agent, &lease, &commit(&["a"], None, 3))
        .await
        .unwrap();
    let r = store.receipt(&agent, "t1").await.unwrap().unwrap();
    assert_eq!(
        (r.outcome, r.cycle, r.reason),
        (ReceiptOutcome::Committed, Some(cp.cycle), None)
    );
    assert_eq!(store.receipt(&agent, "plain").await.unwrap(), None);

    // Skipped.
    store.push_event(&agent, &asking("t2")).await.unwrap();
    store.wait_inbox(&agent, &lease, SHORT).await.unwrap();
    store.ack_cycle(&agent, &lease).await.unwrap();
    let r = store.receipt(&agent, "t2").await.unwrap().unwrap();
    assert_eq!((r.outcome, r.cycle), (ReceiptOutcome::Skipped, None));

    // Failed, with the reason.
    store.push_event(&agent, &asking("t3")).await.unwrap();
    store.wait_inbox(&agent, &lease, SHORT).await.unwrap();
    let failed = CycleCommit {
        failure: Some("the model refused".into()),
        record: None,
        ..commit(&["b"], None, 3)
    };
    store.commit_cycle(&agent, &lease, &failed).await.unwrap();
    let r = store.receipt(&agent, "t3").await.unwrap().unwrap();
    assert_eq!(r.outcome, ReceiptOutcome::Failed);
    assert_eq!(r.reason.as_deref(), Some("the model refused"));
    // The first is still there.
    assert!(store.receipt(&agent, "t1").await.unwrap().is_some());
}

/// Receipts are kept as long as conversations last, however many come meanwhile: 10,001
/// in one cycle (past the 10,000 once kept) all stay; one written longer ago than
/// conversations last goes.
pub(super) async fn receipts_last_as_long_as_conversations(store: &dyn Store) {
    let agent = AgentKey::new("fam", "receipts-kept");
    store.register_agent(&agent).await.unwrap();
    let asking = |id: String| InboxEvent {
        data: Some(serde_json::json!({"messageId": id, "receipt": true})),
        ..event(&id, "a task")
    };
    let lease = store
        .acquire_lease(&agent, "w", TTL)
        .await
        .unwrap()
        .unwrap();
    let day = 24 * 3600 * 1000;
    for (id, age_ms) in [
        ("too-old", RECEIPTS_KEPT_MS + day),
        ("old", RECEIPTS_KEPT_MS - day),
    ] {
        store.push_event(&agent, &asking(id.into())).await.unwrap();
        store.wait_inbox(&agent, &lease, SHORT).await.unwrap();
        let receipt = Receipt {
            time_ms: now_ms() - age_ms,
            ..Receipt::new(ReceiptOutcome::Committed, Some(1), None)
        };
        store.end_cycle(&agent, &lease, &receipt).await.unwrap();
    }
    assert!(store.receipt(&agent, "too-old").await.unwrap().is_some());
    for i in 0..10_001 {
        store
            .push_event(&agent, &asking(format!("t{i}")))
            .await
            .unwrap();
    }
    let mut taken = 0;
    while taken < 10_001 {
        taken += store.wait_inbox(&agent, &lease, SHORT).await.unwrap().len();
    }
    store.ack_cycle(&agent, &lease).await.unwrap();
    assert!(
        store.receipt(&agent, "t0").await.unwrap().is_some(),
        "the first of 10,001 receipts was forgotten"
    );
    assert!(store.receipt(&agent, "t10000").await.unwrap().is_some());
    assert!(store.receipt(&agent, "old").await.unwrap().is_some());
    assert_eq!(
        store.receipt(&agent, "too-old").await.unwrap(),
        None,
        "written longer ago than conversations last"
    );
}

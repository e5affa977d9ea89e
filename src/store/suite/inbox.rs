//! The inbox: whole batches in order without duplicates, what a crashed cycle left in flight,
//! the lease, urgent events, a paused cycle, the look between steps, and wake signals.

use super::*;

pub(super) async fn a_paused_cycle_waits_for_its_answer(store: &dyn Store) {
    let short = std::time::Duration::from_millis(200);
    let long = std::time::Duration::from_secs(5);
    let agent = AgentKey::new("fam", "paused");
    store.register_agent(&agent).await.unwrap();
    let mut wakes = store.subscribe_wakes(&WakeScope::All).await.unwrap();
    let lease = store
        .acquire_lease(&agent, "w", TTL)
        .await
        .unwrap()
        .unwrap();
    store
        .push_event(&agent, &event("e1", "first"))
        .await
        .unwrap();
    assert_eq!(
        store.wait_inbox(&agent, &lease, SHORT).await.unwrap().len(),
        1
    );
    // In flight, and nothing new in the inbox (what is in flight does not count).
    assert_eq!(store.inbox_depth(&agent).await.unwrap(), 0);
    assert!(observed(store, &agent).await.busy(), "thinking");
    // Something arrived since the drain (an answer, perhaps): not paused, the cycle goes on.
    store
        .push_event(&agent, &event("e2", "meanwhile"))
        .await
        .unwrap();
    assert!(!store.pause_cycle(&agent, &lease).await.unwrap());
    assert!(observed(store, &agent).await.busy());
    assert_eq!(
        store.wait_inbox(&agent, &lease, SHORT).await.unwrap().len(),
        2
    );

    // Paused for a human: idle for the scaler, its events still in flight.
    assert!(store.pause_cycle(&agent, &lease).await.unwrap());
    let paused = observed(store, &agent).await;
    assert!(paused.paused && !paused.busy(), "{paused:?}");
    assert_eq!(paused.in_flight, 2);
    // Its worker may go without a wake signal, and what arrives meanwhile (an urgent event, an
    // async tool's result) waits without waking it: nothing can go on before the answer.
    store.release_lease(&agent, &lease).await.unwrap();
    let mut urgent = event("e3", "now!");
    urgent.urgent = true;
    store.push_event(&agent, &urgent).await.unwrap();
    let service = NewCall::new(&agent, "create_ticket", 60_000).unwrap();
    store.register_call(&service).await.unwrap();
    let result = CallResult::Result(serde_json::json!({"ticket": "T-1"}));
    assert!(matches!(
        store
            .complete_call(&service.id, Some(&service.token), &result)
            .await
            .unwrap(),
        Completion::Accepted(_)
    ));
    assert_eq!(next_wake(&mut wakes, short).await, None);
    let waiting = observed(store, &agent).await;
    assert!(waiting.paused && !waiting.busy(), "{waiting:?}");
    assert_eq!(waiting.waiting, 2);

    // A human's answer ends the pause and wakes the agent.
    let call = HumanCall::new(
        &agent,
        "restart_deployment",
        CallKind::Approval,
        "family",
        serde_json::json!({}),
        None,
        60_000,
    )
    .unwrap();
    store.register_human_call(&call).await.unwrap();
    let approve = CallResult::Decision(Verdict {
        answer: Answer::Approve,
        by: "Dana".into(),
        reason: None,
    });
    assert!(matches!(
        store.complete_call(&call.id, None, &approve).await.unwrap(),
        Completion::Accepted(_)
    ));
    assert_eq!(next_wake(&mut wakes, long).await, Some(agent.clone()));
    let answered = observed(store, &agent).await;
    assert!(!answered.paused && answered.busy(), "{answered:?}");
    // The next worker takes it all, the paused cycle's events first.
    let lease = store
        .acquire_lease(&agent, "w2", TTL)
        .await
        .unwrap()
        .unwrap();
    let all = store.wait_inbox(&agent, &lease, SHORT).await.unwrap();
    assert_eq!(all.len(), 5, "{all:?}");
    assert_eq!(
        all[..3].iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
        ["e1", "e2", "e3"]
    );
    // Fenced like every write of a cycle.
    let stale = Lease {
        token: lease.token + 1,
        ..lease.clone()
    };
    assert!(store.pause_cycle(&agent, &stale).await.is_err());
}

pub(super) async fn inbox_drains_whole_batches_in_order_and_drops_duplicates(store: &dyn Store) {
    let a = AgentKey::new("fam", "assistant");
    let lease = store.acquire_lease(&a, "w1", TTL).await.unwrap().unwrap();
    assert!(
        store
            .wait_inbox(&a, &lease, SHORT)
            .await
            .unwrap()
            .is_empty(),
        "nothing to do: times out empty"
    );
    for (id, text) in [
        ("e1", "Tell Muhammad the meeting is at 3pm"),
        ("e2", "Also tell him to bring the documents"),
        ("e3", "Status of Q4?"),
    ] {
        assert!(store.push_event(&a, &event(id, text)).await.unwrap().queued);
    }
    assert!(
        !store
            .push_event(&a, &event("e2", "again"))
            .await
            .unwrap()
            .queued,
        "a seen id is dropped"
    );
    assert_eq!(store.inbox_depth(&a).await.unwrap(), 3);
    assert_eq!(
        store
            .peek_inbox(&a, 2)
            .await
            .unwrap()
            .iter()
            .map(|e| e.id.as_str())
            .collect::<Vec<_>>(),
        ["e1", "e2"]
    );
    let batch = store.wait_inbox(&a, &lease, TTL).await.unwrap();
    assert_eq!(
        batch.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
        ["e1", "e2", "e3"]
    );
    assert_eq!(
        batch[1].text.as_deref(),
        Some("Also tell him to bring the documents")
    );
    assert_eq!(
        (
            store.inbox_depth(&a).await.unwrap(),
            store.inflight(&a).await.unwrap()
        ),
        (0, 3)
    );
    assert!(
        !store
            .push_event(&a, &event("e1", "redelivered by a retrying producer"))
            .await
            .unwrap()
            .queued
    );
    store.ack_cycle(&a, &lease).await.unwrap();
    assert_eq!(store.inflight(&a).await.unwrap(), 0);
    assert!(store
        .wait_inbox(&a, &lease, SHORT)
        .await
        .unwrap()
        .is_empty());
}

pub(super) async fn unacknowledged_events_come_back_to_the_next_worker(store: &dyn Store) {
    let a = AgentKey::new("fam", "assistant");
    store.push_event(&a, &event("e1", "hello")).await.unwrap();
    // A second of lease: enough for the steps below on a loaded machine (a durable write on a
    // secured cluster waits for its replica).
    let first = store
        .acquire_lease(&a, "w1", std::time::Duration::from_secs(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(store.wait_inbox(&a, &first, TTL).await.unwrap().len(), 1);
    // The worker dies mid-cycle: no ack, and its lease runs out.
    assert_eq!(
        store.acquire_lease(&a, "w2", TTL).await.unwrap(),
        None,
        "the lease still holds"
    );
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let second = store.acquire_lease(&a, "w2", TTL).await.unwrap().unwrap();
    assert!(second.token > first.token, "fencing tokens grow");
    store
        .push_event(&a, &event("e2", "are you there?"))
        .await
        .unwrap();
    let again = store.wait_inbox(&a, &second, TTL).await.unwrap();
    assert_eq!(
        again.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
        ["e1", "e2"],
        "nothing lost, order kept"
    );
    // The old worker, back from the dead, can neither take nor acknowledge.
    assert!(matches!(
        store.wait_inbox(&a, &first, SHORT).await,
        Err(StoreError::Fenced { .. })
    ));
    assert!(matches!(
        store.ack_cycle(&a, &first).await,
        Err(StoreError::Fenced { .. })
    ));
    assert!(!store.renew_lease(&a, &first, TTL).await.unwrap());
    store.ack_cycle(&a, &second).await.unwrap();
}

pub(super) async fn one_worker_holds_the_lease(store: &dyn Store) {
    let a = AgentKey::new("fam", "assistant");
    let w1 = store.acquire_lease(&a, "w1", TTL).await.unwrap().unwrap();
    assert_eq!(store.acquire_lease(&a, "w2", TTL).await.unwrap(), None);
    assert_eq!(
        store.acquire_lease(&a, "w1", TTL).await.unwrap(),
        Some(w1.clone()),
        "re-acquiring keeps the token"
    );
    assert!(store.renew_lease(&a, &w1, TTL).await.unwrap());
    store.release_lease(&a, &w1).await.unwrap();
    let w2 = store.acquire_lease(&a, "w2", TTL).await.unwrap().unwrap();
    assert!(w2.token > w1.token);
    store.release_lease(&a, &w1).await.unwrap();
    assert_eq!(
        store.acquire_lease(&a, "w3", TTL).await.unwrap(),
        None,
        "releasing someone else's lease is a no-op"
    );
}

pub(super) async fn wake_is_signalled_only_without_a_worker(store: &dyn Store) {
    let a = AgentKey::new("fam", "sleepy");
    let pushed = store.push_event(&a, &event("e1", "wake up")).await.unwrap();
    assert_eq!(
        pushed,
        Pushed {
            queued: true,
            woke: true
        }
    );
    let lease = store.acquire_lease(&a, "w1", TTL).await.unwrap().unwrap();
    assert!(
        !store
            .push_event(&a, &event("e2", "again"))
            .await
            .unwrap()
            .woke
    );
    store.release_lease(&a, &lease).await.unwrap();
    assert!(
        store
            .push_event(&a, &event("e3", "and again"))
            .await
            .unwrap()
            .woke
    );
}

pub(super) async fn urgent_events_wait_in_their_own_queue_while_thinking(store: &dyn Store) {
    let a = AgentKey::new("fam", "assistant");
    let lease = store.acquire_lease(&a, "w1", TTL).await.unwrap().unwrap();
    // Sleeping: an urgent event simply wakes the agent.
    store.push_event(&a, &urgent("u0", "fire!")).await.unwrap();
    assert_eq!(store.wait_inbox(&a, &lease, TTL).await.unwrap().len(), 1);
    // Thinking: urgent events queue apart, normal ones wait for the next cycle.
    store
        .push_event(&a, &urgent("u1", "stop the deploy"))
        .await
        .unwrap();
    store.push_event(&a, &event("n1", "lunch?")).await.unwrap();
    assert_eq!(
        store
            .peek_inbox(&a, 10)
            .await
            .unwrap()
            .iter()
            .map(|e| e.id.as_str())
            .collect::<Vec<_>>(),
        ["n1"]
    );
    assert_eq!(store.inbox_depth(&a).await.unwrap(), 2);
    let taken = store.take_urgent(&a, &lease).await.unwrap();
    assert_eq!(
        taken.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
        ["u1"]
    );
    assert_eq!(
        store.inflight(&a).await.unwrap(),
        2,
        "injected urgent events are acknowledged with the cycle"
    );
    store
        .push_event(&a, &urgent("u2", "too late for this cycle"))
        .await
        .unwrap();
    store.ack_cycle(&a, &lease).await.unwrap();
    let next = store.wait_inbox(&a, &lease, TTL).await.unwrap();
    assert_eq!(
        next.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
        ["n1", "u2"]
    );
}

pub(super) async fn one_look_between_steps(store: &dyn Store) {
    let a = AgentKey::new("fam", "assistant");
    let lease = store.acquire_lease(&a, "w1", TTL).await.unwrap().unwrap();
    store.push_event(&a, &event("e0", "start")).await.unwrap();
    store.wait_inbox(&a, &lease, TTL).await.unwrap();
    let quiet = store.mid_cycle(&a, &lease, true, 5).await.unwrap();
    assert_eq!(quiet, MidCycle::default());
    store.push_event(&a, &urgent("u1", "stop!")).await.unwrap();
    for i in 0..7 {
        store
            .push_event(&a, &event(&format!("n{i}"), "later"))
            .await
            .unwrap();
    }
    let preview_only = store.mid_cycle(&a, &lease, false, 3).await.unwrap();
    assert!(preview_only.urgent.is_empty());
    assert_eq!(preview_only.waiting, 8);
    let look = store.mid_cycle(&a, &lease, true, 3).await.unwrap();
    assert_eq!(
        look.urgent
            .iter()
            .map(|e| e.id.as_str())
            .collect::<Vec<_>>(),
        ["u1"]
    );
    assert_eq!(look.waiting, 7);
    assert_eq!(
        look.preview
            .iter()
            .map(|e| e.id.as_str())
            .collect::<Vec<_>>(),
        ["n0", "n1", "n2"]
    );
    assert_eq!(store.inflight(&a).await.unwrap(), 2);
    let stale = Lease {
        holder: "w0".into(),
        token: 0,
    };
    assert!(matches!(
        store.mid_cycle(&a, &stale, true, 3).await,
        Err(StoreError::Fenced { .. })
    ));
}

pub(super) async fn a_sleeping_worker_wakes_on_push(store: std::sync::Arc<dyn Store>) {
    let a = AgentKey::new("fam", "assistant");
    let lease = store.acquire_lease(&a, "w1", TTL).await.unwrap().unwrap();
    let waiter = {
        let store = store.clone();
        let a = a.clone();
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let events = store
                .wait_inbox(&a, &lease, std::time::Duration::from_secs(20))
                .await
                .unwrap();
            (events, started.elapsed())
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    store.push_event(&a, &event("e1", "ping")).await.unwrap();
    let (events, waited) = waiter.await.unwrap();
    assert_eq!(events.len(), 1);
    assert!(
        waited < std::time::Duration::from_secs(10),
        "woken by the push, not the timeout ({waited:?})"
    );
}

pub(super) async fn wake_signals_reach_the_listeners_in_scope(store: &dyn Store) {
    let long = std::time::Duration::from_secs(5);
    let short = std::time::Duration::from_millis(200);
    let alice = AgentKey::new("fam", "alice");
    let bob = AgentKey::new("work", "bob");
    for k in [&alice, &bob] {
        store.register_agent(k).await.unwrap();
    }
    let mut all = store.subscribe_wakes(&WakeScope::All).await.unwrap();
    let mut fam = store
        .subscribe_wakes(&WakeScope::Namespace("fam".into()))
        .await
        .unwrap();
    let mut only_bob = store
        .subscribe_wakes(&WakeScope::Agent(bob.clone()))
        .await
        .unwrap();
    store
        .push_event(&bob, &event("b1", "hi bob"))
        .await
        .unwrap();
    store
        .push_event(&alice, &event("a1", "hi alice"))
        .await
        .unwrap();
    // Both, in either order: on a Redis Cluster each agent's signal is on its own shard's
    // channel, and two shards keep no order between them.
    let mut heard = [
        next_wake(&mut all, long).await,
        next_wake(&mut all, long).await,
    ];
    heard.sort();
    assert_eq!(heard, [Some(alice.clone()), Some(bob.clone())]);
    assert_eq!(next_wake(&mut fam, long).await, Some(alice.clone()));
    assert_eq!(next_wake(&mut only_bob, long).await, Some(bob.clone()));
    assert_eq!(next_wake(&mut fam, short).await, None);
    assert_eq!(next_wake(&mut only_bob, short).await, None);

    // Taken without waiting: what is in flight with the inbox behind it, fenced.
    let lease = store
        .acquire_lease(&alice, "pool-0", TTL)
        .await
        .unwrap()
        .unwrap();
    let first = store.take_inbox(&alice, &lease).await.unwrap();
    assert_eq!(ids(&first), ["a1"]);
    assert!(observed(store, &alice).await.thinking);
    store
        .push_event(&alice, &event("a2", "more"))
        .await
        .unwrap();
    let again = store.take_inbox(&alice, &lease).await.unwrap();
    assert_eq!(ids(&again), ["a1", "a2"]);
    let stale = Lease {
        token: lease.token + 1,
        ..lease.clone()
    };
    assert!(matches!(
        store.take_inbox(&alice, &stale).await,
        Err(StoreError::Fenced { .. })
    ));
    store.ack_cycle(&alice, &lease).await.unwrap();
    assert!(store.take_inbox(&alice, &lease).await.unwrap().is_empty());
    assert!(!observed(store, &alice).await.thinking);
}

pub(super) async fn wake_signals_reach_subscribers(store: &dyn Store) {
    let long = std::time::Duration::from_secs(5);
    let short = std::time::Duration::from_millis(200);
    // Wake signals are for registered agents (the operator registers every agent it runs);
    // registered before or after subscribing.
    let a = AgentKey::new("fam", "sleepy");
    store.register_agent(&a).await.unwrap();
    let mut wakes = store.subscribe_wakes(&WakeScope::All).await.unwrap();
    for name in ["alice", "bob"] {
        store
            .register_agent(&AgentKey::new("fam", name))
            .await
            .unwrap();
    }
    store.push_event(&a, &event("e1", "wake up")).await.unwrap();
    assert_eq!(next_wake(&mut wakes, long).await, Some(a.clone()));

    // With a worker holding the agent: no signal. A worker leaving with events waiting
    // (scaled down as they arrived) signals again; leaving an empty inbox does not.
    let lease = store.acquire_lease(&a, "w1", TTL).await.unwrap().unwrap();
    store.push_event(&a, &event("e2", "again")).await.unwrap();
    assert_eq!(next_wake(&mut wakes, short).await, None);
    store.release_lease(&a, &lease).await.unwrap();
    assert_eq!(next_wake(&mut wakes, long).await, Some(a.clone()));
    let lease = store.acquire_lease(&a, "w2", TTL).await.unwrap().unwrap();
    assert_eq!(store.wait_inbox(&a, &lease, SHORT).await.unwrap().len(), 2);
    store.ack_cycle(&a, &lease).await.unwrap();
    store.release_lease(&a, &lease).await.unwrap();
    assert_eq!(next_wake(&mut wakes, short).await, None);

    // Leaving a cycle unfinished signals (its events must be taken again); leaving a cycle
    // paused for a human does not: the answer wakes the agent when it comes.
    store.push_event(&a, &event("e3", "ask")).await.unwrap();
    assert_eq!(next_wake(&mut wakes, long).await, Some(a.clone()));
    let lease = store.acquire_lease(&a, "w3", TTL).await.unwrap().unwrap();
    assert_eq!(store.wait_inbox(&a, &lease, SHORT).await.unwrap().len(), 1);
    store.release_lease(&a, &lease).await.unwrap();
    assert_eq!(next_wake(&mut wakes, long).await, Some(a.clone()));
    let lease = store.acquire_lease(&a, "w4", TTL).await.unwrap().unwrap();
    assert_eq!(store.wait_inbox(&a, &lease, SHORT).await.unwrap().len(), 1);
    store.pause_cycle(&a, &lease).await.unwrap();
    store.release_lease(&a, &lease).await.unwrap();
    assert_eq!(next_wake(&mut wakes, short).await, None);
    let lease = store.acquire_lease(&a, "w5", TTL).await.unwrap().unwrap();
    assert_eq!(store.wait_inbox(&a, &lease, SHORT).await.unwrap().len(), 1);
    store.ack_cycle(&a, &lease).await.unwrap();
    store.release_lease(&a, &lease).await.unwrap();

    // A post wakes the member agents that have no worker.
    let family = family_space(store, 100).await;
    store
        .post_message(&family, &say(human("husam"), "hello"))
        .await
        .unwrap();
    let mut woken = vec![
        next_wake(&mut wakes, long).await.unwrap(),
        next_wake(&mut wakes, long).await.unwrap(),
    ];
    woken.sort();
    assert_eq!(
        woken,
        [AgentKey::new("fam", "alice"), AgentKey::new("fam", "bob")]
    );
}

pub(super) async fn another_partys_events_wait_for_a_later_cycle(store: &dyn Store) {
    let agent = AgentKey::new("fam", "parties");
    store.register_agent(&agent).await.unwrap();
    let lease = store
        .acquire_lease(&agent, "w", TTL)
        .await
        .unwrap()
        .unwrap();
    for (id, text) in [("a", "outsider"), ("b", "member"), ("c", "outsider again")] {
        store.push_event(&agent, &event(id, text)).await.unwrap();
    }
    let taken = store.take_inbox(&agent, &lease).await.unwrap();
    assert_eq!(ids(&taken), ["a", "b", "c"]);
    // The cycle takes "b": "a" and "c" go back to the head of the inbox, in order, before
    // what arrives meanwhile.
    let later = vec!["a".to_string(), "c".to_string(), "nothing".to_string()];
    assert_eq!(store.defer_events(&agent, &lease, &later).await.unwrap(), 2);
    assert_eq!(store.inflight(&agent).await.unwrap(), 1);
    assert_eq!(store.inbox_depth(&agent).await.unwrap(), 2);
    assert_eq!(store.defer_events(&agent, &lease, &[]).await.unwrap(), 0);
    // What was deferred is no news: the cycle pauses.
    assert!(store.pause_cycle(&agent, &lease).await.unwrap());
    // The answer ends the pause (as complete_call does); news, then, is news again.
    store
        .push_event(&agent, &event("d", "the answer"))
        .await
        .unwrap();
    assert!(!store.pause_cycle(&agent, &lease).await.unwrap());
    // The next drain: the cycle's own first, then what waited, in order.
    let taken = store.take_inbox(&agent, &lease).await.unwrap();
    assert_eq!(ids(&taken), ["b", "a", "c", "d"]);
    // Held counts start again: deferring the same again holds them again.
    store
        .defer_events(&agent, &lease, &["a".into(), "c".into()])
        .await
        .unwrap();
    assert!(store.pause_cycle(&agent, &lease).await.unwrap());
    // A cycle that committed nothing of the agent's (a conversation with a memory of its
    // own) ends with its events acknowledged as committed.
    store
        .end_cycle(
            &agent,
            &lease,
            &Receipt::new(ReceiptOutcome::Committed, None, None),
        )
        .await
        .unwrap();
    assert_eq!(store.inflight(&agent).await.unwrap(), 0);
    assert_eq!(
        ids(&store.take_inbox(&agent, &lease).await.unwrap()),
        ["a", "c"]
    );
    // Left for later mid-cycle (an urgent event of another party), an event takes its place
    // by its time among those already waiting: each party's events keep their order.
    let at = |id: &str, ms: i64, urgent: bool| InboxEvent {
        time_ms: ms,
        urgent,
        ..event(id, id)
    };
    store.ack_cycle(&agent, &lease).await.unwrap();
    store
        .push_event(&agent, &at("m1", 1_000, false))
        .await
        .unwrap();
    store
        .push_event(&agent, &at("b1", 2_000, false))
        .await
        .unwrap();
    let taken = store.take_inbox(&agent, &lease).await.unwrap();
    assert_eq!(ids(&taken), ["m1", "b1"]);
    store
        .defer_events(&agent, &lease, &["b1".into()])
        .await
        .unwrap();
    store
        .push_event(&agent, &at("c1", 3_000, false))
        .await
        .unwrap();
    store
        .push_event(&agent, &at("b2", 4_000, true))
        .await
        .unwrap();
    let look = store.mid_cycle(&agent, &lease, true, 5).await.unwrap();
    assert_eq!(ids(&look.urgent), ["b2"]);
    store
        .defer_events(&agent, &lease, &["b2".into()])
        .await
        .unwrap();
    store.ack_cycle(&agent, &lease).await.unwrap();
    assert_eq!(
        ids(&store.take_inbox(&agent, &lease).await.unwrap()),
        ["b1", "c1", "b2"]
    );
    // Fenced.
    store.release_lease(&agent, &lease).await.unwrap();
    assert!(matches!(
        store.defer_events(&agent, &lease, &["a".into()]).await,
        Err(StoreError::Fenced { .. })
    ));
}

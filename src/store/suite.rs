//! One behaviour suite, run against both stores: the embedded one and a real `redis-server`.

use super::*;
use crate::keys::SpaceKey;
use crate::testing::{RedisServer, WaitInbox};

fn member(kind: MemberKind, id: &str) -> Member {
    Member {
        kind,
        id: id.into(),
        name: id.to_uppercase(),
    }
}

fn record(members: Vec<Member>) -> SpaceRecord {
    SpaceRecord {
        v: V1,
        display_name: "Family".into(),
        members,
        max_messages: 100,
        loop_guard: Default::default(),
    }
}

async fn membership_is_applied_idempotently(store: &dyn Store) {
    let family = SpaceKey::new("fam", "family");
    let work = SpaceKey::new("fam", "work");
    assert_eq!(store.space(&family).await.unwrap(), None);
    let members = vec![
        member(MemberKind::Agent, "alice"),
        member(MemberKind::Human, "husam"),
    ];
    assert!(store
        .apply_space(&family, &record(members.clone()))
        .await
        .unwrap());
    assert!(
        !store
            .apply_space(&family, &record(members.clone()))
            .await
            .unwrap(),
        "same members again: no change"
    );
    assert_eq!(
        store.space(&family).await.unwrap(),
        Some(record(members.clone()))
    );
    let mut renamed = record(members.clone());
    renamed.display_name = "The Family".into();
    assert!(
        store.apply_space(&family, &renamed).await.unwrap(),
        "a new display name is a change"
    );
    assert_eq!(store.space(&family).await.unwrap(), Some(renamed));

    let fewer = vec![member(MemberKind::Human, "husam")];
    assert!(store
        .apply_space(&family, &record(fewer.clone()))
        .await
        .unwrap());
    assert_eq!(store.space(&family).await.unwrap(), Some(record(fewer)));

    assert!(store.apply_space(&work, &record(vec![])).await.unwrap());
    assert_eq!(store.space(&work).await.unwrap(), Some(record(vec![])));
    assert_eq!(
        store.spaces().await.unwrap(),
        vec![family.clone(), work.clone()]
    );

    assert!(store.remove_space(&family).await.unwrap());
    assert!(!store.remove_space(&family).await.unwrap());
    assert_eq!(store.space(&family).await.unwrap(), None);
    assert_eq!(store.spaces().await.unwrap(), vec![work]);
}

async fn agents_are_registered(store: &dyn Store) {
    let a = AgentKey::new("fam", "assistant");
    let b = AgentKey::new("work", "assistant");
    assert!(!store.agent_registered(&a).await.unwrap());
    assert!(store.register_agent(&a).await.unwrap());
    assert!(!store.register_agent(&a).await.unwrap(), "idempotent");
    assert!(store.agent_registered(&a).await.unwrap());
    assert!(!store.agent_registered(&b).await.unwrap(), "by namespace");
    assert!(store.unregister_agent(&a).await.unwrap());
    assert!(!store.unregister_agent(&a).await.unwrap());
    assert!(!store.agent_registered(&a).await.unwrap());
}

async fn ping_answers(store: &dyn Store) {
    store.ping().await.unwrap();
}

fn event(id: &str, text: &str) -> InboxEvent {
    crate::testing::human_event(id, text)
}

fn urgent(id: &str, text: &str) -> InboxEvent {
    InboxEvent {
        urgent: true,
        ..event(id, text)
    }
}

const TTL: std::time::Duration = std::time::Duration::from_secs(30);
const SHORT: std::time::Duration = std::time::Duration::from_millis(50);

async fn observed(store: &dyn Store, agent: &AgentKey) -> AgentObservation {
    store
        .observe(std::slice::from_ref(agent))
        .await
        .unwrap()
        .remove(0)
}

async fn a_paused_cycle_waits_for_its_answer(store: &dyn Store) {
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

async fn inbox_drains_whole_batches_in_order_and_drops_duplicates(store: &dyn Store) {
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

async fn unacknowledged_events_come_back_to_the_next_worker(store: &dyn Store) {
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

async fn one_worker_holds_the_lease(store: &dyn Store) {
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

async fn wake_is_signalled_only_without_a_worker(store: &dyn Store) {
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

async fn urgent_events_wait_in_their_own_queue_while_thinking(store: &dyn Store) {
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

fn human(id: &str) -> Sender {
    Sender {
        id: id.into(),
        name: id.to_uppercase(),
        kind: Some(MemberKind::Human),
    }
}

fn agent_sender(id: &str) -> Sender {
    Sender {
        id: id.into(),
        name: id.into(),
        kind: Some(MemberKind::Agent),
    }
}

fn say(sender: Sender, text: &str) -> NewMessage {
    NewMessage {
        sender,
        text: text.into(),
        mention: None,
        idempotency_key: None,
        urgent: false,
        depth: 0,
    }
}

/// The newest ten messages of `space`, newest first.
async fn recent(store: &dyn Store, space: &SpaceKey) -> Vec<SpaceMessage> {
    store
        .read_messages(
            space,
            &ReadQuery {
                limit: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap()
}

async fn family_space(store: &dyn Store, max_messages: u64) -> SpaceKey {
    let family = SpaceKey::new("fam", "family");
    let record = SpaceRecord {
        v: V1,
        display_name: "Family".into(),
        members: vec![
            member(MemberKind::Agent, "alice"),
            member(MemberKind::Agent, "bob"),
            member(MemberKind::Human, "husam"),
        ],
        max_messages,
        loop_guard: Default::default(),
    };
    store.apply_space(&family, &record).await.unwrap();
    family
}

async fn posting_delivers_to_every_other_member_agent(store: &dyn Store) {
    let family = family_space(store, 100).await;
    let alice = AgentKey::new("fam", "alice");
    let bob = AgentKey::new("fam", "bob");
    let posted = store
        .post_message(&family, &say(human("husam"), "Find me hotels in Tokyo"))
        .await
        .unwrap();
    assert!(!posted.duplicate);
    assert_eq!(posted.delivered, ["alice", "bob"]);
    let from_alice = store
        .post_message(&family, &say(agent_sender("alice"), "What's your budget?"))
        .await
        .unwrap();
    assert_eq!(
        from_alice.delivered,
        ["bob"],
        "the sender's own inbox is skipped"
    );
    assert_eq!(store.inbox_depth(&alice).await.unwrap(), 1);
    let events = store.peek_inbox(&bob, 10).await.unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].id, format!("msg:family:{}", posted.id));
    assert_eq!(events[0].kind, EventKind::SpaceMessage);
    assert_eq!(events[0].space.as_deref(), Some("family"));
    assert_eq!(
        events[0].sender.as_ref().map(|s| s.id.as_str()),
        Some("husam")
    );
    assert_eq!(events[0].text.as_deref(), Some("Find me hotels in Tokyo"));
    assert_eq!(
        events[0].data.as_ref().unwrap()["messageId"],
        posted.id.as_str()
    );
    assert_eq!(events[1].text.as_deref(), Some("What's your budget?"));

    let err = store
        .post_message(&family, &say(human("carol"), "let me in"))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotMember { .. }), "{err}");
    let nowhere = SpaceKey::new("fam", "nowhere");
    assert!(matches!(
        store
            .post_message(&nowhere, &say(human("husam"), "hi"))
            .await,
        Err(StoreError::NotMember { .. })
    ));
}

async fn a_retried_post_never_duplicates(store: &dyn Store) {
    let family = family_space(store, 100).await;
    let bob = AgentKey::new("fam", "bob");
    let mut m = say(agent_sender("alice"), "Found 3 hotels");
    m.idempotency_key = Some("alice:cycle-7:call-2".into());
    let first = store.post_message(&family, &m).await.unwrap();
    let again = store.post_message(&family, &m).await.unwrap();
    assert!(again.duplicate);
    assert_eq!(again.id, first.id);
    assert!(again.delivered.is_empty());
    assert_eq!(store.inbox_depth(&bob).await.unwrap(), 1);
    assert_eq!(recent(store, &family).await.len(), 1);
}

async fn idempotency_keys_belong_to_their_sender(store: &dyn Store) {
    let family = SpaceKey::new("fam", "family");
    let members = vec![
        member(MemberKind::Agent, "alice"),
        member(MemberKind::Agent, "bob"),
        member(MemberKind::Human, "husam"),
        member(MemberKind::Human, "muhammad"),
    ];
    store.apply_space(&family, &record(members)).await.unwrap();
    let keyed = |sender: Sender, text: &str, key: &str| NewMessage {
        idempotency_key: Some(key.into()),
        ..say(sender, text)
    };
    // A member who guesses an agent's key, in either form, suppresses nothing.
    for forged in [
        "fam/alice:0123abcd:0:0",
        "agent:alice:fam/alice:0123abcd:0:0",
    ] {
        let first = store
            .post_message(&family, &keyed(human("husam"), "forged", forged))
            .await
            .unwrap();
        assert!(!first.duplicate);
    }
    let reply = store
        .post_message(
            &family,
            &keyed(
                agent_sender("alice"),
                "the real reply",
                "fam/alice:0123abcd:0:0",
            ),
        )
        .await
        .unwrap();
    assert!(!reply.duplicate, "the agent's reply was suppressed");
    assert_eq!(reply.delivered, ["bob"]);
    // Two humans with the same key both post.
    let a = store
        .post_message(&family, &keyed(human("husam"), "one", "line-1"))
        .await
        .unwrap();
    let b = store
        .post_message(&family, &keyed(human("muhammad"), "two", "line-1"))
        .await
        .unwrap();
    assert!(!b.duplicate);
    assert_ne!(a.id, b.id);
    // The same sender's retry is still one message.
    let again = store
        .post_message(&family, &keyed(human("muhammad"), "two", "line-1"))
        .await
        .unwrap();
    assert!(again.duplicate);
    assert_eq!(again.id, b.id);
    let texts: Vec<String> = recent(store, &family)
        .await
        .into_iter()
        .map(|m| m.text)
        .collect();
    assert_eq!(texts, ["two", "one", "the real reply", "forged", "forged"]);
}

async fn the_loop_guard_stops_agents_waking_each_other(store: &dyn Store) {
    let space = SpaceKey::new("fam", "loop");
    let mut r = record(vec![
        member(MemberKind::Agent, "alice"),
        member(MemberKind::Agent, "bob"),
        member(MemberKind::Human, "husam"),
    ]);
    r.loop_guard.max_depth = 3;
    r.loop_guard.max_agent_messages_per_minute = 1000;
    store.apply_space(&space, &r).await.unwrap();
    let bob = AgentKey::new("fam", "bob");
    let at = |sender: Sender, depth: u32| NewMessage {
        depth,
        ..say(sender, "hi")
    };
    let ok = store
        .post_message(&space, &at(agent_sender("alice"), 3))
        .await
        .unwrap();
    assert_eq!(
        (ok.delivered.as_slice(), ok.guarded),
        (&["bob".to_string()][..], None)
    );
    assert_eq!(
        store.peek_inbox(&bob, 10).await.unwrap()[0].depth,
        3,
        "the event carries the depth"
    );
    let held = store
        .post_message(&space, &at(agent_sender("alice"), 4))
        .await
        .unwrap();
    assert_eq!(held.guarded, Some(Guard::Depth));
    assert!(held.delivered.is_empty());
    assert_eq!(
        store.inbox_depth(&bob).await.unwrap(),
        1,
        "bob was not woken again"
    );
    // Humans are never held, whatever the depth field says; nor is an agent alone among
    // agents (there is nobody to wake).
    let alone = SpaceKey::new("fam", "alone");
    let mut solo = r.clone();
    solo.members.retain(|m| m.id != "bob");
    store.apply_space(&alone, &solo).await.unwrap();
    let lone = store
        .post_message(&alone, &at(agent_sender("alice"), 99))
        .await
        .unwrap();
    assert_eq!(lone.guarded, None);
    let human_post = store
        .post_message(&space, &at(human("husam"), 99))
        .await
        .unwrap();
    assert_eq!(human_post.guarded, None);
    let log = recent(store, &space).await;
    // Newest first: husam, the notice, the held message (posted, for humans to see), the first.
    assert_eq!(log.len(), 4);
    assert_eq!(log[1].sender, Sender::system());
    assert!(
        log[1].text.contains("alice's message was not delivered"),
        "{}",
        log[1].text
    );
    assert!(
        log[1].text.contains("agent message 4 in a row"),
        "{}",
        log[1].text
    );
    assert_eq!(log[2].id, held.id);

    // The rate: the fourth agent message in a minute wakes nobody, and says so once.
    let fast = SpaceKey::new("fam", "fast");
    let mut r = r.clone();
    r.loop_guard.max_depth = 100;
    r.loop_guard.max_agent_messages_per_minute = 3;
    store.apply_space(&fast, &r).await.unwrap();
    for _ in 0..3 {
        let p = store
            .post_message(&fast, &at(agent_sender("alice"), 1))
            .await
            .unwrap();
        assert_eq!(p.guarded, None);
    }
    for _ in 0..2 {
        let p = store
            .post_message(&fast, &at(agent_sender("bob"), 1))
            .await
            .unwrap();
        assert_eq!((p.guarded, p.delivered.len()), (Some(Guard::Rate), 0));
    }
    let log = recent(store, &fast).await;
    let notices = log.iter().filter(|m| m.sender == Sender::system()).count();
    assert_eq!((log.len(), notices), (6, 1));
}

async fn notices_are_logged_once_and_wake_no_agent(store: &dyn Store) {
    use futures::StreamExt;
    let family = family_space(store, 100).await;
    let mut live = store.subscribe_live(&family).await.unwrap();
    let first = store
        .post_notice(&family, "Husam approved restart", Some("decision:1"))
        .await
        .unwrap();
    assert!(!first.duplicate && first.delivered.is_empty());
    let again = store
        .post_notice(&family, "Husam approved restart", Some("decision:1"))
        .await
        .unwrap();
    assert_eq!(
        (again.id.as_str(), again.duplicate),
        (first.id.as_str(), true)
    );
    let log = recent(store, &family).await;
    assert_eq!(log.len(), 1, "a keyed notice is posted once");
    assert_eq!(
        (&log[0].sender, log[0].text.as_str()),
        (&Sender::system(), "Husam approved restart")
    );
    for agent in ["alice", "bob"] {
        assert_eq!(
            store
                .inbox_depth(&AgentKey::new("fam", agent))
                .await
                .unwrap(),
            0,
            "{agent}"
        );
    }
    let five = std::time::Duration::from_secs(5);
    let event = tokio::time::timeout(five, live.next()).await.unwrap();
    let Some(LiveEvent::Message { message }) = event else {
        panic!("expected the notice, got {event:?}")
    };
    assert_eq!(message.id, first.id);
    // A member's key is its own: the same key from a member is another post.
    let member = store
        .post_message(
            &family,
            &NewMessage {
                idempotency_key: Some("decision:1".into()),
                ..say(human("husam"), "hi")
            },
        )
        .await
        .unwrap();
    assert!(!member.duplicate);
    assert!(matches!(
        store
            .post_notice(&SpaceKey::new("fam", "nowhere"), "x", None)
            .await,
        Err(StoreError::NotMember { .. })
    ));
}

async fn reading_pages_newest_first_or_since_an_id(store: &dyn Store) {
    let family = family_space(store, 4).await;
    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(
            store
                .post_message(&family, &say(human("husam"), &format!("m{i}")))
                .await
                .unwrap()
                .id,
        );
    }
    let texts = |v: Vec<SpaceMessage>| v.into_iter().map(|m| m.text).collect::<Vec<_>>();
    let all = store
        .read_messages(
            &family,
            &ReadQuery {
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        texts(all.clone()),
        ["m5", "m4", "m3", "m2"],
        "newest first, trimmed to the retention"
    );
    assert_eq!(all[0].id, ids[5]);
    assert_eq!(all[0].space, "family");
    assert_eq!(all[0].sender.id, "husam");
    let page = store
        .read_messages(
            &family,
            &ReadQuery {
                limit: 2,
                before: Some(ids[4].clone()),
                after: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(texts(page), ["m3", "m2"]);
    let since = store
        .read_messages(
            &family,
            &ReadQuery {
                limit: 10,
                before: None,
                after: Some(ids[3].clone()),
            },
        )
        .await
        .unwrap();
    assert_eq!(texts(since), ["m4", "m5"], "oldest first after the id");
    let nothing = SpaceKey::new("fam", "empty");
    assert!(recent(store, &nothing).await.is_empty());
}

async fn live_events_reach_subscribers(store: &dyn Store) {
    use futures::StreamExt;
    let family = family_space(store, 100).await;
    let mut live = store.subscribe_live(&family).await.unwrap();
    let posted = store
        .post_message(&family, &say(human("husam"), "hello"))
        .await
        .unwrap();
    let delta = LiveEvent::Delta {
        stream_id: "s1".into(),
        sender: agent_sender("alice"),
        delta: "Hi Hu".into(),
    };
    store.publish_live(&family, &delta).await.unwrap();
    let five = std::time::Duration::from_secs(5);
    let first = tokio::time::timeout(five, live.next())
        .await
        .unwrap()
        .unwrap();
    let LiveEvent::Message { message } = first else {
        panic!("expected the message, got {first:?}")
    };
    assert_eq!(
        (message.id.as_str(), message.text.as_str()),
        (posted.id.as_str(), "hello")
    );
    let second = tokio::time::timeout(five, live.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(second, delta);
}

async fn urgent_posts_become_urgent_events(store: &dyn Store) {
    let family = family_space(store, 100).await;
    let alice = AgentKey::new("fam", "alice");
    let lease = store
        .acquire_lease(&alice, "w1", TTL)
        .await
        .unwrap()
        .unwrap();
    store
        .post_message(&family, &say(human("husam"), "start"))
        .await
        .unwrap();
    store.wait_inbox(&alice, &lease, TTL).await.unwrap();
    let mut m = say(human("husam"), "stop, wrong city!");
    m.urgent = true;
    store.post_message(&family, &m).await.unwrap();
    let urgent = store.take_urgent(&alice, &lease).await.unwrap();
    assert_eq!(urgent.len(), 1);
    assert!(urgent[0].urgent);
}

fn commit(messages: &[&str], compaction: Option<Compacted>, retained: u32) -> CycleCommit {
    CycleCommit {
        new_messages: messages
            .iter()
            .map(|m| format!("{{\"role\":\"user\",\"content\":\"{m}\"}}"))
            .collect(),
        compaction,
        tokens: 10 * messages.len() as u64,
        cycle_tokens: 100,
        checkpoints_retained: retained,
    }
}

async fn the_journal_lasts_until_its_cycle_ends(store: &dyn Store) {
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

async fn cycles_commit_with_checkpoints_and_acknowledge(store: &dyn Store) {
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

async fn compaction_keeps_a_summary_and_checkpoints_restore(store: &dyn Store) {
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
    // Life goes on from the restored point.
    let cp = store
        .commit_cycle(&a, &lease, &commit(&["m2'"], None, 10))
        .await
        .unwrap();
    assert_eq!((cp.cycle, cp.start, cp.end), (2, 0, 3));
    assert!(store.consciousness(&a).await.unwrap().messages[2].contains("m2'"));
    assert_eq!(
        store.restore_checkpoint(&a, &lease, 9, None).await.unwrap(),
        None
    );
}

async fn a_snapshot_replaces_the_consciousness_between_cycles(store: &dyn Store) {
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
    // The next commit builds on it, chained from its digest.
    let next = commit(&["m3'"], None, 5);
    let cp3 = store.commit_cycle(&a, &lease, &next).await.unwrap();
    assert_eq!((cp3.cycle, cp3.start, cp3.end), (3, 1, 4));
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
            .restore_checkpoint(&a, &lease, 3, Some("cycle:3"))
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

async fn only_the_last_checkpoints_are_kept(store: &dyn Store) {
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

async fn commits_are_fenced_and_validated(store: &dyn Store) {
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

async fn memories_and_goals_are_kept(store: &dyn Store) {
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

async fn one_look_between_steps(store: &dyn Store) {
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

async fn a_sleeping_worker_wakes_on_push(store: std::sync::Arc<dyn Store>) {
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

/// The next wake signal within `wait`, if any.
async fn next_wake(
    wakes: &mut futures::stream::BoxStream<'static, AgentKey>,
    wait: std::time::Duration,
) -> Option<AgentKey> {
    use futures::StreamExt;
    tokio::time::timeout(wait, wakes.next())
        .await
        .ok()
        .flatten()
}

fn ids(events: &[InboxEvent]) -> Vec<&str> {
    events.iter().map(|e| e.id.as_str()).collect()
}

async fn wake_signals_reach_the_listeners_in_scope(store: &dyn Store) {
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
    assert_eq!(next_wake(&mut all, long).await, Some(bob.clone()));
    assert_eq!(next_wake(&mut all, long).await, Some(alice.clone()));
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

async fn wake_signals_reach_subscribers(store: &dyn Store) {
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

async fn observation_reads_every_agent_at_once(store: &dyn Store) {
    let busy = AgentKey::new("fam", "busy");
    let idle = AgentKey::new("fam", "idle");
    let never = AgentKey::new("other", "never-seen");
    let lease = store
        .acquire_lease(&busy, "w1", TTL)
        .await
        .unwrap()
        .unwrap();
    store.push_event(&busy, &event("e1", "one")).await.unwrap();
    assert_eq!(
        store.wait_inbox(&busy, &lease, SHORT).await.unwrap().len(),
        1
    );
    store.push_event(&busy, &event("e2", "two")).await.unwrap();
    store.push_event(&busy, &urgent("u1", "now")).await.unwrap();
    let idle_lease = store
        .acquire_lease(&idle, "w2", TTL)
        .await
        .unwrap()
        .unwrap();
    store.push_event(&idle, &event("e3", "x")).await.unwrap();
    store.wait_inbox(&idle, &idle_lease, SHORT).await.unwrap();
    let cp = store
        .commit_cycle(&idle, &idle_lease, &commit(&["m1", "m2"], None, 10))
        .await
        .unwrap();
    store.release_lease(&idle, &idle_lease).await.unwrap();

    let seen = store
        .observe(&[busy.clone(), idle.clone(), never.clone()])
        .await
        .unwrap();
    assert_eq!(seen.len(), 3);
    let b = &seen[0];
    assert_eq!(
        (b.waiting, b.in_flight, b.thinking, b.worker),
        (2, 1, true, true)
    );
    assert!(b.busy());
    let i = &seen[1];
    assert_eq!(
        (i.waiting, i.in_flight, i.thinking, i.worker),
        (0, 0, false, false)
    );
    assert!(!i.busy());
    assert_eq!(i.cycles, 1);
    assert_eq!(i.checkpoint.as_ref(), Some(&cp));
    assert!(i.last_cycle_ms.is_some());
    assert_eq!(seen[2], AgentObservation::default());
    assert!(store.observe(&[]).await.unwrap().is_empty());
    // The pool's light read says the same of the work.
    let work = store
        .observe_work(&[busy.clone(), idle.clone(), never.clone()])
        .await
        .unwrap();
    assert_eq!(
        work,
        seen.iter().map(AgentObservation::work).collect::<Vec<_>>()
    );
    assert!(store.observe_work(&[]).await.unwrap().is_empty());
    // Who took the lease last, kept after it was given up.
    assert_eq!(i.host.as_deref(), Some(idle_lease.holder.as_str()));
    assert_eq!(seen[0].host.as_deref(), Some("w1"));
    assert_eq!(seen[2].host, None);
    // A fleet larger than one read: every agent, in order.
    let mut many: Vec<AgentKey> = (0..2_500)
        .map(|i| AgentKey::new(idle.namespace.clone(), format!("nobody-{i}")))
        .collect();
    many[1_700] = idle.clone();
    let seen = store.observe(&many).await.unwrap();
    assert_eq!(seen.len(), 2_500);
    assert_eq!((seen[1_699].cycles, seen[1_700].cycles), (0, 1));
    assert_eq!(store.observe_work(&many).await.unwrap().len(), 2_500);
}

fn plan(name: &str) -> crate::crd::PlanSpec {
    serde_yaml::from_str(&format!(
        "{{name: {name}, schedule: '0 6 * * *', instruction: report}}"
    ))
    .unwrap()
}

/// [`plan`] as the agent made it: the note the store keeps.
fn own_plan(name: &str) -> Plan {
    Plan::from(&plan(name))
}

async fn plans_fire_once_per_due_time(store: &dyn Store) {
    let a = AgentKey::new("fam", "planner");
    let p = plan("report");
    let id = crate::plans::plan_id(crate::plans::Source::Spec, "report");
    // First sight: a baseline, nothing pushed.
    assert_eq!(
        store.mark_plan(&a, &id, 1_000, None).await.unwrap(),
        Some(Pushed {
            queued: false,
            woke: false
        })
    );
    assert_eq!(store.inbox_depth(&a).await.unwrap(), 0);
    let due = 2_000;
    let e = crate::plans::event(crate::plans::Source::Spec, &p, due, now_ms());
    let fired = store.mark_plan(&a, &id, due, Some(&e)).await.unwrap();
    assert_eq!(
        fired,
        Some(Pushed {
            queued: true,
            woke: true
        })
    );
    // A second operator (or a restart) firing the same or an earlier due time: nothing.
    assert_eq!(store.mark_plan(&a, &id, due, Some(&e)).await.unwrap(), None);
    assert_eq!(store.mark_plan(&a, &id, 1_500, None).await.unwrap(), None);
    assert_eq!(store.inbox_depth(&a).await.unwrap(), 1);
    assert_eq!(store.plan_marks(&a).await.unwrap().get(&id), Some(&due));
    let seen = store.observe(std::slice::from_ref(&a)).await.unwrap();
    assert_eq!(seen[0].plan_marks.get(&id), Some(&due));
}

async fn agent_plans_are_kept_and_fenced(store: &dyn Store) {
    let a = AgentKey::new("fam", "planner");
    let lease = store.acquire_lease(&a, "w1", TTL).await.unwrap().unwrap();
    store
        .set_plans(&a, &lease, &[own_plan("report"), own_plan("standup")])
        .await
        .unwrap();
    let mut changed = own_plan("report");
    changed.instruction = "the longer report".into();
    store
        .set_plans(&a, &lease, &[changed.clone()])
        .await
        .unwrap();
    assert_eq!(
        store.plans(&a).await.unwrap(),
        vec![changed.clone(), own_plan("standup")]
    );
    assert_eq!(
        store
            .cancel_plans(&a, &lease, &["standup".into(), "nope".into()])
            .await
            .unwrap(),
        1
    );
    assert_eq!(store.plans(&a).await.unwrap(), vec![changed.clone()]);
    let seen = store.observe(std::slice::from_ref(&a)).await.unwrap();
    assert_eq!(seen[0].plans, vec![changed]);
    store.release_lease(&a, &lease).await.unwrap();
    assert!(matches!(
        store.set_plans(&a, &lease, &[own_plan("x")]).await,
        Err(StoreError::Fenced { .. })
    ));
    assert!(matches!(
        store.cancel_plans(&a, &lease, &["report".into()]).await,
        Err(StoreError::Fenced { .. })
    ));
}

/// A plan note of a format this release does not know (a newer release wrote it during an
/// upgrade) is refused where one agent's plans are read, naming the version, and left out of
/// the operator's observation; the plans beside it still read there.
async fn a_plan_of_a_newer_format_is_refused_and_left_out(store: &dyn Store) {
    let a = AgentKey::new("fam", "planner");
    let lease = store.acquire_lease(&a, "w1", TTL).await.unwrap().unwrap();
    store
        .set_plans(&a, &lease, &[own_plan("report")])
        .await
        .unwrap();
    let newer = r#"{"v":2,"name":"later","every":"6h","instruction":"report"}"#;
    store
        .set_notes(
            &a,
            &lease,
            NoteKind::Plans,
            &[("later".to_string(), newer.to_string())],
        )
        .await
        .unwrap();
    let refused = store.plans(&a).await.unwrap_err().to_string();
    assert!(
        refused.contains("record format v2 is newer than this release reads (v1)"),
        "{refused}"
    );
    let seen = store.observe(std::slice::from_ref(&a)).await.unwrap();
    assert_eq!(seen[0].plans, vec![own_plan("report")]);
}

async fn purging_an_agent_forgets_everything(store: &dyn Store) {
    let a = AgentKey::new("fam", "gone");
    let keep = AgentKey::new("fam", "stays");
    for k in [&a, &keep] {
        store.register_agent(k).await.unwrap();
        let lease = store.acquire_lease(k, "w", TTL).await.unwrap().unwrap();
        store.push_event(k, &event("e1", "x")).await.unwrap();
        store.wait_inbox(k, &lease, SHORT).await.unwrap();
        store
            .commit_cycle(k, &lease, &commit(&["m"], None, 10))
            .await
            .unwrap();
        let memories: Memories = [("k".to_string(), "v".to_string())].into();
        store.set_memories(k, &lease, &memories).await.unwrap();
        let used = crate::model::Usage {
            input: 10,
            ..Default::default()
        };
        store
            .record_tokens(k, &crate::periods::Periods::at(now_ms()), &used)
            .await
            .unwrap();
        store.set_plans(k, &lease, &[own_plan("p")]).await.unwrap();
        store.push_event(k, &event("e2", "waiting")).await.unwrap();
    }
    let call = NewCall::new(&a, "create_ticket", 60_000).unwrap();
    store.register_call(&call).await.unwrap();
    store.purge_agent(&a).await.unwrap();
    assert_eq!(
        store
            .complete_call(
                &call.id,
                Some(&call.token),
                &CallResult::Error("late".into())
            )
            .await
            .unwrap(),
        Completion::Unknown,
        "its calls are forgotten too"
    );
    assert!(!store.agent_registered(&a).await.unwrap());
    assert_eq!(
        store.consciousness(&a).await.unwrap(),
        Consciousness::default()
    );
    assert!(store.checkpoints(&a).await.unwrap().is_empty());
    assert!(store.memories(&a).await.unwrap().is_empty());
    assert!(store.plans(&a).await.unwrap().is_empty());
    assert_eq!(
        store.observe(std::slice::from_ref(&a)).await.unwrap()[0],
        AgentObservation::default()
    );
    // The lease is gone too: a new worker starts afresh.
    assert!(store.acquire_lease(&a, "new", TTL).await.unwrap().is_some());
    // Nothing of the other agent was touched.
    assert!(store.agent_registered(&keep).await.unwrap());
    let other = store.observe(std::slice::from_ref(&keep)).await.unwrap();
    assert_eq!((other[0].waiting, other[0].cycles), (1, 1));
    assert_eq!(store.plans(&keep).await.unwrap().len(), 1);
}

async fn human_calls_take_one_answer_without_a_token(store: &dyn Store) {
    let agent = AgentKey::new("ops", "sre");
    let approval = HumanCall::new(
        &agent,
        "restart_deployment",
        CallKind::Approval,
        "oncall",
        serde_json::json!({"deployment": "api"}),
        None,
        60_000,
    )
    .unwrap();
    store.register_human_call(&approval).await.unwrap();
    let schema = serde_json::json!({"type": "object", "properties": {"ok": {"type": "boolean"}}});
    let mut form = HumanCall::new(
        &agent,
        "confirm_deployment",
        CallKind::Interactive,
        "oncall",
        serde_json::json!({}),
        Some(schema.clone()),
        60_000,
    )
    .unwrap();
    form.record.since_ms += 1;
    store.register_human_call(&form).await.unwrap();
    let service = NewCall::new(&agent, "create_ticket", 60_000).unwrap();
    store.register_call(&service).await.unwrap();

    // What waits for a human, oldest first; the service's call is not among them.
    let waiting = store.human_calls(&agent).await.unwrap();
    assert_eq!(
        waiting.iter().map(|c| &c.id).collect::<Vec<_>>(),
        [&approval.id, &form.id]
    );
    assert_eq!(waiting[0].record, approval.record);
    assert_eq!(waiting[1].record.result_schema, Some(schema));
    let read = store.call(&approval.id).await.unwrap().unwrap();
    assert_eq!((read.record.kind, read.done), (CallKind::Approval, false));
    assert_eq!(read.record.space.as_deref(), Some("oncall"));
    assert_eq!(
        store.call(&CallId::new(&agent).unwrap()).await.unwrap(),
        None
    );

    // A token never answers a human's call, and a service's call takes none without one.
    let approve = CallResult::Decision(Verdict {
        answer: Answer::Approve,
        by: "Dana".into(),
        reason: Some("go ahead".into()),
    });
    assert_eq!(
        store
            .complete_call(&approval.id, Some(&service.token), &approve)
            .await
            .unwrap(),
        Completion::Unauthorized
    );
    assert_eq!(
        store
            .complete_call(&service.id, None, &approve)
            .await
            .unwrap(),
        Completion::Unauthorized
    );
    assert_eq!(store.inbox_depth(&agent).await.unwrap(), 0);

    // The answer: once, as one event in the inbox.
    assert!(matches!(
        store
            .complete_call(&approval.id, None, &approve)
            .await
            .unwrap(),
        Completion::Accepted(_)
    ));
    let deny = CallResult::Decision(Verdict {
        answer: Answer::Deny,
        by: "Sam".into(),
        reason: None,
    });
    assert_eq!(
        store
            .complete_call(&approval.id, None, &deny)
            .await
            .unwrap(),
        Completion::Duplicate
    );
    assert!(store.call(&approval.id).await.unwrap().unwrap().done);
    let waiting = store.human_calls(&agent).await.unwrap();
    assert_eq!(
        waiting.iter().map(|c| &c.id).collect::<Vec<_>>(),
        [&form.id]
    );
    let lease = store
        .acquire_lease(&agent, "w", TTL)
        .await
        .unwrap()
        .unwrap();
    let events = store.wait_inbox(&agent, &lease, SHORT).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(
        events[0].text.as_deref(),
        Some(format!("call {} approved by Dana", approval.id).as_str())
    );
    assert_eq!(
        events[0].data,
        Some(serde_json::json!({
            "callId": approval.id.as_str(),
            "tool": "restart_deployment",
            "decision": "approved",
            "by": "Dana",
            "reason": "go ahead"
        }))
    );

    // Too late: refused, nothing written.
    let late = HumanCall::new(
        &agent,
        "restart_deployment",
        CallKind::Approval,
        "oncall",
        serde_json::json!({}),
        None,
        1,
    )
    .unwrap();
    store.register_human_call(&late).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert_eq!(
        store.complete_call(&late.id, None, &deny).await.unwrap(),
        Completion::Expired
    );
    assert!(
        store
            .human_calls(&agent)
            .await
            .unwrap()
            .iter()
            .any(|c| c.id == late.id),
        "an expired call still waits (for its timeout to be told)"
    );
}

async fn async_calls_take_one_result_with_their_token(store: &dyn Store) {
    use futures::StreamExt;
    let agent = AgentKey::new("fam", "ticketer");
    let other = AgentKey::new("fam", "other");
    let call = NewCall::new(&agent, "create_ticket", 60_000).unwrap();
    store.register_call(&call).await.unwrap();
    let result = CallResult::Result(serde_json::json!({"ticket": "T-1", "tags": []}));
    // Refusals write nothing.
    let unknown = CallId::new(&agent).unwrap();
    assert_eq!(
        store
            .complete_call(&unknown, Some(&call.token), &result)
            .await
            .unwrap(),
        Completion::Unknown
    );
    let elsewhere = CallId::parse(&call.id.as_str().replace("ticketer", "other")).unwrap();
    assert_eq!(
        store
            .complete_call(&elsewhere, Some(&call.token), &result)
            .await
            .unwrap(),
        Completion::Unknown,
        "an id names its agent"
    );
    assert_eq!(
        store
            .complete_call(&call.id, Some("not-the-token"), &result)
            .await
            .unwrap(),
        Completion::Unauthorized
    );
    assert_eq!(store.inbox_depth(&agent).await.unwrap(), 0);
    assert_eq!(store.inbox_depth(&other).await.unwrap(), 0);
    // The result: one event, and the agent (no worker holds it) is woken.
    store.register_agent(&agent).await.unwrap();
    let mut wakes = store.subscribe_wakes(&WakeScope::All).await.unwrap();
    let Completion::Accepted(pushed) = store
        .complete_call(&call.id, Some(&call.token), &result)
        .await
        .unwrap()
    else {
        panic!("not accepted")
    };
    assert!(pushed.queued && pushed.woke, "{pushed:?}");
    let woken = tokio::time::timeout(std::time::Duration::from_secs(5), wakes.next())
        .await
        .unwrap();
    assert_eq!(woken, Some(agent.clone()));
    // Once only; the token still comes first.
    assert_eq!(
        store
            .complete_call(&call.id, Some(&call.token), &result)
            .await
            .unwrap(),
        Completion::Duplicate
    );
    assert_eq!(
        store
            .complete_call(&call.id, Some("not-the-token"), &result)
            .await
            .unwrap(),
        Completion::Unauthorized
    );
    let lease = store
        .acquire_lease(&agent, "w", TTL)
        .await
        .unwrap()
        .unwrap();
    let events = store.wait_inbox(&agent, &lease, SHORT).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].id, format!("toolresult:{}", call.id));
    assert_eq!(events[0].kind, EventKind::ToolResult);
    assert_eq!(
        events[0].data,
        Some(
            serde_json::json!({"callId": call.id.as_str(), "tool": "create_ticket", "result": {"ticket": "T-1", "tags": []}})
        )
    );

    // Late: refused as expired, and nothing is written.
    let late = NewCall::new(&agent, "create_ticket", 1).unwrap();
    store.register_call(&late).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert_eq!(
        store
            .complete_call(
                &late.id,
                Some(&late.token),
                &CallResult::Error("too slow".into())
            )
            .await
            .unwrap(),
        Completion::Expired
    );
    // A call whose start failed takes no result.
    let failed = NewCall::new(&agent, "create_ticket", 60_000).unwrap();
    store.register_call(&failed).await.unwrap();
    store.forget_call(&failed.id).await.unwrap();
    assert_eq!(
        store
            .complete_call(&failed.id, Some(&failed.token), &result)
            .await
            .unwrap(),
        Completion::Unknown
    );
    // Forgotten a while after expiry: unknown, and removed by the next registration.
    let mut gone = NewCall::new(&agent, "create_ticket", 0).unwrap();
    gone.record.expires_ms -= FORGET_AFTER_MS + 1;
    store.register_call(&gone).await.unwrap();
    assert_eq!(
        store
            .complete_call(&gone.id, Some(&gone.token), &result)
            .await
            .unwrap(),
        Completion::Unknown
    );
    store
        .register_call(&NewCall::new(&agent, "create_ticket", 60_000).unwrap())
        .await
        .unwrap();
    assert_eq!(
        store
            .complete_call(&gone.id, Some(&gone.token), &result)
            .await
            .unwrap(),
        Completion::Unknown
    );
    assert_eq!(
        store.inbox_depth(&agent).await.unwrap(),
        0,
        "refusals wrote nothing"
    );
    assert_eq!(store.inflight(&agent).await.unwrap(), 1);
}

/// Breaks one agent's inbox, so that pushes into it fail for good, and mends it: a fan-out
/// interrupted half-way.
#[async_trait::async_trait]
trait Faults: Send + Sync {
    /// Pushes into `agent`'s inbox fail (`true`) or work again (`false`).
    async fn break_inbox(&self, agent: &AgentKey, broken: bool);
}

#[async_trait::async_trait]
impl Faults for MemoryStore {
    async fn break_inbox(&self, agent: &AgentKey, broken: bool) {
        self.fail_pushes(agent, if broken { u32::MAX } else { 0 }, false);
    }
}

/// Breaks an agent's inbox on Redis: its dedupe set becomes a string, so `push.lua` fails
/// (WRONGTYPE) at its first command, before writing anything.
struct RedisFaults(String);

/// Faults on a real Redis Cluster, through a cluster client (the key's node answers).
struct ClusterFaults(String);

/// What both write to break an agent's inbox (its dedupe set replaced by a string), or to
/// mend it.
fn inbox_fault(agent: &AgentKey, broken: bool) -> ::redis::Cmd {
    let ids = format!("agentfleet:{{agent:{agent}}}:ids");
    if broken {
        ::redis::Cmd::set(ids, "broken")
    } else {
        ::redis::Cmd::del(ids)
    }
}

#[async_trait::async_trait]
impl Faults for RedisFaults {
    async fn break_inbox(&self, agent: &AgentKey, broken: bool) {
        let client = ::redis::Client::open(self.0.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        inbox_fault(agent, broken)
            .query_async::<()>(&mut conn)
            .await
            .unwrap();
    }
}

#[async_trait::async_trait]
impl Faults for ClusterFaults {
    async fn break_inbox(&self, agent: &AgentKey, broken: bool) {
        let client = ::redis::cluster::ClusterClient::new(vec![self.0.as_str()]).unwrap();
        let mut conn = client.get_async_connection().await.unwrap();
        inbox_fault(agent, broken)
            .query_async::<()>(&mut conn)
            .await
            .unwrap();
    }
}

async fn an_interrupted_fan_out_is_completed_by_its_retry(store: &dyn Store, faults: &dyn Faults) {
    let family = family_space(store, 100).await;
    let alice = AgentKey::new("fam", "alice");
    let bob = AgentKey::new("fam", "bob");
    let mut m = say(human("husam"), "Dinner at 8?");
    m.idempotency_key = Some("dinner".into());
    faults.break_inbox(&bob, true).await;
    let err = store.post_message(&family, &m).await.unwrap_err();
    assert_eq!(err.category(), "store_unavailable", "{err}");
    // The post's own step is done: the message is in the log and alice has it; bob has not.
    let log = recent(store, &family).await;
    assert_eq!(log.len(), 1);
    assert_eq!(store.inbox_depth(&alice).await.unwrap(), 1);
    assert_eq!(store.inbox_depth(&bob).await.unwrap(), 0);
    // A retry while bob's inbox is still broken fails again, and gives alice nothing twice.
    assert!(store.post_message(&family, &m).await.is_err());
    assert_eq!(store.inbox_depth(&alice).await.unwrap(), 1);

    faults.break_inbox(&bob, false).await;
    let retried = store.post_message(&family, &m).await.unwrap();
    assert!(retried.duplicate);
    assert_eq!(retried.id, log[0].id);
    assert_eq!(
        retried.delivered,
        ["bob"],
        "only the agent the fan-out missed"
    );
    let events = store.peek_inbox(&bob, 10).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].id, format!("msg:family:{}", log[0].id));
    assert_eq!(events[0].text.as_deref(), Some("Dinner at 8?"));
    assert_eq!(store.inbox_depth(&alice).await.unwrap(), 1);
    // The fan-out is finished: one more retry delivers nothing, and the log has one message.
    let again = store.post_message(&family, &m).await.unwrap();
    assert!(again.duplicate);
    assert!(again.delivered.is_empty());
    assert_eq!(recent(store, &family).await.len(), 1);
    assert_eq!(store.inbox_depth(&bob).await.unwrap(), 1);

    // Without a key nothing can find the post again: it stays posted, and the error says the
    // delivery failed.
    faults.break_inbox(&bob, true).await;
    assert!(store
        .post_message(&family, &say(human("husam"), "no key"))
        .await
        .is_err());
    assert_eq!(recent(store, &family).await.len(), 2);
    assert_eq!(store.inbox_depth(&alice).await.unwrap(), 2);
    assert_eq!(store.inbox_depth(&bob).await.unwrap(), 1);
}

/// A `redis-server` in cluster mode, alone in its cluster and owning every slot: any command,
/// transaction or script whose keys span two slots fails there with `CROSSSLOT`, as on a real
/// Redis Cluster. The whole suite runs on one too.
struct ClusterNode {
    child: std::process::Child,
    port: u16,
    dir: std::path::PathBuf,
}

impl ClusterNode {
    fn start() -> Self {
        let dir = std::env::temp_dir().join(format!(
            "agentfleet-cluster-{}-{}",
            std::process::id(),
            crate::testing::free_port().unwrap()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let (child, [port, _]) = crate::testing::spawn_on_free_ports(
            "cluster node",
            |[port, bus]| {
                std::process::Command::new("redis-server")
                    .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                    .args(["--save", "", "--appendonly", "no"])
                    .args([
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                    ])
                    // The bus on a free port (by default the port + 10000, which another
                    // test may have been given).
                    .args(["--cluster-port", &bus.to_string()])
                    .arg("--dir")
                    .arg(&dir)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .map_err(|e| {
                        format!("redis-server (Debian: apt-get install -y redis-server): {e}")
                    })
            },
            crate::testing::listening,
        )
        .unwrap();
        let node = Self { child, port, dir };
        let client = ::redis::Client::open(node.url()).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut conn = loop {
            match client.get_connection() {
                Ok(c) => break c,
                Err(e) if std::time::Instant::now() > deadline => panic!("cluster node: {e}"),
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
            }
        };
        ::redis::cmd("CLUSTER")
            .arg(&["ADDSLOTSRANGE", "0", "16383"][..])
            .query::<()>(&mut conn)
            .unwrap();
        while !::redis::cmd("CLUSTER")
            .arg("INFO")
            .query::<String>(&mut conn)
            .unwrap()
            .contains("cluster_state:ok")
        {
            assert!(
                std::time::Instant::now() < deadline,
                "cluster state never ok"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        node
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Forgets every key.
    fn flush(&self) {
        let client = ::redis::Client::open(self.url()).unwrap();
        let mut conn = client.get_connection().unwrap();
        ::redis::cmd("FLUSHALL").query::<()>(&mut conn).unwrap();
    }
}

impl Drop for ClusterNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn tokens_are_counted_by_direction_and_period(store: &dyn Store) {
    use crate::model::Usage;
    use crate::periods::{Periods, Spent};
    let a = AgentKey::new("fam", "spender");
    assert_eq!(
        observed(store, &a).await.tokens,
        None,
        "nothing before a call"
    );
    let day1 = Periods::at(1_795_400_000_000);
    let call = Usage {
        input: 1000,
        output: 40,
        cache_read: 700,
        cache_write: 200,
    };
    store.record_tokens(&a, &day1, &call).await.unwrap();
    let t = store.record_tokens(&a, &day1, &call).await.unwrap();
    assert_eq!(
        (t.input, t.cache_read, t.cache_write, t.output),
        (200, 1400, 400, 80)
    );
    assert_eq!(
        t.spent(&day1),
        Spent {
            day: 2080,
            month: 2080
        }
    );
    assert_eq!(observed(store, &a).await.tokens, Some(t.clone()));
    // The next UTC day starts from 0; the month and the totals go on.
    let day2 = Periods::at(1_795_400_000_000 + 86_400_000);
    let read = store
        .record_tokens(&a, &day2, &Usage::default())
        .await
        .unwrap();
    assert_eq!(
        read.spent(&day2),
        Spent {
            day: 0,
            month: 2080
        }
    );
    let t = store.record_tokens(&a, &day2, &call).await.unwrap();
    assert_eq!(
        t.spent(&day2),
        Spent {
            day: 1040,
            month: 3120
        }
    );
    assert_eq!(t.input, 300);
    // A month later both start again.
    let next_month = Periods::at(1_795_400_000_000 + 31 * 86_400_000);
    let t = store.record_tokens(&a, &next_month, &call).await.unwrap();
    assert_eq!(
        t.spent(&next_month),
        Spent {
            day: 1040,
            month: 1040
        }
    );
    assert_eq!(t.output, 160);
}

macro_rules! suite {
    ($($name:ident),* $(,)?; faults: $($faulty:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(&super::MemoryStore::new()).await;
                }
            )*
            $(
                #[tokio::test]
                async fn $faulty() {
                    let store = super::MemoryStore::new();
                    super::$faulty(&store, &store).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test]
                async fn $name() {
                    let server = super::RedisServer::start().unwrap();
                    let store = super::RedisStore::new(&server.url()).unwrap();
                    super::$name(&store).await;
                }
            )*
            $(
                #[tokio::test]
                async fn $faulty() {
                    let server = super::RedisServer::start().unwrap();
                    let store = super::RedisStore::new(&server.url()).unwrap();
                    super::$faulty(&store, &super::RedisFaults(server.url())).await;
                }
            )*
        }
        /// Every behaviour again on a real Redis Cluster (three primaries, three replicas),
        /// the store given one node's URL: it finds the cluster and follows its slot map.
        #[tokio::test]
        async fn real_cluster_runs_every_behaviour() {
            let cluster = crate::testing::RedisCluster::start().unwrap();
            $(
                cluster.flush();
                eprintln!("on a real cluster: {}", stringify!($name));
                $name(&RedisStore::new(&cluster.url()).unwrap()).await;
            )*
            $(
                cluster.flush();
                eprintln!("on a real cluster: {}", stringify!($faulty));
                $faulty(
                    &RedisStore::new(&cluster.url()).unwrap(),
                    &ClusterFaults(cluster.url()),
                )
                .await;
            )*
            // Given as a list of seed nodes, too.
            cluster.flush();
            observation_reads_every_agent_at_once(&RedisStore::new(&cluster.seeds()).unwrap())
                .await;
        }
        /// Every behaviour again on Redis secured as an SRE runs it: TLS alone (a private CA
        /// given as PEM), the `default` user off, and an ACL user limited to `agentfleet:`
        /// keys and channels with no dangerous command but `INFO`; then on a real cluster so
        /// secured (TLS on the bus and replication too), given one node's URL, with writes
        /// waiting for a replica (`WAIT`).
        #[tokio::test]
        async fn secured_redis_and_cluster_run_every_behaviour() {
            let secured = crate::testing::Secured::new().unwrap();
            let server = crate::testing::SecureRedis::start(&secured).unwrap();
            let options = RedisOptions { ca: Some(secured.ca_pem()), wait: None };
            $(
                server.flush(&secured);
                eprintln!("on secured Redis: {}", stringify!($name));
                $name(&RedisStore::with_options(&secured.url(server.port()), &options).unwrap()).await;
            )*
            let cluster = crate::testing::RedisCluster::start_secured().unwrap();
            // Writes wait for their replica here, too.
            let options = RedisOptions {
                ca: cluster.ca_pem(),
                wait: Some(crate::store::WaitReplicas {
                    replicas: 1,
                    timeout: std::time::Duration::from_secs(2),
                }),
            };
            $(
                cluster.flush();
                eprintln!("on a secured cluster: {}", stringify!($name));
                $name(&RedisStore::with_options(&cluster.url(), &options).unwrap()).await;
            )*
        }
        /// Every behaviour again on a Redis Cluster node: each step on one slot. One node for
        /// all (a node takes two seconds to accept writes), emptied before each behaviour.
        #[tokio::test]
        async fn cluster_runs_every_behaviour() {
            let node = ClusterNode::start();
            $(
                node.flush();
                eprintln!("on a cluster node: {}", stringify!($name));
                $name(&RedisStore::new(&node.url()).unwrap()).await;
            )*
            $(
                node.flush();
                eprintln!("on a cluster node: {}", stringify!($faulty));
                $faulty(
                    &RedisStore::new(&node.url()).unwrap(),
                    &RedisFaults(node.url()),
                )
                .await;
            )*
        }
    };
}

suite!(
    membership_is_applied_idempotently,
    ping_answers,
    agents_are_registered,
    inbox_drains_whole_batches_in_order_and_drops_duplicates,
    unacknowledged_events_come_back_to_the_next_worker,
    one_worker_holds_the_lease,
    wake_is_signalled_only_without_a_worker,
    urgent_events_wait_in_their_own_queue_while_thinking,
    posting_delivers_to_every_other_member_agent,
    a_retried_post_never_duplicates,
    idempotency_keys_belong_to_their_sender,
    the_loop_guard_stops_agents_waking_each_other,
    notices_are_logged_once_and_wake_no_agent,
    reading_pages_newest_first_or_since_an_id,
    live_events_reach_subscribers,
    urgent_posts_become_urgent_events,
    cycles_commit_with_checkpoints_and_acknowledge,
    the_journal_lasts_until_its_cycle_ends,
    compaction_keeps_a_summary_and_checkpoints_restore,
    only_the_last_checkpoints_are_kept,
    commits_are_fenced_and_validated,
    memories_and_goals_are_kept,
    one_look_between_steps,
    wake_signals_reach_subscribers,
    wake_signals_reach_the_listeners_in_scope,
    observation_reads_every_agent_at_once,
    plans_fire_once_per_due_time,
    agent_plans_are_kept_and_fenced,
    a_plan_of_a_newer_format_is_refused_and_left_out,
    purging_an_agent_forgets_everything,
    tokens_are_counted_by_direction_and_period,
    async_calls_take_one_result_with_their_token,
    human_calls_take_one_answer_without_a_token,
    a_paused_cycle_waits_for_its_answer,
    a_snapshot_replaces_the_consciousness_between_cycles;
    faults: an_interrupted_fan_out_is_completed_by_its_retry,
);

#[tokio::test]
async fn memory_sleeping_worker_wakes_on_push() {
    a_sleeping_worker_wakes_on_push(std::sync::Arc::new(MemoryStore::new())).await;
}

#[tokio::test]
async fn redis_sleeping_worker_wakes_on_push() {
    let server = RedisServer::start().unwrap();
    a_sleeping_worker_wakes_on_push(std::sync::Arc::new(RedisStore::new(&server.url()).unwrap()))
        .await;
}

#[tokio::test]
async fn redis_members_set_tracks_agents_for_fan_out() {
    use ::redis::AsyncCommands;
    let server = RedisServer::start().unwrap();
    let store = RedisStore::new(&server.url()).unwrap();
    let s = SpaceKey::new("ns", "eng");
    store
        .apply_space(
            &s,
            &record(vec![
                member(MemberKind::Agent, "a"),
                member(MemberKind::Agent, "b"),
                member(MemberKind::Human, "h"),
            ]),
        )
        .await
        .unwrap();
    let client = ::redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut agents: Vec<String> = conn
        .smembers("agentfleet:{space:ns/eng}:agents")
        .await
        .unwrap();
    agents.sort();
    assert_eq!(agents, vec!["a", "b"]);
    store
        .apply_space(&s, &record(vec![member(MemberKind::Agent, "b")]))
        .await
        .unwrap();
    let agents: Vec<String> = conn
        .smembers("agentfleet:{space:ns/eng}:agents")
        .await
        .unwrap();
    assert_eq!(agents, vec!["b"]);
}

#[tokio::test]
async fn redis_down_is_an_error_not_a_hang() {
    let port = crate::testing::free_port().unwrap();
    let store = RedisStore::new(&format!("redis://127.0.0.1:{port}/")).unwrap();
    let started = std::time::Instant::now();
    let err = store.ping().await.unwrap_err();
    assert_eq!(err.category(), "store_unavailable", "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}

#[tokio::test]
async fn redis_commit_recovers_from_a_stale_cached_window() {
    let server = RedisServer::start().unwrap();
    let a_store = RedisStore::new(&server.url()).unwrap();
    let b_store = RedisStore::new(&server.url()).unwrap();
    let a = AgentKey::new("fam", "assistant");
    let short = std::time::Duration::from_millis(100);
    let first = a_store
        .acquire_lease(&a, "process-a", short)
        .await
        .unwrap()
        .unwrap();
    a_store
        .commit_cycle(&a, &first, &commit(&["a1"], None, 10))
        .await
        .unwrap();
    // Another process takes over for a while and commits.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let other = b_store
        .acquire_lease(&a, "process-b", TTL)
        .await
        .unwrap()
        .unwrap();
    b_store
        .commit_cycle(&a, &other, &commit(&["b2", "b2'"], None, 10))
        .await
        .unwrap();
    b_store.release_lease(&a, &other).await.unwrap();
    // The first process comes back: its remembered window is stale, the commit still lands right.
    let again = a_store
        .acquire_lease(&a, "process-a", TTL)
        .await
        .unwrap()
        .unwrap();
    let cp = a_store
        .commit_cycle(&a, &again, &commit(&["a3"], None, 10))
        .await
        .unwrap();
    assert_eq!((cp.cycle, cp.start, cp.end), (3, 0, 4));
    let c = a_store.consciousness(&a).await.unwrap();
    assert_eq!(c.messages.len(), 4);
    assert!(c.messages[3].contains("a3"));
    assert_eq!(
        a_store
            .checkpoints(&a)
            .await
            .unwrap()
            .iter()
            .map(|c| c.cycle)
            .collect::<Vec<_>>(),
        [3, 2, 1]
    );
}

#[tokio::test]
async fn memory_fan_out_retries_a_push_that_failed_for_a_passing_reason() {
    let store = MemoryStore::new();
    let family = family_space(&store, 100).await;
    let bob = AgentKey::new("fam", "bob");
    store.fail_pushes(&bob, 2, true);
    let posted = store
        .post_message(&family, &say(human("husam"), "hello"))
        .await
        .unwrap();
    assert_eq!(posted.delivered, ["alice", "bob"], "bob's third try landed");
    assert_eq!(store.inbox_depth(&bob).await.unwrap(), 1);
    // A failure that outlasts the tries is the post's error.
    store.fail_pushes(&bob, 3, true);
    let err = store
        .post_message(&family, &say(human("husam"), "again"))
        .await
        .unwrap_err();
    assert_eq!(err.category(), "store_timeout", "{err}");
}

#[tokio::test]
async fn cluster_node_refuses_a_step_across_slots() {
    let node = ClusterNode::start();
    let client = ::redis::Client::open(node.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let err = ::redis::Script::new("return 1")
        .key("agentfleet:{space:fam/family}:log")
        .key("agentfleet:{agent:fam/alice}:inbox")
        .invoke_async::<u8>(&mut conn)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("CROSSSLOT"), "{err}");
}

/// On a real Redis Cluster, live events and wake signals are sharded: each goes to the node of
/// its space's or agent's slot (no classic `PUBLISH` broadcast over the cluster bus), and the
/// subscriptions follow a failover of that node, then a resharding that moves the slots,
/// without being made again.
#[tokio::test]
async fn cluster_pub_sub_stays_on_its_node_and_follows_failover_and_resharding() {
    use futures::StreamExt;
    let five = std::time::Duration::from_secs(5);
    let mut cluster = crate::testing::RedisCluster::start().unwrap();
    let store = RedisStore::new(&cluster.url()).unwrap();
    let family = family_space(&store, 100).await;
    let agents = [AgentKey::new("fam", "alice"), AgentKey::new("fam", "bob")];
    store.register_agent(&agents[0]).await.unwrap();
    let mut wakes = store.subscribe_wakes(&WakeScope::All).await.unwrap();
    store.register_agent(&agents[1]).await.unwrap();
    let mut live = store.subscribe_live(&family).await.unwrap();
    let before = cluster.broadcast_publishes();

    let mut post_and_hear = async |text: &str| {
        // Right after a failover the first attempts may meet the cluster still electing.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        let posted = loop {
            match store
                .post_message(&family, &say(human("husam"), text))
                .await
            {
                Ok(p) => break p,
                Err(e) if std::time::Instant::now() < deadline => {
                    eprintln!("post while the cluster recovers: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
                Err(e) => panic!("{e}"),
            }
        };
        let heard = tokio::time::timeout(five, live.next()).await;
        let Ok(Some(LiveEvent::Message { message })) = heard else {
            panic!("no live event for {text}: {heard:?}")
        };
        assert_eq!(message.id, posted.id);
        let mut woken = Vec::new();
        for _ in &agents {
            woken.push(
                tokio::time::timeout(five, wakes.next())
                    .await
                    .unwrap()
                    .unwrap(),
            );
        }
        woken.sort();
        assert_eq!(woken, agents);
        for a in &agents {
            let lease = store.acquire_lease(a, "w", TTL).await.unwrap().unwrap();
            assert_eq!(store.wait_inbox(a, &lease, SHORT).await.unwrap().len(), 1);
            store.ack_cycle(a, &lease).await.unwrap();
            store.release_lease(a, &lease).await.unwrap();
        }
    };
    post_and_hear("before").await;
    assert_eq!(
        cluster.broadcast_publishes(),
        before,
        "a live event or wake signal was broadcast to every node"
    );

    // The node serving the space's slot dies; its replica takes over.
    let key = "agentfleet:{space:fam/family}:live";
    let owner = cluster.owner(key).unwrap();

    cluster.kill(owner);
    cluster.failed_over(owner, key).unwrap();
    post_and_hear("after the failover").await;

    // A resharding moves the space's slot and alice's, with their keys, to another primary.
    for k in [key, "agentfleet:{agent:fam/alice}:inbox"] {
        let from = cluster.owner(k).unwrap();
        let to = cluster
            .primaries()
            .into_iter()
            .find(|&p| p != from)
            .unwrap();
        cluster.move_slot(k, to).unwrap();
        assert_eq!(cluster.owner(k), Some(to));
    }
    post_and_hear("after a resharding").await;
    assert_eq!(cluster.broadcast_publishes(), before);
}

/// Secured Redis refuses a wrong password and an untrusted certificate with one clear error,
/// which never carries the password.
#[tokio::test]
async fn secured_redis_refuses_clearly() {
    use crate::testing::secure::PASSWORD;
    let secured = crate::testing::Secured::new().unwrap();
    let server = crate::testing::SecureRedis::start(&secured).unwrap();
    let trusted = RedisOptions {
        ca: Some(secured.ca_pem()),
        wait: None,
    };
    let good = secured.url(server.port());
    RedisStore::with_options(&good, &trusted)
        .unwrap()
        .ping()
        .await
        .unwrap();

    let wrong = good.replace(PASSWORD, "not-the-pass");
    let e = RedisStore::with_options(&wrong, &trusted)
        .unwrap()
        .ping()
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("authentication failed"), "{e}");
    assert!(!e.contains("not-the-pass"), "{e}");

    // Without the CA, the system's roots do not trust the test CA.
    let e = RedisStore::new(&good)
        .unwrap()
        .ping()
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("certificate"), "{e}");
    assert!(!e.contains(PASSWORD), "{e}");
}

/// What a failover of a primary whose replica lags costs in acknowledged writes, on a real
/// cluster: without `WAIT`, the posts and commits acknowledged while the replica lagged are
/// lost when it takes over; with writes waiting for their replica, no acknowledged post is
/// (those not replicated in time fail, and their retry with the same key lands once the
/// replica has taken over), and each commit not replicated in time is logged.
///
/// The replica is made to lag by cutting it off its primary (a broken link), so that the loss
/// is not left to a race: on one machine replication takes well under a millisecond.
#[tokio::test]
async fn a_failover_loses_acknowledged_writes_unless_they_wait_for_replicas() {
    let mut lost_posts = Vec::new();
    for wait in [
        None,
        Some(crate::store::WaitReplicas {
            replicas: 1,
            timeout: std::time::Duration::from_millis(300),
        }),
    ] {
        let mut cluster = crate::testing::RedisCluster::start().unwrap();
        let store =
            RedisStore::with_options(&cluster.url(), &RedisOptions { ca: None, wait }).unwrap();
        let family = family_space(&store, 1000).await;
        let space_key = "agentfleet:{space:fam/family}:log";
        let primary = cluster.owner(space_key).unwrap();
        let replica = cluster.replica_of(primary).unwrap();
        // An agent on the same primary, member of the space.
        let agent = (0..)
            .map(|i| AgentKey::new("fam", format!("a{i}")))
            .find(|a| cluster.owner(&format!("agentfleet:{{agent:{a}}}:inbox")) == Some(primary))
            .unwrap();
        let record = SpaceRecord {
            v: V1,
            display_name: "Family".into(),
            members: vec![
                member(MemberKind::Agent, &agent.name),
                member(MemberKind::Human, "husam"),
            ],
            max_messages: 1000,
            loop_guard: Default::default(),
        };
        store.apply_space(&family, &record).await.unwrap();

        let keyed = |n: usize| NewMessage {
            idempotency_key: Some(format!("k{n}")),
            ..say(human("husam"), &format!("m{n}"))
        };
        let mut acked = Vec::new();
        let mut failed = Vec::new();
        let mut commits = 0u64;
        let cycle = async |store: &RedisStore| -> Result<(), StoreError> {
            let lease = store.acquire_lease(&agent, "w", TTL).await?.unwrap();
            store.wait_inbox(&agent, &lease, SHORT).await?;
            store
                .commit_cycle(&agent, &lease, &commit(&["c"], None, 3))
                .await?;
            store.ack_cycle(&agent, &lease).await?;
            store.release_lease(&agent, &lease).await
        };
        for n in 0..5 {
            store.post_message(&family, &keyed(n)).await.unwrap();
            acked.push(n);
            cycle(&store).await.unwrap();
            commits += 1;
        }
        // The replica is cut off its primary; writes go on.
        cluster.cut_off(replica);
        for n in 5..10 {
            match store.post_message(&family, &keyed(n)).await {
                Ok(_) => acked.push(n),
                Err(e) => {
                    assert!(matches!(e, StoreError::NotReplicated { .. }), "{e}");
                    failed.push(n);
                }
            }
            if cycle(&store).await.is_ok() {
                commits += 1;
            }
        }
        // The primary dies; the replica takes over with what it had. The dead node is started
        // again (as Kubernetes would) and comes back as the new primary's replica.
        cluster.kill(primary);
        cluster.reconnect(replica);
        let took = cluster.failed_over(primary, space_key).unwrap();
        cluster.restart(primary).unwrap();
        // The posts that were not acknowledged are retried with their keys.
        for &n in &failed {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
            while let Err(e) = store.post_message(&family, &keyed(n)).await {
                assert!(std::time::Instant::now() < deadline, "{e}");
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        }
        // Ten posts at most: `recent` reads them all.
        let log: Vec<String> = recent(&store, &family)
            .await
            .into_iter()
            .map(|m| m.text)
            .collect();
        let lost: Vec<usize> = acked
            .iter()
            .copied()
            .filter(|n| !log.contains(&format!("m{n}")))
            .collect();
        let kept = store.consciousness(&agent).await.unwrap().cycle;
        eprintln!(
            "failover in {took:?}, writes waiting for replicas: {}; acknowledged posts {} (lost {:?}), \
             posts refused then retried {:?}; acknowledged commits {commits}, cycles kept {kept}",
            wait.is_some(),
            acked.len(),
            lost,
            failed
        );
        for n in &failed {
            assert!(
                log.contains(&format!("m{n}")),
                "retried post m{n} is in the log"
            );
        }
        lost_posts.push(lost.len());
    }
    assert!(
        lost_posts[0] > 0,
        "without WAIT the lagging replica lost acknowledged posts"
    );
    assert_eq!(lost_posts[1], 0, "with WAIT no acknowledged post is lost");
}

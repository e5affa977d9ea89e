//! Spaces' logs: posting and its fan-out, retries and idempotency keys, the loop guard,
//! notices, reading pages, live events, urgent posts.

use super::*;

pub(super) async fn posting_delivers_to_every_other_member_agent(store: &dyn Store) {
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

pub(super) async fn a_retried_post_never_duplicates(store: &dyn Store) {
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

pub(super) async fn idempotency_keys_belong_to_their_sender(store: &dyn Store) {
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

pub(super) async fn the_loop_guard_stops_agents_waking_each_other(store: &dyn Store) {
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

pub(super) async fn notices_are_logged_once_and_wake_no_agent(store: &dyn Store) {
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

pub(super) async fn reading_pages_newest_first_or_since_an_id(store: &dyn Store) {
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
                ..Default::default()
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
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(texts(since), ["m4", "m5"], "oldest first after the id");
    let nothing = SpaceKey::new("fam", "empty");
    assert!(recent(store, &nothing).await.is_empty());
}

pub(super) async fn long_messages_are_refused_and_pages_stop_at_their_bytes(store: &dyn Store) {
    let family = family_space(store, 100).await;
    let mut record = store.space(&family).await.unwrap().unwrap();
    record.max_message_bytes = 1000;
    store.apply_space(&family, &record).await.unwrap();
    // One byte over the space's bound: refused before anything is written, for anyone.
    for sender in [human("husam"), agent_sender("alice")] {
        match store
            .post_message(&family, &say(sender, &"x".repeat(1001)))
            .await
        {
            Err(StoreError::TooLarge { bytes, max, .. }) => assert_eq!((bytes, max), (1001, 1000)),
            other => panic!("{other:?}"),
        }
    }
    assert!(recent(store, &family).await.is_empty());
    assert!(store
        .peek_inbox(&AgentKey::new("fam", "bob"), 10)
        .await
        .unwrap()
        .is_empty());
    let mut ids = Vec::new();
    for i in 0..5 {
        let text = format!("{i}{}", "y".repeat(999));
        let message = say(human("husam"), &text);
        ids.push(store.post_message(&family, &message).await.unwrap().id);
    }
    // A page stops before it passes its bytes (one message at least), and says so.
    let read = |before: Option<String>, after: Option<String>, max_bytes: usize| {
        let family = family.clone();
        async move {
            let query = ReadQuery {
                limit: 10,
                before,
                after,
                max_bytes,
            };
            store.read_page(&family, &query).await
        }
    };
    let one = ids[0].len() + 1000 + "husam".len() * 2;
    let page = read(None, None, one * 2 + 1).await.unwrap();
    let firsts = |p: &Page| {
        p.messages
            .iter()
            .map(|m| m.text[..1].to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(firsts(&page), ["4", "3"]);
    assert_eq!(page.next(), Some(ids[3].as_str()));
    let page = read(Some(ids[3].clone()), None, 10).await.unwrap();
    assert_eq!(firsts(&page), ["2"], "one message, however small the bound");
    let page = read(None, Some(ids[1].clone()), one * 3).await.unwrap();
    assert_eq!(firsts(&page), ["2", "3", "4"]);
    assert_eq!(page.next(), None, "the end of the log");
    let page = read(None, None, 0).await.unwrap();
    assert_eq!(page.messages.len(), 5, "0: the store's page bound");
    assert!(!page.more);
}

pub(super) async fn live_events_reach_subscribers(store: &dyn Store) {
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

pub(super) async fn urgent_posts_become_urgent_events(store: &dyn Store) {
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

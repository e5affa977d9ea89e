//! Membership records applied idempotently, registered agents, a ping.

use super::*;

pub(super) async fn membership_is_applied_idempotently(store: &dyn Store) {
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

pub(super) async fn agents_are_registered(store: &dyn Store) {
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

pub(super) async fn agent_facts_are_applied_idempotently(store: &dyn Store) {
    let a = AgentKey::new("fam", "assistant");
    assert_eq!(store.facts(&a).await.unwrap(), None);
    let facts = AgentFacts {
        model_provider: "openai".into(),
        model_name: "gpt-4o-mini".into(),
        tokens_per_day: Some(1000),
        problem: Some("Secret key not found".into()),
        ..AgentFacts::default()
    };
    assert!(store.apply_facts(&a, &facts).await.unwrap());
    assert!(!store.apply_facts(&a, &facts).await.unwrap(), "idempotent");
    assert_eq!(store.facts(&a).await.unwrap().as_ref(), Some(&facts));
    let mended = AgentFacts {
        problem: None,
        ..facts
    };
    assert!(store.apply_facts(&a, &mended).await.unwrap());
    assert_eq!(store.facts(&a).await.unwrap(), Some(mended));
    store.purge_agent(&a).await.unwrap();
    assert_eq!(
        store.facts(&a).await.unwrap(),
        None,
        "forgotten with its data"
    );
}

pub(super) async fn ping_answers(store: &dyn Store) {
    store.ping().await.unwrap();
}

pub(super) async fn conversations_expire_with_everything_in_them(store: &dyn Store) {
    let agent = AgentKey::new("fam", "helper");
    let space = SpaceKey::conversation(&agent, "human", "husam", "ctx-1");
    let theirs = SpaceKey::conversation(&agent, "human", "dana", "ctx-1");
    let r = record(vec![member(MemberKind::Agent, "helper")]);
    let now = now_ms();
    for s in [&space, &theirs] {
        store.apply_space(s, &r).await.unwrap();
    }
    assert_eq!(
        store
            .keep_conversation(&agent, "human:husam", &space, now + 600, None)
            .await
            .unwrap(),
        now + 600
    );
    store
        .keep_conversation(&agent, "human:dana", &theirs, now + 60_000, None)
        .await
        .unwrap();
    // Kept again (after each post), it lasts from its first keep, not longer.
    assert_eq!(
        store
            .keep_conversation(&agent, "human:husam", &space, now + 60_000, None)
            .await
            .unwrap(),
        now + 600
    );
    assert_eq!(
        store.conversations(&agent, "human:husam").await.unwrap(),
        vec![space.clone()]
    );
    // Conversations are not among the spaces of the namespace's index.
    assert!(!store.spaces().await.unwrap().contains(&space));
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    assert_eq!(store.space(&space).await.unwrap(), None, "expired");
    assert!(store
        .conversations(&agent, "human:husam")
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        store.conversations(&agent, "human:dana").await.unwrap(),
        vec![theirs.clone()]
    );
    assert!(store.space(&theirs).await.unwrap().is_some());
    // The same contextId again is a new conversation, lasting from now.
    store.apply_space(&space, &r).await.unwrap();
    let again = now_ms() + 60_000;
    assert_eq!(
        store
            .keep_conversation(&agent, "human:husam", &space, again, None)
            .await
            .unwrap(),
        again
    );
    assert!(store.space(&space).await.unwrap().is_some());
}

//! Scaling by the loop: a wake signal scales up at once, the sweep catches what was missed
//! and scales idle agents down, a Pool is sized by its agents' load, a refused change is
//! tried again.

use super::*;

#[tokio::test]
async fn a_wake_signal_scales_up_at_once_and_only_agents_that_may() {
    // A long sweep: only the wake signal can be what scales.
    let tuning = Tuning {
        sweep: Duration::from_secs(3600),
        ..fast()
    };
    let r = start(Arc::new(MemoryStore::new()), tuning);
    let asleep = AgentKey::new("fam", "asleep");
    let paused = AgentKey::new("fam", "paused");
    let external = AgentKey::new("fam", "external");
    track(&r, &asleep, &spec("spaces: []"), 0);
    track(&r, &paused, &spec("paused: true"), 0);
    track(&r, &external, &spec("scaling: {external: true}"), 0);
    tokio::time::sleep(Duration::from_millis(100)).await;
    for k in [
        &paused,
        &external,
        &AgentKey::new("fam", "unknown"),
        &asleep,
    ] {
        r.store.push_event(k, &ev("e1")).await.unwrap();
    }
    until("the asleep agent scaled up", || {
        r.cluster.replicas() == [(asleep.clone(), 1)]
    })
    .await;
    // A second event while its worker starts: no second change.
    r.store.push_event(&asleep, &ev("e2")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(r.cluster.replicas(), [(asleep.clone(), 1)]);
    until("the ScaledUp event", || {
        r.cluster.calls().iter().any(|c| {
            matches!(c, Call::Event(reason, note) if reason == "ScaledUp" && note.contains("event(s) waiting"))
        })
    })
    .await;
    let wakes = &r.metrics.wakes;
    assert_eq!(wakes.with_label_values(&["scaled"]).get(), 1);
    assert_eq!(wakes.with_label_values(&["held"]).get(), 2);
    assert_eq!(wakes.with_label_values(&["unknown"]).get(), 1);
    assert_eq!(wakes.with_label_values(&["already_up"]).get(), 1);
    assert_eq!(r.metrics.wake_to_scale.get_sample_count(), 1);
    r.stop().await;
}

fn track_pool(r: &Running, min: i32, max: i32) -> PoolKey {
    let key = PoolKey::new("fam", "shared");
    r.scaler.pools.track(
        &key,
        crate::operator::dataplane::pools::PoolTracked {
            object: ObjectReference::default(),
            min,
            max,
            cycles_at_once: 1,
            scale_down: Duration::ZERO,
            replicas: Some(0),
        },
    );
    key
}

#[tokio::test]
async fn a_pooled_agent_wakes_its_pool_and_the_sweep_sizes_it_by_load() {
    let pooled = spec("runtime: {pool: shared}, scaling: {external: true}");
    // Only the wake signal can scale here.
    let r = start(
        Arc::new(MemoryStore::new()),
        Tuning {
            sweep: Duration::from_secs(3600),
            ..fast()
        },
    );
    track_pool(&r, 0, 3);
    let a = AgentKey::new("fam", "a");
    track(&r, &a, &pooled, 0);
    tokio::time::sleep(Duration::from_millis(100)).await;
    r.store.push_event(&a, &ev("e1")).await.unwrap();
    until("the pool started a replica", || {
        r.cluster.pool_replicas() == [1]
    })
    .await;
    r.store.push_event(&a, &ev("e2")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(r.cluster.pool_replicas(), [1], "one wake, one replica");
    assert!(r.cluster.replicas().is_empty(), "no worker of its own");
    r.stop().await;

    // The sweep: a replica per agent with work (one slot each here), at most max; none once
    // every inbox is empty.
    let r = start(Arc::new(MemoryStore::new()), fast());
    let pool = track_pool(&r, 0, 2);
    let keys: Vec<AgentKey> = (0..3)
        .map(|i| AgentKey::new("fam", format!("a{i}")))
        .collect();
    for k in &keys {
        track(&r, k, &pooled, 0);
        r.store.push_event(k, &ev("e1")).await.unwrap();
    }
    until("the pool at its max", || {
        r.cluster.pool_replicas().last() == Some(&2)
    })
    .await;
    assert_eq!(
        r.scaler.pools.load(&pool).map(|l| (l.agents, l.waiting)),
        Some((3, 3))
    );
    for k in &keys {
        r.store.purge_agent(k).await.unwrap();
    }
    until("the pool back at zero", || {
        r.cluster.pool_replicas().last() == Some(&0)
    })
    .await;
    assert!(r.cluster.calls().iter().any(
        |c| matches!(c, Call::Event(reason, note) if reason == "ScaledDown" && note.contains("0 waiting"))
    ));
    // Its Deployment gone (the Pool deleted): forgotten, not retried every sweep.
    r.cluster
        .refuse_scale
        .store(true, std::sync::atomic::Ordering::SeqCst);
    r.store.push_event(&keys[0], &ev("e2")).await.unwrap();
    until("the pool forgotten", || {
        r.scaler.pools.load(&pool).is_none()
    })
    .await;
    r.stop().await;
}

#[tokio::test]
async fn the_sweep_scales_up_missed_wakes_and_down_idle_agents_only() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    // Events that arrived before the operator listened: only the sweep sees them.
    let missed = AgentKey::new("fam", "missed");
    store.push_event(&missed, &ev("e1")).await.unwrap();
    let r = start(store.clone(), fast());
    track(&r, &missed, &spec("scaling: {idleSeconds: 0}"), 0);
    until("the missed agent scaled up", || {
        r.cluster.replicas().contains(&(missed.clone(), 1))
    })
    .await;
    let gauge = |g: &prometheus::IntGaugeVec| g.with_label_values(&["fam", "missed"]).get();
    let thinking = || {
        r.metrics
            .thinking_seconds
            .with_label_values(&["fam", "missed"])
            .get()
    };
    until("the inbox depth in its gauge", || {
        gauge(&r.metrics.inbox_depth) == 1
    })
    .await;

    // A worker takes the event and thinks for a long time: never cut off.
    let lease = store
        .acquire_lease(&missed, "w", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store
            .wait_inbox(&missed, &lease, Duration::from_millis(10))
            .await
            .unwrap()
            .len(),
        1
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        r.cluster.replicas(),
        [(missed.clone(), 1)],
        "in flight: held"
    );
    until("Thinking in the status", || {
        r.cluster
            .statuses(&missed)
            .last()
            .is_some_and(|s| s.phase == Some(AgentPhase::Thinking))
    })
    .await;
    until(
        "thinking for a while, the inbox empty, counted by phase",
        || {
            thinking() > 0.0
                && gauge(&r.metrics.inbox_depth) == 0
                && r.metrics.agents.with_label_values(&["Thinking"]).get() == 1
        },
    )
    .await;

    // The cycle ends; idle (idleSeconds 0) → down.
    store.ack_cycle(&missed, &lease).await.unwrap();
    until("scaled down", || {
        r.cluster.replicas() == [(missed.clone(), 1), (missed.clone(), 0)]
    })
    .await;
    until("no longer thinking", || thinking() == 0.0).await;
    until("the ScaledDown event", || {
        r.cluster.calls().iter().any(|c| {
            matches!(c, Call::Event(reason, note) if reason == "ScaledDown" && note.contains("nothing in flight"))
        })
    })
    .await;
    assert_eq!(
        r.metrics
            .scale_decisions
            .with_label_values(&["up", "sweep"])
            .get(),
        1
    );
    assert_eq!(
        r.metrics
            .scale_decisions
            .with_label_values(&["down", "sweep"])
            .get(),
        1
    );
    r.stop().await;
}

#[tokio::test]
async fn a_refused_scale_is_retried_by_the_next_sweep() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let a = AgentKey::new("fam", "a");
    store.push_event(&a, &ev("e1")).await.unwrap();
    let r = start(store, fast());
    r.cluster
        .refuse_scale
        .store(true, std::sync::atomic::Ordering::SeqCst);
    track(&r, &a, &spec("spaces: []"), 0);
    until("a refused attempt", || {
        r.metrics.scale_errors.with_label_values(&["up"]).get() >= 1
    })
    .await;
    r.cluster
        .refuse_scale
        .store(false, std::sync::atomic::Ordering::SeqCst);
    until("scaled up on a later sweep", || {
        r.cluster.replicas() == [(a.clone(), 1)]
    })
    .await;
    r.stop().await;
}

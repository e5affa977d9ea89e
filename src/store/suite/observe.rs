//! What the operator reads: every agent at once, a purge, tokens by direction and period.

use super::*;

pub(super) async fn observation_reads_every_agent_at_once(store: &dyn Store) {
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

pub(super) async fn purging_an_agent_forgets_everything(store: &dyn Store) {
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
        store.set_tool_specs(k, "[]").await.unwrap();
        store.set_rehearsal_report(k, "r", "{}", 1).await.unwrap();
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
    assert_eq!(store.tool_specs(&a).await.unwrap(), None);
    assert!(store.rehearsal_reports(&a).await.unwrap().is_empty());
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
    assert_eq!(store.rehearsal_reports(&keep).await.unwrap().len(), 1);
}

pub(super) async fn tokens_are_counted_by_direction_and_period(store: &dyn Store) {
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

pub(super) async fn rehearsal_reports_keep_the_newest(store: &dyn Store) {
    let a = AgentKey::new("fam", "assistant");
    let kept = crate::store::REHEARSALS_KEPT;
    for i in 0..kept + 3 {
        let name = format!("r{i}");
        store
            .set_rehearsal_report(&a, &name, &format!("{{\"n\":{i}}}"), 1_000 + i as i64)
            .await
            .unwrap();
    }
    // Written again: the same name, its new report.
    store
        .set_rehearsal_report(&a, "r5", "{\"n\":\"again\"}", 5_000)
        .await
        .unwrap();
    let all = store.rehearsal_reports(&a).await.unwrap();
    assert_eq!(all.len(), kept);
    assert_eq!(all[0], "{\"n\":\"again\"}");
    assert_eq!(all[1], format!("{{\"n\":{}}}", kept + 2));
    for gone in ["r0", "r1", "r2"] {
        assert_eq!(store.rehearsal_report(&a, gone).await.unwrap(), None);
    }
    assert_eq!(
        store.rehearsal_report(&a, "r3").await.unwrap().as_deref(),
        Some("{\"n\":3}")
    );
    assert!(store
        .rehearsal_reports(&AgentKey::new("fam", "nobody"))
        .await
        .unwrap()
        .is_empty());
}

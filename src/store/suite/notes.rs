//! Plans: firing once per due time, the agent's own plans, a plan of a newer format.

use super::*;

pub(super) async fn plans_fire_once_per_due_time(store: &dyn Store) {
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

pub(super) async fn agent_plans_are_kept_and_fenced(store: &dyn Store) {
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
pub(super) async fn a_plan_of_a_newer_format_is_refused_and_left_out(store: &dyn Store) {
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

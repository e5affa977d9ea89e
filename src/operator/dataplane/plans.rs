//! Plans fire from the operator, so an agent scaled to zero still gets its 06:00 plan. Each
//! pass asks [`crate::plans::pending`] which of an agent's plans (its spec's and its own) need
//! something now ([`due`]); [`fire`] pushes a due plan's event, or records a new plan's
//! baseline. The data plane records each due time, so a plan fires once even when two
//! operators look at it.

use tracing::warn;

use crate::crd::PlanSpec;
use crate::identity::AgentKey;
use crate::plans::{self, Due, Source};
use crate::store::{AgentObservation, Store};
use crate::telemetry::OperatorMetrics;

/// A plan of one agent that needs something now.
pub(super) struct Firing {
    agent: AgentKey,
    source: Source,
    plan: PlanSpec,
    due: Due,
}

/// The plans of `agent` (its spec's `plans`, then the ones it made, in `seen`) that need
/// something at `now` (ms), and the earliest due time of the others.
pub(super) fn due(
    agent: &AgentKey,
    plans: &[PlanSpec],
    seen: &AgentObservation,
    now: i64,
) -> (Vec<Firing>, Option<i64>) {
    let (todo, next) = plans::pending(plans, seen, now);
    let firings = todo
        .into_iter()
        .map(|(source, plan, due)| Firing {
            agent: agent.clone(),
            source,
            plan,
            due,
        })
        .collect();
    (firings, next)
}

/// Fires one plan and counts it; a failure is logged, and the next sweep retries.
pub(super) async fn fire(store: &dyn Store, metrics: &OperatorMetrics, firing: Firing) {
    let Firing {
        agent,
        source,
        plan,
        due,
    } = firing;
    match plans::fire(store, &agent, source, &plan, due).await {
        Ok(true) => metrics
            .plans_fired
            .with_label_values(&[source.as_str()])
            .inc(),
        Ok(false) => {}
        Err(e) => {
            warn!(%agent, plan = %plan.name, error = %crate::report::chain(&e), "cannot fire plan; the next sweep retries")
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::super::tests::{fast, spec, start, track, until};
    use crate::crd::PlanSpec;
    use crate::identity::AgentKey;
    use crate::store::{now_ms, EventKind, MemoryStore, Store};
    use crate::testing::WaitInbox;

    #[tokio::test]
    async fn plans_fire_once_per_due_time_even_with_two_operators() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let a = AgentKey::new("fam", "planner");
        let at = crate::plans::rfc3339(now_ms() + 300);
        let s = spec(&format!(
            "plans: [{{name: soon, at: '{at}', instruction: 'post the report'}}, {{name: daily, schedule: '0 6 * * *', instruction: 'morning'}}]"
        ));
        // Two operators (a leader change with the old one still running) on one data plane.
        let one = start(store.clone(), fast());
        let two = start(store.clone(), fast());
        track(&one, &a, &s, 0);
        track(&two, &a, &s, 0);
        until("the plan's event", || {
            one.metrics.plans_fired.with_label_values(&["spec"]).get()
                + two.metrics.plans_fired.with_label_values(&["spec"]).get()
                >= 1
        })
        .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let lease = store
            .acquire_lease(&a, "w", Duration::from_secs(30))
            .await
            .unwrap()
            .unwrap();
        let events = store
            .wait_inbox(&a, &lease, Duration::from_millis(10))
            .await
            .unwrap();
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].kind, EventKind::Plan);
        assert_eq!(events[0].text.as_deref(), Some("post the report"));
        // The daily plan got its baseline and waits for 06:00.
        let marks = store.plan_marks(&a).await.unwrap();
        assert!(marks.contains_key("spec/daily"), "{marks:?}");
        // The plan's push woke the agent: scaled up (by one of the two).
        until("scaled up", || {
            one.cluster.replicas().len() + two.cluster.replicas().len() >= 1
        })
        .await;
        one.stop().await;
        two.stop().await;
    }

    #[tokio::test]
    async fn plans_the_agent_made_fire_too() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let a = AgentKey::new("fam", "planner");
        let lease = store
            .acquire_lease(&a, "w", Duration::from_secs(30))
            .await
            .unwrap()
            .unwrap();
        let own: PlanSpec = serde_yaml::from_str(&format!(
            "{{name: remind, at: '{}', instruction: 'remind Husam'}}",
            crate::plans::rfc3339(now_ms() + 200)
        ))
        .unwrap();
        store
            .set_plans(&a, &lease, &[crate::store::Plan::from(&own)])
            .await
            .unwrap();
        let r = start(store.clone(), fast());
        track(&r, &a, &spec("scaling: {minReplicas: 1}"), 1);
        let events = store
            .wait_inbox(&a, &lease, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].id.split(':').nth(1), Some("agent/remind"));
        assert_eq!(r.metrics.plans_fired.with_label_values(&["agent"]).get(), 1);
        r.stop().await;
    }
}

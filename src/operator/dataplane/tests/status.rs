//! The status the loop writes: at most once per interval and only when it changed, the tools
//! a worker reports, what an agent waits on a human for, and a spent budget.

use super::*;

#[tokio::test]
async fn status_is_written_when_it_changes_and_at_most_once_per_interval() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let tuning = Tuning {
        sweep: Duration::from_millis(50),
        status_interval: Duration::from_millis(600),
        ..fast()
    };
    let r = start(store.clone(), tuning);
    let a = AgentKey::new("fam", "a");
    // minReplicas 1 and a worker holding the lease: no scaling, only status.
    track(&r, &a, &spec("scaling: {minReplicas: 1}"), 1);
    let lease = store
        .acquire_lease(&a, "w", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    until("a first status", || !r.cluster.statuses(&a).is_empty()).await;
    // Nothing changes: no more writes, though sweeps run every 50 ms.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(r.cluster.statuses(&a).len(), 1);
    assert_eq!(r.cluster.statuses(&a)[0].phase, Some(AgentPhase::Sleeping));
    // Changes arrive fast; writes stay at the interval, and the last one wins.
    let started = Instant::now();
    for i in 0..20 {
        store
            .push_event(&a, &ev(&format!("burst-{i}")))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    until("the final depth", || {
        r.cluster
            .statuses(&a)
            .last()
            .is_some_and(|s| s.inbox_depth == Some(20))
    })
    .await;
    let writes = r.cluster.statuses(&a).len() - 1;
    let allowed = started.elapsed().as_millis() / 600 + 2;
    assert!(
        (writes as u128) <= allowed,
        "{writes} writes in {:?}",
        started.elapsed()
    );
    store.release_lease(&a, &lease).await.unwrap();
    r.stop().await;
}

#[tokio::test]
async fn the_tools_a_worker_reports_reach_the_status_once() {
    use crate::crd::ToolStatus;
    use crate::operator::status::{find, TOOLS_READY};
    use crate::store::prelude::*;
    use crate::store::ToolRecord;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let r = start(store.clone(), fast());
    let a = AgentKey::new("fam", "a");
    track(&r, &a, &spec("scaling: {minReplicas: 1}"), 1);
    until("a first status", || !r.cluster.statuses(&a).is_empty()).await;
    let first = r.cluster.statuses(&a)[0].clone();
    assert!(first.tools.is_empty());
    let unknown = find(&first.conditions, TOOLS_READY).unwrap();
    assert_eq!(
        (unknown.status.as_str(), unknown.reason.as_str()),
        ("Unknown", "NotReported")
    );
    let events = || {
        r.cluster
            .calls()
            .into_iter()
            .filter(|c| matches!(c, Call::Event(..) | Call::Warning(..)))
            .collect::<Vec<_>>()
    };
    assert!(events().is_empty(), "nothing reported, nothing to say");

    let tool = |name: &str, source: &str, error: Option<&str>| {
        ToolRecord::from(&ToolStatus {
            name: name.into(),
            source: source.into(),
            ready: error.is_none(),
            last_error: error.map(str::to_string),
            note: None,
        })
    };
    store
        .set_tools(
            &a,
            &[
                tool("send_message", "builtin", None),
                tool("open_ticket", "http", None),
                tool(
                    "grafana__*",
                    "mcp:grafana",
                    Some("cannot connect: connection refused"),
                ),
            ],
        )
        .await
        .unwrap();
    let down = |s: &AgentStatus| {
        find(&s.conditions, TOOLS_READY).is_some_and(|c| c.reason == "McpUnreachable")
    };
    until("ToolsReady False (McpUnreachable)", || {
        r.cluster.statuses(&a).last().is_some_and(down)
    })
    .await;
    let written = r.cluster.statuses(&a);
    let s = written.last().unwrap();
    assert_eq!(s.tools.len(), 3);
    let c = find(&s.conditions, TOOLS_READY).unwrap();
    assert_eq!(c.status, "False");
    // Observed at the Agent's generation, as the reconcile's conditions are (kstatus reads
    // it); the build before issue 26 wrote none.
    assert!(
        s.conditions
            .iter()
            .all(|c| c.observed_generation == Some(3)),
        "{:?}",
        s.conditions
    );
    assert!(
        c.message.contains("MCP server grafana unreachable"),
        "{}",
        c.message
    );
    let since = c.last_transition_time.clone();
    // Nothing changes: nothing is written again, the transition time holds.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(r.cluster.statuses(&a).len(), written.len());
    assert_eq!(
        events(),
        [Call::Warning(
            "McpUnreachable".into(),
            "1 of 3 tool(s) unavailable: MCP server grafana unreachable: cannot connect: connection refused".into()
        )],
        "one Warning for the transition"
    );

    // The server comes up: its tools replace the placeholder, ToolsReady flips.
    store
        .set_tools(
            &a,
            &[
                tool("send_message", "builtin", None),
                tool("open_ticket", "http", None),
                tool("grafana__query", "mcp:grafana", None),
            ],
        )
        .await
        .unwrap();
    until("ToolsReady True", || {
        r.cluster
            .statuses(&a)
            .last()
            .is_some_and(|s| find(&s.conditions, TOOLS_READY).is_some_and(|c| c.status == "True"))
    })
    .await;
    let s = r.cluster.statuses(&a).last().cloned().unwrap();
    assert_eq!(s.tools[2].name, "grafana__query");
    let c = find(&s.conditions, TOOLS_READY).unwrap();
    assert_eq!(c.reason, "AllReady");
    assert!(c.last_transition_time.0 >= since.0);
    assert_eq!(
        events().last(),
        Some(&Call::Event("AllReady".into(), "3 tool(s) ready".into())),
        "the recovery is a Normal Event"
    );
    assert_eq!(events().len(), 2);
    r.stop().await;
}

#[tokio::test]
async fn what_an_agent_waits_on_a_human_for_is_in_its_status_and_a_gauge() {
    use crate::store::prelude::*;
    use crate::store::{CallKind, HumanCall};
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let r = start(store.clone(), fast());
    let a = AgentKey::new("fam", "a");
    track(&r, &a, &spec("scaling: {minReplicas: 1}"), 1);
    let call = HumanCall::new(
        &a,
        "restart_deployment",
        CallKind::Approval,
        "family",
        serde_json::json!({"deployment": "api"}),
        None,
        3_600_000,
    )
    .unwrap();
    store.register_human_call(&call).await.unwrap();
    until("the pending call in status", || {
        r.cluster
            .statuses(&a)
            .last()
            .is_some_and(|s| !s.pending_calls.is_empty())
    })
    .await;
    let status = r.cluster.statuses(&a).last().cloned().unwrap();
    let pending = &status.pending_calls[0];
    assert_eq!(
        (
            pending.tool.as_str(),
            pending.call_id.as_str(),
            pending.kind.as_str()
        ),
        ("restart_deployment", call.id.as_str(), "approval")
    );
    assert_eq!(pending.space.as_deref(), Some("family"));
    assert!(pending.since.is_some() && pending.expires > pending.since);
    assert_eq!(
        r.metrics
            .pending_calls
            .with_label_values(&["fam", "a"])
            .get(),
        1
    );
}

/// `spec.budget`: the tokens the worker counted show in `status.tokens`; a spent budget is
/// `BudgetExhausted=True` with one Warning Event, and its waiting events wake no worker (by
/// wake signal or sweep); a raised budget makes them work again at once.
#[tokio::test]
async fn a_spent_budget_holds_the_worker_and_says_so() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let key = AgentKey::new("fam", "spender");
    let periods = crate::crd::Periods::at(now_ms());
    let used = crate::model::Usage {
        input: 900,
        output: 200,
        cache_read: 600,
        cache_write: 100,
    };
    store.record_tokens(&key, &periods, &used).await.unwrap();
    let r = start(store.clone(), fast());
    let small = spec("budget: {tokensPerDay: 1000, tokensPerMonth: 100000}");
    track(&r, &key, &small, 0);
    until("BudgetExhausted in the status", || {
        r.cluster.statuses(&key).last().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "BudgetExhausted" && c.status == "True")
        })
    })
    .await;
    let status = r.cluster.statuses(&key).pop().unwrap();
    let tokens = status.tokens.clone().unwrap();
    assert_eq!(
        (
            tokens.input,
            tokens.cache_read,
            tokens.cache_write,
            tokens.output
        ),
        (200, 600, 100, 200)
    );
    assert_eq!((tokens.today, tokens.this_month), (1100, 1100));
    let c = status
        .conditions
        .iter()
        .find(|c| c.type_ == "BudgetExhausted")
        .unwrap();
    assert_eq!(c.reason, "DailyBudgetSpent");
    assert!(c
        .message
        .starts_with("1100 of the daily budget of 1000 tokens spent"));
    // Events arrive: no wake, no sweep scales it up.
    r.store.push_event(&key, &ev("e1")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(r.cluster.replicas().is_empty(), "{:?}", r.cluster.calls());
    assert_eq!(
        r.metrics.wakes.with_label_values(&["budget_spent"]).get(),
        1
    );
    let warnings: Vec<Call> = r
        .cluster
        .calls()
        .into_iter()
        .filter(|c| matches!(c, Call::Warning(reason, _) if reason == "DailyBudgetSpent"))
        .collect();
    assert_eq!(warnings.len(), 1, "one Warning Event: {warnings:?}");
    let gauge = |g: &prometheus::IntGaugeVec, labels: &[&str]| g.with_label_values(labels).get();
    assert_eq!(gauge(&r.metrics.budget_exhausted, &["fam", "spender"]), 1);
    assert_eq!(
        gauge(&r.metrics.budget_remaining, &["fam", "spender", "month"]),
        98_900
    );

    // Raised: the waiting event is work again, and the condition says what is left.
    track(&r, &key, &spec("budget: {tokensPerDay: 5000}"), 0);
    until("scaled up", || r.cluster.replicas() == [(key.clone(), 1)]).await;
    until("WithinBudget", || {
        r.cluster.statuses(&key).last().is_some_and(|s| {
            s.conditions.iter().any(|c| {
                c.type_ == "BudgetExhausted"
                    && c.status == "False"
                    && c.message == "3900 tokens left today"
            })
        })
    })
    .await;
    until("a Normal Event for the change back", || {
        r.cluster
            .calls()
            .iter()
            .any(|c| matches!(c, Call::Event(reason, _) if reason == "WithinBudget"))
    })
    .await;
    assert_eq!(gauge(&r.metrics.budget_exhausted, &["fam", "spender"]), 0);
    r.stop().await;
}

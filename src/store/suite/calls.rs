//! Calls that wait: a human's answer without a token, an async result with its token.

use super::*;

pub(super) async fn human_calls_take_one_answer_without_a_token(store: &dyn Store) {
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

pub(super) async fn async_calls_take_one_result_with_their_token(store: &dyn Store) {
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

pub(super) async fn calls_of_remote_agents_under_way_are_noted(store: &dyn Store) {
    let agent = AgentKey::new("fam", "outbound");
    assert_eq!(store.outbound_depth(&agent).await.unwrap(), None);
    let now = now_ms();
    store
        .note_outbound(&agent, "call-1", 3, now + 60_000)
        .await
        .unwrap();
    store
        .note_outbound(&agent, "call-2", 5, now + 60_000)
        .await
        .unwrap();
    assert_eq!(store.outbound_depth(&agent).await.unwrap(), Some(5));
    // Over (its time set to the past): the next deepest counts.
    store
        .note_outbound(&agent, "call-2", 5, now - 1)
        .await
        .unwrap();
    assert_eq!(store.outbound_depth(&agent).await.unwrap(), Some(3));
    store
        .note_outbound(&agent, "call-1", 3, now - 1)
        .await
        .unwrap();
    assert_eq!(store.outbound_depth(&agent).await.unwrap(), None);
    // Another agent's are its own.
    store
        .note_outbound(&AgentKey::new("fam", "other"), "x", 7, now + 60_000)
        .await
        .unwrap();
    assert_eq!(store.outbound_depth(&agent).await.unwrap(), None);

    // A followed remote task is ended by the worker even past the call's time (a worker that
    // was down then): the model learns of it. Once, and only without a token.
    let remote = RemoteTask {
        source: "billing".into(),
        url: "http://127.0.0.1:9/rpc".into(),
        task_id: "t1".into(),
    };
    let late = NewCall::following(&agent, "billing__refund", remote, 1, 2).unwrap();
    store.register_call(&late).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let over = CallResult::Error("not over within the call's time".into());
    assert_eq!(
        store
            .complete_call(&late.id, Some("guess"), &over)
            .await
            .unwrap(),
        Completion::Unauthorized
    );
    assert!(matches!(
        store.complete_call(&late.id, None, &over).await.unwrap(),
        Completion::Accepted(_)
    ));
    assert_eq!(
        store.complete_call(&late.id, None, &over).await.unwrap(),
        Completion::Duplicate
    );
    assert_eq!(store.inbox_depth(&agent).await.unwrap(), 1);
}

//! Effects happen once: a redone cycle posts nothing twice and takes in what arrived since it
//! began; a finished outside call is replayed from the journal and never made again; an
//! unknown outcome is told to the model or retried with the same key; and calls a human
//! approves, denies, lets time out or answers (an interactive tool). Same rig as
//! [`super::tests`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;

use super::tests::{
    calls, last_tool_result, rig, rig_with, send, text, user_texts, Rig, LAST_STEP_ANSWERS, NS,
};
use super::Outcome;
use crate::model::{Failure, Message, ModelError, Turn, Usage};
use crate::store::{prelude::*, InboxEvent};

#[tokio::test]
async fn a_redone_cycle_posts_nothing_twice() {
    // The cycle resumes from its journal after the model failed: step 0 (its post) is
    // replayed, not redone, and the model is asked for step 1 again.
    let r = rig(
        "",
        vec![
            Ok(send("once")),
            Err(ModelError::new(Failure::Unreachable, "reset")),
            Ok(Turn {
                text: Some("done".into()),
                ..Turn::default()
            }),
        ],
    )
    .await;
    r.say("hi", false, 0).await;
    let events = r.drain().await;
    let first = r.agentlet.cycle(&r.lease, &events).await.unwrap();
    assert!(matches!(first, Outcome::Failed(_)));
    let again = r.agentlet.cycle(&r.lease, &events).await.unwrap();
    assert!(matches!(again, Outcome::Completed(_)));
    assert_eq!(r.said().await.len(), 2, "hi and one answer");
}

#[tokio::test]
async fn a_cycle_killed_after_it_posted_shows_the_model_its_post_and_posts_it_once() {
    // Step 0 posts and waits for a reply; the worker dies while it waits (after the post,
    // before the step's results are journaled), and Husam says more meanwhile. The resumed
    // cycle redoes that same step — its post dropped as a duplicate of its key — and the
    // model, asked about the new message, sees what it already said. (The build before this
    // asked the model for step 0 anew without it: in the chaos suite's failovers, a model
    // answered a job a second time.)
    let waiting = calls(&[(
        "send_message",
        json!({"space": "family", "text": "once", "wait": {"for": [{"type": "human"}], "timeout": 1}}),
    )]);
    let r = Arc::new(rig("", vec![Ok(waiting), Ok(text("Done."))]).await);
    r.say("hi", false, 0).await;
    let events = r.drain().await;
    let running = tokio::spawn({
        let r = r.clone();
        let events = events.clone();
        async move { r.agentlet.cycle(&r.lease, &events).await }
    });
    // Posted and waiting: the step is in the journal already.
    for _ in 0..100 {
        if r.said().await.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let journal = r.store.journal(&r.agentlet.key).await.unwrap();
    assert!(
        journal
            .iter()
            .any(|e| e.contains("\"entry\":\"turn\"") && e.contains("once")),
        "the step's turn is journaled before its post: {journal:?}"
    );
    running.abort();
    let _ = running.await;
    r.say("and more", false, 0).await;
    let events = r.drain().await;
    let outcome = r.agentlet.cycle(&r.lease, &events).await.unwrap();
    assert!(matches!(outcome, Outcome::Completed(_)));
    let said: Vec<String> = r.said().await.into_iter().map(|(t, _)| t).collect();
    assert_eq!(said, ["hi", "once", "and more"], "posted once");
    let asked = r.requests();
    let last = &asked.last().unwrap().messages;
    assert!(
        last.iter().any(|m| matches!(m, Message::Assistant { tool_calls, .. } if tool_calls.iter().any(|c| c.arguments.contains("once")))),
        "the model sees its post: {last:?}"
    );
}

#[tokio::test]
async fn a_redone_cycle_takes_in_what_arrived_since_it_began() {
    // The model fails after step 0; meanwhile Husam says more (three agent messages deep).
    // The redone cycle resumes from its journal and shows the new message to the model
    // before it acknowledges it; its reply is one deeper than the new message.
    let r = rig(
        "",
        vec![
            Ok(send("on it")),
            Err(ModelError::new(Failure::Unreachable, "reset")),
            Ok(send("and the new one too")),
        ],
    )
    .await;
    r.say("first", false, 0).await;
    let events = r.drain().await;
    let first = r.agentlet.cycle(&r.lease, &events).await.unwrap();
    assert!(matches!(first, Outcome::Failed(_)));
    r.say("second", false, 3).await;
    let events = r.drain().await;
    assert_eq!(events.len(), 2, "the redone cycle drains both");
    let again = r.agentlet.cycle(&r.lease, &events).await.unwrap();
    assert!(matches!(again, Outcome::Completed(_)));
    let late = "[new events since this cycle began]\n[Family] Husam: \"second\"";
    let requests = r.requests();
    assert!(
        user_texts(&requests[2].messages).contains(&late),
        "{:?}",
        user_texts(&requests[2].messages)
    );
    assert!(user_texts(&r.remembered().await).contains(&late));
    let said = r.said().await;
    assert_eq!(
        said.len(),
        4,
        "first, on it, second, one more answer: {said:?}"
    );
    assert_eq!(said[3], ("and the new one too".to_string(), 4));
    assert_eq!(r.in_flight().await, 0);
}

/// A tool outside the worker that counts its calls (with their idempotency keys).
struct Ticketing {
    idempotent: bool,
    /// Whether a human approves each call first.
    approval: bool,
    keys: Mutex<Vec<String>>,
}

#[async_trait]
impl crate::worker::tools::External for Ticketing {
    fn specs(&self) -> Vec<crate::model::ToolSpec> {
        vec![crate::model::ToolSpec {
            name: "create_ticket".into(),
            description: "Opens a ticket.".into(),
            parameters: json!({"type": "object"}),
        }]
    }

    fn status(&self) -> Vec<crate::crd::ToolStatus> {
        Vec::new()
    }

    fn idempotent(&self, _: &str) -> bool {
        self.idempotent
    }

    fn asks(&self, _: &str) -> Option<crate::worker::tools::Ask> {
        self.approval.then_some(crate::worker::tools::Ask {
            kind: crate::store::CallKind::Approval,
            result_schema: None,
            timeout_seconds: None,
        })
    }

    async fn call(
        &self,
        call: &crate::worker::tools::ExternalCall<'_>,
    ) -> crate::worker::tools::Outcome {
        self.keys
            .lock()
            .unwrap()
            .push(call.idempotency_key.to_string());
        crate::worker::tools::Outcome {
            content: json!({"ticket": 7}).to_string(),
            ok: true,
        }
    }
}

fn ticketing(idempotent: bool) -> Arc<Ticketing> {
    Arc::new(Ticketing {
        idempotent,
        approval: false,
        keys: Mutex::new(Vec::new()),
    })
}

/// [`ticketing`] (not idempotent) whose every call a human approves first.
fn approved_ticketing() -> Arc<Ticketing> {
    Arc::new(Ticketing {
        idempotent: false,
        approval: true,
        keys: Mutex::new(Vec::new()),
    })
}

/// Husam asks for a ticket; the cycle asks the space and pauses. The call asked, and the
/// events in flight.
async fn asked(r: &Rig) -> (crate::store::RegisteredCall, Vec<InboxEvent>) {
    r.say("open a ticket", false, 0).await;
    let events = r.drain().await;
    let outcome = r.agentlet.cycle(&r.lease, &events).await.unwrap();
    assert!(matches!(outcome, Outcome::Paused { .. }), "{outcome:?}");
    let waiting = r.store.human_calls(&r.agentlet.key).await.unwrap();
    assert_eq!(waiting.len(), 1);
    (waiting[0].clone(), events)
}

/// Dana's answer to `call`, then the events of the cycle that resumes.
async fn decide(
    r: &Rig,
    call: &crate::store::RegisteredCall,
    answer: crate::store::Answer,
    reason: Option<&str>,
) -> Vec<InboxEvent> {
    let decision = crate::store::CallResult::Decision(crate::store::Verdict {
        answer,
        by: "Dana".into(),
        reason: reason.map(str::to_string),
    });
    let done = r
        .store
        .complete_call(&call.id, None, &decision)
        .await
        .unwrap();
    assert!(
        matches!(done, crate::store::Completion::Accepted(_)),
        "{done:?}"
    );
    r.drain().await
}

fn ticket() -> Turn {
    calls(&[("create_ticket", json!({"title": "disk full"}))])
}

#[tokio::test]
async fn a_finished_outside_call_is_replayed_not_made_again() {
    let tool = ticketing(false);
    let r = rig_with(
        LAST_STEP_ANSWERS,
        vec![
            Ok(ticket()),
            Err(ModelError::new(Failure::Unreachable, "reset")),
            Ok(text("Opened it.")),
        ],
        vec![tool.clone()],
    )
    .await;
    r.say("open a ticket", false, 0).await;
    let events = r.drain().await;
    let first = r.agentlet.cycle(&r.lease, &events).await.unwrap();
    assert!(matches!(first, Outcome::Failed(_)));
    assert_eq!(tool.keys.lock().unwrap().len(), 1);
    let again = r.agentlet.cycle(&r.lease, &events).await.unwrap();
    assert!(matches!(again, Outcome::Completed(_)));
    assert_eq!(tool.keys.lock().unwrap().len(), 1, "not made again");
    let requests = r.requests();
    assert_eq!(requests.len(), 3, "step 0 once, step 1 twice");
    assert!(
        matches!(requests[2].messages.last(), Some(Message::Tool { content, .. }) if content.contains("\"ticket\":7")),
        "the result replayed to the model: {:?}",
        requests[2].messages.last()
    );
    let remembered = r.remembered().await;
    assert_eq!(
        remembered.len(),
        4,
        "inbox, call, result, answer: {remembered:?}"
    );
    assert!(
        r.store.journal(&r.agentlet.key).await.unwrap().is_empty(),
        "the commit ends the journal"
    );
}

/// Husam's message in flight, and a journal as a worker leaves it when it dies during the
/// call of step 0 (marked, no result).
async fn died_during_the_call(r: &Rig) -> Vec<InboxEvent> {
    died_during_step_0(r, &ticket()).await
}

/// "open a ticket" in flight, and a journal as a worker leaves it when it dies during the
/// first call of step 0, whose model turn was `turn` (marked, no result).
async fn died_during_step_0(r: &Rig, turn: &Turn) -> Vec<InboxEvent> {
    r.say("open a ticket", false, 0).await;
    let events = r.drain().await;
    let entries = [
        super::journal::Entry::Begin {
            batch: "b1".into(),
            inbox: "[Family] Husam: \"open a ticket\"".into(),
            depth: 1,
            events: events.iter().map(|e| e.id.clone()).collect(),
        },
        super::journal::Entry::Turn {
            step: 0,
            message: turn.message(),
            usage: Usage::default(),
        },
        super::journal::Entry::Started { step: 0, index: 0 },
    ];
    let raw: Vec<String> = entries
        .iter()
        .map(|e| serde_json::to_string(e).unwrap())
        .collect();
    r.store
        .append_journal(&r.agentlet.key, &r.lease, &raw)
        .await
        .unwrap();
    events
}

#[tokio::test]
async fn late_events_get_a_step_even_when_the_resumed_step_ended_the_cycle() {
    // The worker died during step 0, whose calls were create_ticket and skip (which ends the
    // cycle); Husam said more meanwhile. The resumed cycle finishes step 0 (skip ends it) but
    // still asks the model once about the new message instead of acknowledging it unread.
    let tool = ticketing(false);
    let r = rig_with("", vec![Ok(send("Noted."))], vec![tool.clone()]).await;
    let turn = calls(&[
        ("create_ticket", json!({"title": "disk full"})),
        ("skip", json!({})),
    ]);
    died_during_step_0(&r, &turn).await;
    r.say("and page Sam", false, 0).await;
    let events = r.drain().await;
    assert_eq!(events.len(), 2);
    let outcome = r.agentlet.cycle(&r.lease, &events).await.unwrap();
    assert!(matches!(outcome, Outcome::Completed(_)));
    assert!(tool.keys.lock().unwrap().is_empty(), "not repeated");
    let requests = r.requests();
    assert!(
        !requests.is_empty(),
        "the model was asked about the late message"
    );
    assert!(
        user_texts(&requests[0].messages)
            .iter()
            .any(|t| t.contains("and page Sam")),
        "{:?}",
        user_texts(&requests[0].messages)
    );
    assert_eq!(r.said().await.last().unwrap().0, "Noted.");
}

#[tokio::test]
async fn an_unknown_outcome_is_not_repeated_and_the_model_is_told() {
    let tool = ticketing(false);
    let r = rig_with("", vec![Ok(text("I will check."))], vec![tool.clone()]).await;
    let events = died_during_the_call(&r).await;
    let outcome = r.agentlet.cycle(&r.lease, &events).await.unwrap();
    assert!(matches!(outcome, Outcome::Completed(_)));
    assert!(tool.keys.lock().unwrap().is_empty(), "not repeated");
    let told = last_tool_result(&r, 0);
    assert!(
        told.contains("outcome of this call of create_ticket is unknown"),
        "{told}"
    );
}

#[tokio::test]
async fn an_unknown_outcome_of_a_tool_not_back_yet_is_not_repeated_nor_called_unknown() {
    // After the restart the tool's source does not offer it (an MCP server still down): the
    // model is told the outcome is unknown, not that the tool is unknown (which would invite
    // a new call with a new key once the server is back).
    let r = rig_with("", vec![Ok(text("I will check."))], Vec::new()).await;
    let events = died_during_the_call(&r).await;
    let outcome = r.agentlet.cycle(&r.lease, &events).await.unwrap();
    assert!(matches!(outcome, Outcome::Completed(_)));
    let told = last_tool_result(&r, 0);
    assert!(
        told.contains("outcome of this call of create_ticket is unknown")
            && told.contains("not repeated"),
        "{told}"
    );
}

#[tokio::test]
async fn an_unknown_outcome_of_an_idempotent_tool_is_retried_with_the_same_key() {
    let tool = ticketing(true);
    let r = rig_with("", vec![Ok(text("Opened it."))], vec![tool.clone()]).await;
    let events = died_during_the_call(&r).await;
    let outcome = r.agentlet.cycle(&r.lease, &events).await.unwrap();
    assert!(matches!(outcome, Outcome::Completed(_)));
    assert_eq!(
        *tool.keys.lock().unwrap(),
        ["fam/assistant:b1:0:0"],
        "made again once, with the first try's key"
    );
}

#[tokio::test]
async fn an_approved_call_runs_once_after_the_cycle_paused_for_it() {
    let tool = approved_ticketing();
    let r = rig_with(
        LAST_STEP_ANSWERS,
        vec![Ok(ticket()), Ok(text("Opened T-7."))],
        vec![tool.clone()],
    )
    .await;
    let (call, _) = asked(&r).await;
    // Asked, not made; nothing committed; the space was told.
    assert!(tool.keys.lock().unwrap().is_empty());
    assert_eq!(
        r.store.consciousness(&r.agentlet.key).await.unwrap().cycle,
        0
    );
    assert_eq!(r.in_flight().await, 1);
    let said = r.said().await;
    let request = &said.last().unwrap().0;
    assert!(
        request.contains("wants to call create_ticket") && request.contains(call.id.as_str()),
        "{said:?}"
    );
    assert_eq!(call.record.space.as_deref(), Some("family"));
    assert_eq!(call.record.arguments, Some(json!({"title": "disk full"})));

    // Woken with nothing decided: still paused, nothing asked twice, nothing made.
    let events = r.drain().await;
    let again = r.agentlet.cycle(&r.lease, &events).await.unwrap();
    assert!(matches!(again, Outcome::Paused { .. }), "{again:?}");
    assert_eq!(r.said().await.len(), said.len(), "not asked twice");
    assert_eq!(r.store.human_calls(&r.agentlet.key).await.unwrap().len(), 1);
    assert_eq!(r.requests().len(), 1, "the model is not asked while paused");

    let events = decide(&r, &call, crate::store::Answer::Approve, None).await;
    let done = r.agentlet.cycle(&r.lease, &events).await.unwrap();
    assert!(matches!(done, Outcome::Completed(_)), "{done:?}");
    assert_eq!(tool.keys.lock().unwrap().len(), 1, "made once");
    let requests = r.requests();
    assert_eq!(
        requests.len(),
        2,
        "the model is asked only for the next step"
    );
    assert!(
        matches!(requests[1].messages.last(), Some(Message::Tool { content, .. }) if content.contains("\"ticket\":7")),
        "{:?}",
        requests[1].messages.last()
    );
    assert!(
        !user_texts(&requests[1].messages)
            .iter()
            .any(|t| t.contains("approved by")),
        "the answer is the call's, not a new event"
    );
    assert_eq!(
        r.in_flight().await,
        0,
        "the answer is acknowledged with the cycle"
    );
    let timed = r
        .agentlet
        .metrics
        .decision_time
        .with_label_values(&[NS, "assistant", "create_ticket"])
        .get_sample_count();
    assert_eq!(timed, 1, "the time to the decision is measured once");
}

#[tokio::test]
async fn a_denied_call_is_not_made_and_the_model_reads_why() {
    let tool = approved_ticketing();
    let r = rig_with(
        "",
        vec![Ok(ticket()), Ok(text("Not opened."))],
        vec![tool.clone()],
    )
    .await;
    let (call, _) = asked(&r).await;
    let events = decide(
        &r,
        &call,
        crate::store::Answer::Deny,
        Some("not during the freeze"),
    )
    .await;
    let done = r.agentlet.cycle(&r.lease, &events).await.unwrap();
    assert!(matches!(done, Outcome::Completed(_)));
    assert!(tool.keys.lock().unwrap().is_empty(), "never made");
    let told = last_tool_result(&r, 1);
    assert!(
        told.contains("Dana denied the call of create_ticket: not during the freeze"),
        "{told}"
    );
}

#[tokio::test]
async fn a_call_nobody_answers_in_time_is_told_it_timed_out() {
    let tool = approved_ticketing();
    let r = rig_with(
        "  tools: {approvalTimeoutSeconds: 1}",
        vec![Ok(ticket()), Ok(text("Nobody answered."))],
        vec![tool.clone()],
    )
    .await;
    let (call, events) = asked(&r).await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let done = r.agentlet.cycle(&r.lease, &events).await.unwrap();
    assert!(matches!(done, Outcome::Completed(_)), "{done:?}");
    assert!(tool.keys.lock().unwrap().is_empty());
    let told = last_tool_result(&r, 1);
    assert!(
        told.contains("timed out") && told.contains(call.id.as_str()),
        "{told}"
    );
}

#[tokio::test]
async fn an_interactive_tools_answer_is_its_result() {
    let interactive: Vec<crate::crd::InteractiveToolSpec> = serde_yaml::from_str(
        "- name: confirm_deployment
  description: Ask a human to confirm a deployment.
  inputSchema: {type: object, properties: {version: {type: string}}}
  resultSchema: {type: object, properties: {confirmed: {type: boolean}}}",
    )
    .unwrap();
    let r = rig_with(
        "",
        vec![
            Ok(calls(&[("confirm_deployment", json!({"version": "1.2"}))])),
            Ok(text("Deploying 1.2.")),
        ],
        vec![Arc::new(
            crate::worker::tools::interactive::InteractiveTools::new(&interactive),
        )],
    )
    .await;
    let (call, _) = asked(&r).await;
    assert_eq!(call.record.kind, crate::store::CallKind::Interactive);
    assert_eq!(
        call.record.result_schema,
        Some(json!({"type": "object", "properties": {"confirmed": {"type": "boolean"}}}))
    );
    let said = r.said().await;
    assert!(
        said.last().unwrap().0.contains("asks: confirm_deployment"),
        "{said:?}"
    );
    let events = decide(
        &r,
        &call,
        crate::store::Answer::Result(json!({"confirmed": true})),
        None,
    )
    .await;
    let done = r.agentlet.cycle(&r.lease, &events).await.unwrap();
    assert!(matches!(done, Outcome::Completed(_)), "{done:?}");
    let told = last_tool_result(&r, 1);
    assert_eq!(
        told,
        json!({"answer": {"confirmed": true}, "by": "Dana"}).to_string()
    );
}

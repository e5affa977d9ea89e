//! The cycle with models that are not perfect (issue 28's list): a human's cycle that would
//! end in silence gets one nudge ([`super::nudge`]); tool calls written as text are made,
//! empty turns remembered as nothing ([`crate::model::lenient`]); unknown tools, malformed
//! arguments and calls past a step's bound get error results the model can correct; text
//! beside calls stays private while the calls are made.

use serde_json::json;

use super::tests::{calls, record, rig, send, text, user_texts, Rig, NS};
use super::Outcome;
use crate::identity::SpaceKey;
use crate::model::{Message, ToolCall, Turn, Usage};
use crate::store::{prelude::*, Member, MemberKind, NewMessage, Sender};

fn nudges(r: &Rig) -> u64 {
    r.agentlet
        .metrics
        .cycle_nudges
        .with_label_values(&[NS, "assistant"])
        .get()
}

fn nudged_in(r: &Rig, request: usize) -> bool {
    user_texts(&r.requests()[request].messages)
        .iter()
        .any(|t| t.contains("nobody has seen one yet"))
}

#[tokio::test]
async fn plain_text_to_a_human_gets_one_nudge_and_the_answer_reaches_the_space() {
    let r = rig(
        "",
        vec![
            Ok(text("Dinner is at 8, noted.")),
            Ok(send("Hello! Dinner at 8, noted.")),
            Ok(text("Answered.")),
        ],
    )
    .await;
    assert!(matches!(
        r.cycle("Remember dinner is at 8, and say hello.").await,
        Outcome::Completed(_)
    ));
    assert_eq!(r.requests().len(), 3);
    assert!(!nudged_in(&r, 0) && nudged_in(&r, 1));
    assert_eq!(nudges(&r), 1);
    let said: Vec<String> = r.said().await.into_iter().map(|(t, _)| t).collect();
    assert!(
        said.iter().any(|t| t == "Hello! Dinner at 8, noted."),
        "{said:?}"
    );
    let remembered = serde_json::to_string(&r.remembered().await).unwrap();
    assert!(
        remembered.contains("nobody has seen one yet"),
        "the nudge is part of the cycle's story"
    );
}

#[tokio::test]
async fn the_nudge_names_who_is_waiting_and_where() {
    let r = rig(
        "",
        vec![
            Ok(text("The forecast is rain.")),
            Ok(send("Rain today.")),
            Ok(text("Answered.")),
        ],
    )
    .await;
    r.cycle("What is the weather?").await;
    let requests = r.requests();
    let nudge = user_texts(&requests[1].messages)
        .into_iter()
        .find(|t| t.starts_with("[agentfleet]"))
        .unwrap();
    assert!(
        nudge.contains("Husam is waiting in space \"family\" for your answer")
            && nudge.contains("Answer now with send_message.")
            && nudge.ends_with("Call skip only if the message was not for you."),
        "{nudge}"
    );
    // The text that reached nobody is not shown again (a small model wrote it out again,
    // word for word), nor remembered; the cycle's record keeps it.
    let shown = serde_json::to_string(&requests[1].messages).unwrap();
    assert!(!shown.contains("The forecast is rain."), "{shown}");
    let remembered = serde_json::to_string(&r.remembered().await).unwrap();
    assert!(
        !remembered.contains("The forecast is rain."),
        "{remembered}"
    );
    assert!(remembered.contains("Rain today."), "{remembered}");
}

#[tokio::test]
async fn a_copy_of_the_context_is_not_remembered_and_the_human_is_answered() {
    // Qwen2.5-Coder 1.5B after a tool result: it writes out its request's context.
    let echo = format!(
        "{}\nCurrent time: 2026-11-27T07:02:02.234Z\n\nSpaces you are a member of:",
        crate::model::format::CONTEXT_HEADING
    );
    let r = rig(
        "",
        vec![
            Ok(text(&echo)),
            Ok(send("Rain today.")),
            Ok(text("Answered.")),
        ],
    )
    .await;
    r.cycle("What is the weather?").await;
    assert_eq!(nudges(&r), 1);
    assert_eq!(said(&r).await, vec!["What is the weather?", "Rain today."]);
    let remembered = serde_json::to_string(&r.remembered().await).unwrap();
    assert!(!remembered.contains("[CONTEXT"), "{remembered}");
    let echoes = r
        .agentlet
        .metrics
        .model_readings
        .with_label_values(&[NS, "assistant", "context_echo"])
        .get();
    assert_eq!(echoes, 1);
}

#[tokio::test]
async fn a_refused_send_message_is_no_answer() {
    // A send_message the tool refused (no such agent to mention), then text.
    let r = rig(
        "",
        vec![
            Ok(calls(&[(
                "send_message",
                json!({"space": "family", "text": "Hi", "mention": "nobody"}),
            )])),
            Ok(text("Said hello.")),
            Ok(send("Hello!")),
        ],
    )
    .await;
    r.cycle("Hi! Please say hello.").await;
    assert_eq!(nudges(&r), 1);
    assert_eq!(said(&r).await, vec!["Hi! Please say hello.", "Hello!"]);
}

#[tokio::test]
async fn a_model_that_ignores_the_nudge_is_not_nudged_again() {
    let r = rig("", vec![Ok(text("hmm")), Ok(text("still thinking"))]).await;
    assert!(matches!(r.cycle("hello?").await, Outcome::Completed(_)));
    assert_eq!(r.requests().len(), 2, "one nudge, never a loop");
    assert_eq!(nudges(&r), 1);
    // A new cycle may be nudged once again.
    r.cycle("anyone?").await;
    assert_eq!(nudges(&r), 2);
}

#[tokio::test]
async fn an_answered_or_skipped_cycle_or_its_last_step_is_not_nudged() {
    let r = rig("", vec![Ok(send("Hi")), Ok(text("Done."))]).await;
    r.cycle("hi").await;
    assert_eq!((r.requests().len(), nudges(&r)), (2, 0), "answered");

    let r = rig(
        "",
        vec![
            Ok(calls(&[("read_messages", json!({"space": "family"}))])),
            Ok(calls(&[("skip", json!({}))])),
        ],
    )
    .await;
    r.cycle("hi").await;
    assert_eq!((r.requests().len(), nudges(&r)), (2, 0), "skipped later");

    let r = rig("  cycle: {maxSteps: 1}", vec![Ok(text("hmm"))]).await;
    r.cycle("hi").await;
    assert_eq!(
        (r.requests().len(), nudges(&r)),
        (1, 0),
        "no step left for it"
    );
}

#[tokio::test]
async fn a_cycle_woken_by_an_agent_is_not_nudged() {
    let r = rig("", vec![Ok(text("Nothing for me."))]).await;
    let mut family = record("Family");
    family.members.push(Member {
        kind: MemberKind::Agent,
        id: "planner".into(),
        name: "planner".into(),
    });
    let space = SpaceKey::new(NS, "family");
    r.store.apply_space(&space, &family).await.unwrap();
    r.store
        .post_message(
            &space,
            &NewMessage {
                sender: Sender {
                    groups: Vec::new(),
                    id: "planner".into(),
                    name: "planner".into(),
                    kind: Some(MemberKind::Agent),
                },
                text: "FYI: the build is green.".into(),
                mention: None,
                idempotency_key: None,
                urgent: false,
                depth: 0,
            },
        )
        .await
        .unwrap();
    let events = r.drain().await;
    assert!(!events.is_empty());
    let outcome = r.agentlet.cycle(&r.lease, &events).await.unwrap();
    assert!(matches!(outcome, Outcome::Completed(_)));
    assert_eq!((r.requests().len(), nudges(&r)), (1, 0));
}

fn readings(r: &Rig, kind: &str) -> u64 {
    r.agentlet
        .metrics
        .model_readings
        .with_label_values(&[NS, "assistant", kind])
        .get()
}

/// The tool results the model was shown in request `n`.
fn results_in(r: &Rig, n: usize) -> Vec<String> {
    r.requests()[n]
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .collect()
}

async fn said(r: &Rig) -> Vec<String> {
    r.said().await.into_iter().map(|(t, _)| t).collect()
}

#[tokio::test]
async fn a_call_written_as_text_is_made_and_counted() {
    let written = r#"<tool_call>
{"name": "send_message", "arguments": {"space": "family", "text": "Hello, Husam!"}}
</tool_call>"#;
    let r = rig("", vec![Ok(text(written))]).await;
    assert!(matches!(r.cycle("hi").await, Outcome::Completed(_)));
    assert_eq!(said(&r).await, vec!["hi", "Hello, Husam!"]);
    assert_eq!(readings(&r, "tool_call_in_text"), 1);
    assert_eq!(nudges(&r), 0, "it answered");
    let remembered = r.remembered().await;
    assert!(
        remembered.iter().any(|m| matches!(m, Message::Assistant { content: None, tool_calls } if tool_calls[0].name == "send_message")),
        "remembered as the call it was: {remembered:?}"
    );
}

#[tokio::test]
async fn an_empty_turn_is_remembered_as_nothing_and_a_human_still_gets_an_answer() {
    let empty = Turn {
        text: Some("<think>hmm</think>".into()),
        tool_calls: Vec::new(),
        usage: Usage::default(),
        finish_reason: None,
    };
    let r = rig("", vec![Ok(empty), Ok(send("Hi!"))]).await;
    assert!(matches!(r.cycle("hi").await, Outcome::Completed(_)));
    assert_eq!(readings(&r, "empty"), 1);
    assert_eq!(nudges(&r), 1);
    assert_eq!(said(&r).await, vec!["hi", "Hi!"]);
    let remembered = r.remembered().await;
    assert!(
        !remembered.iter().any(|m| matches!(m, Message::Assistant { content: None, tool_calls } if tool_calls.is_empty())),
        "no assistant message with neither text nor calls: {remembered:?}"
    );
}

#[tokio::test]
async fn text_beside_calls_stays_private_and_the_calls_are_made() {
    let mut turn = send("On it.");
    turn.text = Some("The user wants an acknowledgement.".into());
    let r = rig("", vec![Ok(turn)]).await;
    r.cycle("please ack").await;
    assert_eq!(said(&r).await, vec!["please ack", "On it."]);
    let remembered = r.remembered().await;
    assert!(remembered.iter().any(|m| matches!(m, Message::Assistant { content: Some(c), .. } if c == "The user wants an acknowledgement.")));
}

#[tokio::test]
async fn wrong_names_and_arguments_get_results_the_model_corrects() {
    let bad_json = Turn {
        tool_calls: vec![ToolCall {
            id: "c1".into(),
            name: "send_message".into(),
            arguments: "{\"space\": \"family\", \"text\": ".into(),
        }],
        ..text("")
    };
    let r = rig(
        "",
        vec![
            Ok(calls(&[("sendMessage", json!({"text": "Hi"}))])),
            Ok(bad_json),
            Ok(calls(&[("send_message", json!({"space": "family"}))])),
            Ok(send("Hi")),
        ],
    )
    .await;
    assert!(matches!(r.cycle("hi").await, Outcome::Completed(_)));
    let shown = |n: usize| results_in(&r, n).last().cloned().unwrap_or_default();
    assert!(
        shown(1).contains("unknown tool") && shown(1).contains("send_message"),
        "{}",
        shown(1)
    );
    assert!(shown(2).contains("not JSON"), "{}", shown(2));
    assert!(
        shown(3).contains("invalid arguments for send_message"),
        "{}",
        shown(3)
    );
    assert_eq!(
        said(&r).await,
        vec!["hi", "Hi"],
        "corrected within maxSteps"
    );
}

#[tokio::test]
async fn calls_past_a_steps_bound_are_not_made_and_the_model_is_told() {
    let bound = super::act::MAX_CALLS_PER_STEP;
    let many: Vec<(&str, serde_json::Value)> = (0..bound + 2)
        .map(|_| ("read_messages", json!({"space": "family"})))
        .collect();
    let r = rig("", vec![Ok(calls(&many)), Ok(send("Read."))]).await;
    r.cycle("catch up").await;
    let results = results_in(&r, 1);
    assert_eq!(results.len(), bound + 2, "every call has a result");
    assert!(results[..bound].iter().all(|c| !c.contains("not made")));
    let told = format!("at most {bound} tool calls");
    assert!(
        results[bound..].iter().all(|c| c.contains(&told)),
        "{:?}",
        &results[bound..]
    );
}

#[tokio::test]
async fn mentioning_a_human_posts_the_message_without_the_mention() {
    // As Qwen2.5-Coder 0.5B does: it mentions the person it answers.
    let r = rig(
        "",
        vec![Ok(calls(&[(
            "send_message",
            json!({"space": "family", "text": "Hello!", "mention": "Husam"}),
        )]))],
    )
    .await;
    r.cycle("Hi! Please say hello.").await;
    assert_eq!(said(&r).await, vec!["Hi! Please say hello.", "Hello!"]);
    let result = results_in(&r, 1).pop().unwrap_or_default();
    assert!(
        result.contains("\"success\":true") && result.contains("Husam is a human member"),
        "{result}"
    );
    assert_eq!(nudges(&r), 0);
}

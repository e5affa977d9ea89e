//! The cycle's record as the worker keeps it: every outcome, the steps with their tokens,
//! private text, calls and results, the message it posted; a model's megabyte and 256 calls
//! kept within bounds and counted; the agent's secrets masked.

use serde_json::json;

use super::record::Recorder;
use super::tests::{calls, rig, send, text, Rig};
use super::Outcome;
use crate::cycles::{CycleOutcome, CycleRecord, CALLS_PER_STEP, RECORD_BYTES, TEXT_BYTES};
use crate::model::{Failure, ModelError, ToolCall, Turn};
use crate::party::Party;
use crate::secrets::Redactor;
use crate::store::prelude::*;

/// The agent's records, newest first.
async fn records(r: &Rig) -> Vec<CycleRecord> {
    let key = &r.agentlet.key;
    let mut out = Vec::new();
    for head in r.store.cycle_heads(key, None, 100).await.unwrap() {
        let json = r.store.cycle_record(key, head.seq).await.unwrap().unwrap();
        assert!(json.len() <= RECORD_BYTES, "{}", json.len());
        out.push(serde_json::from_str(&json).unwrap());
    }
    out
}

#[tokio::test]
async fn a_committed_cycle_is_recorded_with_its_steps_calls_and_the_message_it_posted() {
    let mut thinking = calls(&[("send_message", json!({"space": "family", "text": "8pm"}))]);
    thinking.text = Some("Dinner is at 8, I should say so.".into());
    let r = rig("", vec![Ok(thinking), Ok(text("Done."))]).await;
    assert!(matches!(
        r.cycle("When is dinner?").await,
        Outcome::Completed(_)
    ));
    let [record] = records(&r).await.try_into().unwrap();
    assert_eq!(record.outcome, Some(CycleOutcome::Committed));
    assert_eq!(record.checkpoint, Some(1));
    assert_eq!(record.party, "members");
    assert_eq!(record.events.len(), 1);
    assert_eq!(record.events[0].text, "When is dinner?");
    assert_eq!(record.steps.len(), 2);
    let first = &record.steps[0];
    assert_eq!(
        first.text.as_deref(),
        Some("Dinner is at 8, I should say so.")
    );
    assert_eq!((first.tokens.input, first.tokens.output), (10, 5));
    assert_eq!(first.calls[0].tool, "send_message");
    assert_eq!(first.calls[0].ok, Some(true));
    assert!(first.calls[0]
        .result
        .as_deref()
        .unwrap()
        .contains("messageId"));
    assert_eq!(record.tokens.input, 20);
    let family = crate::identity::SpaceKey::new(super::tests::NS, "family");
    let query = crate::store::ReadQuery {
        limit: 10,
        ..Default::default()
    };
    let said = r.store.read_messages(&family, &query).await.unwrap();
    let posted = &record.posted[0];
    assert_eq!(posted.space, "family");
    assert!(said.iter().any(|m| m.id == posted.id && m.text == "8pm"));
}

#[tokio::test]
async fn skipped_and_failed_cycles_are_recorded_with_why() {
    let r = rig(
        "",
        vec![
            Ok(calls(&[("skip", json!({"reason": "not for me"}))])),
            Err(ModelError::new(
                Failure::ServerError,
                "the provider answered 503",
            )),
        ],
    )
    .await;
    assert!(matches!(r.cycle("noise").await, Outcome::Skipped));
    assert!(matches!(r.cycle("again").await, Outcome::Failed(_)));
    let [failed, skipped] = records(&r).await.try_into().unwrap();
    assert_eq!(skipped.outcome, Some(CycleOutcome::Skipped));
    assert_eq!(skipped.checkpoint, None);
    assert_eq!(skipped.reason.as_deref(), Some("not for me"));
    assert_eq!(skipped.steps[0].calls[0].tool, "skip");
    assert_eq!(failed.outcome, Some(CycleOutcome::Failed));
    assert!(
        failed.reason.as_deref().unwrap().contains("503"),
        "{:?}",
        failed.reason
    );
    assert!(failed.steps.is_empty());
}

#[tokio::test]
async fn a_megabyte_of_private_text_and_256_calls_stay_within_bounds_and_are_counted() {
    let huge = "<script>alert(1)</script>".repeat(1024 * 1024 / 25);
    let mut turn: Turn = calls(
        &(0..256)
            .map(|_| ("recall", json!({"query": "x"})))
            .collect::<Vec<_>>(),
    );
    turn.text = Some(huge.clone());
    let r = rig("", vec![Ok(turn), Ok(send("ok")), Ok(text("Done."))]).await;
    r.cycle("Look everything up.").await;
    let [record] = records(&r).await.try_into().unwrap();
    let step = &record.steps[0];
    let kept = step.text.as_deref().unwrap();
    assert!(kept.len() <= TEXT_BYTES);
    assert!(step.text_cut > 0);
    assert_eq!(step.calls.len(), CALLS_PER_STEP);
    assert_eq!(step.calls.len() as u64 + step.calls_cut, 256);
}

#[test]
fn the_agents_secrets_are_masked_in_every_text() {
    let secret = "s3cr3t-t0k3n-value";
    let event = crate::testing::human_event("e1", &format!("my key is {secret}"));
    let mut recorder = Recorder::new(Redactor::new([secret]), &Party::Members, &[event]);
    let mut turn = text(&format!("I will use {secret}"));
    turn.tool_calls.push(ToolCall {
        id: "c".into(),
        name: "fetch".into(),
        arguments: json!({"auth": secret}).to_string(),
    });
    recorder.step(0, Default::default(), Default::default(), None, &turn, "m");
    let outcome = crate::worker::tools::Outcome::error(format!("401 for {secret}"));
    recorder.call(0, &turn.tool_calls[0], Some(&outcome), None);
    let spec = crate::crd::CycleRecordsSpec::default();
    let write = recorder.ended(
        CycleOutcome::Failed,
        Some(format!("echoed {secret}")),
        &spec,
    );
    let json = serde_json::to_string(&write.record).unwrap();
    assert!(!json.contains(secret), "{json}");
    assert!(json.contains("***"));
}

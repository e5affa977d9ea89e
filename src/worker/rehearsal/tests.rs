//! Rehearsals with the scripted model and real HTTP servers playing candidates' models: an
//! equal candidate passes, one that answers differently fails; a candidate whose model
//! fails, one that loops, one over the ceiling end the rehearsal with the reason; and the
//! agent's own data is never touched.

use std::sync::Arc;

use serde_json::json;

use super::{Criteria, Rehearsal, RehearsalError};
use crate::crd::Agent;
use crate::identity::{AgentKey, SpaceKey};
use crate::store::prelude::*;
use crate::store::MemoryStore;
use crate::testing::{human_message, space_record, MockModel, MockTurn};
use crate::worker::cycle::Agentlet;

fn alice(model: &str) -> Agent {
    serde_yaml::from_str(&format!(
        "apiVersion: agentfleet.dev/v1alpha1
kind: Agent
metadata: {{name: alice, namespace: fam}}
spec:
  model: {model}
  instructions: You help the family.
  spaces: [family]
  cycle: {{maxSteps: 4}}"
    ))
    .unwrap()
}

const SCRIPTED: &str = "{provider: scripted, name: scripted}";

fn key() -> AgentKey {
    AgentKey::new("fam", "alice")
}

/// Alice, scripted, lives three cycles in `family` (with Husam and bob): she remembers a
/// fact, says what she remembers, and skips a line for bob.
async fn lived() -> Arc<MemoryStore> {
    let store = Arc::new(MemoryStore::new());
    let family = SpaceKey::new("fam", "family");
    store
        .apply_space(
            &family,
            &space_record("Family", &["alice", "bob"], &["Husam"]),
        )
        .await
        .unwrap();
    store.register_agent(&key()).await.unwrap();
    let agent = alice(SCRIPTED);
    let model = crate::model::client(&agent.spec.model, "alice", Default::default()).unwrap();
    let agentlet = Agentlet::new(
        agent,
        key(),
        store.clone(),
        Arc::from(model),
        crate::telemetry::WorkerMetrics::new().unwrap(),
    );
    for text in [
        "alice, please remember that dinner is at 8",
        "alice, what do you remember?",
        "bob, can you fetch the milk?",
    ] {
        store
            .post_message(&family, &human_message("Husam", text))
            .await
            .unwrap();
        let lease = store
            .acquire_lease(&key(), "w", std::time::Duration::from_secs(60))
            .await
            .unwrap()
            .unwrap();
        let events = store.take_inbox(&key(), &lease).await.unwrap();
        agentlet.cycle(&lease, &events).await.unwrap();
        store.release_lease(&key(), &lease).await.unwrap();
    }
    store
}

fn rehearsal(candidate: Agent, criteria: Criteria) -> Rehearsal {
    let model = crate::model::client(&candidate.spec.model, "alice", Default::default()).unwrap();
    Rehearsal {
        key: key(),
        candidate,
        model: Arc::from(model),
        cycles: 10,
        criteria,
    }
}

fn openai(model: &MockModel) -> String {
    format!(
        "{{provider: openai, name: mock, baseUrl: '{}'}}",
        model.base_url
    )
}

#[tokio::test]
async fn an_equal_candidate_passes_and_a_different_one_fails() {
    let store = lived().await;
    let before = crate::store::snapshot(store.as_ref(), &key())
        .await
        .unwrap();
    let bob = AgentKey::new("fam", "bob");
    let bob_waits = store.inbox_depth(&bob).await.unwrap();

    // New instructions on the same (scripted) model: the same decisions, the same calls.
    let mut equal = alice(SCRIPTED);
    equal.spec.instructions = "You help the family, briefly.".into();
    let mut seen = Vec::new();
    let report = rehearsal(equal, Criteria::default())
        .run(store.as_ref(), |c| seen.push(c.seq))
        .await
        .unwrap();
    let s = &report.summary;
    assert!(
        s.passed,
        "{}",
        serde_json::to_string_pretty(&report).unwrap()
    );
    assert_eq!((s.rehearsed, s.compared), (3, 3));
    assert_eq!((s.reply_agreement, s.tool_agreement), (1.0, 1.0));
    assert_eq!(
        seen,
        [1, 2, 3],
        "each cycle is told as it is done, oldest first"
    );
    let outcomes: Vec<&str> = report
        .cycles
        .iter()
        .map(|c| c.candidate.as_ref().unwrap().outcome.as_str())
        .collect();
    assert_eq!(outcomes, ["replied", "replied", "skipped"]);
    // The first cycle began without the fact it kept: it kept it under the same key again.
    assert_eq!(
        report.cycles[0].candidate.as_ref().unwrap().calls,
        [r#"set_memories {"memories":{"note-1":"dinner is at 8"}}"#],
    );
    let first = store.cycle_record(&key(), 1).await.unwrap().unwrap();
    let first: crate::cycles::CycleRecord = serde_json::from_str(&first).unwrap();
    assert_eq!(
        serde_json::to_value(&first.notes_before).unwrap(),
        json!({"memories": {"note-1": null}}),
        "its record says what the notes it changed were before"
    );

    // A model that answers everything (also the line for bob) fails on replies.
    let eager = MockModel::responding(|r| {
        if crate::testing::last_turn(r).role == "tool" {
            MockTurn::text("Done.")
        } else {
            MockTurn::tools(&[("send_message", json!({"text": "On it!"}))])
        }
    })
    .await
    .unwrap();
    let report = rehearsal(alice(&openai(&eager)), Criteria::default())
        .run(store.as_ref(), |_| {})
        .await
        .unwrap();
    let s = &report.summary;
    assert!(!s.passed);
    assert_eq!(report.cycles[2].reply_agrees, Some(false));
    assert!(
        s.verdict
            .starts_with("the candidate replied or stayed quiet as recorded in 2 of 3 cycles"),
        "{}",
        s.verdict
    );

    // Nothing of the agent changed, and nobody heard the candidates.
    assert_eq!(
        crate::store::snapshot(store.as_ref(), &key())
            .await
            .unwrap(),
        before
    );
    assert_eq!(store.inbox_depth(&bob).await.unwrap(), bob_waits);
    assert_eq!(store.inbox_depth(&key()).await.unwrap(), 0);
    let said = store
        .read_messages(
            &SpaceKey::new("fam", "family"),
            &crate::store::ReadQuery {
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(said.iter().all(|m| m.text != "On it!"), "{said:?}");
    assert_eq!(store.cycle_heads(&key(), None, 100).await.unwrap().len(), 3);
}

#[tokio::test]
async fn a_failing_candidate_ends_the_rehearsal_with_the_reason() {
    let store = lived().await;
    let refusing = MockModel::start(vec![MockTurn::Status(
        400,
        "model mock does not exist".into(),
    )])
    .await
    .unwrap();
    let report = rehearsal(alice(&openai(&refusing)), Criteria::default())
        .run(store.as_ref(), |_| {})
        .await
        .unwrap();
    let s = &report.summary;
    assert!(!s.passed);
    assert_eq!(report.cycles.len(), 1, "it ends at the first failure");
    assert!(
        s.verdict
            .starts_with("the candidate's model failed in place of cycle 1:"),
        "{}",
        s.verdict
    );
    assert!(s.verdict.contains("does not exist"), "{}", s.verdict);
}

#[tokio::test]
async fn a_looping_candidate_stops_at_its_steps_and_an_expensive_one_at_the_ceiling() {
    let store = lived().await;
    // Calls a tool forever: each cycle stops at `cycle.maxSteps`, and the rehearsal goes on.
    let looping =
        MockModel::responding(|_| MockTurn::tools(&[("set_goals", json!({"goal": "think more"}))]))
            .await
            .unwrap();
    let report = rehearsal(alice(&openai(&looping)), Criteria::default())
        .run(store.as_ref(), |_| {})
        .await
        .unwrap();
    assert_eq!(report.cycles.len(), 3);
    for c in &report.cycles {
        let d = c.candidate.as_ref().unwrap();
        assert_eq!(d.steps, 4, "{d:?}");
        assert!(
            d.reason.as_deref().is_some_and(|r| r.contains("maxSteps")),
            "{d:?}"
        );
    }
    assert!(!report.summary.passed);

    // Past the rehearsal's own ceiling it ends, and says so.
    let ceiling = Criteria {
        max_tokens: Some(400),
        ..Criteria::default()
    };
    let report = rehearsal(alice(&openai(&looping)), ceiling)
        .run(store.as_ref(), |_| {})
        .await
        .unwrap();
    assert_eq!(report.cycles.len(), 1);
    let verdict = &report.summary.verdict;
    assert!(
        verdict.starts_with("the candidate spent ")
            && verdict.ends_with("tokens by cycle 1, over the rehearsal's ceiling of 400"),
        "{verdict}"
    );
}

#[tokio::test]
async fn an_agent_without_records_has_nothing_to_rehearse() {
    let store = MemoryStore::new();
    let e = rehearsal(alice(SCRIPTED), Criteria::default())
        .run(&store, |_| {})
        .await
        .unwrap_err();
    assert!(matches!(e, RehearsalError::NoRecords(_)));
    assert_eq!(
        e.to_string(),
        "fam/alice has no cycle records to rehearse (yet, or spec.cycle.records.keep is 0)"
    );
}

/// In place (as `agentfleet dev` rehearses): an agent whose model is a resolved Model list is
/// rehearsed on its first model only; a candidate naming another Model is resolved with the
/// Models given, and one naming a Model that is not there is refused saying so.
#[tokio::test]
async fn in_place_a_model_list_is_rehearsed_on_its_first_model_and_a_named_candidate_resolved() {
    let store = lived().await;
    let mut live = alice(SCRIPTED);
    live.spec.model = serde_yaml::from_str(
        "{ref: mind, provider: scripted, name: scripted, retryAfterSeconds: 60, fallback: [{model: spare, settings: {provider: scripted, name: spare}}]}",
    )
    .unwrap();
    let other: crate::crd::ModelResourceSpec =
        serde_yaml::from_str("{provider: scripted, name: scripted}").unwrap();
    let models: crate::models::Models<'_> = [("other", &other)].into_iter().collect();
    let criteria = Criteria::default();
    let key = |_: &crate::crd::ModelSettings| crate::model::ApiKey::None;
    let run = |name: &'static str, change: &'static str| {
        let change: crate::crd::Candidate = serde_yaml::from_str(change).unwrap();
        (name, change)
    };
    for (name, change) in [run("same", "{}"), run("named", "{model: {ref: other}}")] {
        let request = super::InPlace {
            name,
            change: &change,
            cycles: 3,
            criteria: &criteria,
        };
        let recorded = super::in_place(store.as_ref(), &live, request, &models, &key)
            .await
            .unwrap();
        let report = recorded.report.unwrap();
        assert!(report.summary.passed, "{name}: {:?}", report.summary);
    }
    let (name, change) = run("lost", "{model: {ref: gone}}");
    let request = super::InPlace {
        name,
        change: &change,
        cycles: 3,
        criteria: &criteria,
    };
    let refused = super::in_place(store.as_ref(), &live, request, &models, &key)
        .await
        .unwrap_err();
    assert_eq!(
        refused,
        "the candidate's model: spec.model.ref: no Model \"gone\" in this namespace"
    );
}

//! The cycle's steps with neither Redis nor HTTP: the embedded store and a model played from
//! a list of turns (a real [`Model`], recording what it was asked).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{json, Value};

use super::{Agentlet, Outcome};
use crate::crd::Agent;
use crate::identity::AgentKey;
use crate::identity::SpaceKey;
use crate::model::{
    Delta, Failure, Message, Model, ModelError, Request, ToolCall, ToolChoice, Turn, Usage,
};
use crate::store::{
    prelude::*, InboxEvent, Lease, LiveEvent, Member, MemberKind, MemoryStore, NewMessage,
    ReadQuery, Sender, SpaceRecord, V1,
};
use crate::telemetry::WorkerMetrics;
use crate::testing::WaitInbox;

pub(super) const NS: &str = "fam";

/// A space record with the agent `assistant` and the human Husam.
pub(super) fn record(display_name: &str) -> SpaceRecord {
    SpaceRecord {
        v: V1,
        display_name: display_name.into(),
        members: vec![
            Member {
                kind: MemberKind::Agent,
                id: "assistant".into(),
                name: "assistant".into(),
            },
            Member {
                kind: MemberKind::Human,
                id: "husam".into(),
                name: "Husam".into(),
            },
        ],
        groups: Vec::new(),
        max_messages: 1000,
        max_message_bytes: crate::store::DEFAULT_MAX_MESSAGE_BYTES,
        loop_guard: Default::default(),
        context_id: None,
    }
}

/// A model that plays its turns in order (then ends with "Done."), records every request,
/// and streams each call's arguments in pieces of five characters, as a real model would.
struct Played {
    turns: Mutex<VecDeque<Result<Turn, ModelError>>>,
    requests: Mutex<Vec<Request>>,
}

#[async_trait]
impl Model for Played {
    async fn complete(
        &self,
        request: &Request,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<Turn, ModelError> {
        self.requests.lock().unwrap().push(request.clone());
        let turn = self.turns.lock().unwrap().pop_front();
        let turn = turn.unwrap_or_else(|| Ok(text("Done.")))?;
        for (index, call) in turn.tool_calls.iter().enumerate() {
            let chars: Vec<char> = call.arguments.chars().collect();
            for piece in chars.chunks(5) {
                on_delta(Delta::ToolArguments {
                    index,
                    name: call.name.clone(),
                    delta: piece.iter().collect(),
                });
            }
        }
        Ok(turn)
    }
}

/// A turn of text only.
pub(super) fn text(text: &str) -> Turn {
    Turn {
        text: Some(text.into()),
        tool_calls: Vec::new(),
        usage: Usage {
            input: 10,
            output: 1,
            ..Usage::default()
        },
        finish_reason: None,
    }
}

/// A turn calling `calls` (name, arguments).
pub(super) fn calls(calls: &[(&str, Value)]) -> Turn {
    Turn {
        text: None,
        tool_calls: calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| ToolCall {
                id: format!("call_{i}"),
                name: name.to_string(),
                arguments: args.to_string(),
            })
            .collect(),
        usage: Usage {
            input: 10,
            output: 5,
            ..Usage::default()
        },
        finish_reason: None,
    }
}

pub(super) fn send(text: &str) -> Turn {
    calls(&[("send_message", json!({"space": "family", "text": text}))])
}

fn read() -> Turn {
    calls(&[("read_messages", json!({"space": "family"}))])
}

/// Two steps a cycle: a call, then a plain-text answer that ends the cycle without the nudge
/// (it is the last step).
pub(super) const LAST_STEP_ANSWERS: &str = "  cycle: {maxSteps: 2}";

pub(super) struct Rig {
    pub(super) store: Arc<MemoryStore>,
    model: Arc<Played>,
    pub(super) agentlet: Agentlet,
    pub(super) lease: Lease,
}

/// The agent `assistant` of space `family` (with `extra` spec YAML), its lease, and a model
/// that plays `turns`.
pub(super) async fn rig(extra: &str, turns: Vec<Result<Turn, ModelError>>) -> Rig {
    rig_with(extra, turns, Vec::new()).await
}

/// [`rig`], with tools outside the worker.
pub(super) async fn rig_with(
    extra: &str,
    turns: Vec<Result<Turn, ModelError>>,
    external: Vec<Arc<dyn crate::worker::tools::External>>,
) -> Rig {
    let agent: Agent = serde_yaml::from_str(&format!(
        "apiVersion: agentfleet.dev/v1alpha1
kind: Agent
metadata: {{name: assistant, namespace: {NS}}}
spec:
  model: {{provider: scripted, name: played}}
  spaces: [family]
{extra}"
    ))
    .unwrap();
    let store = Arc::new(MemoryStore::new());
    store
        .apply_space(&SpaceKey::new(NS, "family"), &record("Family"))
        .await
        .unwrap();
    let key = AgentKey::new(NS, "assistant");
    let lease = store
        .acquire_lease(&key, "test", Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    let model = Arc::new(Played {
        turns: Mutex::new(turns.into()),
        requests: Mutex::new(Vec::new()),
    });
    let agentlet = Agentlet::new(
        agent,
        key,
        store.clone(),
        model.clone(),
        WorkerMetrics::new().unwrap(),
    )
    .with_external(external);
    Rig {
        store,
        model,
        agentlet,
        lease,
    }
}

impl Rig {
    /// Husam says `text` in family (urgent or not, with a causal depth).
    pub(super) async fn say(&self, text: &str, urgent: bool, depth: u32) {
        self.store
            .post_message(
                &SpaceKey::new(NS, "family"),
                &NewMessage {
                    sender: Sender {
                        groups: Vec::new(),
                        id: "husam".into(),
                        name: "Husam".into(),
                        kind: Some(MemberKind::Human),
                    },
                    text: text.into(),
                    mention: None,
                    idempotency_key: None,
                    urgent,
                    depth,
                },
            )
            .await
            .unwrap();
    }

    /// The inbox drained in flight, as the process loop does before a cycle.
    pub(super) async fn drain(&self) -> Vec<InboxEvent> {
        self.store
            .wait_inbox(&self.agentlet.key, &self.lease, Duration::from_secs(1))
            .await
            .unwrap()
    }

    /// Husam says `text`; the cycle that handles it.
    pub(super) async fn cycle(&self, text: &str) -> Outcome {
        self.say(text, false, 0).await;
        let events = self.drain().await;
        self.agentlet.cycle(&self.lease, &events).await.unwrap()
    }

    pub(super) fn requests(&self) -> Vec<Request> {
        self.model.requests.lock().unwrap().clone()
    }

    /// The committed consciousness's messages.
    pub(super) async fn remembered(&self) -> Vec<Message> {
        let c = self.store.consciousness(&self.agentlet.key).await.unwrap();
        c.messages
            .iter()
            .map(|m| serde_json::from_str(m).unwrap())
            .collect()
    }

    /// The messages of family, oldest first.
    pub(super) async fn said(&self) -> Vec<(String, u32)> {
        let query = ReadQuery {
            limit: 100,
            ..Default::default()
        };
        let mut m = self
            .store
            .read_messages(&SpaceKey::new(NS, "family"), &query)
            .await
            .unwrap();
        m.reverse();
        m.into_iter().map(|m| (m.text, m.depth)).collect()
    }

    pub(super) async fn in_flight(&self) -> u64 {
        self.store.inflight(&self.agentlet.key).await.unwrap()
    }
}

/// The content of the tool result that ends the model's request number `n` (from 0).
pub(super) fn last_tool_result(r: &Rig, n: usize) -> String {
    match r.requests()[n].messages.last() {
        Some(Message::Tool { content, .. }) => content.clone(),
        other => panic!("request {n} does not end with a tool result: {other:?}"),
    }
}

fn tool_names(request: &Request) -> Vec<&str> {
    request.tools.iter().map(|t| t.name.as_str()).collect()
}

pub(super) fn user_texts(messages: &[Message]) -> Vec<&str> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::User { content } => Some(content.as_str()),
            _ => None,
        })
        .collect()
}

fn results(messages: &[Message]) -> Vec<Value> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool { content, .. } => Some(serde_json::from_str(content).unwrap()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_tool_call_and_its_result_go_into_the_cycles_messages() {
    let r = rig("", vec![Ok(send("Hello!"))]).await;
    let Outcome::Completed(checkpoint) = r.cycle("hi").await else {
        panic!("not committed")
    };
    assert_eq!((checkpoint.cycle, checkpoint.messages), (1, 4));
    let remembered = r.remembered().await;
    assert_eq!(remembered[0], Message::user("[Family] Husam: \"hi\""));
    assert_eq!(remembered[1], send("Hello!").message());
    let Message::Tool { tool_call_id, .. } = &remembered[2] else {
        panic!("{remembered:?}")
    };
    assert_eq!(tool_call_id, "call_0");
    assert_eq!(results(&remembered)[0]["status"], "delivered");
    assert_eq!(remembered[3], text("Done.").message());
    // The second step saw the first one's call and result.
    let requests = r.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1].messages, remembered[..3]);
    assert_eq!(
        r.said().await,
        [("hi".to_string(), 0), ("Hello!".to_string(), 1)]
    );
    assert_eq!(r.in_flight().await, 0, "the events are acknowledged");
    let c = r.store.consciousness(&r.agentlet.key).await.unwrap();
    assert_eq!(c.tokens_used, 15 + 11);
    assert_eq!(r.agentlet.cached_consciousness().await, Some(c));
}

#[tokio::test]
async fn every_json_log_line_of_a_cycle_says_its_namespace_agent_and_cycle() {
    let r = rig(
        "",
        vec![Ok(send("Hello!")), Ok(text("Done.")), Ok(send("Again"))],
    )
    .await;
    r.cycle("hi").await;
    let (logs, _guard) = crate::testing::CapturedLogs::capture_json(tracing::Level::DEBUG);
    let Outcome::Completed(checkpoint) = r.cycle("once more").await else {
        panic!("not committed")
    };
    assert_eq!(checkpoint.cycle, 2);
    let lines: Vec<Value> = logs
        .text()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.len() >= 2, "{lines:?}");
    for line in &lines {
        assert_eq!(line["spans"][0], "cycle", "{line}");
        assert_eq!(line["namespace"], NS, "{line}");
        assert_eq!(line["agent"], "assistant", "{line}");
        assert_eq!(line["cycle"], 2, "{line}");
        assert_eq!(line["events"], 1, "{line}");
    }
    assert!(lines
        .iter()
        .any(|l| l["message"] == "tool call" && l["tool"] == "send_message"));
    assert!(lines.iter().any(|l| l["message"] == "cycle committed"));
}

#[tokio::test]
async fn skip_alone_at_the_first_step_rolls_the_cycle_back() {
    let r = rig(
        "",
        vec![
            Ok(send("first")),
            Ok(text("Done.")),
            Ok(calls(&[("skip", json!({}))])),
        ],
    )
    .await;
    assert!(matches!(r.cycle("one").await, Outcome::Completed(_)));
    let before = r.store.consciousness(&r.agentlet.key).await.unwrap();
    assert!(matches!(r.cycle("two").await, Outcome::Skipped));
    let after = r.store.consciousness(&r.agentlet.key).await.unwrap();
    assert_eq!(after, before, "no message, no cycle count, no checkpoint");
    assert_eq!(r.store.checkpoints(&r.agentlet.key).await.unwrap().len(), 1);
    assert_eq!(r.in_flight().await, 0, "the events are acknowledged");
    assert_eq!(r.agentlet.cached_consciousness().await, Some(before));
    assert_eq!(r.requests().len(), 3, "no step after the skip");
}

#[tokio::test]
async fn skip_beside_other_tools_or_later_only_ends_the_cycle() {
    let beside = calls(&[
        ("send_message", json!({"text": "on it"})),
        ("skip", json!({"reason": "done"})),
    ]);
    let r = rig("", vec![Ok(beside)]).await;
    assert!(matches!(r.cycle("hi").await, Outcome::Completed(_)));
    assert_eq!(r.requests().len(), 1, "the cycle ends with the step");
    let remembered = r.remembered().await;
    assert_eq!(remembered.len(), 4);
    assert_eq!(
        results(&remembered)[1],
        json!({"skipped": true, "note": "the cycle ends here"})
    );
    assert_eq!(r.said().await.len(), 2, "the message sent before stays");

    let r = rig("", vec![Ok(read()), Ok(calls(&[("skip", json!({}))]))]).await;
    let Outcome::Completed(checkpoint) = r.cycle("hi").await else {
        panic!("a later skip rolled back")
    };
    assert_eq!(checkpoint.messages, 5);
    assert_eq!(r.requests().len(), 2);
}

#[tokio::test]
async fn phase_gates_shape_each_step() {
    let extra = "  cycle: {phases: [{fromStep: 0, toStep: 0, activeTools: [read_messages], toolChoice: required}]}";
    let early = calls(&[
        ("send_message", json!({"text": "too early"})),
        ("read_messages", json!({})),
    ]);
    let r = rig(extra, vec![Ok(early)]).await;
    assert!(matches!(r.cycle("hi").await, Outcome::Completed(_)));
    let requests = r.requests();
    assert_eq!(tool_names(&requests[0]), ["read_messages"]);
    assert_eq!(requests[0].tool_choice, ToolChoice::Required);
    // Every built-in but enter_space (the agent has one space) and delete_memories
    // (set_memories forgets): issue 44.
    assert_eq!(requests[1].tools.len(), 6);
    assert_eq!(requests[1].tool_choice, ToolChoice::Auto);
    let results = results(&r.remembered().await);
    assert_eq!(
        results[0]["error"],
        "tool \"send_message\" is not available at this step; available now: read_messages"
    );
    assert_eq!(results[1]["space"], "family", "the offered tool ran");
    assert_eq!(r.said().await.len(), 1, "the gated call sent nothing");
}

#[tokio::test]
async fn urgent_events_are_injected_remembered_and_deepen_the_replies() {
    let r = rig("", vec![Ok(read()), Ok(send("Stopping now."))]).await;
    r.say("please look at the report", false, 0).await;
    let events = r.drain().await;
    r.say("STOP", true, 3).await;
    let outcome = r.agentlet.cycle(&r.lease, &events).await.unwrap();
    assert!(matches!(outcome, Outcome::Completed(_)));
    let injected = "[URGENT — new events injected mid-cycle]\n[Family] Husam: \"STOP\"";
    let requests = r.requests();
    assert!(!user_texts(&requests[0].messages).contains(&injected));
    assert!(user_texts(&requests[1].messages).contains(&injected));
    assert!(user_texts(&r.remembered().await).contains(&injected));
    let said = r.said().await;
    assert_eq!(
        said.last(),
        Some(&("Stopping now.".to_string(), 4)),
        "one deeper than the urgent event"
    );
    assert_eq!(
        r.in_flight().await,
        0,
        "the urgent event is acknowledged too"
    );
}

#[tokio::test]
async fn the_preview_is_shown_to_the_step_and_never_remembered() {
    let r = rig("", vec![Ok(read())]).await;
    r.say("first", false, 0).await;
    let events = r.drain().await;
    r.say("second", false, 0).await;
    assert!(matches!(
        r.agentlet.cycle(&r.lease, &events).await.unwrap(),
        Outcome::Completed(_)
    ));
    let requests = r.requests();
    // The preview comes with the fresh context, after the conversation.
    let context = &requests[1].context;
    let (fresh, preview) = context.split_once("[INBOX PREVIEW").unwrap();
    assert!(fresh.starts_with(crate::model::format::CONTEXT_HEADING));
    assert!(preview.contains("second"), "{preview}");
    assert!(matches!(
        requests[1].messages.last(),
        Some(Message::Tool { .. })
    ));
    let stored = r.store.consciousness(&r.agentlet.key).await.unwrap();
    assert!(!stored
        .messages
        .iter()
        .any(|m| m.contains("INBOX PREVIEW") || m.contains("[CONTEXT")));
    let waiting = r.store.inbox_depth(&r.agentlet.key).await.unwrap();
    assert_eq!(waiting, 1, "it waits for the next cycle");

    let off = rig("  cycle: {midCycleInbox: 'off'}", vec![Ok(read())]).await;
    off.say("first", false, 0).await;
    let events = off.drain().await;
    off.say("second", false, 0).await;
    off.agentlet.cycle(&off.lease, &events).await.unwrap();
    let context = &off.requests()[1].context;
    assert!(!context.contains("INBOX PREVIEW"), "{context}");
}

#[tokio::test]
async fn the_token_budget_and_max_steps_stop_the_loop() {
    let mut costly = read();
    costly.usage = Usage {
        input: 900,
        output: 100,
        ..Usage::default()
    };
    let stops = |r: &Rig, reason: &str| {
        r.agentlet
            .metrics
            .cycle_stops
            .with_label_values(&[NS, "assistant", reason])
            .get()
    };
    let r = rig("  cycle: {tokenBudget: 1000}", vec![Ok(costly)]).await;
    let Outcome::Completed(checkpoint) = r.cycle("hi").await else {
        panic!("not committed")
    };
    assert_eq!(r.requests().len(), 1, "no step after the budget is spent");
    assert_eq!(checkpoint.messages, 3, "the call and its result are kept");
    let c = r.store.consciousness(&r.agentlet.key).await.unwrap();
    assert_eq!(c.tokens_used, 1000);
    // Said in the space (the build before issue 26 ended such cycles silently), and counted.
    assert_eq!(
        r.said().await.last().unwrap().0,
        "assistant stopped after spending 1000 tokens in one cycle (cycle.tokenBudget 1000); what it did is remembered, and a new message lets it go on"
    );
    assert_eq!(stops(&r, "token_budget"), 1);

    let r = rig(
        "  cycle: {maxSteps: 2}",
        vec![Ok(read()), Ok(read()), Ok(read())],
    )
    .await;
    let Outcome::Completed(checkpoint) = r.cycle("hi").await else {
        panic!("not committed")
    };
    assert_eq!(r.requests().len(), 2);
    assert_eq!(checkpoint.messages, 5, "it ends on the last step's results");
    let said = r.said().await;
    assert_eq!(
        said.last().unwrap().0,
        "assistant stopped after 2 steps (cycle.maxSteps) while it was still using tools; what it did is remembered, and a new message lets it go on"
    );
    assert_eq!((stops(&r, "max_steps"), stops(&r, "token_budget")), (1, 0));

    // A cycle the model ends itself at its last step says nothing.
    let r = rig(
        "  cycle: {maxSteps: 2}",
        vec![Ok(read()), Ok(text("Done."))],
    )
    .await;
    assert!(matches!(r.cycle("hi").await, Outcome::Completed(_)));
    assert_eq!(r.said().await.len(), 1, "only Husam's message");
    assert_eq!(stops(&r, "max_steps"), 0);
}

#[tokio::test]
async fn a_model_failure_commits_nothing_and_keeps_the_events() {
    let refused = ModelError::new(Failure::ServerError, "503");
    let r = rig("", vec![Ok(send("sent before the failure")), Err(refused)]).await;
    let Outcome::Failed(e) = r.cycle("hi").await else {
        panic!("not failed")
    };
    assert_eq!(e.failure, Failure::ServerError);
    let c = r.store.consciousness(&r.agentlet.key).await.unwrap();
    assert_eq!((c.cycle, c.messages.len()), (0, 0));
    assert!(r
        .store
        .checkpoints(&r.agentlet.key)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(r.in_flight().await, 1, "the events stay in flight");
    assert_eq!(r.agentlet.cached_consciousness().await, None);
}

#[tokio::test]
async fn send_message_text_streams_to_the_space() {
    let r = rig("", vec![Ok(send("Hello, family!"))]).await;
    let mut live = r
        .store
        .subscribe_live(&SpaceKey::new(NS, "family"))
        .await
        .unwrap();
    assert!(matches!(r.cycle("hi").await, Outcome::Completed(_)));
    let mut streamed = String::new();
    let mut ids = Vec::new();
    while let Ok(Some(event)) = tokio::time::timeout(Duration::from_millis(200), live.next()).await
    {
        if let LiveEvent::Delta {
            stream_id, delta, ..
        } = event
        {
            streamed.push_str(&delta);
            ids.push(stream_id);
        }
    }
    assert_eq!(streamed, "Hello, family!");
    ids.dedup();
    assert_eq!(ids.len(), 1);
    assert!(
        ids[0].starts_with("fam/assistant:") && ids[0].ends_with(":0:0"),
        "{}",
        ids[0]
    );
}

#[tokio::test]
async fn compaction_summarizes_what_drops_out_and_counts_its_tokens() {
    // One step a cycle: the plain-text replies end it without the nudge.
    let extra =
        "  consciousness: {windowTokens: 60, keepRecentMessages: 2}\n  cycle: {maxSteps: 1}";
    let summary = Turn {
        text: Some("Husam said a lot.".into()),
        tool_calls: Vec::new(),
        usage: Usage {
            input: 100,
            output: 7,
            ..Usage::default()
        },
        finish_reason: None,
    };
    let r = rig(
        extra,
        vec![Ok(text("noted")), Ok(text("noted")), Ok(summary)],
    )
    .await;
    r.cycle(&"a".repeat(100)).await;
    let Outcome::Completed(checkpoint) = r.cycle(&"b".repeat(100)).await else {
        panic!("not committed")
    };
    let requests = r.requests();
    let asked = &requests[2];
    assert_eq!(
        (asked.tools.len(), &asked.tool_choice),
        (0, &ToolChoice::None)
    );
    let c = r.store.consciousness(&r.agentlet.key).await.unwrap();
    assert_eq!(c.summary.as_deref(), Some("Husam said a lot."));
    assert_eq!(c.start, 2, "the first cycle's messages dropped out");
    assert_eq!(checkpoint.start, 2);
    assert_eq!(c.tokens_used, 11 + 11 + 107, "the summary's tokens count");
    assert_eq!(r.agentlet.cached_consciousness().await, Some(c));
}

#[tokio::test]
async fn tokens_are_counted_by_direction_with_what_the_cache_served() {
    let mut cached = read();
    cached.usage = Usage {
        input: 1000,
        output: 40,
        cache_read: 900,
        cache_write: 0,
    };
    let mut written = text("done");
    written.usage = Usage {
        input: 1100,
        output: 10,
        cache_read: 0,
        cache_write: 1000,
    };
    let r = rig(LAST_STEP_ANSWERS, vec![Ok(cached), Ok(written)]).await;
    assert!(matches!(r.cycle("hi").await, Outcome::Completed(_)));
    let counted = |direction: &str| {
        r.agentlet
            .metrics
            .tokens
            .with_label_values(&[NS, "assistant", "played", direction])
            .get()
    };
    assert_eq!(
        ["input", "cache_read", "cache_write", "output"].map(counted),
        [100 + 100, 900, 1000, 50],
        "disjoint: their sum is every token used"
    );
    let c = r.store.consciousness(&r.agentlet.key).await.unwrap();
    assert_eq!(
        c.tokens_used,
        2100 + 50,
        "prompt and completion tokens, cached or not"
    );
}

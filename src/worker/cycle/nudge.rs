//! The one nudge (seed 000 "What Happens Inside": the agent's text is private; only
//! `send_message` reaches a space). A cycle woken by a human's message that is about to end
//! with the model's plain text — no `send_message`, no `skip`, nothing asked — would leave that
//! human with silence, as small real models often do. Once per cycle, while a step remains,
//! the model is told so and gets one more step to answer or skip; never a loop. Counted in
//! `agentfleet_cycle_nudges_total`.

use super::journal::Entry;
use super::Cycle;
use crate::crd::MemberKind;
use crate::model::Message;
use crate::store::EventKind;

/// Tools that answer, or say on purpose that there is nothing to answer.
const ANSWERS: &[&str] = &["send_message", "skip"];

impl Cycle<'_> {
    /// Whether the cycle that is about to end after `step` deserves the nudge; if so, adds
    /// it (journaled, so a resumed cycle sees it too) and counts it.
    pub(super) fn nudged(&mut self, step: u32) -> bool {
        if self.nudged
            || step + 1 >= self.agentlet.agent.spec.cycle.max_steps
            || !self.events.iter().any(from_a_human)
            || self.answered()
        {
            return false;
        }
        self.nudged = true;
        let message = "[agentfleet] Your text above is private: nobody in the spaces saw it. \
                       To answer, call send_message now; if nothing needs an answer, call skip."
            .to_string();
        self.journal_later(Entry::Urgent {
            message: message.clone(),
            depth: self.depth,
            events: Vec::new(),
        });
        self.new.push(Message::user(message));
        let key = &self.agentlet.key;
        self.agentlet
            .metrics
            .cycle_nudges
            .with_label_values(&[&key.namespace, &key.name])
            .inc();
        true
    }

    /// Whether the cycle has called a tool of [`ANSWERS`].
    fn answered(&self) -> bool {
        self.new.iter().any(|m| match m {
            Message::Assistant { tool_calls, .. } => tool_calls
                .iter()
                .any(|c| ANSWERS.contains(&c.name.as_str())),
            _ => false,
        })
    }
}

/// A human's message in a space.
fn from_a_human(e: &crate::store::InboxEvent) -> bool {
    e.kind == EventKind::SpaceMessage
        && e.sender
            .as_ref()
            .is_some_and(|s| s.kind == Some(MemberKind::Human))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::tests::{calls, record, rig, send, text, user_texts, Rig, NS};
    use super::super::Outcome;
    use crate::crd::{MemberKind, ResolvedMember};
    use crate::membership::SpaceKey;
    use crate::store::{prelude::*, NewMessage, Sender};

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
            .any(|t| t.contains("nobody in the spaces saw it"))
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
            remembered.contains("nobody in the spaces saw it"),
            "the nudge is part of the cycle's story"
        );
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
        family.members.push(ResolvedMember {
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
}

//! `skip` (seed 000 "Skip Cycle"), all of it: called alone at the first step it rolls the
//! whole cycle back (no consciousness change, no cycle count, no checkpoint; the events are
//! acknowledged), as if the cycle never happened. Called later, or beside other tools that
//! have then already run, it only ends the cycle after the step's calls.

use tracing::info;

use super::Cycle;
use crate::crd::BuiltinTool;
use crate::cycles::CycleOutcome;
use crate::model::ToolCall;
use crate::store::{Receipt, ReceiptOutcome, StoreError};
use crate::worker::tools;

/// Whether a step's calls roll the cycle back: `skip` alone, at the first step.
pub(super) fn rolls_back(step: u32, calls: &[ToolCall]) -> bool {
    step == 0 && !calls.is_empty() && calls.iter().all(is_skip)
}

/// The result of a `skip` call that does not roll the cycle back (the cycle ends after this
/// step's calls); `None` for any other call.
pub(super) fn ends_cycle(call: &ToolCall) -> Option<tools::Outcome> {
    is_skip(call).then(tools::skip_result)
}

fn is_skip(call: &ToolCall) -> bool {
    call.name == BuiltinTool::Skip.name()
}

impl Cycle<'_> {
    /// Rolls the cycle back: acknowledges its events, and keeps the consciousness it loaded
    /// (nothing changed, so it stays valid for the next cycle).
    pub(super) async fn roll_back(mut self) -> Result<(), StoreError> {
        let agentlet = self.agentlet;
        self.note_changes().await;
        let record = self.record_write(CycleOutcome::Skipped, None);
        let receipt = Receipt::new(ReceiptOutcome::Skipped, None, None);
        agentlet
            .store
            .end_cycle_recorded(&agentlet.key, self.lease, &receipt, Some(&record))
            .await?;
        // A conversation with a memory of its own never had the agent's consciousness.
        if self.remembers {
            agentlet
                .remember(self.lease, self.consciousness, self.history)
                .await;
        }
        info!(
            elapsed_ms = self.started.elapsed().as_millis() as u64,
            "skipped: rolled back"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str) -> ToolCall {
        ToolCall {
            id: format!("id-{name}"),
            name: name.into(),
            arguments: "{}".into(),
        }
    }

    #[test]
    fn only_skip_alone_at_the_first_step_rolls_back() {
        assert!(rolls_back(0, &[call("skip")]));
        assert!(rolls_back(0, &[call("skip"), call("skip")]));
        assert!(
            !rolls_back(1, &[call("skip")]),
            "later it only ends the cycle"
        );
        assert!(!rolls_back(0, &[call("send_message"), call("skip")]));
        assert!(!rolls_back(0, &[]));
    }

    #[test]
    fn a_skip_that_does_not_roll_back_ends_the_cycle() {
        let outcome = ends_cycle(&call("skip")).unwrap();
        assert!(outcome.ok);
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&outcome.content).unwrap(),
            serde_json::json!({"skipped": true, "note": "the cycle ends here"})
        );
        assert!(ends_cycle(&call("send_message")).is_none());
    }
}

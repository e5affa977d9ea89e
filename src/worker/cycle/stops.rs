//! A cycle stopped before the model was done (seed 000 "Stopping Conditions"; issue 26):
//! at `cycle.maxSteps` while the model still calls tools, past `cycle.tokenBudget`, or with
//! an async call refused because the chain of cycles since the last person's event reached
//! `cycle.maxChainDepth`. The cycle is committed as usual; what stopped it is said in the
//! space (a notice from agentfleet, once per cycle and reason) and counted in
//! `agentfleet_cycle_stops_total{reason}`, so nobody waits for an answer that will not come.

use tracing::{info, warn};

use super::{Agentlet, Cycle};
use crate::identity::SpaceKey;
use crate::model::ToolCall;
use crate::worker::tools::Outcome;

/// Why a cycle stopped short.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stop {
    /// `cycle.maxSteps` reached while the model still called tools.
    MaxSteps,
    /// `cycle.tokenBudget` spent.
    TokenBudget,
    /// An async call refused at `cycle.maxChainDepth`.
    Chain,
}

impl Stop {
    /// Every value of [`Stop::label`].
    pub(super) const LABELS: [&'static str; 3] = ["max_steps", "token_budget", "chain"];

    /// The `reason` label of `agentfleet_cycle_stops_total`.
    fn label(self) -> &'static str {
        match self {
            Stop::MaxSteps => "max_steps",
            Stop::TokenBudget => "token_budget",
            Stop::Chain => "chain",
        }
    }
}

/// What a committed cycle that stopped short has to say, and where.
pub(super) struct Told {
    stops: Vec<(Stop, String)>,
    spaces: Vec<String>,
    batch: String,
}

impl Cycle<'_> {
    /// Notes that the cycle stopped for `stop` (said once per reason).
    pub(super) fn stopped(&mut self, stop: Stop, why: String) {
        if self.stops.iter().all(|(s, _)| *s != stop) {
            self.recorder.note(why.clone());
            self.stops.push((stop, why));
        }
    }

    /// The error result that refuses `call` when it would continue the cycle's chain past
    /// `cycle.maxChainDepth` (an async tool's result would wake another cycle), else `None`.
    pub(super) fn chain_refusal(&mut self, call: &ToolCall) -> Option<Outcome> {
        let max = self.agentlet.agent.spec.cycle.max_chain_depth;
        let continues = self
            .agentlet
            .toolbox()
            .external(&call.name)
            .is_some_and(|e| e.continues(&call.name));
        if !continues || self.depth < max {
            return None;
        }
        let why = format!(
            "{} did not start {}: this is cycle {} of a chain that tool results started since the last message of a person, and an agent goes on alone for at most {max} (cycle.maxChainDepth); a new message lets it go on",
            self.agentlet.key.name, call.name, self.depth
        );
        self.stopped(Stop::Chain, why);
        Some(Outcome::error(format!(
            "not started: tool results have woken you {max} times in a row without a person (cycle.maxChainDepth), and this call's result would wake you again. Tell the people in your space what you have and what you would do next, and wait for them"
        )))
    }

    /// What is to be told once the cycle is committed (nothing when it did not stop short).
    /// The stops stay: the cycle's record says them too.
    pub(super) fn take_told(&mut self) -> Option<Told> {
        if self.stops.is_empty() {
            return None;
        }
        Some(Told {
            stops: self.stops.clone(),
            spaces: self.agentlet.told_in(self.events, self.active.as_deref()),
            batch: self.batch.clone(),
        })
    }
}

impl Agentlet {
    /// Says in the spaces why a committed cycle stopped short, once per cycle and reason (a
    /// redone cycle posts nothing new), and counts it.
    pub(super) async fn tell_stopped(&self, told: Told) {
        let [ns, agent] = self.labels();
        for (stop, why) in &told.stops {
            self.metrics
                .cycle_stops
                .with_label_values(&[ns, agent, stop.label()])
                .inc();
            info!(agent = %self.key, reason = stop.label(), "{why}");
            for space in &told.spaces {
                let key = format!("stop:{}:{}:{}", self.key, told.batch, stop.label());
                let space = SpaceKey::new(self.key.namespace.clone(), space.clone());
                if let Err(e) = self.store.post_notice(&space, why, Some(&key)).await {
                    warn!(agent = %self.key, space = %space, error = %e, "the notice of a stopped cycle was not posted");
                }
            }
        }
    }
}

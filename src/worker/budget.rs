//! The agent's spending as its worker sees it (`spec.budget`, `status.tokens`): every model
//! call's tokens are counted in the data plane as the call returns (whatever then becomes of
//! the cycle), and what the data plane answers is kept here. A cycle ends cleanly once a
//! period's budget is spent, and no cycle starts until the period rolls over: the events wait
//! in the inbox, nothing is lost.

use std::time::Duration;

use tracing::{info, warn};

use super::cycle::Agentlet;
use crate::crd::{Exhausted, Periods};
use crate::model::Usage;
use crate::store::{now_ms, StoreError, TokenSpend};

/// What this worker knows of the agent's spending (`None` until first read or counted).
#[derive(Default)]
pub(crate) struct Spending {
    known: tokio::sync::Mutex<Option<TokenSpend>>,
}

impl Agentlet {
    /// Counts the tokens of one model call (a step, a summary). A data plane that does not
    /// answer costs a warning, never the cycle: the call was made either way.
    pub(crate) async fn count_tokens(&self, usage: &Usage) {
        let periods = Periods::at(now_ms());
        match self.store.record_tokens(&self.key, &periods, usage).await {
            Ok(spend) => *self.spending.known.lock().await = Some(spend),
            Err(e) => warn!(agent = %self.key, error = %e, "the call's tokens were not counted"),
        }
    }

    /// Whether the agent has spent a budget as of what this worker last knew (a running
    /// cycle ends at once when it has).
    pub(crate) async fn budget_spent(&self) -> Option<Exhausted> {
        let budget = self.agent.spec.budget.as_ref()?;
        let known = self.spending.known.lock().await;
        let periods = Periods::at(now_ms());
        budget.exhausted(known.as_ref()?.spent(&periods), &periods)
    }

    /// Before a cycle: whether a budget is spent, read from the data plane when this worker
    /// knows nothing yet (a new session).
    pub(crate) async fn budget_before_cycle(&self) -> Result<Option<Exhausted>, StoreError> {
        if self.agent.spec.budget.is_none() {
            return Ok(None);
        }
        if self.spending.known.lock().await.is_none() {
            let periods = Periods::at(now_ms());
            let spend = self
                .store
                .record_tokens(&self.key, &periods, &Usage::default())
                .await?;
            *self.spending.known.lock().await = Some(spend);
        }
        Ok(self.budget_spent().await)
    }
}

/// How long to wait before looking at a spent budget again: until it rolls over, at most
/// `longest` (so that shutdown and a lost lease are noticed).
pub(crate) fn wait_for_roll_over(spent: &Exhausted, longest: Duration) -> Duration {
    let left = u64::try_from(spent.until_ms.saturating_sub(now_ms())).unwrap_or(0);
    Duration::from_millis(left).min(longest)
}

/// Logs that the agent stopped calling the model, once per spent period.
pub(crate) fn announce(agent: &Agentlet, spent: &Exhausted, last: &mut Option<(String, i64)>) {
    let this = (spent.period.to_string(), spent.until_ms);
    if last.as_ref() != Some(&this) {
        info!(agent = %agent.key, reason = spent.reason(), "{}", spent.message());
        *last = Some(this);
    }
}

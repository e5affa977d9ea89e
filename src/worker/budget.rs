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

/// How often a worker whose budget is spent looks at its inbox (to say why it does not
/// answer what arrives) and at the clock.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// How long to wait before looking at a spent budget again: until it rolls over, at most
/// [`LOOK_EVERY`].
pub(crate) fn wait_for_roll_over(spent: &Exhausted) -> Duration {
    let left = u64::try_from(spent.until_ms.saturating_sub(now_ms())).unwrap_or(0);
    Duration::from_millis(left).min(LOOK_EVERY)
}

/// What a worker whose budget is spent has told so far.
#[derive(Default)]
pub(crate) struct Told {
    /// The spent period last logged (`period`, until when).
    period: Option<(&'static str, i64)>,
    /// The events waiting when the agent's spaces were last told.
    waiting: Option<u64>,
}

impl Agentlet {
    /// Says that the budget is spent: in the log once per spent period, and in the agent's
    /// spaces (an `error` activity: `chat` shows "! NAME cannot answer: …") when it is first
    /// seen and whenever more events arrive meanwhile, so that whoever wrote knows why no
    /// answer comes and until when.
    pub(crate) async fn tell_spent(&self, spent: &Exhausted, told: &mut Told) {
        let period = (spent.period, spent.until_ms);
        if told.period != Some(period) {
            info!(agent = %self.key, reason = spent.reason(), "{}", spent.message());
            told.period = Some(period);
            told.waiting = None;
        }
        let waiting = match self.store.inbox_depth(&self.key).await {
            Ok(n) => n,
            Err(e) => {
                warn!(agent = %self.key, error = %e, "cannot count the waiting events");
                return;
            }
        };
        if told.waiting.is_some_and(|before| waiting <= before) {
            told.waiting = Some(waiting);
            return;
        }
        told.waiting = Some(waiting);
        for space in &self.agent.spec.spaces {
            self.publish_activity(Some(space), "error", None, Some(spent.message()))
                .await;
        }
    }
}

//! `status.tokens` and the `BudgetExhausted` condition, from the tokens the worker counted in
//! the data plane and the Agent's `spec.budget` (the rule itself: [`BudgetSpec::exhausted`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;

use super::{merge, Cond};
use crate::crd::{BudgetSpec, Exhausted, Periods, Spent, TokensStatus};
use crate::store::AgentObservation;

/// Condition: a token budget of the agent is spent (only with `spec.budget`; reasons
/// `DailyBudgetSpent`, `MonthlyBudgetSpent`, and `WithinBudget` when `False`).
pub const BUDGET_EXHAUSTED: &str = "BudgetExhausted";

/// What the agent spent in the budget periods of `now_ms`.
fn spent_now(seen: &AgentObservation, periods: &Periods) -> Spent {
    seen.tokens
        .as_ref()
        .map(|t| t.spent(periods))
        .unwrap_or_default()
}

/// The spent budget of an agent at `now_ms`, if one is: no worker is woken for its inbox
/// until then (it would call no model), and the loop looks again when it rolls over.
pub fn spent(
    budget: Option<&BudgetSpec>,
    seen: &AgentObservation,
    now_ms: i64,
) -> Option<Exhausted> {
    let budget = budget?;
    let periods = Periods::at(now_ms);
    budget.exhausted(spent_now(seen, &periods), &periods)
}

/// Tokens left before a budget is spent (`None`: no budget), by period.
pub fn remaining(budget: &BudgetSpec, seen: &AgentObservation, now_ms: i64) -> [Option<u64>; 2] {
    budget.left(spent_now(seen, &Periods::at(now_ms)))
}

/// `status.tokens`, once the worker counted a call.
pub fn tokens(seen: &AgentObservation, now_ms: i64) -> Option<TokensStatus> {
    let t = seen.tokens.as_ref()?;
    let s = t.spent(&Periods::at(now_ms));
    Some(TokensStatus {
        input: t.input,
        cache_read: t.cache_read,
        cache_write: t.cache_write,
        output: t.output,
        today: s.day,
        this_month: s.month,
    })
}

/// `BudgetExhausted` (none without a budget), its time kept from `previous` until its status
/// flips.
pub fn budget_condition(
    budget: Option<&BudgetSpec>,
    seen: &AgentObservation,
    previous: &[Condition],
    now: Timestamp,
) -> Option<Condition> {
    let budget = budget.filter(|b| b.is_set())?;
    let now_ms = now.as_millisecond();
    let cond = match spent(Some(budget), seen, now_ms) {
        Some(e) => Cond::ok(BUDGET_EXHAUSTED, e.reason(), e.message()),
        None => {
            let [day, month] = remaining(budget, seen, now_ms);
            let left: Vec<String> = [(day, "today"), (month, "this month (UTC)")]
                .into_iter()
                .filter_map(|(n, when)| n.map(|n| format!("{n} tokens left {when}")))
                .collect();
            Cond::fail(BUDGET_EXHAUSTED, "WithinBudget", left.join(", "))
        }
    };
    merge(previous, &[cond], None, now).into_iter().next()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::TokenSpend;

    fn seen_at(now: Timestamp, day_tokens: u64, month_tokens: u64) -> AgentObservation {
        let p = Periods::at(now.as_millisecond());
        AgentObservation {
            tokens: Some(TokenSpend {
                input: 10,
                cache_read: 20,
                cache_write: 5,
                output: 7,
                day: p.day,
                day_tokens,
                month: p.month,
                month_tokens,
            }),
            ..AgentObservation::default()
        }
    }

    #[test]
    fn the_condition_says_what_is_left_or_until_when_it_is_spent() {
        let now: Timestamp = "2026-11-23T10:00:00Z".parse().unwrap();
        let budget = BudgetSpec {
            tokens_per_day: Some(1000),
            tokens_per_month: Some(50_000),
        };
        let within = budget_condition(Some(&budget), &seen_at(now, 400, 9000), &[], now).unwrap();
        assert_eq!(
            (within.status.as_str(), within.reason.as_str()),
            ("False", "WithinBudget")
        );
        assert_eq!(
            within.message,
            "600 tokens left today, 41000 tokens left this month (UTC)"
        );
        let spent =
            budget_condition(Some(&budget), &seen_at(now, 1000, 9000), &[within], now).unwrap();
        assert_eq!(
            (spent.status.as_str(), spent.reason.as_str()),
            ("True", "DailyBudgetSpent")
        );
        assert!(
            spent.message.contains("2026-11-24T00:00:00Z"),
            "{}",
            spent.message
        );
        // The next day counts from 0 (what the data plane holds is yesterday's).
        let tomorrow: Timestamp = "2026-11-24T00:00:01Z".parse().unwrap();
        let next = budget_condition(
            Some(&budget),
            &seen_at(now, 1000, 9000),
            std::slice::from_ref(&spent),
            tomorrow,
        )
        .unwrap();
        assert_eq!(next.reason, "WithinBudget");
        assert_eq!(
            tokens(&seen_at(now, 1000, 9000), tomorrow.as_millisecond())
                .unwrap()
                .today,
            0
        );
        // No budget, no condition; no calls yet, nothing spent.
        assert_eq!(
            budget_condition(None, &seen_at(now, 1000, 9000), &[], now),
            None
        );
        let fresh = AgentObservation::default();
        assert_eq!(
            budget_condition(Some(&budget), &fresh, &[], now)
                .unwrap()
                .reason,
            "WithinBudget"
        );
        assert_eq!(tokens(&fresh, 0), None);
    }
}

//! `spec.budget`: how many model tokens an agent may spend per UTC day and per UTC month, and
//! the one rule of whether it has spent them (the worker stops calling the model by it, the
//! operator shows `BudgetExhausted` by it).

use jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::periods::{Periods, Spent};

/// Tokens an agent may spend. Every token a model call reports counts: the prompt (read from
/// the provider's cache or not) and the output, of cycles that commit, skip or fail alike.
/// When a period's budget is spent the agent stops calling the model until the period rolls
/// over (UTC) or the budget is raised: events wait in its inbox, nothing is lost, and the
/// cycle under way ends cleanly at the limit (as at `cycle.tokenBudget`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetSpec {
    /// Tokens per UTC day (from 00:00 UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub tokens_per_day: Option<u64>,

    /// Tokens per UTC calendar month (from the 1st, 00:00 UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub tokens_per_month: Option<u64>,
}

/// A budget that is spent: which, and until when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exhausted {
    /// `day` or `month`.
    pub period: &'static str,
    /// The budget.
    pub limit: u64,
    /// What was spent in the period.
    pub spent: u64,
    /// When the period rolls over (ms since the epoch).
    pub until_ms: i64,
}

impl Exhausted {
    /// The condition's reason: `DailyBudgetSpent`, `MonthlyBudgetSpent`.
    pub fn reason(&self) -> &'static str {
        match self.period {
            "day" => "DailyBudgetSpent",
            _ => "MonthlyBudgetSpent",
        }
    }

    /// For people: what was spent, and when the agent goes on.
    pub fn message(&self) -> String {
        let until = Timestamp::from_millisecond(self.until_ms)
            .map_or_else(|_| "later".to_string(), |t| t.to_string());
        format!(
            "{} of the {} budget of {} tokens spent; the agent calls no model until {until} (UTC) or a raised budget, and its events wait in the inbox",
            self.spent,
            if self.period == "day" { "daily" } else { "monthly" },
            self.limit
        )
    }
}

impl BudgetSpec {
    /// Whether any budget is set.
    pub fn is_set(&self) -> bool {
        self.tokens_per_day.is_some() || self.tokens_per_month.is_some()
    }

    /// The spent budget with the latest roll-over, if any is spent (the agent goes on only
    /// when every spent period has rolled over).
    pub fn exhausted(&self, spent: Spent, periods: &Periods) -> Option<Exhausted> {
        let day = self
            .tokens_per_day
            .filter(|limit| spent.day >= *limit)
            .map(|limit| Exhausted {
                period: "day",
                limit,
                spent: spent.day,
                until_ms: periods.day_ends_ms,
            });
        let month = self
            .tokens_per_month
            .filter(|limit| spent.month >= *limit)
            .map(|limit| Exhausted {
                period: "month",
                limit,
                spent: spent.month,
                until_ms: periods.month_ends_ms,
            });
        month.or(day)
    }

    /// Tokens left in each period, `[day, month]` (`None`: no budget for that period).
    pub fn left(&self, spent: Spent) -> [Option<u64>; 2] {
        [
            self.tokens_per_day.map(|l| l.saturating_sub(spent.day)),
            self.tokens_per_month.map(|l| l.saturating_sub(spent.month)),
        ]
    }

    /// Tokens left before a budget is spent (`None`: no budget).
    pub fn remaining(&self, spent: Spent) -> Option<u64> {
        match self.left(spent) {
            [Some(d), Some(m)] => Some(d.min(m)),
            [d, m] => d.or(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(rfc3339: &str) -> i64 {
        rfc3339.parse::<Timestamp>().unwrap().as_millisecond()
    }

    #[test]
    fn a_budget_is_spent_at_its_limit_and_the_later_roll_over_wins() {
        let p = Periods::at(ms("2026-11-23T10:00:00Z"));
        let b = BudgetSpec {
            tokens_per_day: Some(1000),
            tokens_per_month: Some(5000),
        };
        assert_eq!(
            b.exhausted(
                Spent {
                    day: 999,
                    month: 999
                },
                &p
            ),
            None
        );
        assert_eq!(
            b.remaining(Spent {
                day: 999,
                month: 999
            }),
            Some(1)
        );
        let day = b
            .exhausted(
                Spent {
                    day: 1000,
                    month: 1000,
                },
                &p,
            )
            .unwrap();
        assert_eq!((day.period, day.reason()), ("day", "DailyBudgetSpent"));
        assert_eq!(day.until_ms, ms("2026-11-24T00:00:00Z"));
        assert!(
            day.message().contains("2026-11-24T00:00:00Z"),
            "{}",
            day.message()
        );
        let both = b
            .exhausted(
                Spent {
                    day: 1200,
                    month: 5000,
                },
                &p,
            )
            .unwrap();
        assert_eq!(both.reason(), "MonthlyBudgetSpent");
        assert_eq!(both.until_ms, ms("2026-12-01T00:00:00Z"));
        assert_eq!(
            b.remaining(Spent {
                day: 10,
                month: 4995
            }),
            Some(5)
        );
        assert_eq!(
            BudgetSpec::default().exhausted(
                Spent {
                    day: u64::MAX,
                    month: u64::MAX
                },
                &p
            ),
            None
        );
        assert_eq!(BudgetSpec::default().remaining(Spent::default()), None);
    }
}

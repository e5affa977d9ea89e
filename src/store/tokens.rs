//! The tokens an agent spends, as the worker counts them at every model call: by direction
//! over its life, and in the budget periods (`spec.budget`, `status.tokens`).

use std::collections::HashMap;

use crate::model::Usage;
use crate::periods::{Periods, Spent};

/// The model tokens an agent spent, counted at every model call (`status.tokens`, budgets):
/// by direction over its life, and in the budget periods of its last call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenSpend {
    /// Prompt tokens billed in full.
    pub input: u64,
    /// Prompt tokens read from the provider's cache.
    pub cache_read: u64,
    /// Prompt tokens written to the provider's cache.
    pub cache_write: u64,
    /// Output tokens.
    pub output: u64,
    /// The UTC day of `day_tokens` (`2026-11-23`).
    pub day: String,
    /// Every token of that day.
    pub day_tokens: u64,
    /// The UTC month of `month_tokens` (`2026-11`).
    pub month: String,
    /// Every token of that month.
    pub month_tokens: u64,
}

impl TokenSpend {
    /// What was spent in `periods` (nothing yet when the last call was in an earlier one).
    pub fn spent(&self, periods: &Periods) -> Spent {
        Spent {
            day: if self.day == periods.day {
                self.day_tokens
            } else {
                0
            },
            month: if self.month == periods.month {
                self.month_tokens
            } else {
                0
            },
        }
    }
}

impl TokenSpend {
    /// Counts `usage` of calls made in `periods` (a period that rolled over starts from 0).
    pub fn add(&mut self, periods: &Periods, usage: &Usage) {
        if self.day != periods.day {
            self.day.clone_from(&periods.day);
            self.day_tokens = 0;
        }
        if self.month != periods.month {
            self.month.clone_from(&periods.month);
            self.month_tokens = 0;
        }
        let mut all = 0;
        for (direction, n) in usage.by_direction() {
            let field = match direction {
                "input" => &mut self.input,
                "cache_read" => &mut self.cache_read,
                "cache_write" => &mut self.cache_write,
                _ => &mut self.output,
            };
            *field += n;
            all += n;
        }
        self.day_tokens += all;
        self.month_tokens += all;
    }

    /// The record as a store keeps it, field by field (`input`, `cacheRead`, `cacheWrite`,
    /// `output`, `day`, `dayTokens`, `month`, `monthTokens`); what cannot be read counts 0.
    pub fn from_fields(fields: &HashMap<String, String>) -> Self {
        let n = |f: &str| fields.get(f).and_then(|v| v.parse().ok()).unwrap_or(0);
        let s = |f: &str| fields.get(f).cloned().unwrap_or_default();
        TokenSpend {
            input: n("input"),
            cache_read: n("cacheRead"),
            cache_write: n("cacheWrite"),
            output: n("output"),
            day: s("day"),
            day_tokens: n("dayTokens"),
            month: s("month"),
            month_tokens: n("monthTokens"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_roll_over_and_directions_add_up() {
        let nov = Periods::at(1_795_400_000_000); // 2026-11-23T02:13Z
        let mut t = TokenSpend::default();
        let usage = Usage {
            input: 1000,
            output: 50,
            cache_read: 800,
            cache_write: 100,
        };
        t.add(&nov, &usage);
        t.add(&nov, &usage);
        assert_eq!(
            (t.input, t.cache_read, t.cache_write, t.output),
            (200, 1600, 200, 100)
        );
        assert_eq!(
            t.spent(&nov),
            Spent {
                day: 2100,
                month: 2100
            }
        );
        let next_day = Periods::at(1_795_400_000_000 + 86_400_000);
        assert_eq!(
            t.spent(&next_day),
            Spent {
                day: 0,
                month: 2100
            }
        );
        t.add(&next_day, &Usage::default());
        assert_eq!((t.day_tokens, t.month_tokens), (0, 2100));
        assert_eq!(t.input, 200, "life totals never roll over");
    }
}

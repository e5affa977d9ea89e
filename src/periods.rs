//! The UTC day and month a moment falls in, and the tokens spent in them: the arithmetic of
//! `spec.budget` that the operator, the worker and the data plane share (`crate::crd`
//! re-exports it beside `BudgetSpec`). None of it is stored as a record: the data plane
//! counts tokens under a period's name (`2026-11-23`, `2026-11`) in fields of its own (see
//! `TokenSpend`). So it lives below the custom resources and the store alike, and the store
//! needs no CRD type to count.

use jiff::civil::Date;
use jiff::{Timestamp, ToSpan};

/// The budget periods a moment falls in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Periods {
    /// The UTC day, `2026-11-23`.
    pub day: String,
    /// The UTC month, `2026-11`.
    pub month: String,
    /// When the day ends (ms since the epoch).
    pub day_ends_ms: i64,
    /// When the month ends (ms since the epoch).
    pub month_ends_ms: i64,
}

impl Periods {
    /// The periods of `now_ms` (ms since the epoch).
    pub fn at(now_ms: i64) -> Periods {
        let date = Timestamp::from_millisecond(now_ms)
            .unwrap_or(Timestamp::UNIX_EPOCH)
            .to_zoned(jiff::tz::TimeZone::UTC)
            .date();
        let start_ms = |d: Date| {
            d.to_zoned(jiff::tz::TimeZone::UTC)
                .map_or(i64::MAX, |z| z.timestamp().as_millisecond())
        };
        let next_day = date.checked_add(1.day()).unwrap_or(Date::MAX);
        let next_month = date
            .first_of_month()
            .checked_add(1.month())
            .unwrap_or(Date::MAX);
        Periods {
            day: date.strftime("%Y-%m-%d").to_string(),
            month: date.strftime("%Y-%m").to_string(),
            day_ends_ms: start_ms(next_day),
            month_ends_ms: start_ms(next_month),
        }
    }
}

/// Tokens spent in the current periods.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Spent {
    /// This UTC day.
    pub day: u64,
    /// This UTC month.
    pub month: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(rfc3339: &str) -> i64 {
        rfc3339.parse::<Timestamp>().unwrap().as_millisecond()
    }

    #[test]
    fn periods_are_utc_days_and_months() {
        let p = Periods::at(ms("2026-12-31T23:59:59.999Z"));
        assert_eq!(p.day, "2026-12-31");
        assert_eq!(p.month, "2026-12");
        assert_eq!(p.day_ends_ms, ms("2027-01-01T00:00:00Z"));
        assert_eq!(p.month_ends_ms, ms("2027-01-01T00:00:00Z"));
        let p = Periods::at(ms("2028-02-29T12:00:00Z"));
        assert_eq!(
            (p.day.as_str(), p.month.as_str()),
            ("2028-02-29", "2028-02")
        );
        assert_eq!(p.day_ends_ms, ms("2028-03-01T00:00:00Z"));
        assert_eq!(p.month_ends_ms, ms("2028-03-01T00:00:00Z"));
        let p = Periods::at(ms("2026-11-23T00:00:00Z"));
        assert_eq!(p.day, "2026-11-23");
        assert_eq!(p.month_ends_ms, ms("2026-12-01T00:00:00Z"));
    }
}

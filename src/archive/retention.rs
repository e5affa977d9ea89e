//! Which archived checkpoints stay: the newest `keepLast`, and the newest of each UTC day for
//! `keepDays` days. "Newest" is by the object's time, then its cycle: after a restore rolls
//! the cycle count back, the checkpoints of the abandoned future are older than the new ones
//! of the same numbers and age out like any other.

use std::collections::{BTreeMap, BTreeSet};

/// An archived checkpoint as a listing shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listed {
    /// The cycle it was taken after.
    pub cycle: u64,
    /// When it was written (ms since the epoch).
    pub time_ms: i64,
}

const DAY_MS: i64 = 86_400_000;

/// Newest first: by time, then by cycle.
pub fn newest_first(objects: &mut [Listed]) {
    objects.sort_by_key(|o| std::cmp::Reverse((o.time_ms, o.cycle)));
}

/// The cycles to keep of `objects` at `now_ms`.
pub fn keep(objects: &[Listed], keep_last: u32, keep_days: u32, now_ms: i64) -> BTreeSet<u64> {
    let mut sorted = objects.to_vec();
    newest_first(&mut sorted);
    let mut kept: BTreeSet<u64> = sorted
        .iter()
        .take(keep_last as usize)
        .map(|o| o.cycle)
        .collect();
    if keep_days > 0 {
        let today = now_ms.div_euclid(DAY_MS);
        let oldest = today - i64::from(keep_days) + 1;
        let mut daily: BTreeMap<i64, u64> = BTreeMap::new();
        for o in &sorted {
            let day = o.time_ms.div_euclid(DAY_MS);
            if day >= oldest && day <= today {
                daily.entry(day).or_insert(o.cycle);
            }
        }
        kept.extend(daily.into_values());
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_795_000_000_000;

    fn at(cycle: u64, time_ms: i64) -> Listed {
        Listed { cycle, time_ms }
    }

    #[test]
    fn the_newest_are_kept_and_one_a_day_for_the_days_asked() {
        // Ten a day for five days, one per 2.4 hours, the newest now.
        let objects: Vec<Listed> = (0..50u64)
            .map(|i| at(i + 1, NOW - (49 - i as i64) * DAY_MS / 10))
            .collect();
        let kept = keep(&objects, 3, 3, NOW);
        // The three newest, then the newest of each of the two days before today (today's
        // newest is among the three).
        let mut expected: BTreeSet<u64> = [48, 49, 50].into();
        let today = NOW.div_euclid(DAY_MS);
        for day in [today - 1, today - 2] {
            let newest = objects
                .iter()
                .filter(|o| o.time_ms.div_euclid(DAY_MS) == day)
                .map(|o| o.cycle)
                .max()
                .unwrap();
            expected.insert(newest);
        }
        assert_eq!(kept, expected);
        assert_eq!(keep(&objects, 3, 0, NOW), [48, 49, 50].into());
        assert_eq!(keep(&objects, 100, 0, NOW).len(), 50);
    }

    #[test]
    fn after_a_roll_back_the_newer_writes_win_over_higher_cycles() {
        // Cycles 1..=6 written, rolled back to 3, then 4 and 5 written again later.
        let objects = [
            at(1, NOW - 9000),
            at(2, NOW - 8000),
            at(3, NOW - 7000),
            at(6, NOW - 4000),
            at(4, NOW - 1000),
            at(5, NOW),
        ];
        // The abandoned 6 is older than the new 4 and 5, and ages out before them.
        assert_eq!(keep(&objects, 3, 0, NOW), [4, 5, 6].into());
        assert_eq!(keep(&objects, 2, 0, NOW), [4, 5].into());
        let mut sorted = objects.to_vec();
        newest_first(&mut sorted);
        assert_eq!(sorted[0].cycle, 5);
    }
}

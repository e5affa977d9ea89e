//! A record's bounds: each text is cut where it is added (a model's megabyte of private text
//! never sits in a record), lists keep their first entries and count the rest, and a whole
//! record that is still over [`RECORD_BYTES`] has its texts cut shorter, then its middle
//! steps dropped, until it fits. Whatever is cut is counted where it was.

use super::{CycleRecord, StepTrace};

/// A record's size at most, as the data plane keeps it (bytes of JSON).
pub const RECORD_BYTES: usize = 256 * 1024;
/// A text's size at most (an event's, the model's private text of a step, a call's
/// arguments or result), before a record over its size cuts them shorter.
pub const TEXT_BYTES: usize = 16 * 1024;
/// Events a record keeps.
pub const EVENTS: usize = 32;
/// Steps a record keeps: the first [`STEPS`]` - `[`LAST_STEPS`] and the last ones.
pub const STEPS: usize = 64;
/// Of [`STEPS`], how many are the cycle's last.
const LAST_STEPS: usize = 16;
/// Calls a step keeps.
pub const CALLS_PER_STEP: usize = 32;
/// Messages posted a record names.
pub const POSTED: usize = 32;
/// Notes a record keeps the earlier values of (`notes_before`).
pub const NOTES: usize = 64;

/// `text` cut to at most `max` bytes (at a character boundary), and how many bytes were not
/// kept.
pub fn clip(text: &str, max: usize) -> (String, u64) {
    if text.len() <= max {
        return (text.to_string(), 0);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (text[..end].to_string(), (text.len() - end) as u64)
}

/// Cuts `text` in place to `max` bytes, adding what was not kept to `cut`.
fn shorten(text: &mut String, cut: &mut u64, max: usize) {
    if text.len() > max {
        let (kept, dropped) = clip(text, max);
        *text = kept;
        *cut += dropped;
    }
}

impl CycleRecord {
    /// Adds a step, keeping the first and the last ones within [`STEPS`].
    pub fn push_step(&mut self, step: StepTrace) {
        if self.steps.len() >= STEPS {
            self.steps.remove(STEPS - LAST_STEPS);
            self.steps_cut += 1;
        }
        self.steps.push(step);
    }

    /// Every text of the record cut to `max` bytes.
    fn shorten_texts(&mut self, max: usize) {
        for e in &mut self.events {
            shorten(&mut e.text, &mut e.text_cut, max);
            if let Some(data) = &mut e.data {
                shorten(data, &mut e.data_cut, max);
            }
        }
        // A note's earlier value is whole or not kept (a cut one would undo wrongly).
        for values in self.notes_before.values_mut() {
            let before = values.len();
            values.retain(|_, v| v.as_ref().is_none_or(|v| v.len() <= max));
            self.notes_cut += (before - values.len()) as u64;
        }
        for s in &mut self.steps {
            if let Some(text) = &mut s.text {
                shorten(text, &mut s.text_cut, max);
            }
            for c in &mut s.calls {
                shorten(&mut c.arguments, &mut c.arguments_cut, max);
                if let Some(result) = &mut c.result {
                    shorten(result, &mut c.result_cut, max);
                }
            }
        }
    }
}

/// The record as the data plane keeps it (JSON) within `cap` bytes: as it is when it fits;
/// else with its texts cut shorter, step by step down to 64 bytes each, then with steps
/// dropped from the middle (the first and the last kept).
pub fn fit(record: &mut CycleRecord, cap: usize) -> Result<String, serde_json::Error> {
    let mut json = serde_json::to_string(record)?;
    let mut max = TEXT_BYTES;
    while json.len() > cap && max > 64 {
        max /= 4;
        record.shorten_texts(max);
        json = serde_json::to_string(record)?;
    }
    while json.len() > cap && record.steps.len() > 2 {
        let middle = record.steps.len() / 2;
        record.steps.remove(middle);
        record.steps_cut += 1;
        json = serde_json::to_string(record)?;
    }
    while json.len() > cap && record.events.len() > 1 {
        record.events.pop();
        record.events_cut += 1;
        json = serde_json::to_string(record)?;
    }
    Ok(json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cycles::{CallTrace, EventTrace};

    fn call(bytes: usize) -> CallTrace {
        CallTrace {
            id: "c".into(),
            tool: "t".into(),
            arguments: "a".repeat(bytes),
            result: Some("r".repeat(bytes)),
            ok: Some(true),
            ..CallTrace::default()
        }
    }

    #[test]
    fn a_text_is_cut_at_a_character_boundary_and_counted() {
        assert_eq!(clip("héllo", 2), ("h".to_string(), 5));
        assert_eq!(clip("héllo", 3), ("hé".to_string(), 3));
        assert_eq!(clip("hi", 10), ("hi".to_string(), 0));
    }

    #[test]
    fn steps_beyond_the_bound_drop_from_the_middle_and_are_counted() {
        let mut r = CycleRecord::default();
        for step in 0..200 {
            r.push_step(StepTrace {
                step,
                ..StepTrace::default()
            });
        }
        assert_eq!(r.steps.len(), STEPS);
        assert_eq!(r.steps_cut, 200 - STEPS as u64);
        assert_eq!(r.steps[0].step, 0);
        assert_eq!(r.steps[STEPS - LAST_STEPS - 1].step, 47);
        assert_eq!(r.steps.last().map(|s| s.step), Some(199));
        assert_eq!(r.head().steps, 200);
    }

    #[test]
    fn a_record_over_its_size_is_cut_until_it_fits_and_says_what_was_cut() {
        let mut r = CycleRecord {
            events: vec![EventTrace {
                text: "e".repeat(TEXT_BYTES),
                ..EventTrace::default()
            }],
            ..CycleRecord::default()
        };
        for step in 0..STEPS as u32 {
            r.push_step(StepTrace {
                step,
                text: Some("p".repeat(TEXT_BYTES)),
                calls: (0..CALLS_PER_STEP).map(|_| call(TEXT_BYTES)).collect(),
                ..StepTrace::default()
            });
        }
        let json = fit(&mut r, RECORD_BYTES).unwrap();
        assert!(json.len() <= RECORD_BYTES, "{}", json.len());
        let back: CycleRecord = serde_json::from_str(&json).unwrap();
        assert_eq!(back, r);
        assert!(back.steps[0].text_cut > 0);
        assert!(back.steps[0].calls[0].result_cut > 0);
        assert!(back.events[0].text_cut > 0);
        assert_eq!(back.steps.len() as u64 + back.steps_cut, STEPS as u64);
        assert_eq!(back.steps[0].step, 0);
        assert_eq!(back.steps.last().map(|s| s.step), Some(STEPS as u32 - 1));
    }

    #[test]
    fn a_record_within_its_size_is_kept_whole() {
        let mut r = CycleRecord::default();
        r.push_step(StepTrace {
            text: Some("thinking".into()),
            calls: vec![call(100)],
            ..StepTrace::default()
        });
        let before = r.clone();
        let json = fit(&mut r, RECORD_BYTES).unwrap();
        assert_eq!(r, before);
        assert_eq!(serde_json::from_str::<CycleRecord>(&json).unwrap(), before);
    }
}

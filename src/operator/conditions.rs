//! Standard status conditions, merged with the previous set so that `lastTransitionTime` only
//! moves when a condition's status flips.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// A condition as the reconciler computes it, before it is merged with the previous set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cond {
    /// Condition type, for example `Ready`.
    pub type_: &'static str,
    /// `true` for `"True"`, `false` for `"False"`, `None` for `"Unknown"`.
    pub status: Option<bool>,
    /// CamelCase reason.
    pub reason: &'static str,
    /// Human-readable detail.
    pub message: String,
}

impl Cond {
    /// A `True` condition.
    pub fn ok(type_: &'static str, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            type_,
            status: Some(true),
            reason,
            message: message.into(),
        }
    }

    /// A `False` condition.
    pub fn fail(type_: &'static str, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            type_,
            status: Some(false),
            reason,
            message: message.into(),
        }
    }

    /// An `Unknown` condition.
    pub fn unknown(type_: &'static str, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            type_,
            status: None,
            reason,
            message: message.into(),
        }
    }

    fn status_str(&self) -> &'static str {
        match self.status {
            Some(true) => "True",
            Some(false) => "False",
            None => "Unknown",
        }
    }
}

/// The new condition list: `next` in its order, each keeping the previous
/// `lastTransitionTime` when its status did not change, `now` otherwise.
pub fn merge(
    previous: &[Condition],
    next: &[Cond],
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    next.iter()
        .map(|c| {
            let status = c.status_str().to_string();
            let last_transition_time = previous
                .iter()
                .find(|p| p.type_ == c.type_ && p.status == status)
                .map(|p| p.last_transition_time.clone())
                .unwrap_or(Time(now));
            Condition {
                type_: c.type_.to_string(),
                status,
                reason: c.reason.to_string(),
                message: c.message.clone(),
                observed_generation: generation,
                last_transition_time,
            }
        })
        .collect()
}

/// The previous condition of a type, if any.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_when_status_flips() {
        let t0 = Timestamp::from_second(1_000).unwrap();
        let t1 = Timestamp::from_second(2_000).unwrap();
        let first = merge(
            &[],
            &[Cond::fail("Ready", "Starting", "starting")],
            Some(1),
            t0,
        );
        assert_eq!(first[0].last_transition_time, Time(t0));
        assert_eq!(first[0].status, "False");

        let same = merge(
            &first,
            &[Cond::fail("Ready", "StillStarting", "later")],
            Some(2),
            t1,
        );
        assert_eq!(same[0].last_transition_time, Time(t0), "reason change only");
        assert_eq!(same[0].reason, "StillStarting");
        assert_eq!(same[0].observed_generation, Some(2));

        let flipped = merge(&same, &[Cond::ok("Ready", "Ok", "")], Some(2), t1);
        assert_eq!(flipped[0].last_transition_time, Time(t1));
        assert_eq!(flipped[0].status, "True");
        assert_eq!(
            merge(&flipped, &[Cond::unknown("Ready", "X", "")], None, t1)[0].status,
            "Unknown"
        );
    }
}

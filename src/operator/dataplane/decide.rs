//! The scale decisions, pure: from an agent's scaling spec and what the data plane shows,
//! whether its worker goes up, down, or stays ([`decide`]), and the replicas the reconcile
//! applies ([`replicas_to_apply`]). No client, no clock: the loop passes in how long the agent
//! has been idle.

use std::time::Duration;

use crate::crd::{AgentSpec, ScalingSpec};
use crate::store::AgentObservation;

/// What to do with an agent's replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Leave them.
    Hold,
    /// Start a worker: events wait (or `minReplicas` is 1).
    Up {
        /// Events waiting.
        waiting: u64,
    },
    /// Stop the worker: idle long enough, nothing waiting, nothing in flight.
    Down {
        /// How long it has been idle.
        idle: Duration,
    },
}

impl Decision {
    /// The replicas it sets, if any.
    pub fn replicas(self) -> Option<i32> {
        match self {
            Decision::Hold => None,
            Decision::Up { .. } => Some(1),
            Decision::Down { .. } => Some(0),
        }
    }
}

/// Decides an agent's replicas from its scaling spec, the replicas asked for now, what the
/// data plane shows, and how long it has been idle (`None`: not idle).
pub fn decide(
    scaling: &ScalingSpec,
    paused: bool,
    replicas: i32,
    seen: &AgentObservation,
    idle: Option<Duration>,
) -> Decision {
    if scaling.external || paused {
        return Decision::Hold;
    }
    if replicas < 1 {
        return if seen.busy() || scaling.min_replicas >= 1 {
            Decision::Up {
                waiting: seen.waiting,
            }
        } else {
            Decision::Hold
        };
    }
    match idle {
        Some(idle)
            if scaling.min_replicas == 0
                && !seen.busy()
                && idle >= Duration::from_secs(scaling.idle_seconds.into()) =>
        {
            Decision::Down { idle }
        }
        _ => Decision::Hold,
    }
}

/// The replicas the reconcile applies to the worker Deployment: `None` when someone else owns
/// them (`scaling.external`), 0 when paused, 1 with `minReplicas: 1`, otherwise what the
/// scaler last asked for (`current`; 0 for a new agent — its first event wakes it).
pub fn replicas_to_apply(spec: &AgentSpec, current: Option<i32>) -> Option<i32> {
    if spec.scaling.external {
        None
    } else if spec.paused {
        Some(0)
    } else if spec.scaling.min_replicas >= 1 {
        Some(1)
    } else {
        Some(current.unwrap_or(0).clamp(0, 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scaling(yaml: &str) -> ScalingSpec {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn seen(waiting: u64, in_flight: u64, thinking: bool) -> AgentObservation {
        AgentObservation {
            waiting,
            in_flight,
            thinking,
            ..AgentObservation::default()
        }
    }

    const LONG: Option<Duration> = Some(Duration::from_secs(301));

    #[test]
    fn scale_decisions() {
        let zero = scaling("{}");
        let quiet = seen(0, 0, false);
        // Up as soon as something waits; never while nothing does.
        assert_eq!(
            decide(&zero, false, 0, &seen(3, 0, false), None),
            Decision::Up { waiting: 3 }
        );
        assert_eq!(decide(&zero, false, 0, &quiet, LONG), Decision::Hold);
        // A cycle in flight on a scaled-down agent (its pod died mid-cycle) brings it back.
        assert_eq!(
            decide(&zero, false, 0, &seen(0, 2, true), None),
            Decision::Up { waiting: 0 }
        );
        // Down only after idleSeconds with an empty inbox and nothing in flight.
        assert_eq!(
            decide(&zero, false, 1, &quiet, LONG),
            Decision::Down {
                idle: Duration::from_secs(301)
            }
        );
        assert_eq!(
            decide(&zero, false, 1, &quiet, Some(Duration::from_secs(299))),
            Decision::Hold
        );
        assert_eq!(decide(&zero, false, 1, &quiet, None), Decision::Hold);
        assert_eq!(
            decide(&zero, false, 1, &seen(1, 0, false), LONG),
            Decision::Hold
        );
        assert_eq!(
            decide(&zero, false, 1, &seen(0, 1, false), LONG),
            Decision::Hold,
            "a long cycle is never cut off"
        );
        assert_eq!(
            decide(&zero, false, 1, &seen(0, 0, true), LONG),
            Decision::Hold
        );
        let short = scaling("{idleSeconds: 0}");
        assert_eq!(
            decide(&short, false, 1, &quiet, Some(Duration::ZERO)),
            Decision::Down {
                idle: Duration::ZERO
            }
        );
        // Always on, external and paused.
        let always = scaling("{minReplicas: 1}");
        assert_eq!(decide(&always, false, 1, &quiet, LONG), Decision::Hold);
        assert_eq!(
            decide(&always, false, 0, &quiet, None),
            Decision::Up { waiting: 0 }
        );
        let external = scaling("{external: true}");
        assert_eq!(
            decide(&external, false, 0, &seen(5, 0, false), None),
            Decision::Hold
        );
        assert_eq!(decide(&external, false, 1, &quiet, LONG), Decision::Hold);
        assert_eq!(
            decide(&zero, true, 0, &seen(5, 0, false), None),
            Decision::Hold,
            "paused holds at zero"
        );
    }

    #[test]
    fn a_cycle_paused_for_a_human_lets_its_worker_go() {
        let zero = scaling("{idleSeconds: 60}");
        let paused = AgentObservation {
            paused: true,
            ..seen(0, 2, false)
        };
        let long = Some(Duration::from_secs(61));
        assert_eq!(
            decide(&zero, false, 1, &paused, long),
            Decision::Down {
                idle: Duration::from_secs(61)
            }
        );
        assert_eq!(
            decide(&zero, false, 0, &paused, None),
            Decision::Hold,
            "not woken"
        );
        // Something arrives: it waits for the answer (nothing can go on before it).
        let meanwhile = AgentObservation {
            waiting: 1,
            ..paused.clone()
        };
        assert_eq!(decide(&zero, false, 0, &meanwhile, None), Decision::Hold);
        // The answer ends the pause: woken.
        let answered = AgentObservation {
            paused: false,
            ..meanwhile
        };
        assert_eq!(
            decide(&zero, false, 0, &answered, None),
            Decision::Up { waiting: 1 }
        );
        // A call's time is up: the worker comes back to tell the model.
        let call = crate::store::HumanCall::new(
            &crate::store::AgentKey::new("ops", "sre"),
            "restart",
            crate::store::CallKind::Approval,
            "oncall",
            serde_json::json!({}),
            None,
            1000,
        )
        .unwrap();
        let waiting_on = AgentObservation {
            pending: vec![crate::store::RegisteredCall {
                id: call.id,
                record: call.record.clone(),
                done: false,
            }],
            ..paused
        };
        let before = waiting_on.at(call.record.expires_ms - 1);
        assert_eq!(decide(&zero, false, 0, &before, None), Decision::Hold);
        let due = waiting_on.at(call.record.expires_ms);
        assert_eq!(
            decide(&zero, false, 0, &due, None),
            Decision::Up { waiting: 0 }
        );
        // Not paused, the same events in flight keep it up.
        assert_eq!(
            decide(&zero, false, 1, &seen(0, 2, false), long),
            Decision::Hold
        );
    }

    #[test]
    fn replicas_applied_follow_the_spec_and_the_scaler() {
        let mut spec: AgentSpec =
            serde_yaml::from_str("{model: {provider: scripted, name: x}}").unwrap();
        assert_eq!(replicas_to_apply(&spec, None), Some(0), "new: asleep");
        assert_eq!(replicas_to_apply(&spec, Some(1)), Some(1));
        spec.scaling.min_replicas = 1;
        assert_eq!(replicas_to_apply(&spec, Some(0)), Some(1));
        spec.paused = true;
        assert_eq!(replicas_to_apply(&spec, Some(1)), Some(0));
        spec.scaling.external = true;
        assert_eq!(replicas_to_apply(&spec, Some(1)), None);
    }
}

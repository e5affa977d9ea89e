//! The scale decisions, pure: from an agent's scaling spec and what the data plane shows,
//! whether its worker goes up, down, or stays ([`decide`]), and the replicas the reconcile
//! applies ([`replicas_to_apply`]). No client, no clock: the loop passes in how long the agent
//! has been idle.

use std::time::Duration;

use crate::crd::{AgentSpec, ConsciousnessSpec, PendingRestore, ScalingSpec};
use crate::store::AgentObservation;

/// What to do with an agent's replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaleAction {
    /// Leave them.
    Hold,
    /// Start a worker: events wait (or `minReplicas` is 1, or the spec asks for a restore).
    Up {
        /// Events waiting.
        waiting: u64,
        /// Nothing waits, but the spec asks for a restore or a seed that only a worker
        /// applies.
        restore: bool,
    },
    /// Stop the worker: idle long enough, nothing waiting, nothing in flight.
    Down {
        /// How long it has been idle.
        idle: Duration,
    },
}

impl ScaleAction {
    /// The replicas it sets, if any.
    pub fn replicas(self) -> Option<i32> {
        match self {
            ScaleAction::Hold => None,
            ScaleAction::Up { .. } => Some(1),
            ScaleAction::Down { .. } => Some(0),
        }
    }
}

/// The restore or seed `spec` asks for that the data plane shows not applied (the one rule:
/// [`ConsciousnessSpec::pending`]); a request whose last attempt failed is not asked again.
pub fn restore_pending<'a>(
    spec: &'a ConsciousnessSpec,
    seen: &AgentObservation,
) -> Option<PendingRestore<'a>> {
    let failed = seen
        .restore
        .as_ref()
        .filter(|r| !r.ok)
        .and_then(|r| r.request.as_deref());
    spec.pending(seen.restored.as_deref(), seen.cycles, failed)
}

/// Whether an agent has work for a worker: [`AgentObservation::busy`], except that events
/// waiting for an agent whose token budget is spent are none (it calls no model until the
/// budget rolls over); a cycle under way still is.
pub fn has_work(seen: &AgentObservation, budget_spent: bool) -> bool {
    seen.thinking || (seen.busy() && !budget_spent)
}

/// Decides an agent's replicas from its scaling spec, the replicas asked for now, what the
/// data plane shows, and how long it has been idle (`None`: not idle). A restore or seed the
/// spec asks for and the data plane has not applied is work for a worker (it applies it as
/// it starts), unless a cycle waits for a human: nothing goes on before the answer. What is
/// work: [`has_work`].
pub fn decide(
    scaling: &ScalingSpec,
    paused: bool,
    consciousness: &ConsciousnessSpec,
    replicas: i32,
    seen: &AgentObservation,
    idle: Option<Duration>,
    budget_spent: bool,
) -> ScaleAction {
    if scaling.external || paused {
        return ScaleAction::Hold;
    }
    let busy = has_work(seen, budget_spent);
    let restore = !seen.paused && restore_pending(consciousness, seen).is_some();
    if replicas < 1 {
        return if busy || restore || scaling.min_replicas >= 1 {
            ScaleAction::Up {
                waiting: seen.waiting,
                restore: restore && !busy,
            }
        } else {
            ScaleAction::Hold
        };
    }
    match idle {
        Some(idle)
            if scaling.min_replicas == 0
                && !busy
                && !restore
                && idle >= Duration::from_secs(scaling.idle_seconds.into()) =>
        {
            ScaleAction::Down { idle }
        }
        _ => ScaleAction::Hold,
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

/// Why replicas change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// A wake signal.
    Wake,
    /// A sweep of every agent.
    Sweep,
}

impl Trigger {
    /// How an Event says it.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Wake => "wake signal",
            Trigger::Sweep => "sweep",
        }
    }

    /// The metrics label.
    pub fn label(self) -> &'static str {
        match self {
            Trigger::Wake => "wake",
            Trigger::Sweep => "sweep",
        }
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

    /// A consciousness spec that asks for nothing.
    fn none() -> ConsciousnessSpec {
        ConsciousnessSpec::default()
    }

    #[test]
    fn a_spent_budget_is_no_work_for_a_worker() {
        let zero = scaling("{}");
        let waiting = seen(3, 0, false);
        assert_eq!(
            decide(&zero, false, &none(), 0, &waiting, None, true),
            ScaleAction::Hold,
            "events wait without waking a worker that could call no model"
        );
        assert_eq!(
            decide(&zero, false, &none(), 1, &waiting, LONG, true),
            ScaleAction::Down {
                idle: Duration::from_secs(301)
            },
            "a worker kept idle by a spent budget goes after idleSeconds"
        );
        assert_eq!(
            decide(&zero, false, &none(), 1, &seen(3, 2, true), LONG, true),
            ScaleAction::Hold,
            "the cycle under way ends first"
        );
        // The budget rolled over or was raised: the waiting events are work again.
        assert_eq!(
            decide(&zero, false, &none(), 0, &waiting, None, false),
            ScaleAction::Up {
                waiting: 3,
                restore: false
            }
        );
    }

    #[test]
    fn scale_decisions() {
        let zero = scaling("{}");
        let quiet = seen(0, 0, false);
        // Up as soon as something waits; never while nothing does.
        assert_eq!(
            decide(&zero, false, &none(), 0, &seen(3, 0, false), None, false),
            ScaleAction::Up {
                waiting: 3,
                restore: false
            }
        );
        assert_eq!(
            decide(&zero, false, &none(), 0, &quiet, LONG, false),
            ScaleAction::Hold
        );
        // A cycle in flight on a scaled-down agent (its pod died mid-cycle) brings it back.
        assert_eq!(
            decide(&zero, false, &none(), 0, &seen(0, 2, true), None, false),
            ScaleAction::Up {
                waiting: 0,
                restore: false
            }
        );
        // Down only after idleSeconds with an empty inbox and nothing in flight.
        assert_eq!(
            decide(&zero, false, &none(), 1, &quiet, LONG, false),
            ScaleAction::Down {
                idle: Duration::from_secs(301)
            }
        );
        assert_eq!(
            decide(
                &zero,
                false,
                &none(),
                1,
                &quiet,
                Some(Duration::from_secs(299)),
                false
            ),
            ScaleAction::Hold
        );
        assert_eq!(
            decide(&zero, false, &none(), 1, &quiet, None, false),
            ScaleAction::Hold
        );
        assert_eq!(
            decide(&zero, false, &none(), 1, &seen(1, 0, false), LONG, false),
            ScaleAction::Hold
        );
        assert_eq!(
            decide(&zero, false, &none(), 1, &seen(0, 1, false), LONG, false),
            ScaleAction::Hold,
            "a long cycle is never cut off"
        );
        assert_eq!(
            decide(&zero, false, &none(), 1, &seen(0, 0, true), LONG, false),
            ScaleAction::Hold
        );
        let short = scaling("{idleSeconds: 0}");
        assert_eq!(
            decide(
                &short,
                false,
                &none(),
                1,
                &quiet,
                Some(Duration::ZERO),
                false
            ),
            ScaleAction::Down {
                idle: Duration::ZERO
            }
        );
        // Always on, external and paused.
        let always = scaling("{minReplicas: 1}");
        assert_eq!(
            decide(&always, false, &none(), 1, &quiet, LONG, false),
            ScaleAction::Hold
        );
        assert_eq!(
            decide(&always, false, &none(), 0, &quiet, None, false),
            ScaleAction::Up {
                waiting: 0,
                restore: false
            }
        );
        let external = scaling("{external: true}");
        assert_eq!(
            decide(
                &external,
                false,
                &none(),
                0,
                &seen(5, 0, false),
                None,
                false
            ),
            ScaleAction::Hold
        );
        assert_eq!(
            decide(&external, false, &none(), 1, &quiet, LONG, false),
            ScaleAction::Hold
        );
        assert_eq!(
            decide(&zero, true, &none(), 0, &seen(5, 0, false), None, false),
            ScaleAction::Hold,
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
            decide(&zero, false, &none(), 1, &paused, long, false),
            ScaleAction::Down {
                idle: Duration::from_secs(61)
            }
        );
        assert_eq!(
            decide(&zero, false, &none(), 0, &paused, None, false),
            ScaleAction::Hold,
            "not woken"
        );
        // Something arrives: it waits for the answer (nothing can go on before it).
        let meanwhile = AgentObservation {
            waiting: 1,
            ..paused.clone()
        };
        assert_eq!(
            decide(&zero, false, &none(), 0, &meanwhile, None, false),
            ScaleAction::Hold
        );
        // The answer ends the pause: woken.
        let answered = AgentObservation {
            paused: false,
            ..meanwhile
        };
        assert_eq!(
            decide(&zero, false, &none(), 0, &answered, None, false),
            ScaleAction::Up {
                waiting: 1,
                restore: false
            }
        );
        // A call's time is up: the worker comes back to tell the model.
        let call = crate::store::HumanCall::new(
            &crate::identity::AgentKey::new("ops", "sre"),
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
        assert_eq!(
            decide(&zero, false, &none(), 0, &before, None, false),
            ScaleAction::Hold
        );
        let due = waiting_on.at(call.record.expires_ms);
        assert_eq!(
            decide(&zero, false, &none(), 0, &due, None, false),
            ScaleAction::Up {
                waiting: 0,
                restore: false
            }
        );
        // Not paused, the same events in flight keep it up.
        assert_eq!(
            decide(&zero, false, &none(), 1, &seen(0, 2, false), long, false),
            ScaleAction::Hold
        );
    }

    #[test]
    fn a_restore_or_seed_not_applied_wakes_the_worker_until_it_is() {
        let zero = scaling("{}");
        let restore: ConsciousnessSpec = serde_yaml::from_str("{restore: {cycle: 40}}").unwrap();
        let quiet = AgentObservation {
            cycles: 50,
            ..seen(0, 0, false)
        };
        let wake = ScaleAction::Up {
            waiting: 0,
            restore: true,
        };
        assert_eq!(decide(&zero, false, &restore, 0, &quiet, None, false), wake);
        assert_eq!(
            decide(&zero, false, &restore, 1, &quiet, LONG, false),
            ScaleAction::Hold,
            "not scaled down before the worker applied it"
        );
        // Events waiting explain the wake themselves.
        assert_eq!(
            decide(&zero, false, &restore, 0, &seen(2, 0, false), None, false),
            ScaleAction::Up {
                waiting: 2,
                restore: false
            }
        );
        // Applied: nothing to do, and the idle worker goes.
        let applied = AgentObservation {
            restored: Some("cycle:40".into()),
            ..quiet.clone()
        };
        assert_eq!(
            decide(&zero, false, &restore, 0, &applied, None, false),
            ScaleAction::Hold
        );
        assert_eq!(
            decide(&zero, false, &restore, 1, &applied, LONG, false),
            ScaleAction::Down {
                idle: Duration::from_secs(301)
            }
        );
        // Its last attempt failed: not asked again (a new spec asks again).
        let failed = AgentObservation {
            restore: Some(crate::store::RestoreReport {
                v: crate::store::V1,
                ok: false,
                reason: "CheckpointNotFound".into(),
                message: "no archived checkpoint of cycle 40".into(),
                since_ms: 1,
                request: Some("cycle:40".into()),
                applied: None,
            }),
            ..quiet.clone()
        };
        assert_eq!(
            decide(&zero, false, &restore, 0, &failed, None, false),
            ScaleAction::Hold
        );
        let again: ConsciousnessSpec = serde_yaml::from_str("{restore: {cycle: 39}}").unwrap();
        assert_eq!(decide(&zero, false, &again, 0, &failed, None, false), wake);
        // An earlier restore that succeeded is no failure of this one.
        let succeeded = AgentObservation {
            restore: Some(crate::store::RestoreReport {
                v: crate::store::V1,
                ok: true,
                ..failed.restore.clone().unwrap()
            }),
            ..quiet.clone()
        };
        assert_eq!(
            decide(&zero, false, &restore, 0, &succeeded, None, false),
            wake
        );
        // A cycle waiting for a human: nothing goes on before the answer.
        let paused = AgentObservation {
            paused: true,
            in_flight: 1,
            ..quiet.clone()
        };
        assert_eq!(
            decide(&zero, false, &restore, 0, &paused, None, false),
            ScaleAction::Hold
        );
        // Held at zero, or scaled by someone else: never.
        assert_eq!(
            decide(&zero, true, &restore, 0, &quiet, None, false),
            ScaleAction::Hold
        );
        assert_eq!(
            decide(
                &scaling("{external: true}"),
                false,
                &restore,
                0,
                &quiet,
                None,
                false
            ),
            ScaleAction::Hold
        );
        // A seed, only while the agent has no consciousness of its own.
        let seed: ConsciousnessSpec = serde_yaml::from_str("{seedFrom: {agent: sre}}").unwrap();
        let empty = seen(0, 0, false);
        assert_eq!(decide(&zero, false, &seed, 0, &empty, None, false), wake);
        assert_eq!(
            decide(&zero, false, &seed, 0, &quiet, None, false),
            ScaleAction::Hold,
            "it has cycles of its own"
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

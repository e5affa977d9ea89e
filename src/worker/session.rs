//! An agent's session as a state machine, pure: what the runtime does next, decided from what
//! just happened. No store, no model, no clock: the driver (`pool/activation.rs`) does the
//! work and reports it here. Unit-tested without Redis, as `cycle/gates.rs` is.
//!
//! A session starts when the agent's lease is taken (a wake signal, a sweep, a timer) and ends
//! when nothing is left to do; between sessions an agent holds no lease, no task and no
//! connection.
//!
//! ```text
//!  Settling ─▶ Looking ─▶ Cycling ─▶ Looking ─▶ … ─▶ Done        (lease given up)
//!                │                 └▶ Pausing ─▶ Paused          (lease given up; the human's
//!                │                                                answer or its time wakes it)
//!                └▶ Spent ─▶ Looking                              (lease kept until the roll-over)
//!  Cycling ─▶ (the model refused MAX_REFUSALS times) GivingUp ─▶ Looking
//!  any failure ─▶ Backoff ─▶ the step that failed                (lease kept)
//!  fenced anywhere ─▶ Lost                                       (the lease is another's)
//! ```

use std::time::Duration;

/// Failed cycles of one batch before the model's refusal is committed instead of retried.
pub(crate) const MAX_REFUSALS: u32 = 3;

/// A doubling delay between a first and a largest one: every retry of the runtime (and the
/// MCP tools' reconnects).
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    next: Duration,
    min: Duration,
    max: Duration,
}

impl Backoff {
    pub(crate) fn new(min: Duration, max: Duration) -> Self {
        Self {
            next: min,
            min,
            max,
        }
    }

    /// The delay to wait now (the next one is twice as long).
    pub(crate) fn take(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }

    pub(crate) fn reset(&mut self) {
        self.next = self.min;
    }
}

/// Where a session is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// Making the consciousness what it should be (recover, seed, restore) before a cycle.
    Settling,
    /// Looking for work: the budget, then the inbox (without waiting).
    Looking,
    /// A cycle runs over the events taken.
    Cycling,
    /// A cycle asked a human: recording the pause.
    Pausing {
        /// When the earliest wait ends (ms since the epoch).
        until_ms: i64,
    },
    /// The model refused the batch too often: committing the refusal.
    GivingUp,
    /// The budget is spent until `until_ms`: the lease is kept, nothing runs, events wait.
    Spent {
        /// When the budget rolls over (ms since the epoch).
        until_ms: i64,
    },
    /// Something failed: after `wait`, `then` again.
    Backoff {
        /// How long to wait.
        wait: Duration,
        /// The step to go back to.
        then: Box<State>,
        /// What failed, in words (readiness, logs).
        why: String,
    },
    /// Ended: a call waits for a human until `until_ms`; the lease is given up.
    Paused {
        /// When the earliest wait ends (ms since the epoch).
        until_ms: i64,
    },
    /// Ended: nothing waits; the lease is given up.
    Done,
    /// Ended: another worker holds the lease (or the data plane forgot it).
    Lost,
}

impl State {
    /// Whether the session has ended.
    #[cfg(test)]
    pub(crate) fn ended(&self) -> bool {
        matches!(self, State::Paused { .. } | State::Done | State::Lost)
    }
}

/// A step failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The lease is another's.
    Fenced,
    /// The data plane could not be reached or refused (in words).
    DataPlane(String),
}

/// How settling went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Settled {
    /// Nothing more to do this session.
    Done,
    /// A cycle is in flight: settle again once it has ended.
    AfterTheCycle,
}

/// What looking for work found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Looked {
    /// The budget is spent until then (ms since the epoch).
    Spent(i64),
    /// Events to think about (taken in flight).
    Events(usize),
}

/// How a cycle ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Cycled {
    /// Committed.
    Completed,
    /// Rolled back by `skip`.
    Skipped,
    /// A call waits for a human until then (ms since the epoch).
    Paused(i64),
    /// The model failed; `transient` failures (rate limits, timeouts) are never refusals.
    ModelFailed {
        /// Whether it may pass by itself.
        transient: bool,
    },
}

/// One agent's session.
#[derive(Debug)]
pub(crate) struct Session {
    state: State,
    refusals: u32,
    model: Backoff,
    store: Backoff,
    settle_after_cycle: bool,
}

impl Session {
    /// A session that has just taken the lease; `settle` unless the consciousness is known to
    /// be as this process left it.
    pub(crate) fn new(settle: bool) -> Self {
        Self {
            state: if settle {
                State::Settling
            } else {
                State::Looking
            },
            refusals: 0,
            model: Backoff::new(Duration::from_secs(1), Duration::from_secs(300)),
            store: Backoff::new(Duration::from_millis(200), Duration::from_secs(30)),
            settle_after_cycle: false,
        }
    }

    /// Where it is.
    pub(crate) fn state(&self) -> &State {
        &self.state
    }

    /// How the model's last failure is to be reported: the wait before the retry, or `None`
    /// when the refusal is being committed.
    pub(crate) fn retry_in(&self) -> Option<Duration> {
        match &self.state {
            State::Backoff { wait, .. } => Some(*wait),
            _ => None,
        }
    }

    /// A data-plane failure of the step `then`: wait, then do it again.
    fn failed(&mut self, failure: Failure, then: State) {
        self.state = match failure {
            Failure::Fenced => State::Lost,
            Failure::DataPlane(why) => State::Backoff {
                wait: self.store.take(),
                then: Box::new(then),
                why: format!("data plane: {why}"),
            },
        };
    }

    /// Settling went so.
    pub(crate) fn settled(&mut self, result: Result<Settled, Failure>) {
        match result {
            Ok(Settled::Done) => self.state = State::Looking,
            Ok(Settled::AfterTheCycle) => {
                self.settle_after_cycle = true;
                self.state = State::Looking;
            }
            Err(f) => self.failed(f, State::Settling),
        }
    }

    /// Looking for work went so.
    pub(crate) fn looked(&mut self, result: Result<Looked, Failure>) {
        match result {
            Ok(Looked::Spent(until_ms)) => self.state = State::Spent { until_ms },
            Ok(Looked::Events(0)) => self.state = State::Done,
            Ok(Looked::Events(_)) => {
                self.store.reset();
                self.state = State::Cycling;
            }
            Err(f) => self.failed(f, State::Looking),
        }
    }

    /// The cycle went so.
    pub(crate) fn cycled(&mut self, result: Result<Cycled, Failure>) {
        let ended = match result {
            Ok(Cycled::Completed) | Ok(Cycled::Skipped) => {
                self.refusals = 0;
                self.model.reset();
                self.store.reset();
                true
            }
            Ok(Cycled::Paused(until_ms)) => {
                self.refusals = 0;
                self.state = State::Pausing { until_ms };
                return;
            }
            Ok(Cycled::ModelFailed { transient }) => {
                self.refusals = if transient { 0 } else { self.refusals + 1 };
                if self.refusals < MAX_REFUSALS {
                    self.state = State::Backoff {
                        wait: self.model.take(),
                        then: Box::new(State::Looking),
                        why: "the model failed".into(),
                    };
                } else {
                    self.state = State::GivingUp;
                }
                return;
            }
            Err(f) => {
                self.failed(f, State::Looking);
                return;
            }
        };
        if ended {
            self.after_cycle();
        }
    }

    /// A cycle ended (committed, skipped, or its refusal committed): settle if it was
    /// waited for, else look for more.
    fn after_cycle(&mut self) {
        self.state = if std::mem::take(&mut self.settle_after_cycle) {
            State::Settling
        } else {
            State::Looking
        };
    }

    /// Recording the pause went so: `true` paused, `false` events arrived meanwhile (go on
    /// with them). A pause not recorded for a passing reason still ends the session: the
    /// scaler sees the agent busy until the next pause.
    pub(crate) fn pause_recorded(&mut self, result: Result<bool, Failure>) {
        let State::Pausing { until_ms } = self.state else {
            return;
        };
        self.state = match result {
            Ok(false) => State::Looking,
            Ok(true) | Err(Failure::DataPlane(_)) => State::Paused { until_ms },
            Err(Failure::Fenced) => State::Lost,
        };
    }

    /// Committing the refusal went so.
    pub(crate) fn refusal_committed(&mut self, result: Result<(), Failure>) {
        match result {
            Ok(()) => {
                self.refusals = 0;
                self.after_cycle();
            }
            // The events stay in flight: the next look takes them again.
            Err(Failure::DataPlane(why)) => {
                self.state = State::Backoff {
                    wait: self.store.take(),
                    then: Box::new(State::Looking),
                    why: format!("data plane: {why}"),
                }
            }
            Err(Failure::Fenced) => self.state = State::Lost,
        }
    }

    /// The wait of [`State::Backoff`] or [`State::Spent`] is over.
    pub(crate) fn waited(&mut self) {
        self.state = match std::mem::replace(&mut self.state, State::Done) {
            State::Backoff { then, .. } => *then,
            State::Spent { .. } => State::Looking,
            other => other,
        };
    }

    /// The lease was lost (its renewal found it another's).
    pub(crate) fn lost(&mut self) {
        self.state = State::Lost;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dp() -> Failure {
        Failure::DataPlane("connection refused".into())
    }

    #[test]
    fn a_wake_settles_takes_thinks_and_ends_when_nothing_waits() {
        let mut s = Session::new(true);
        assert_eq!(s.state(), &State::Settling);
        s.settled(Ok(Settled::Done));
        assert_eq!(s.state(), &State::Looking);
        s.looked(Ok(Looked::Events(3)));
        assert_eq!(s.state(), &State::Cycling);
        s.cycled(Ok(Cycled::Completed));
        assert_eq!(s.state(), &State::Looking);
        s.looked(Ok(Looked::Events(0)));
        assert_eq!(s.state(), &State::Done);
        assert!(s.state().ended());
    }

    #[test]
    fn a_warm_agent_skips_settling() {
        assert_eq!(Session::new(false).state(), &State::Looking);
    }

    #[test]
    fn a_cycle_in_flight_is_finished_before_settling_again() {
        let mut s = Session::new(true);
        s.settled(Ok(Settled::AfterTheCycle));
        s.looked(Ok(Looked::Events(1)));
        s.cycled(Ok(Cycled::Skipped));
        assert_eq!(s.state(), &State::Settling);
        s.settled(Ok(Settled::Done));
        s.looked(Ok(Looked::Events(1)));
        s.cycled(Ok(Cycled::Completed));
        assert_eq!(s.state(), &State::Looking, "settled once only");
    }

    #[test]
    fn data_plane_failures_back_off_growing_and_go_back_to_the_step() {
        let mut s = Session::new(true);
        s.settled(Err(dp()));
        let State::Backoff { wait, then, why } = s.state().clone() else {
            panic!("{:?}", s.state())
        };
        assert_eq!(
            (wait, *then, why.as_str()),
            (
                Duration::from_millis(200),
                State::Settling,
                "data plane: connection refused"
            )
        );
        s.waited();
        assert_eq!(s.state(), &State::Settling);
        s.settled(Err(dp()));
        assert!(
            matches!(s.state(), State::Backoff { wait, .. } if *wait == Duration::from_millis(400))
        );
        s.waited();
        s.settled(Ok(Settled::Done));
        s.looked(Err(dp()));
        assert!(
            matches!(s.state(), State::Backoff { then, wait, .. } if **then == State::Looking && *wait == Duration::from_millis(800))
        );
        s.waited();
        // Taking events resets it.
        s.looked(Ok(Looked::Events(1)));
        s.cycled(Err(dp()));
        assert!(
            matches!(s.state(), State::Backoff { then, wait, .. } if **then == State::Looking && *wait == Duration::from_millis(200))
        );
    }

    #[test]
    fn fenced_anywhere_ends_the_session_as_lost() {
        let mut s = Session::new(true);
        s.settled(Err(Failure::Fenced));
        assert_eq!(s.state(), &State::Lost);
        let mut s = Session::new(false);
        s.looked(Ok(Looked::Events(1)));
        s.cycled(Err(Failure::Fenced));
        assert_eq!(s.state(), &State::Lost);
        let mut s = Session::new(false);
        s.lost();
        assert!(s.state().ended());
    }

    #[test]
    fn a_refusing_model_is_retried_then_its_refusal_committed() {
        let mut s = Session::new(false);
        let mut waits = Vec::new();
        for _ in 0..MAX_REFUSALS - 1 {
            s.looked(Ok(Looked::Events(2)));
            s.cycled(Ok(Cycled::ModelFailed { transient: false }));
            waits.push(s.retry_in().unwrap());
            s.waited();
            assert_eq!(s.state(), &State::Looking);
        }
        assert_eq!(waits, [Duration::from_secs(1), Duration::from_secs(2)]);
        s.looked(Ok(Looked::Events(2)));
        s.cycled(Ok(Cycled::ModelFailed { transient: false }));
        assert_eq!(s.state(), &State::GivingUp);
        assert_eq!(s.retry_in(), None);
        s.refusal_committed(Err(dp()));
        assert!(matches!(s.state(), State::Backoff { .. }));
        s.waited();
        s.looked(Ok(Looked::Events(2)));
        // The count goes on for the same batch: refused again, given up again.
        s.cycled(Ok(Cycled::ModelFailed { transient: false }));
        assert_eq!(s.state(), &State::GivingUp);
        s.refusal_committed(Ok(()));
        assert_eq!(s.state(), &State::Looking);
        s.looked(Ok(Looked::Events(1)));
        s.cycled(Ok(Cycled::ModelFailed { transient: false }));
        assert!(matches!(s.state(), State::Backoff { .. }), "counted anew");
    }

    #[test]
    fn transient_model_failures_are_retried_for_ever_with_a_growing_wait() {
        let mut s = Session::new(false);
        let mut last = Duration::ZERO;
        for _ in 0..12 {
            s.looked(Ok(Looked::Events(1)));
            s.cycled(Ok(Cycled::ModelFailed { transient: true }));
            let wait = s.retry_in().unwrap();
            assert!(wait >= last && wait <= Duration::from_secs(300));
            last = wait;
            s.waited();
        }
        assert_eq!(last, Duration::from_secs(300));
        s.looked(Ok(Looked::Events(1)));
        s.cycled(Ok(Cycled::Completed));
        s.looked(Ok(Looked::Events(1)));
        s.cycled(Ok(Cycled::ModelFailed { transient: true }));
        assert_eq!(
            s.retry_in(),
            Some(Duration::from_secs(1)),
            "reset by success"
        );
    }

    #[test]
    fn a_pause_ends_the_session_unless_events_came_meanwhile() {
        let mut s = Session::new(false);
        s.looked(Ok(Looked::Events(1)));
        s.cycled(Ok(Cycled::Paused(5_000)));
        assert_eq!(s.state(), &State::Pausing { until_ms: 5_000 });
        s.pause_recorded(Ok(false));
        assert_eq!(s.state(), &State::Looking);
        s.looked(Ok(Looked::Events(2)));
        s.cycled(Ok(Cycled::Paused(6_000)));
        s.pause_recorded(Ok(true));
        assert_eq!(s.state(), &State::Paused { until_ms: 6_000 });
        assert!(s.state().ended());
        // Not recorded for a passing reason: paused all the same.
        let mut s = Session::new(false);
        s.looked(Ok(Looked::Events(1)));
        s.cycled(Ok(Cycled::Paused(7_000)));
        s.pause_recorded(Err(dp()));
        assert_eq!(s.state(), &State::Paused { until_ms: 7_000 });
    }

    #[test]
    fn a_spent_budget_keeps_the_session_until_the_roll_over() {
        let mut s = Session::new(false);
        s.looked(Ok(Looked::Spent(86_400_000)));
        assert_eq!(
            s.state(),
            &State::Spent {
                until_ms: 86_400_000
            }
        );
        assert!(!s.state().ended());
        s.waited();
        assert_eq!(s.state(), &State::Looking);
    }
}

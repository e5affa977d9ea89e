//! One session of one agent, driven by the state machine of [`crate::worker::session`]: take
//! the lease, settle, then look for work and think — each look and cycle in a slot of the
//! pool, given to another while the cycle waits on its model — until nothing waits; then give the lease up. The state machine decides; this file
//! only does what it says and reports how it went.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Semaphore};
use tracing::{debug, error, info, warn};

use crate::model::ModelError;
use crate::store::{InboxEvent, Lease, Store, StoreError};
use crate::telemetry::PoolMetrics;
use crate::worker::activity::Next;
use crate::worker::budget::{wait_for_roll_over, Told};
use crate::worker::cycle::{Agentlet, Outcome};
use crate::worker::session::{Cycled, Failure, Looked, Session, Settled, State};
use crate::worker::slot::{Slot, SlotGauges};
use crate::worker::{hydrate, Health};

/// How long a new agent's first session waits for its external tools to be known.
const SETTLE_TOOLS: Duration = Duration::from_secs(10);

/// What every session of a pool shares.
pub(crate) struct Setting {
    /// The data plane.
    pub(crate) store: Arc<dyn Store>,
    /// This process in the agents' leases.
    pub(crate) holder: String,
    /// How long a lease lasts without renewal.
    pub(crate) lease_ttl: Duration,
    /// Looks and cycles at once (fair: first come, first served).
    pub(crate) slots: Arc<Semaphore>,
    /// The pool's metrics.
    pub(crate) metrics: PoolMetrics,
    /// The pool's name in its metrics.
    pub(crate) pool: String,
}

impl Setting {
    /// A slot of the pool for `agent`'s session, not held yet.
    fn slot(&self, agent: &crate::identity::AgentKey) -> Slot {
        let labels = [agent.namespace.as_str(), self.pool.as_str()];
        Slot::new(
            self.slots.clone(),
            SlotGauges {
                waiting: self.metrics.waiting.with_label_values(&labels),
                wait: self.metrics.slot_wait.with_label_values(&labels),
                awaiting_model: self.metrics.awaiting_model.with_label_values(&labels),
            },
        )
    }
}

/// How a session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Nothing waits.
    Done,
    /// A call waits for a human until then (ms since the epoch): look again then, or when its
    /// answer wakes the agent.
    Paused(i64),
    /// Another worker holds the agent (it signals a wake when it leaves work behind).
    Elsewhere,
    /// The lease was lost mid-session.
    Lost,
    /// The lease could not be taken (the data plane is away): try again after this long.
    Retry(Duration),
    /// The process is shutting down.
    Shutdown,
    /// The agent was unloaded (it left the pool, or its manifest changed).
    Retired,
}

/// Aborts a background task when its owner goes away (so a dropped session stops renewing
/// its lease, as a killed process would).
pub(crate) struct AbortOnDrop(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs one session of `agentlet` (see the module's doc). `fresh`: the agent was just loaded
/// (its tools may still be connecting). `retry_lease`: the wait after a failed attempt to take
/// the lease. `retired`: the agent was unloaded; the session ends between cycles, leaving
/// what waits (and a cycle that failed, in flight) to the next holder.
pub(crate) async fn run(
    agentlet: &Arc<Agentlet>,
    setting: &Setting,
    health: &Health,
    fresh: bool,
    retry_lease: Duration,
    mut shutdown: watch::Receiver<bool>,
    retired: watch::Receiver<bool>,
) -> Ended {
    let key = agentlet.key.clone();
    if fresh {
        // The first cycle (maybe one resumed from its journal) should see the MCP servers'
        // tools: give their first connection a moment; one that does not answer comes later.
        tokio::select! {
            settled = tokio::time::timeout(SETTLE_TOOLS, agentlet.toolbox().settled()) => {
                if settled.is_err() {
                    info!(agent = %key, "some tools are not known yet; starting without them");
                }
            }
            _ = shutdown.wait_for(|v| *v) => return Ended::Shutdown,
        }
    }
    let lease = match setting
        .store
        .acquire_lease(&key, &setting.holder, setting.lease_ttl)
        .await
    {
        Ok(Some(lease)) => lease,
        Ok(None) => {
            debug!(agent = %key, "another worker holds this agent");
            return Ended::Elsewhere;
        }
        Err(e) => {
            warn!(agent = %key, error = %e, retry_in = ?retry_lease, "cannot take the agent's lease; retrying");
            health.set_problem(format!("data plane: {e}"));
            return Ended::Retry(retry_lease);
        }
    };
    let warm = agentlet.carry_over(&lease).await;
    debug!(agent = %key, token = lease.token, warm, "session starts");
    // A warm agent's tools are reported as they change (the pool's reporter); a cold one's now.
    if !warm {
        agentlet.report_tools().await;
    }

    // Renew in the background; losing it ends the session (and the store refuses our writes).
    let (lost_tx, lost) = watch::channel(false);
    let renewer = AbortOnDrop({
        let store = setting.store.clone();
        let key = key.clone();
        let lease = lease.clone();
        let ttl = setting.lease_ttl;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(ttl / 3).await;
                match store.renew_lease(&key, &lease, ttl).await {
                    Ok(true) => {}
                    Ok(false) => {
                        let _ = lost_tx.send(true);
                        return;
                    }
                    Err(e) => warn!(agent = %key, error = %e, "lease renewal failed; retrying"),
                }
            }
        })
    });
    let mut driver = Driver {
        agentlet,
        setting,
        health,
        lease: &lease,
        session: Session::new(!warm),
        events: Vec::new(),
        failure: None,
        paused: None,
        told: Told::default(),
        slot: setting.slot(&key),
    };
    let ended = driver.drive(shutdown, lost, retired).await;
    drop(driver);

    drop(renewer);
    if ended != Ended::Lost {
        if let Err(e) = setting.store.release_lease(&key, &lease).await {
            warn!(agent = %key, error = %e, "could not release the lease");
        }
    }
    ended
}

/// A session under way.
struct Driver<'a> {
    agentlet: &'a Arc<Agentlet>,
    setting: &'a Setting,
    health: &'a Health,
    lease: &'a Lease,
    session: Session,
    /// The events of the cycle under way (in flight).
    events: Vec<InboxEvent>,
    /// The model's last failure on these events.
    failure: Option<ModelError>,
    /// The record of the cycle that paused, kept by the step that records the pause.
    paused: Option<Box<crate::store::RecordWrite>>,
    /// What was said of a spent budget.
    told: Told,
    /// Its slot of the pool: held from a look to the end of its cycle, but for the time
    /// the cycle waits on its model.
    slot: Slot,
}

/// A store error as the state machine sees it.
fn failure(e: StoreError) -> Failure {
    match e {
        StoreError::Fenced { .. } => Failure::Fenced,
        e => Failure::DataPlane(e.to_string()),
    }
}

impl Driver<'_> {
    async fn drive(
        &mut self,
        mut shutdown: watch::Receiver<bool>,
        mut lost: watch::Receiver<bool>,
        mut retired: watch::Receiver<bool>,
    ) -> Ended {
        let key = self.agentlet.key.clone();
        loop {
            if *lost.borrow() {
                warn!(agent = %key, "lease lost; the session ends");
                self.session.lost();
            }
            match self.session.state().clone() {
                State::Done => return Ended::Done,
                State::Paused { until_ms } => return Ended::Paused(until_ms),
                State::Lost => return Ended::Lost,
                State::Settling => {
                    let settled = self.agentlet.settle(self.lease).await.map(|s| match s {
                        hydrate::Settled::Done => Settled::Done,
                        hydrate::Settled::AfterTheCycle => Settled::AfterTheCycle,
                    });
                    self.session.settled(settled.map_err(failure));
                }
                State::Looking => {
                    // A cycle in flight is finished first; between cycles, shutdown ends it
                    // (what waits is left to the next worker, with a wake signal).
                    if *shutdown.borrow() {
                        return Ended::Shutdown;
                    }
                    if *retired.borrow() {
                        return Ended::Retired;
                    }
                    let looked = self.look().await;
                    self.session.looked(looked);
                    if self.session.state() != &State::Cycling {
                        self.slot.give_back();
                    }
                }
                State::Cycling => {
                    let cycled = self.cycle().await;
                    self.slot.give_back();
                    self.session.cycled(cycled);
                    if let Some(wait) = self.session.retry_in() {
                        if let Some(e) = &self.failure {
                            warn!(agent = %key, error = %e, retry_in = ?wait, "cycle failed; its events stay in flight");
                            self.agentlet
                                .report_failure(e, &self.events, Next::RetryIn(wait))
                                .await;
                        }
                    }
                }
                State::Pausing { .. } => {
                    let record = self.paused.take();
                    let paused = self
                        .setting
                        .store
                        .pause_cycle_recorded(&key, self.lease, record.as_deref())
                        .await;
                    if let Err(e) = &paused {
                        warn!(agent = %key, error = %e, "the pause was not recorded");
                    }
                    self.session.pause_recorded(paused.map_err(failure));
                }
                State::GivingUp => {
                    let committed = self.give_up().await;
                    self.session.refusal_committed(committed);
                }
                State::Spent { .. } => {
                    let wait = match self.agentlet.budget_spent().await {
                        Some(spent) => {
                            self.agentlet.tell_spent(&spent, &mut self.told).await;
                            wait_for_roll_over(&spent)
                        }
                        None => Duration::ZERO,
                    };
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = shutdown.wait_for(|v| *v) => return Ended::Shutdown,
                        _ = retired.wait_for(|v| *v) => return Ended::Retired,
                        _ = lost.wait_for(|v| *v) => {}
                    }
                    self.session.waited();
                }
                State::Backoff { wait, why, then } => {
                    if *then != State::Looking || self.failure.is_none() {
                        warn!(agent = %key, error = %why, retry_in = ?wait, "retrying");
                        self.health.set_problem(why);
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = shutdown.wait_for(|v| *v) => return Ended::Shutdown,
                        _ = retired.wait_for(|v| *v) => return Ended::Retired,
                        _ = lost.wait_for(|v| *v) => {}
                    }
                    self.session.waited();
                }
            }
        }
    }

    /// Takes a slot, then the budget, then the inbox.
    async fn look(&mut self) -> Result<Looked, Failure> {
        let key = &self.agentlet.key;
        self.slot.take().await;
        match self.agentlet.budget_before_cycle().await {
            Ok(Some(spent)) => return Ok(Looked::Spent(spent.until_ms)),
            Ok(None) => {}
            Err(e) => return Err(failure(e)),
        }
        let events = self
            .setting
            .store
            .take_inbox(key, self.lease)
            .await
            .map_err(failure)?;
        self.health.clear_problem();
        if events.is_empty() {
            self.events.clear();
            self.failure = None;
            return Ok(Looked::Events(0));
        }
        // A cycle answers one party: another's events wait for the next one.
        let (party, mine, later) = crate::party::split(events);
        if !later.is_empty() {
            let ids: Vec<String> = later.into_iter().map(|e| e.id).collect();
            debug!(agent = %key, party = party.label(), waiting = ids.len(), "another party's events wait for a later cycle");
            self.setting
                .store
                .defer_events(key, self.lease, &ids)
                .await
                .map_err(failure)?;
        }
        self.events = mine;
        Ok(Looked::Events(self.events.len()))
    }

    /// Runs the cycle over the events taken.
    async fn cycle(&mut self) -> Result<Cycled, Failure> {
        let thinking = self.setting.metrics.thinking.with_label_values(&[
            self.agentlet.key.namespace.as_str(),
            self.setting.pool.as_str(),
        ]);
        thinking.inc();
        let outcome = self
            .agentlet
            .cycle_in(self.lease, &self.events, Some(&self.slot))
            .await;
        thinking.dec();
        match outcome {
            Ok(Outcome::Completed(_)) => {
                self.failure = None;
                if let Some(archiver) = self.agentlet.archiver() {
                    archiver.changed();
                }
                self.agentlet.report_success().await;
                Ok(Cycled::Completed)
            }
            Ok(Outcome::Answered) => {
                self.failure = None;
                self.agentlet.report_success().await;
                Ok(Cycled::Completed)
            }
            Ok(Outcome::Skipped) => {
                self.failure = None;
                self.agentlet.report_success().await;
                Ok(Cycled::Skipped)
            }
            Ok(Outcome::Paused { until_ms, record }) => {
                self.paused = Some(record);
                Ok(Cycled::Paused(until_ms))
            }
            Ok(Outcome::Failed(e)) => {
                let transient = e.is_transient();
                self.failure = Some(e);
                Ok(Cycled::ModelFailed { transient })
            }
            Err(e) => {
                if !matches!(e, StoreError::Fenced { .. }) {
                    warn!(agent = %self.agentlet.key, error = %e, "cycle failed on the data plane; retrying");
                }
                Err(failure(e))
            }
        }
    }

    /// The model refused the batch too often: its refusal is committed.
    async fn give_up(&mut self) -> Result<(), Failure> {
        let key = &self.agentlet.key;
        let Some(e) = self.failure.take() else {
            return Ok(());
        };
        error!(agent = %key, error = %e, "the model refused this batch repeatedly; recording the failure");
        self.agentlet
            .report_failure(&e, &self.events, Next::GaveUp)
            .await;
        match self
            .agentlet
            .commit_refusal(self.lease, &self.events, &e)
            .await
        {
            Ok(committed) => {
                if let (Some(archiver), Some(_)) = (self.agentlet.archiver(), committed) {
                    archiver.changed();
                }
                Ok(())
            }
            Err(err) => {
                warn!(agent = %key, error = %err, "the refusal was not recorded; the events stay in flight");
                self.failure = Some(e);
                Err(failure(err))
            }
        }
    }
}

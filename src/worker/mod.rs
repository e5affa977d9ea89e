//! `agentfleet worker --agent FILE`: one agent's living process (seed 003). It sleeps on the
//! inbox without polling, wakes, drains everything, thinks in one cycle, persists, sleeps.
//!
//! Whatever happens to the data plane, the model or the task itself, the agent is never
//! silently gone: a data-plane outage is waited out with backoff (events in flight stay in
//! flight), a failed model call is retried with backoff and shown in the agent's spaces, and a
//! session that ends anyway is restarted and counted ([`supervise`]); `/readyz` says why the
//! agent cannot work while it cannot.

pub mod archiver;
mod budget;
pub mod compaction;
pub mod cycle;
mod health;
mod hydrate;
pub mod prompt;
pub mod report;
pub mod tools;

pub use health::Health;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use tokio::sync::watch;
use tracing::{debug, error, info, warn};

use crate::crd::Agent;
use crate::store::{AgentKey, Lease, Store, StoreError};
use crate::telemetry::{self, WorkerMetrics};
use cycle::{Agentlet, Outcome};
use report::Next;

/// Flags of `agentfleet worker`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// The Agent manifest (YAML, as `kubectl apply` takes it).
    #[arg(long)]
    pub agent: PathBuf,
    /// The data plane (`--redis`).
    #[command(flatten)]
    pub redis: crate::cli::Redis,
    /// Address of `/metrics`, `/healthz` and `/readyz`.
    #[arg(long, env = "AGENTFLEET_METRICS_ADDR", default_value = "0.0.0.0:9090")]
    pub metrics_addr: SocketAddr,
    /// This worker's identity in the agent's lease (the pod name in a pod).
    #[arg(long, env = "AGENTFLEET_POD_NAME")]
    pub identity: Option<String>,
    /// Seconds the agent's lease lasts without renewal: how long a replacement waits after
    /// this worker dies without releasing it.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=300))]
    pub lease_seconds: u64,
    /// The gateway's base URL (`http://…`) the services of async tools post their results to.
    #[arg(long, env = "AGENTFLEET_CALLBACK_URL")]
    pub callback_url: Option<String>,
    /// Where checkpoints are archived.
    #[command(flatten)]
    pub archive: crate::archive::ArchiveFlag,
}

/// How long one wait on the inbox blocks before the loop looks around (shutdown, lease).
const WAIT: Duration = Duration::from_secs(5);
/// How long a session waits for its external tools to be known before it starts.
const SETTLE: Duration = Duration::from_secs(10);
/// Failed cycles of one batch before the model's refusal is committed instead of retried.
const MAX_REFUSALS: u32 = 3;

/// Reads an Agent manifest.
pub fn load_manifest(path: &std::path::Path) -> anyhow::Result<Agent> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let agent: Agent = serde_yaml::from_str(&text)
        .with_context(|| format!("{} is not a valid Agent manifest", path.display()))?;
    if agent.metadata.name.as_deref().unwrap_or("").is_empty() {
        anyhow::bail!("{}: metadata.name is required", path.display());
    }
    Ok(agent)
}

/// Aborts a background task when its owner goes away (so a dropped worker stops renewing
/// its lease, as a killed process would).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A doubling delay between a first and a largest one (also the MCP tools' reconnects).
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

/// Whether the agent's cycle is still paused for a human (no answer has come). When the data
/// plane cannot tell, it is not: the cycle resumes, reads its answers and pauses again.
async fn still_paused(agentlet: &Agentlet) -> bool {
    match agentlet
        .store
        .observe(std::slice::from_ref(&agentlet.key))
        .await
    {
        Ok(seen) => seen.first().is_some_and(|o| o.paused),
        Err(e) => {
            debug!(agent = %agentlet.key, error = %e, "cannot tell whether the pause ended; resuming");
            false
        }
    }
}

/// Sleeps `d`; `false` when shutdown came first.
async fn pause(d: Duration, shutdown: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => true,
        _ = shutdown.wait_for(|v| *v) => false,
    }
}

/// Every `reason` of `agentfleet_agent_restarts_total` (see [`supervise`]).
pub const RESTART_REASONS: [&str; 4] = ["data_plane", "lease_lost", "panic", "error"];

/// Runs one agent for as long as `shutdown` is false, whatever happens: a session
/// ([`run_agent`]) that ends for any reason — the lease lost, an error, a panic — is counted
/// in `agentfleet_agent_restarts_total`, shown by `health`, logged, and started again with
/// backoff.
pub async fn supervise(
    agentlet: Arc<Agentlet>,
    holder: String,
    lease_ttl: Duration,
    health: Arc<Health>,
    shutdown: watch::Receiver<bool>,
) {
    let key = agentlet.key.clone();
    let mut delay = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
    let mut stop = shutdown.clone();
    loop {
        let started = std::time::Instant::now();
        let session = tokio::spawn(run_agent(
            agentlet.clone(),
            holder.clone(),
            lease_ttl,
            health.clone(),
            shutdown.clone(),
        ));
        let outcome = session.await;
        if *stop.borrow() {
            return;
        }
        let (reason, why) = match outcome {
            Ok(Ok(())) => ("error", "the agent's loop ended".to_string()),
            Ok(Err(e @ StoreError::Fenced { .. })) => ("lease_lost", e.to_string()),
            Ok(Err(e @ (StoreError::Redis { .. } | StoreError::Timeout { .. }))) => {
                ("data_plane", e.to_string())
            }
            Ok(Err(e)) => ("error", e.to_string()),
            Err(e) if e.is_panic() => ("panic", "the agent's task panicked".to_string()),
            Err(e) => ("error", e.to_string()),
        };
        if started.elapsed() > Duration::from_secs(60) {
            delay.reset();
        }
        let wait = delay.take();
        agentlet
            .metrics
            .agent_restarts
            .with_label_values(&[key.namespace.as_str(), key.name.as_str(), reason])
            .inc();
        health.set_problem(format!("restarting after: {why}"));
        error!(agent = %key, reason, error = %why, retry_in = ?wait, "agent stopped; restarting it");
        // The data plane may have changed meanwhile (a Redis that lost its data, say).
        agentlet.forget_cache().await;
        if !pause(wait, &mut stop).await {
            return;
        }
    }
}

/// One session of an agent until `shutdown` resolves: waits for its lease (a second worker of
/// the same agent waits here, and so does one whose data plane is unreachable), then sleeps
/// on the inbox and runs cycles, riding out data-plane outages. A cycle under way when
/// shutdown comes is finished first. Ends with an error when the lease is lost (another worker
/// holds the agent, or the data plane forgot it); [`supervise`] starts a new session then.
pub async fn run_agent(
    agentlet: Arc<Agentlet>,
    holder: String,
    lease_ttl: Duration,
    health: Arc<Health>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), StoreError> {
    let key = agentlet.key.clone();
    let store = agentlet.store.clone();
    // The first cycle (maybe one resumed from its journal) should see the MCP servers' tools:
    // give their first connection a moment; one that does not answer in time comes later.
    tokio::select! {
        settled = tokio::time::timeout(SETTLE, agentlet.toolbox().settled()) => {
            if settled.is_err() {
                info!(agent = %key, "some tools are not known yet; starting without them");
            }
        }
        _ = shutdown.wait_for(|v| *v) => return Ok(()),
    }
    let mut retry = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
    let lease = loop {
        health.beat();
        let wait = match store.acquire_lease(&key, &holder, lease_ttl).await {
            Ok(Some(lease)) => break lease,
            Ok(None) => {
                info!(agent = %key, "another worker holds this agent; waiting");
                health.clear_problem();
                (lease_ttl / 5).min(Duration::from_secs(2))
            }
            Err(e) => {
                let wait = retry.take();
                warn!(agent = %key, error = %e, retry_in = ?wait, "cannot take the agent's lease; retrying");
                health.set_problem(format!("data plane: {e}"));
                wait
            }
        };
        if !pause(wait, &mut shutdown).await {
            return Ok(());
        }
    };
    health.clear_problem();
    health.set_leased(true);
    info!(agent = %key, token = lease.token, "holding the agent's lease");
    agentlet.report_tools().await;

    // Renew in the background; losing it stops the loop (and the store refuses our commits).
    let (lost_tx, mut lost) = watch::channel(false);
    let renewer = AbortOnDrop({
        let store = store.clone();
        let key = key.clone();
        let lease = lease.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(lease_ttl / 3).await;
                match store.renew_lease(&key, &lease, lease_ttl).await {
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

    // What the agent can call changes while it holds the lease (an MCP server comes up or
    // goes away, its list changes): the data plane hears of it at once, not at the next wake.
    let reporter = AbortOnDrop({
        let agentlet = agentlet.clone();
        tokio::spawn(async move {
            loop {
                agentlet.toolbox().changed().await;
                agentlet.report_tools().await;
            }
        })
    });

    // Checkpoints go to the archive off the cycle's path; the last one before the lease goes.
    let (stop_archiving, archiving_stopped) = watch::channel(false);
    let archiving = tokio::spawn(archiver::run(
        agentlet.clone(),
        lease.clone(),
        archiving_stopped,
    ));

    let result = process(&agentlet, &lease, &health, &mut shutdown, &mut lost).await;
    let _ = stop_archiving.send(true);
    if let Err(e) = archiving.await {
        warn!(agent = %key, error = %e, "the archiver stopped");
    }
    drop(reporter);
    drop(renewer);
    health.set_leased(false);
    if let Err(e) = store.release_lease(&key, &lease).await {
        warn!(agent = %key, error = %e, "could not release the lease");
    }
    result
}

/// The sleep–wake–think loop of a session.
async fn process(
    agentlet: &Agentlet,
    lease: &Lease,
    health: &Health,
    shutdown: &mut watch::Receiver<bool>,
    lost: &mut watch::Receiver<bool>,
) -> Result<(), StoreError> {
    let key = &agentlet.key;
    let mut refusals = 0u32;
    let mut model_backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(300));
    let mut store_backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
    let fenced = || StoreError::Fenced {
        agent: key.to_string(),
    };
    // While a cycle waits for a human: until when (its events stay in flight, and it goes
    // on only when something new arrives or that time has passed).
    let mut paused_until: Option<i64> = None;
    // Recover, seed or restore the consciousness before the first cycle; when a cycle is in
    // flight, after it.
    let mut settle = true;
    let mut settle_after_cycle = false;
    // What was said of a spent budget.
    let mut told = budget::Told::default();
    loop {
        health.beat();
        if *shutdown.borrow() {
            return Ok(());
        }
        if *lost.borrow() {
            warn!(agent = %key, "lease lost; stopping");
            return Err(fenced());
        }
        if std::mem::take(&mut settle) {
            match agentlet.settle(lease).await {
                Ok(hydrate::Settled::Done) => {}
                Ok(hydrate::Settled::AfterTheCycle) => settle_after_cycle = true,
                Err(StoreError::Fenced { .. }) => return Err(fenced()),
                Err(e) => {
                    settle = true;
                    let wait = store_backoff.take();
                    warn!(agent = %key, error = %e, retry_in = ?wait, "cannot read the consciousness; retrying");
                    health.set_problem(format!("data plane: {e}"));
                    if !pause(wait, shutdown).await {
                        return Ok(());
                    }
                    continue;
                }
            }
        }
        if let Some(until) = paused_until {
            let left = u64::try_from(until.saturating_sub(crate::store::now_ms())).unwrap_or(0);
            let wait = Duration::from_millis(left).min(WAIT);
            let arrived = tokio::select! {
                r = agentlet.store.wait_new(key, wait) => r,
                _ = shutdown.wait_for(|v| *v) => return Ok(()),
                _ = lost.wait_for(|v| *v) => continue,
            };
            match arrived {
                Ok(false) if crate::store::now_ms() < until => continue,
                // Something arrived: only an answer goes on (it ends the pause); the rest
                // waits for it.
                Ok(true) if crate::store::now_ms() < until && still_paused(agentlet).await => {
                    continue
                }
                Ok(_) => paused_until = None,
                Err(e) => {
                    let wait = store_backoff.take();
                    warn!(agent = %key, error = %e, retry_in = ?wait, "cannot reach the inbox; retrying");
                    if !pause(wait, shutdown).await {
                        return Ok(());
                    }
                    continue;
                }
            }
        }
        // A spent budget: no cycle until it rolls over; the events wait where they are.
        match agentlet.budget_before_cycle().await {
            Ok(None) => {}
            Ok(Some(spent)) => {
                agentlet.tell_spent(&spent, &mut told).await;
                tokio::select! {
                    _ = tokio::time::sleep(budget::wait_for_roll_over(&spent)) => {}
                    _ = shutdown.wait_for(|v| *v) => return Ok(()),
                    _ = lost.wait_for(|v| *v) => {}
                }
                continue;
            }
            Err(e) => {
                let wait = store_backoff.take();
                warn!(agent = %key, error = %e, retry_in = ?wait, "cannot read what the agent spent; retrying");
                health.set_problem(format!("data plane: {e}"));
                if !pause(wait, shutdown).await {
                    return Ok(());
                }
                continue;
            }
        }
        let waited = tokio::select! {
            r = agentlet.store.wait_inbox(key, lease, WAIT) => r,
            _ = shutdown.wait_for(|v| *v) => return Ok(()),
            _ = lost.wait_for(|v| *v) => continue,
        };
        let events = match waited {
            Ok(events) => {
                health.clear_problem();
                store_backoff.reset();
                events
            }
            Err(StoreError::Fenced { .. }) => return Err(fenced()),
            // The data plane is away: say so, wait, and wait on the inbox again (what was in
            // flight is still there and comes back first).
            Err(e) => {
                let wait = store_backoff.take();
                warn!(agent = %key, error = %e, retry_in = ?wait, "cannot reach the inbox; retrying");
                health.set_problem(format!("data plane: {e}"));
                if !pause(wait, shutdown).await {
                    return Ok(());
                }
                continue;
            }
        };
        // What the agent can call may change while it sleeps (an MCP server comes and goes).
        agentlet.report_tools().await;
        if events.is_empty() {
            continue;
        }
        // The cycle runs to its end even if shutdown arrives meanwhile.
        let outcome = agentlet.cycle(lease, &events).await;
        if matches!(outcome, Ok(Outcome::Completed(_)) | Ok(Outcome::Skipped)) {
            settle = std::mem::take(&mut settle_after_cycle);
        }
        if let (Ok(Outcome::Completed(_)), Some(archiver)) = (&outcome, agentlet.archiver()) {
            archiver.changed();
        }
        match outcome {
            Ok(Outcome::Completed(_)) | Ok(Outcome::Skipped) => {
                refusals = 0;
                model_backoff.reset();
                store_backoff.reset();
                agentlet.report_success().await;
            }
            Ok(Outcome::Paused { until_ms }) => {
                refusals = 0;
                paused_until = Some(until_ms);
                match agentlet.store.pause_cycle(key, lease).await {
                    Ok(true) => {}
                    // Events came meanwhile (an answer, perhaps): go on with them now.
                    Ok(false) => paused_until = None,
                    Err(StoreError::Fenced { .. }) => return Err(fenced()),
                    // Only the scaler's view: the agent looks busy until the next pause.
                    Err(e) => warn!(agent = %key, error = %e, "the pause was not recorded"),
                }
            }
            Ok(Outcome::Failed(e)) => {
                refusals = if e.is_transient() { 0 } else { refusals + 1 };
                if refusals < MAX_REFUSALS {
                    let wait = model_backoff.take();
                    warn!(agent = %key, error = %e, retry_in = ?wait, "cycle failed; its events stay in flight");
                    agentlet
                        .report_failure(&e, &events, Next::RetryIn(wait))
                        .await;
                    if !pause(wait, shutdown).await {
                        return Ok(());
                    }
                    continue;
                }
                error!(agent = %key, error = %e, "the model refused this batch {MAX_REFUSALS} times; recording the failure");
                agentlet.report_failure(&e, &events, Next::GaveUp).await;
                match agentlet.commit_refusal(lease, &events, &e).await {
                    Ok(_) => {
                        refusals = 0;
                        settle = std::mem::take(&mut settle_after_cycle);
                        if let Some(archiver) = agentlet.archiver() {
                            archiver.changed();
                        }
                    }
                    Err(StoreError::Fenced { .. }) => return Err(fenced()),
                    Err(err) => {
                        warn!(agent = %key, error = %err, "the refusal was not recorded; the events stay in flight")
                    }
                }
            }
            Err(StoreError::Fenced { .. }) => {
                warn!(agent = %key, "lease lost mid-cycle; nothing was committed");
                return Err(fenced());
            }
            Err(e) => {
                let wait = store_backoff.take();
                warn!(agent = %key, error = %e, retry_in = ?wait, "cycle failed on the data plane; retrying");
                health.set_problem(format!("data plane: {e}"));
                if !pause(wait, shutdown).await {
                    return Ok(());
                }
            }
        }
    }
}

#[derive(Clone)]
struct HttpState {
    health: Arc<Health>,
    store: Arc<dyn Store>,
}

async fn healthz(State(s): State<HttpState>) -> (StatusCode, String) {
    let age = s.health.stalled_for_ms();
    if age > 60_000 {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("process loop stalled for {}s\n", age / 1000),
        );
    }
    (StatusCode::OK, "ok\n".into())
}

async fn readyz(State(s): State<HttpState>) -> (StatusCode, String) {
    if let Err(e) = s.store.ping().await {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("data plane: {e}\n"),
        );
    }
    match s.health.ready() {
        Ok(()) => (StatusCode::OK, "ok\n".into()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}

/// `agentfleet worker`.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let agent = load_manifest(&args.agent)?;
    let key = AgentKey::new(
        agent
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        agent.metadata.name.clone().unwrap_or_default(),
    );
    let store: Arc<dyn Store> = Arc::new(args.redis.store().context("data plane")?);
    let archive = args.archive.open()?;
    let api_key = std::env::var("AGENTFLEET_MODEL_API_KEY").ok();
    let model = crate::model::from_spec(&agent.spec.model, &key.name, api_key).context("model")?;
    let metrics = WorkerMetrics::new().context("registering metrics")?;
    let health = Arc::new(Health::for_agent(&metrics, &key));
    health.beat();
    let holder = telemetry::process_identity(args.identity.as_deref(), "worker");
    let shutdown_rx = telemetry::shutdown_channel("shutting down after the current cycle");
    let router = telemetry::metrics_router(metrics.registry.clone()).merge(
        Router::new()
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .with_state(HttpState {
                health: health.clone(),
                store: store.clone(),
            }),
    );
    let server = {
        let mut rx = shutdown_rx.clone();
        tokio::spawn(telemetry::serve(args.metrics_addr, router, async move {
            let _ = rx.wait_for(|v| *v).await;
        }))
    };
    info!(agent = %key, model = %agent.spec.model.name, provider = agent.spec.model.provider.as_str(), "worker starting");
    let external = tools::external(
        &key,
        &agent.spec.tools,
        &tools::ExternalContext {
            store: store.clone(),
            secrets: tools::secrets::Secrets::default(),
            callback_url: args.callback_url.clone(),
        },
    );
    let mut agentlet =
        Agentlet::new(agent, key, store, Arc::from(model), metrics).with_external(external);
    if let Some(archive) = &archive {
        agentlet = agentlet.with_archive(archive);
    }
    let agentlet = Arc::new(agentlet);
    supervise(
        agentlet,
        holder,
        Duration::from_secs(args.lease_seconds),
        health,
        shutdown_rx,
    )
    .await;
    server.abort();
    Ok(())
}

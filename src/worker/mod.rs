//! `agentfleet worker --agent FILE`: one agent's living process (seed 003). It sleeps on the
//! inbox without polling, wakes, drains everything, thinks in one cycle, persists, sleeps.

pub mod compaction;
pub mod cycle;
pub mod prompt;
pub mod tools;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use tokio::sync::watch;
use tracing::{error, info, warn};

use crate::crd::Agent;
use crate::model::ModelError;
use crate::store::{AgentKey, Lease, RedisStore, Store, StoreError};
use crate::telemetry::{self, WorkerMetrics};
use cycle::{Agentlet, Outcome};

/// Flags of `agentfleet worker`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// The Agent manifest (YAML, as `kubectl apply` takes it).
    #[arg(long)]
    pub agent: PathBuf,
    /// Redis URL of the data plane.
    #[arg(
        long,
        env = "AGENTFLEET_REDIS_URL",
        default_value = "redis://127.0.0.1:6379/"
    )]
    pub redis: String,
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
}

/// How long one wait on the inbox blocks before the loop looks around (shutdown, lease).
const WAIT: Duration = Duration::from_secs(5);
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

/// A worker's state as its endpoints see it.
#[derive(Default)]
pub struct Health {
    leased: AtomicBool,
    heartbeat: AtomicI64,
}

impl Health {
    /// Whether this worker holds its agent's lease.
    pub fn leased(&self) -> bool {
        self.leased.load(Ordering::Relaxed)
    }

    fn beat(&self) {
        self.heartbeat
            .store(crate::store::now_ms(), Ordering::Relaxed);
    }
}

/// Runs one agent until `shutdown` resolves: waits for its lease (a second worker of the same
/// agent waits here), then sleeps on the inbox and runs cycles. A cycle under way when
/// shutdown comes is finished first.
pub async fn run_agent(
    agentlet: Arc<Agentlet>,
    holder: String,
    lease_ttl: Duration,
    health: Arc<Health>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), StoreError> {
    let key = agentlet.key.clone();
    let store = agentlet.store.clone();
    let lease = loop {
        health.beat();
        if let Some(lease) = store.acquire_lease(&key, &holder, lease_ttl).await? {
            break lease;
        }
        info!(agent = %key, "another worker holds this agent; waiting");
        tokio::select! {
            _ = tokio::time::sleep((lease_ttl / 5).min(Duration::from_secs(2))) => {}
            _ = shutdown.wait_for(|v| *v) => return Ok(()),
        }
    };
    health.leased.store(true, Ordering::Relaxed);
    info!(agent = %key, token = lease.token, "holding the agent's lease");

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

    let result = process(&agentlet, &lease, &health, &mut shutdown, &mut lost).await;
    drop(renewer);
    health.leased.store(false, Ordering::Relaxed);
    if let Err(e) = store.release_lease(&key, &lease).await {
        warn!(agent = %key, error = %e, "could not release the lease");
    }
    result
}

async fn process(
    agentlet: &Agentlet,
    lease: &Lease,
    health: &Health,
    shutdown: &mut watch::Receiver<bool>,
    lost: &mut watch::Receiver<bool>,
) -> Result<(), StoreError> {
    let key = &agentlet.key;
    let mut refusals = 0u32;
    let mut backoff = Duration::from_secs(1);
    loop {
        health.beat();
        if *shutdown.borrow() {
            return Ok(());
        }
        if *lost.borrow() {
            warn!(agent = %key, "lease lost; stopping");
            return Err(StoreError::Fenced {
                agent: key.to_string(),
            });
        }
        let events = tokio::select! {
            r = agentlet.store.wait_inbox(key, lease, WAIT) => r?,
            _ = shutdown.wait_for(|v| *v) => return Ok(()),
            _ = lost.wait_for(|v| *v) => continue,
        };
        if events.is_empty() {
            continue;
        }
        // The cycle runs to its end even if shutdown arrives meanwhile.
        match agentlet.cycle(lease, &events).await {
            Ok(Outcome::Completed(_)) | Ok(Outcome::Skipped) => {
                refusals = 0;
                backoff = Duration::from_secs(1);
            }
            Ok(Outcome::Failed(e)) => {
                refusals = if matches!(e, ModelError::Fatal(_)) {
                    refusals + 1
                } else {
                    0
                };
                if refusals >= MAX_REFUSALS {
                    error!(agent = %key, error = %e, "the model refused this batch {MAX_REFUSALS} times; recording the failure");
                    agentlet.commit_refusal(lease, &events, &e).await?;
                    refusals = 0;
                } else {
                    warn!(agent = %key, error = %e, retry_in = ?backoff, "cycle failed; its events stay in flight");
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = shutdown.wait_for(|v| *v) => return Ok(()),
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(300));
                }
            }
            Err(StoreError::Fenced { .. }) => {
                warn!(agent = %key, "lease lost mid-cycle; nothing was committed");
                return Err(StoreError::Fenced {
                    agent: key.to_string(),
                });
            }
            Err(e) => {
                warn!(agent = %key, error = %e, retry_in = ?backoff, "cycle failed on the data plane; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(60));
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
    let age = crate::store::now_ms() - s.health.heartbeat.load(Ordering::Relaxed);
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
    if !s.health.leased.load(Ordering::Relaxed) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "waiting for the agent's lease\n".into(),
        );
    }
    (StatusCode::OK, "ok\n".into())
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
    let store: Arc<dyn Store> = Arc::new(RedisStore::new(&args.redis).context("data plane")?);
    let api_key = std::env::var("AGENTFLEET_MODEL_API_KEY").ok();
    let model = crate::model::from_spec(&agent.spec.model, &key.name, api_key).context("model")?;
    let metrics = WorkerMetrics::new().context("registering metrics")?;
    let health = Arc::new(Health::default());
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
    let agentlet = Arc::new(Agentlet::new(agent, key, store, Arc::from(model), metrics));
    let result = run_agent(
        agentlet,
        holder,
        Duration::from_secs(args.lease_seconds),
        health,
        shutdown_rx,
    )
    .await;
    server.abort();
    result.map_err(anyhow::Error::from)
}

//! `agentfleet worker --agent FILE`: one agent's living process (seed 003). It sleeps on the
//! inbox without polling, wakes, drains everything, thinks in one cycle, persists, sleeps.
//!
//! Whatever happens to the data plane, the model or the task itself, the agent is never
//! silently gone: a data-plane outage is waited out with backoff (events in flight stay in
//! flight), a failed model call is retried with backoff and shown in the agent's spaces, and a
//! session that ends anyway is restarted and counted ([`supervise`]); `/readyz` says why the
//! agent cannot work while it cannot.

pub mod activity;
pub mod archiver;
mod budget;
pub mod compaction;
mod cue;
pub mod cycle;
mod health;
pub mod host;
mod hydrate;
pub mod pool;
pub mod prompt;
pub mod rehearsal;
pub(crate) mod session;
pub(crate) mod slot;
pub mod tools;

pub use health::Health;
pub use pool::RESTART_REASONS;
pub(crate) use session::Backoff;

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
use tracing::info;

use crate::crd::Agent;
use crate::store::Store;
use crate::telemetry::{self, WorkerMetrics};
use cycle::Agentlet;

/// Flags of `agentfleet worker`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// The Agent manifest (YAML, as `kubectl apply` takes it).
    #[arg(long)]
    pub agent: PathBuf,
    /// What every process that runs agents is given.
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

/// Flags of every process that runs agents (`agentfleet worker`, `agentfleet pool`).
#[derive(clap::Args, Debug, Clone)]
pub struct RuntimeArgs {
    /// The data plane (`--redis`).
    #[command(flatten)]
    pub redis: crate::store::RedisArgs,
    /// Address of `/metrics`, `/healthz` and `/readyz`.
    #[arg(long, env = "AGENTFLEET_METRICS_ADDR", default_value = "0.0.0.0:9090")]
    pub metrics_addr: SocketAddr,
    /// This process's identity in the agents' leases (the pod name in a pod).
    #[arg(long, env = "AGENTFLEET_POD_NAME")]
    pub identity: Option<String>,
    /// Seconds an agent's lease lasts without renewal: how long another process waits for an
    /// agent whose process died mid-cycle.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=300))]
    pub lease_seconds: u64,
    /// The gateway's base URL (`http://…`) the services of async tools post their results to.
    #[arg(long, env = "AGENTFLEET_CALLBACK_URL")]
    pub callback_url: Option<String>,
    /// Where checkpoints are archived.
    #[command(flatten)]
    pub archive: crate::archive::ArchiveFlag,
    /// Where the Secrets its models' keys and tools' headers come from are mounted
    /// (`DIR/NAME/KEY`), read at each use.
    #[arg(long, env = "AGENTFLEET_SECRETS_DIR", default_value = crate::secrets::MOUNT_DIR)]
    pub secrets_dir: PathBuf,
    /// Seconds between two looks at the manifests for changes (a mounted ConfigMap changes
    /// in place: a new model, endpoint or fallback list reaches the agents at their next
    /// cycle, without a restart).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub reload_seconds: u64,
}

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

/// How long the sessions under way may take to end at shutdown (a cycle is finished first).
pub(crate) const DRAIN: Duration = Duration::from_secs(120);

/// Runs one agent until `shutdown`: a pool of one ([`pool::Pool`]). It sleeps on its own
/// wake signal, takes its lease for each session and gives it up when nothing waits; a
/// session that ends badly (the lease lost, the data plane away, a panic) is counted in
/// `agentfleet_agent_restarts_total`, shown by `health`, and tried again with backoff.
pub async fn run_agent(
    agentlet: Arc<Agentlet>,
    holder: String,
    lease_ttl: Duration,
    health: Arc<Health>,
    shutdown: watch::Receiver<bool>,
) {
    let config = pool::PoolConfig::dedicated(&agentlet.key, holder, lease_ttl);
    let pool = pool::Pool::new(
        config,
        agentlet.store.clone(),
        agentlet.metrics.clone(),
        health,
        None,
        shutdown,
    );
    pool.add_agentlet(agentlet);
    pool.run(DRAIN).await;
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

/// Serves `/metrics`, `/healthz` (the loop is alive) and `/readyz` (the data plane answers
/// and `health` has nothing against it) until `shutdown`.
pub(crate) fn serve_endpoints(
    addr: SocketAddr,
    metrics: &WorkerMetrics,
    health: Arc<Health>,
    store: Arc<dyn Store>,
    shutdown: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<std::io::Result<()>> {
    let router = telemetry::metrics_router(metrics.registry.clone()).merge(
        Router::new()
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .with_state(HttpState { health, store }),
    );
    let mut rx = shutdown;
    tokio::spawn(telemetry::serve(addr, router, async move {
        let _ = rx.wait_for(|v| *v).await;
    }))
}

/// `agentfleet worker`.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let agent = load_manifest(&args.agent)?;
    let key = host::key_of(&agent);
    let store: Arc<dyn Store> = Arc::new(args.runtime.redis.store().context("data plane")?);
    let archive = args.runtime.archive.open()?;
    let api_key = std::env::var(crate::model::API_KEY_ENV).ok();
    let metrics = WorkerMetrics::new().context("registering metrics")?;
    let health = Arc::new(Health::for_agent(&metrics, &key));
    health.beat();
    let holder = telemetry::process_identity(args.runtime.identity.as_deref(), "worker");
    let shutdown_rx = telemetry::shutdown_channel("shutting down after the current cycle");
    let server = serve_endpoints(
        args.runtime.metrics_addr,
        &metrics,
        health.clone(),
        store.clone(),
        shutdown_rx.clone(),
    );
    info!(agent = %key, model = %agent.spec.model.name, provider = agent.spec.model.provider().as_str(), "worker starting");
    let host = host::Host {
        store,
        metrics,
        api_key,
        secrets: [(
            key.namespace.clone(),
            tools::secrets::Secrets::Dir(args.runtime.secrets_dir.clone()),
        )]
        .into(),
        callback_url: args.runtime.callback_url.clone(),
        archive,
        lists: Default::default(),
    };
    // A model that cannot be made is refused now, not at the agent's first wake.
    host.model(&agent)?;
    let pool = pool::Pool::new(
        pool::PoolConfig::dedicated(
            &key,
            holder,
            Duration::from_secs(args.runtime.lease_seconds),
        ),
        host.store.clone(),
        host.metrics.clone(),
        health,
        Some(Arc::new(move |agent: &Agent| host.agentlet(agent))),
        shutdown_rx.clone(),
    );
    pool.set_manifests(vec![agent]);
    pool.look(&key);
    // Its manifest changes in place (a mounted ConfigMap: a Model's new endpoint or fallback
    // list); the next cycle runs the new one.
    let path = args.agent.clone();
    let reloading = pool::follow::follow(
        pool.clone(),
        args.agent.clone(),
        Duration::from_secs(args.runtime.reload_seconds),
        move || Ok(vec![load_manifest(&path)?]),
        shutdown_rx,
    );
    pool.run(DRAIN).await;
    reloading.abort();
    server.abort();
    Ok(())
}

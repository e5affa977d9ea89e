//! `agentfleet pool`: many Agents of one namespace in one process (see [`super::Pool`]).
//!
//! The Agents come from a directory of manifests (`--agents DIR`, as `kubectl apply -f DIR`
//! takes them; those of other namespaces are refused), looked at again every few seconds: in
//! a pod it is the Pool's ConfigMaps, which the operator renders and the kubelet updates in
//! place, so the pool needs no access to the Kubernetes API. The Secrets their tools and models
//! read are mounted at `/etc/agentfleet/secrets/NAME/KEY` as a dedicated worker's are, or given
//! as `kind: Secret` documents of the directory: a pool reads no Secret it was not given, and
//! no secret value goes into the data plane. Each model's API key is read from its Agent's
//! `model.apiKeySecretRef`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use tracing::info;

use super::{Pool, PoolConfig};
use crate::store::{Store, WakeScope};
use crate::telemetry::{self, WorkerMetrics};
use crate::worker::host::Host;
use crate::worker::tools::secrets::Secrets;
use crate::worker::Health;

/// Flags of `agentfleet pool`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// The namespace whose Agents the pool serves (it serves no other).
    #[arg(long, env = "AGENTFLEET_NAMESPACE")]
    pub namespace: String,
    /// The pool's name (metrics, logs).
    #[arg(long, env = "AGENTFLEET_POOL")]
    pub name: String,
    /// A directory of Agent manifests (and `kind: Secret` documents) to serve.
    #[arg(long)]
    pub agents: PathBuf,
    /// What every process that runs agents is given.
    #[command(flatten)]
    pub runtime: crate::worker::RuntimeArgs,
    /// Looks and cycles at once in this process.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub cycles_at_once: u64,
    /// Agents kept loaded between their sessions (the most recently active).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub warm_agents: u64,
    /// Seconds between two sweeps of the sleeping agents' inboxes (for wake signals pub/sub
    /// lost).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=300))]
    pub sweep_seconds: u64,
}

/// The Agents of the directory that the pool serves (its namespace's, not paused), and the
/// Secret documents of the directory.
fn read(args: &Args) -> anyhow::Result<(Vec<crate::crd::Agent>, Secrets)> {
    let manifests = crate::manifests::load_dir(&args.agents, &args.namespace)?;
    let foreign: Vec<String> = manifests
        .agents
        .iter()
        .map(crate::worker::host::key_of)
        .filter(|k| k.namespace != args.namespace)
        .map(|k| k.to_string())
        .collect();
    if !foreign.is_empty() {
        bail!(
            "pool {} serves namespace {} only; refused: {}",
            args.name,
            args.namespace,
            foreign.join(", ")
        );
    }
    let given = manifests.secrets_of(&args.namespace);
    let secrets = if given.is_empty() {
        Secrets::Dir(args.runtime.secrets_dir.clone())
    } else {
        Secrets::from_map(given)
    };
    let agents = manifests
        .agents
        .into_iter()
        .filter(|a| !a.spec.paused)
        .collect();
    Ok((agents, secrets))
}

/// `agentfleet pool`.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let (agents, secrets) = read(&args)?;
    let store: Arc<dyn Store> = Arc::new(args.runtime.redis.store().context("data plane")?);
    let metrics = WorkerMetrics::new().context("registering metrics")?;
    let health = Arc::new(Health::default());
    health.beat();
    let shutdown = telemetry::shutdown_channel("shutting down after the cycles under way");
    let server = crate::worker::serve_endpoints(
        args.runtime.metrics_addr,
        &metrics,
        health.clone(),
        store.clone(),
        shutdown.clone(),
    );
    let host = Host {
        store: store.clone(),
        metrics: metrics.clone(),
        api_key: None,
        secrets: [(args.namespace.clone(), secrets)].into(),
        callback_url: args.runtime.callback_url.clone(),
        archive: args.runtime.archive.open()?,
        lists: Default::default(),
    };
    info!(pool = %args.name, namespace = %args.namespace, agents = agents.len(), "pool starting");
    let usize_of = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    let pool = Pool::new(
        PoolConfig {
            name: args.name.clone(),
            scope: WakeScope::Namespace(args.namespace.clone()),
            holder: telemetry::process_identity(args.runtime.identity.as_deref(), "pool"),
            lease_ttl: Duration::from_secs(args.runtime.lease_seconds),
            cycles_at_once: usize_of(args.cycles_at_once),
            warm_agents: usize_of(args.warm_agents),
            sweep_every: Duration::from_secs(args.sweep_seconds),
        },
        store,
        metrics,
        health,
        Some(Arc::new(move |agent: &crate::crd::Agent| {
            host.agentlet(agent)
        })),
        shutdown.clone(),
    );
    pool.set_manifests(agents);
    // The directory changes in place (a mounted ConfigMap): the pool follows it.
    let reloading = super::follow::follow(
        pool.clone(),
        args.agents.clone(),
        Duration::from_secs(args.runtime.reload_seconds),
        move || read(&args).map(|(agents, _)| agents),
        shutdown,
    );
    pool.run(crate::worker::DRAIN).await;
    reloading.abort();
    server.abort();
    Ok(())
}

//! `agentfleet operator`: the Agent, Space, Pool and Rehearsal controllers, leader election, and the
//! `/metrics`, `/healthz`, `/readyz` endpoints.
//!
//! Where things are: [`run`] and its flags here; what the reconciles share in [`context`]; the
//! controllers' wiring in [`controllers`] and what wakes them in `watches`; the reconciles in
//! [`agent`] (with [`pooled`] for an agent in a Pool), [`space`], [`pool`] and [`rehearsal`], checking specs with [`validate`], computing conditions in
//! [`conditions`] and building their objects with the pure [`build`]; the status in
//! [`status`]; the data-plane loop (scale decisions, cluster calls, plans) in [`dataplane`];
//! liveness and readiness in [`health`]; the leader Lease in [`leader`]. No module imports
//! from this one.

pub mod agent;
mod apply;
pub mod build;
mod cleanup;
pub mod conditions;
pub mod context;
pub mod controllers;
pub mod dataplane;
pub mod health;
pub mod leader;
pub mod model;
pub mod pool;
pub mod pooled;
pub mod rehearsal;
pub mod rollout;
pub mod space;
pub mod status;
pub mod validate;
mod watches;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use tokio::sync::watch;
use tracing::{error, info, warn};

use self::build::{RedisUrlSource, WorkerArchive, WorkerDefaults};
use self::context::Config;
use self::controllers::run_controllers;
use self::dataplane::Tuning;
use self::health::Health;
use crate::archive::Archive;
use crate::store::Store;
use crate::telemetry::{self, LogFormat, OperatorMetrics};

/// Flags of `agentfleet operator`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// The data plane (`--redis`).
    #[command(flatten)]
    pub redis: crate::store::RedisArgs,
    /// Address of `/metrics`, `/healthz` and `/readyz`.
    #[arg(long, env = "AGENTFLEET_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Image of the workers, unless an Agent names its own.
    #[arg(long, env = "AGENTFLEET_WORKER_IMAGE", default_value = concat!("ghcr.io/agentfleet/agentfleet:", env!("CARGO_PKG_VERSION")))]
    pub worker_image: String,
    /// Pull policy of the worker image (the cluster's default when unset).
    #[arg(long, env = "AGENTFLEET_WORKER_IMAGE_PULL_POLICY")]
    pub worker_image_pull_policy: Option<String>,
    /// Redis URL given to the workers, inline in their Deployments (the operator's own when
    /// neither this nor `--worker-redis-secret` is set).
    #[arg(
        long,
        env = "AGENTFLEET_WORKER_REDIS_URL",
        conflicts_with = "worker_redis_secret"
    )]
    pub worker_redis: Option<String>,
    /// Name of a Secret, in each Agent's namespace, holding the workers' Redis URL (use this
    /// when the URL carries a password).
    #[arg(long, env = "AGENTFLEET_WORKER_REDIS_SECRET")]
    pub worker_redis_secret: Option<String>,
    /// Write the workers' Redis URL (`--worker-redis`, else the operator's own) into a Secret
    /// beside each worker, owned by its Agent (`AGENT-worker-redis`), for a URL with a
    /// password and Agents in any namespace. Needs create/patch on Secrets.
    #[arg(
        long,
        env = "AGENTFLEET_WORKER_REDIS_MANAGED",
        conflicts_with = "worker_redis_secret"
    )]
    pub worker_redis_managed: bool,
    /// Key of the Redis URL in `--worker-redis-secret`.
    #[arg(
        long,
        env = "AGENTFLEET_WORKER_REDIS_SECRET_KEY",
        default_value = "url"
    )]
    pub worker_redis_secret_key: String,
    /// The gateway's base URL as the workers' pods reach it (for example
    /// `http://agentfleet-gateway.agentfleet.svc:80`): the services of async tools post their
    /// results there. Given to every worker as `AGENTFLEET_CALLBACK_URL`; without it, workers
    /// offer no async tools.
    #[arg(long, env = "AGENTFLEET_GATEWAY_URL", value_parser = gateway_url)]
    pub gateway_url: Option<String>,
    /// How the workers write their log lines: one JSON object a line (`json`, for a pod's
    /// log collector) or `text`.
    #[arg(long, env = "AGENTFLEET_WORKER_LOG_FORMAT", value_enum, default_value_t = LogFormat::Json)]
    pub worker_log_format: LogFormat,
    /// Where the workers export OpenTelemetry traces (their `OTEL_EXPORTER_OTLP_ENDPOINT`;
    /// an Agent's own `spec.worker.env` wins). Unset: workers export no traces.
    #[arg(long, env = "AGENTFLEET_WORKER_OTLP_ENDPOINT")]
    pub worker_otlp_endpoint: Option<String>,
    /// Namespace of the leader Lease (the operator's own namespace in a pod).
    #[arg(long, env = "AGENTFLEET_LEASE_NAMESPACE", default_value = "default")]
    pub lease_namespace: String,
    /// Name of the leader Lease.
    #[arg(
        long,
        env = "AGENTFLEET_LEASE_NAME",
        default_value = "agentfleet-operator"
    )]
    pub lease_name: String,
    /// This replica's identity in the Lease (the pod name in a pod).
    #[arg(long, env = "AGENTFLEET_POD_NAME")]
    pub identity: Option<String>,
    /// Seconds a leader's lease lasts without renewal.
    #[arg(long, default_value_t = 15)]
    pub lease_seconds: u64,
    /// Seconds between sweeps of every agent's inbox depth, activity and plans (the fallback
    /// for wake signals, and the pace of scale-downs and status updates).
    #[arg(long, env = "AGENTFLEET_SWEEP_SECONDS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=300))]
    pub sweep_seconds: u64,
    /// Least seconds between two status writes of one agent.
    #[arg(long, env = "AGENTFLEET_STATUS_INTERVAL_SECONDS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub status_interval_seconds: u64,
    /// Where checkpoints are archived: the URL and the store's variables are given to every
    /// worker in a Secret beside it (`AGENT-worker-archive`), and a deleted Agent's archived
    /// checkpoints are removed with its data (unless `retainOnDelete`). Unset: no archive.
    #[command(flatten)]
    pub archive: crate::archive::ArchiveFlag,
    /// Seconds a deleted Agent waits for an unreachable data plane before it is deleted anyway.
    #[arg(long, env = "AGENTFLEET_CLEANUP_TIMEOUT_SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub cleanup_timeout_seconds: u64,
}

impl Args {
    /// What every worker gets from these flags: image, pull policy, the data plane's URL —
    /// from a Secret, or inline (the operator's own unless `--worker-redis` names another) —
    /// and `archive`, the archive opened from `--archive`.
    pub fn worker_defaults(&self, archive: Option<&Archive>) -> WorkerDefaults {
        let redis = match (&self.worker_redis_secret, &self.worker_redis) {
            (Some(name), _) => RedisUrlSource::Secret {
                name: name.clone(),
                key: self.worker_redis_secret_key.clone(),
            },
            (None, url) if self.worker_redis_managed => {
                RedisUrlSource::Managed(url.clone().unwrap_or_else(|| self.redis.url.clone()))
            }
            (None, url) => {
                let url = url.clone().unwrap_or_else(|| self.redis.url.clone());
                if crate::store::redact_url(&url) != url {
                    warn!(
                        url = %crate::store::redact_url(&url),
                        "the workers' Redis URL carries a password and would be visible in their Deployments; use --worker-redis-managed or --worker-redis-secret"
                    );
                }
                RedisUrlSource::Value(url)
            }
        };
        WorkerDefaults {
            image: self.worker_image.clone(),
            image_pull_policy: self.worker_image_pull_policy.clone(),
            redis,
            redis_env: self.redis.worker_env(),
            callback_url: self.gateway_url.clone(),
            log_format: self.worker_log_format,
            otlp_endpoint: self.worker_otlp_endpoint.clone(),
            archive: self
                .archive
                .url
                .as_deref()
                .zip(archive)
                .map(|(url, archive)| WorkerArchive::new(url, archive)),
        }
    }

    /// The archive of `--archive`, opened with this process's environment (none without
    /// it); a URL that names no archive is an error.
    pub fn open_archive(&self) -> anyhow::Result<Option<Archive>> {
        self.archive
            .open()
            .context("--archive (AGENTFLEET_ARCHIVE_URL)")
    }

    /// The data-plane loop's timing from these flags.
    fn tuning(&self) -> Tuning {
        Tuning {
            sweep: Duration::from_secs(self.sweep_seconds),
            status_interval: Duration::from_secs(self.status_interval_seconds),
            cleanup_timeout: Duration::from_secs(self.cleanup_timeout_seconds),
        }
    }
}

/// `--gateway-url`: an `http://` or `https://` URL with a host and no query, without its
/// trailing `/` (the workers append the callback's path).
fn gateway_url(s: &str) -> Result<String, String> {
    let rest = s
        .strip_prefix("http://")
        .or_else(|| s.strip_prefix("https://"))
        .ok_or("must start with http:// or https://")?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err("must name a host".into());
    }
    if s.contains(['?', '#']) || s.chars().any(char::is_whitespace) {
        return Err("must be a base URL, without query, fragment or spaces".into());
    }
    Ok(s.trim_end_matches('/').to_string())
}

/// `agentfleet operator`.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let archive = args.open_archive()?;
    let client = Client::try_default()
        .await
        .context("connecting to the Kubernetes API (in-cluster or KUBECONFIG)")?;
    let store: Arc<dyn Store> = Arc::new(args.redis.store().context("data plane")?);
    let metrics = OperatorMetrics::new().context("registering metrics")?;
    let health = Arc::new(Health::default());
    health.beat();
    let identity = telemetry::process_identity(args.identity.as_deref(), "agentfleet-operator");
    let shutdown_rx = telemetry::shutdown_channel("shutting down");
    // Every replica says whether it reaches Redis, the leader and the standbys alike.
    tokio::spawn(telemetry::data_plane::watch_data_plane(
        store.clone(),
        metrics.data_plane_up.clone(),
        telemetry::data_plane::EVERY,
        shutdown_rx.clone(),
    ));
    let wait_shutdown = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|v| *v).await;
    };

    let router = telemetry::metrics_router(metrics.registry.clone()).merge(health::routes(
        health.clone(),
        store.clone(),
        i64::try_from(args.lease_seconds).unwrap_or(15),
    ));
    let server = tokio::spawn(telemetry::serve(
        args.metrics_addr,
        router,
        wait_shutdown(shutdown_rx.clone()),
    ));

    let leases: Api<Lease> = Api::namespaced(client.clone(), &args.lease_namespace);
    let elector = leader::Elector::new(
        leases.clone(),
        &args.lease_name,
        &identity,
        Duration::from_secs(args.lease_seconds),
    );
    let (leader_tx, mut leader_rx) = watch::channel(false);
    let elector_task = {
        let health = health.clone();
        tokio::spawn(elector.run(leader_tx, move || health.beat()))
    };
    info!(%identity, lease = %args.lease_name, "waiting for leadership");

    let mut shutdown = shutdown_rx.clone();
    tokio::select! {
        _ = leader_rx.wait_for(|v| *v) => {}
        _ = shutdown.wait_for(|v| *v) => {
            elector_task.abort();
            return Ok(());
        }
    }
    health.set_leader(true);
    metrics.leader.set(1);

    let worker = args.worker_defaults(archive.as_ref());
    // Stop the controllers on shutdown, or as soon as leadership is lost.
    let lost = Arc::new(AtomicBool::new(false));
    let stop = {
        let lost = lost.clone();
        let mut leader_rx = leader_rx.clone();
        let mut shutdown = shutdown_rx.clone();
        async move {
            tokio::select! {
                _ = leader_rx.wait_for(|v| !*v) => lost.store(true, Ordering::Relaxed),
                _ = shutdown.wait_for(|v| *v) => {}
            }
        }
    };
    run_controllers(
        client.clone(),
        store,
        metrics.clone(),
        Config {
            worker,
            instance: Some(identity.clone()),
            tuning: args.tuning(),
            archive,
        },
        health.clone(),
        stop,
    )
    .await;
    elector_task.abort();
    health.set_leader(false);
    metrics.leader.set(0);
    if lost.load(Ordering::Relaxed) {
        error!("lost the leader lease; exiting so that a fresh start campaigns again");
        anyhow::bail!("lost the leader lease");
    }
    let releaser = leader::Elector::new(
        leases,
        &args.lease_name,
        &identity,
        Duration::from_secs(args.lease_seconds),
    );
    if let Err(e) = releaser.release().await {
        warn!(error = %crate::report::chain(&e), "could not release the leader lease");
    }
    let _ = server.await;
    Ok(())
}

#[cfg(test)]
mod tests;

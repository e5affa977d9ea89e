//! `agentfleet operator`: the Agent and Space controllers, leader election, and the
//! `/metrics`, `/healthz`, `/readyz` endpoints.

pub mod agent;
pub mod build;
pub mod conditions;
pub mod leader;
pub mod scaling;
pub mod space;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store as Cache};
use kube::runtime::{predicates, watcher, Controller, Predicate, WatchStreamExt};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::watch;
use tracing::{error, info, warn};

use crate::crd::{Agent, Space};
use crate::store::{self, RedisStore, Store, StoreError};
use crate::telemetry::{self, OperatorMetrics};
use build::{RedisUrlSource, WorkerDefaults};

/// Flags of `agentfleet operator`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// The data plane (`--redis`).
    #[command(flatten)]
    pub redis: crate::cli::Redis,
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
    /// Key of the Redis URL in `--worker-redis-secret`.
    #[arg(
        long,
        env = "AGENTFLEET_WORKER_REDIS_SECRET_KEY",
        default_value = "url"
    )]
    pub worker_redis_secret_key: String,
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
    /// Seconds a deleted Agent waits for an unreachable data plane before it is deleted anyway.
    #[arg(long, env = "AGENTFLEET_CLEANUP_TIMEOUT_SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub cleanup_timeout_seconds: u64,
}

/// Why a reconcile failed. Each variant's text says its cause and `source()` does not return
/// it again (see [`crate::report`]), so the cause is said once however it is printed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Kubernetes API refused or failed a request.
    #[error("Kubernetes API: {0}")]
    Kube(kube::Error),
    /// The data plane failed.
    #[error("data plane: {0}")]
    Store(StoreError),
    /// The Agent manifest could not be rendered.
    #[error("rendering the agent manifest: {0}")]
    Render(serde_yaml::Error),
    /// The object lacks a field the API server always sets.
    #[error("object has no {0}")]
    MissingField(&'static str),
    /// A cache this reconcile reads has not synced.
    #[error("cache not synced")]
    CacheNotReady,
    /// A deleted Agent's data-plane state could not be removed yet.
    #[error("{0}")]
    CleanupPending(String),
    /// Adding or removing a finalizer failed.
    #[error("finalizer: {0}")]
    Finalizer(Box<kube::runtime::finalizer::Error<Error>>),
}

// By hand, not `#[from]`: `#[from]` would also make the wrapped error the source.
impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        Error::Store(e)
    }
}

impl From<serde_yaml::Error> for Error {
    fn from(e: serde_yaml::Error) -> Self {
        Error::Render(e)
    }
}

impl Error {
    /// A bounded label for metrics (never the error's text).
    pub fn category(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(_)) => "kube_api",
            Error::Kube(_) => "kube_client",
            Error::Store(e) => e.category(),
            Error::Render(_) => "render",
            Error::MissingField(_) => "invalid_object",
            Error::CacheNotReady => "cache",
            Error::CleanupPending(_) => "cleanup_pending",
            Error::Finalizer(e) => match e.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(inner)
                | kube::runtime::finalizer::Error::CleanupFailed(inner) => inner.category(),
                _ => "finalizer",
            },
        }
    }
}

/// How this operator runs its workers and times its data-plane work.
#[derive(Clone, Debug)]
pub struct Config {
    /// What every worker gets from the operator's configuration.
    pub worker: WorkerDefaults,
    /// This replica's identity (Event reporter instance).
    pub instance: Option<String>,
    /// Sweep, status and cleanup timing.
    pub tuning: scaling::Tuning,
}

/// Shared by every reconcile.
pub struct Context {
    /// The Kubernetes client.
    pub client: Client,
    /// The data plane.
    pub store: Arc<dyn Store>,
    /// Operator metrics.
    pub metrics: OperatorMetrics,
    /// Publishes Kubernetes Events.
    pub recorder: Recorder,
    /// What every worker gets from the operator's configuration.
    pub worker: WorkerDefaults,
    /// Cache of every Agent.
    pub agents: Cache<Agent>,
    /// Cache of every Space.
    pub spaces: Cache<Space>,
    /// Scaling, data-plane status and plans (the loop runs beside the controllers).
    pub scaler: Arc<scaling::Scaler>,
    failures: Mutex<HashMap<String, u32>>,
    applied: Mutex<HashMap<String, String>>,
    caches_ready: watch::Sender<bool>,
}

impl Context {
    /// A context over the given caches.
    pub fn new(
        client: Client,
        store: Arc<dyn Store>,
        metrics: OperatorMetrics,
        config: Config,
        agents: Cache<Agent>,
        spaces: Cache<Space>,
    ) -> Self {
        let Config {
            worker,
            instance,
            tuning,
        } = config;
        let reporter = Reporter {
            controller: "agentfleet-operator".into(),
            instance,
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            store,
            metrics,
            worker,
            agents,
            spaces,
            scaler: Arc::new(scaling::Scaler::new(tuning)),
            failures: Mutex::new(HashMap::new()),
            applied: Mutex::new(HashMap::new()),
            caches_ready: watch::Sender::new(false),
        }
    }

    /// Publishes an Event about `obj`; a failure is logged, never fatal.
    pub async fn publish<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let ev = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &obj.object_ref(&())).await {
            warn!(error = %crate::report::chain(&e), reason, "cannot publish event");
        }
    }

    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Backoff after a failed reconcile of `key`: 1 s doubling to 5 min.
    fn backoff(&self, key: String) -> Duration {
        let mut failures = self.failures();
        let n = failures.entry(key).or_insert(0);
        *n = n.saturating_add(1);
        Duration::from_secs((1u64 << (*n - 1).min(9)).min(300))
    }

    /// Waits until both caches have synced. Any number of reconciles may wait here.
    ///
    /// (kube-runtime's `Store::wait_until_ready` keeps only the last waiter's waker, so with
    /// several concurrent waiters all but one hang forever; one task awaits the stores and
    /// opens this gate instead.)
    pub async fn caches_synced(&self) -> Result<(), Error> {
        self.caches_ready
            .subscribe()
            .wait_for(|ready| *ready)
            .await
            .map(|_| ())
            .map_err(|_| Error::CacheNotReady)
    }

    /// Opens the gate of [`Context::caches_synced`].
    pub fn mark_caches_synced(&self) {
        self.caches_ready.send_replace(true);
    }

    /// The worker configuration hash this process last applied for `ns/name`.
    fn applied_hash(&self, key: &str) -> Option<String> {
        self.applied
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(key)
            .cloned()
    }

    fn record_applied_hash(&self, key: String, hash: &str) {
        self.applied
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key, hash.to_string());
    }

    fn succeeded(&self, key: &str) {
        self.failures().remove(key);
    }
}

/// Wraps a reconciler with metrics and failure bookkeeping.
async fn instrumented<K, F, Fut>(
    controller: &'static str,
    obj: Arc<K>,
    ctx: Arc<Context>,
    f: F,
) -> Result<Action, Error>
where
    K: Resource + ResourceExt,
    F: FnOnce(Arc<K>, Arc<Context>) -> Fut,
    Fut: std::future::Future<Output = Result<Action, Error>>,
{
    let key = format!(
        "{controller}/{}/{}",
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    );
    let timer = ctx
        .metrics
        .reconcile_duration
        .with_label_values(&[controller])
        .start_timer();
    ctx.metrics
        .reconciles
        .with_label_values(&[controller])
        .inc();
    let result = f(obj, ctx.clone()).await;
    timer.observe_duration();
    match &result {
        Ok(_) => ctx.succeeded(&key),
        Err(e) => ctx
            .metrics
            .reconcile_errors
            .with_label_values(&[controller, e.category()])
            .inc(),
    }
    result
}

fn error_policy<K: ResourceExt>(
    controller: &'static str,
) -> impl Fn(Arc<K>, &Error, Arc<Context>) -> Action {
    move |obj, error, ctx| {
        let key = format!(
            "{controller}/{}/{}",
            obj.namespace().unwrap_or_default(),
            obj.name_any()
        );
        // A pending cleanup retries at a steady pace: its deadline is bounded.
        let delay = ctx
            .backoff(key)
            .min(if error.category() == "cleanup_pending" {
                Duration::from_secs(5)
            } else {
                Duration::from_secs(300)
            });
        warn!(%controller, object = %obj.name_any(), error = %crate::report::chain(error), retry_in = ?delay, "reconcile failed");
        Action::requeue(delay)
    }
}

/// Liveness and readiness of this replica.
#[derive(Default)]
pub struct Health {
    leader: AtomicBool,
    caches_synced: AtomicBool,
    controllers_stopped: AtomicBool,
    elector_heartbeat: AtomicI64,
}

fn now_secs() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_second()
}

#[derive(Clone)]
struct HttpState {
    health: Arc<Health>,
    store: Arc<dyn Store>,
    lease_seconds: i64,
}

async fn healthz(State(s): State<HttpState>) -> (StatusCode, String) {
    if s.health.controllers_stopped.load(Ordering::Relaxed) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "controllers stopped\n".into(),
        );
    }
    let age = now_secs() - s.health.elector_heartbeat.load(Ordering::Relaxed);
    if age > 2 * s.lease_seconds + 10 {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("leader election stalled for {age}s\n"),
        );
    }
    (StatusCode::OK, "ok\n".into())
}

async fn readyz(State(s): State<HttpState>) -> (StatusCode, String) {
    match tokio::time::timeout(Duration::from_secs(2), s.store.ping()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("data plane: {e}\n"),
            )
        }
        Err(_) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                "data plane: no answer within 2s\n".into(),
            )
        }
    }
    if s.health.leader.load(Ordering::Relaxed) {
        if !s.health.caches_synced.load(Ordering::Relaxed) {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                "leader: caches not synced yet\n".into(),
            );
        }
        return (StatusCode::OK, "ok: leader\n".into());
    }
    (StatusCode::OK, "ok: standby\n".into())
}

/// Agents in `space`'s namespace that name it.
fn agents_naming(agents: &Cache<Agent>, space: &Space) -> Vec<ObjectRef<Agent>> {
    let ns = space.namespace();
    let name = space.name_any();
    agents
        .state()
        .iter()
        .filter(|a| a.namespace() == ns && a.spec.spaces.contains(&name))
        .map(|a| ObjectRef::from_obj(a.as_ref()))
        .collect()
}

/// Which Spaces an Agent event concerns: only a change of the spaces it names, or of whether
/// it is being deleted, changes membership — its frequent status writes do not.
#[derive(Default)]
struct MembershipChanges {
    seen: Mutex<HashMap<String, (Vec<String>, bool)>>,
}

impl MembershipChanges {
    /// The Spaces to reconcile for this version of `agent`: those it named before and names
    /// now (that exist), when that (or its deletion) changed; none otherwise.
    fn affected(&self, agent: &Agent, spaces: &Cache<Space>) -> Vec<ObjectRef<Space>> {
        let Some(uid) = agent.uid() else {
            return Vec::new();
        };
        let now = (
            agent.spec.spaces.clone(),
            agent.metadata.deletion_timestamp.is_some(),
        );
        let before = {
            let mut seen = self
                .seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match seen.insert(uid, now.clone()) {
                Some(before) if before == now => return Vec::new(),
                before => before,
            }
        };
        let ns = agent.namespace().unwrap_or_default();
        let mut names: Vec<String> = before
            .map(|(spaces, _)| spaces)
            .unwrap_or_default()
            .into_iter()
            .chain(now.0)
            .collect();
        names.sort();
        names.dedup();
        // Spaces that do not exist (yet) derive their members when they are created.
        names
            .into_iter()
            .map(|n| ObjectRef::new(&n).within(&ns))
            .filter(|r| spaces.get(r).is_some())
            .collect()
    }

    /// Forgets Agents that no longer exist.
    fn retain(&self, agents: &Cache<Agent>) {
        let live: std::collections::HashSet<String> =
            agents.state().iter().filter_map(|a| a.uid()).collect();
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|uid, _| live.contains(uid));
    }
}

/// Worker Deployment events that matter to their Agent: a spec change other than replicas
/// (someone edited it: repair), an availability change (conditions), or a deletion (repair).
/// A scale change (the scaler's own) and a write that changes only metadata — such as the
/// managed-fields time some API servers bump on an unchanged server-side apply — trigger
/// nothing, so a wake costs one API call and an unchanged apply cannot loop.
fn worker_changes(
    api: Api<Deployment>,
    config: watcher::Config,
    scaler: Arc<scaling::Scaler>,
) -> impl futures::Stream<Item = Result<Deployment, watcher::Error>> + Send + 'static {
    use std::hash::{Hash, Hasher};
    let fingerprint = |d: &Deployment| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        // The spec without replicas (the scaler's to change, and no reason to reconcile), and
        // what the conditions are made of.
        let mut spec = d.spec.clone();
        if let Some(spec) = spec.as_mut() {
            spec.replicas = None;
        }
        serde_json::to_string(&spec)
            .unwrap_or_default()
            .hash(&mut h);
        let status = d.status.clone().unwrap_or_default();
        status.available_replicas.hash(&mut h);
        for c in status.conditions.unwrap_or_default() {
            (c.type_, c.status, c.reason, c.message).hash(&mut h);
        }
        h.finish()
    };
    let mut seen: HashMap<String, u64> = HashMap::new();
    watcher(api, config)
        .default_backoff()
        .filter_map(move |event| {
            let out = match event {
                Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)) => {
                    let key = d.uid().unwrap_or_else(|| d.name_any());
                    let print = fingerprint(&d);
                    let changed = seen.insert(key, print) != Some(print);
                    // Replicas someone else set on a worker the operator scales: repair.
                    let agent = d.labels().get(build::AGENT_LABEL).map(|name| {
                        store::AgentKey::new(d.namespace().unwrap_or_default(), name.clone())
                    });
                    let stray = agent
                        .and_then(|a| scaler.expected_replicas(&a))
                        .is_some_and(|n| d.spec.as_ref().and_then(|s| s.replicas) != Some(n));
                    (changed || stray).then_some(Ok(d))
                }
                Ok(watcher::Event::Delete(d)) => {
                    seen.remove(&d.uid().unwrap_or_else(|| d.name_any()));
                    Some(Ok(d))
                }
                Ok(watcher::Event::Init | watcher::Event::InitDone) => None,
                Err(e) => Some(Err(e)),
            };
            futures::future::ready(out)
        })
}

/// Reconciles run at once, per controller.
const RECONCILERS: u16 = 16;

/// Runs both controllers until `shutdown` resolves or a controller stops.
pub async fn run_controllers(
    client: Client,
    store: Arc<dyn Store>,
    metrics: OperatorMetrics,
    config: Config,
    health: Arc<Health>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let wc = watcher::Config::default().any_semantic();
    let children = watcher::Config::default()
        .labels(&format!(
            "app.kubernetes.io/managed-by={}",
            build::MANAGED_BY
        ))
        .any_semantic();
    let agents_api = Api::<Agent>::all(client.clone());
    let spaces_api = Api::<Space>::all(client.clone());
    // Agents reconcile on a new generation (spec changes, deletion) or finalizer changes, not
    // on their own status writes, which the data-plane loop makes often.
    let (agent_cache, agent_writer) = reflector::store();
    let agent_events = watcher(agents_api.clone(), wc.clone())
        .default_backoff()
        .reflect(agent_writer)
        .applied_objects()
        .predicate_filter(
            predicates::generation.combine(predicates::finalizers),
            Default::default(),
        );
    // Bounded concurrency: a thousand Agents reconciling at once would only queue at the API
    // server, in front of the scale changes that wake agents.
    let reconcilers = kube::runtime::controller::Config::default().concurrency(RECONCILERS);
    let agent_ctl =
        Controller::for_stream(agent_events, agent_cache.clone()).with_config(reconcilers.clone());
    let space_ctl = Controller::new(spaces_api.clone(), wc.clone()).with_config(reconcilers);
    let space_cache = space_ctl.store();
    let ctx = Arc::new(Context::new(
        client.clone(),
        store.clone(),
        metrics.clone(),
        config,
        agent_cache.clone(),
        space_cache.clone(),
    ));

    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|v| *v).await;
    };
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });

    let agents = {
        let spaces_for_agents = agent_cache.clone();
        agent_ctl
            .owns_stream(worker_changes(
                Api::<Deployment>::all(client.clone()),
                children.clone(),
                ctx.scaler.clone(),
            ))
            .owns(Api::<ConfigMap>::all(client.clone()), children)
            .watches(spaces_api, wc.clone(), move |space| {
                agents_naming(&spaces_for_agents, &space)
            })
            .graceful_shutdown_on(stopped(stop_rx.clone()))
            .run(
                |obj, ctx| instrumented("agent", obj, ctx, agent::run),
                error_policy("agent"),
                ctx.clone(),
            )
            .for_each(|res| async move {
                if let Err(e) = res {
                    warn!(error = %crate::report::chain(&e), "agent controller");
                }
            })
    };
    let changes = Arc::new(MembershipChanges::default());
    let spaces = {
        let changes = changes.clone();
        let cache = space_cache.clone();
        space_ctl
            .watches(agents_api, wc, move |agent| {
                changes.affected(&agent, &cache)
            })
            .graceful_shutdown_on(stopped(stop_rx.clone()))
            .run(
                |obj, ctx| instrumented("space", obj, ctx, space::reconcile),
                error_policy("space"),
                ctx.clone(),
            )
            .for_each(|res| async move {
                if let Err(e) = res {
                    warn!(error = %crate::report::chain(&e), "space controller");
                }
            })
    };
    let synced = {
        let health = health.clone();
        let ctx = ctx.clone();
        let (a, s) = (agent_cache.clone(), space_cache.clone());
        // The only task that awaits the stores themselves (see `Context::caches_synced`).
        async move {
            if a.wait_until_ready().await.is_ok() && s.wait_until_ready().await.is_ok() {
                ctx.mark_caches_synced();
                health.caches_synced.store(true, Ordering::Relaxed);
                info!("caches synced");
            }
        }
    };
    let data_plane = {
        let deps = scaling::Deps {
            store,
            cluster: Arc::new(scaling::KubeCluster::new(
                client.clone(),
                ctx.recorder.clone(),
            )),
            metrics,
        };
        let scaler = ctx.scaler.clone();
        let ctx = ctx.clone();
        let stop = stop_rx.clone();
        async move {
            // Decisions need every Agent known: start after the caches synced.
            if ctx.caches_synced().await.is_ok() {
                scaler.run(deps, stop).await;
            }
        }
    };
    let sweeper = {
        let ctx = ctx.clone();
        let mut stop = stop_rx.clone();
        async move {
            loop {
                changes.retain(&ctx.agents);
                match space::sweep_orphans(&ctx).await {
                    Ok(0) => {}
                    Ok(n) => info!(removed = n, "orphaned space memberships removed"),
                    Err(e) => warn!(error = %crate::report::chain(&e), "orphan sweep failed"),
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(300)) => {}
                    _ = stop.wait_for(|v| *v) => return,
                }
            }
        }
    };
    tokio::join!(agents, spaces, synced, sweeper, data_plane);
    health.controllers_stopped.store(true, Ordering::Relaxed);
}

/// `agentfleet operator`.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let client = Client::try_default()
        .await
        .context("connecting to the Kubernetes API (in-cluster or KUBECONFIG)")?;
    let store: Arc<dyn Store> = Arc::new(RedisStore::new(&args.redis.url).context("data plane")?);
    let metrics = OperatorMetrics::new().context("registering metrics")?;
    let health = Arc::new(Health::default());
    health
        .elector_heartbeat
        .store(now_secs(), Ordering::Relaxed);
    let identity = telemetry::process_identity(args.identity.as_deref(), "agentfleet-operator");
    let shutdown_rx = telemetry::shutdown_channel("shutting down");
    let wait_shutdown = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|v| *v).await;
    };

    let router = telemetry::metrics_router(metrics.registry.clone()).merge(
        Router::new()
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .with_state(HttpState {
                health: health.clone(),
                store: store.clone(),
                lease_seconds: i64::try_from(args.lease_seconds).unwrap_or(15),
            }),
    );
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
        tokio::spawn(elector.run(leader_tx, move || {
            health
                .elector_heartbeat
                .store(now_secs(), Ordering::Relaxed);
        }))
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
    health.leader.store(true, Ordering::Relaxed);
    metrics.leader.set(1);

    let redis = match (&args.worker_redis_secret, &args.worker_redis) {
        (Some(name), _) => RedisUrlSource::Secret {
            name: name.clone(),
            key: args.worker_redis_secret_key.clone(),
        },
        (None, url) => {
            let url = url.clone().unwrap_or_else(|| args.redis.url.clone());
            if crate::store::redact_url(&url) != url {
                warn!(
                    url = %crate::store::redact_url(&url),
                    "the workers' Redis URL carries a password and would be visible in their Deployments; use --worker-redis-secret"
                );
            }
            RedisUrlSource::Value(url)
        }
    };
    let worker = WorkerDefaults {
        image: args.worker_image.clone(),
        image_pull_policy: args.worker_image_pull_policy.clone(),
        redis,
    };
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
            tuning: scaling::Tuning {
                sweep: Duration::from_secs(args.sweep_seconds),
                status_interval: Duration::from_secs(args.status_interval_seconds),
                cleanup_timeout: Duration::from_secs(args.cleanup_timeout_seconds),
            },
        },
        health.clone(),
        stop,
    )
    .await;
    elector_task.abort();
    health.leader.store(false, Ordering::Relaxed);
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

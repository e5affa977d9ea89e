//! What every reconcile shares: the [`Context`] (Kubernetes client, data plane, metrics,
//! Event recorder, caches, the data-plane loop's state), the operator's [`Config`], the
//! reconcile [`Error`] with its bounded metric label, and the backoff after failures. The
//! controllers import it from here, beside them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::Store as Cache;
use kube::{Client, Resource};
use tokio::sync::watch;
use tracing::warn;

use super::build::WorkerDefaults;
use super::dataplane::{Scaler, Tuning};
use crate::archive::Archive;
use crate::crd::{Agent, ModelResource, Space};
use crate::store::{Store, StoreError};
use crate::sync::lock;
use crate::telemetry::OperatorMetrics;

/// Why a reconcile failed. Each variant's text says its cause and `source()` does not return
/// it again (see [`crate::report`]), so the cause is said once however it is printed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Kubernetes API refused or failed a request.
    #[error("Kubernetes API: {}", kube_text(.0))]
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
    /// The API server refused an object as invalid (a problem of the spec, said in a
    /// condition; never retried as a failure). The message names the object.
    #[error("{0}")]
    Refused(String),
    /// A cache this reconcile reads has not synced.
    #[error("cache not synced")]
    CacheNotReady,
    /// A deleted Agent's data-plane state could not be removed yet.
    #[error("{0}")]
    CleanupPending(String),
    /// Adding or removing a finalizer failed.
    #[error("{}", finalizer_text(.0))]
    Finalizer(Box<kube::runtime::finalizer::Error<Error>>),
}

/// A Kubernetes client error in one line: an API refusal as its code, reason and message
/// (kube's own text repeats the whole `Status` as debug output).
fn kube_text(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => {
            format!("{} {}: {}", status.code, status.reason, status.message)
        }
        other => crate::report::chain(other),
    }
}

fn finalizer_text(error: &kube::runtime::finalizer::Error<Error>) -> String {
    use kube::runtime::finalizer::Error as F;
    match error {
        F::ApplyFailed(inner) | F::CleanupFailed(inner) => inner.to_string(),
        F::AddFinalizer(e) => format!("adding the finalizer: Kubernetes API: {}", kube_text(e)),
        F::RemoveFinalizer(e) => {
            format!("removing the finalizer: Kubernetes API: {}", kube_text(e))
        }
        other => format!("finalizer: {other}"),
    }
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
            Error::Kube(_) if self.is_stale() => "stale",
            Error::Kube(kube::Error::Api(_)) => "kube_api",
            Error::Kube(_) => "kube_client",
            Error::Store(e) => e.category(),
            Error::Render(_) => "render",
            Error::MissingField(_) => "invalid_object",
            Error::Refused(_) => "refused",
            Error::CacheNotReady => "cache",
            Error::CleanupPending(_) => "cleanup_pending",
            Error::Finalizer(e) => match e.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(inner)
                | kube::runtime::finalizer::Error::CleanupFailed(inner) => inner.category(),
                _ if self.is_stale() => "stale",
                _ => "finalizer",
            },
        }
    }

    /// Whether the reconcile acted on an object older than the server's (a write conflict,
    /// or a finalizer patch whose precondition no longer held): the cache catches up and the
    /// retry succeeds, so it is no failure to warn about.
    pub fn is_stale(&self) -> bool {
        use kube::runtime::finalizer::Error as F;
        let conflict = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 409);
        match self {
            Error::Kube(e) => conflict(e),
            Error::Finalizer(f) => match f.as_ref() {
                // Adding or removing tests the finalizers as read (a JSON patch `test`): a
                // failed test is 422; an object already gone (404) was finished by another
                // reconcile.
                F::AddFinalizer(e) | F::RemoveFinalizer(e) => {
                    matches!(e, kube::Error::Api(s) if matches!(s.code, 404 | 409 | 422))
                }
                F::ApplyFailed(inner) | F::CleanupFailed(inner) => inner.is_stale(),
                _ => false,
            },
            _ => false,
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
    pub tuning: Tuning,
    /// The archive of checkpoints (`--archive`), whose objects of a deleted Agent go with it.
    pub archive: Option<Archive>,
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
    /// Cache of every Model.
    pub models: Cache<ModelResource>,
    /// Scaling, data-plane status and plans (the loop runs beside the controllers).
    pub scaler: Arc<Scaler>,
    /// The archive of checkpoints (`--archive`), if any.
    pub archive: Option<Archive>,
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
        models: Cache<ModelResource>,
    ) -> Self {
        let Config {
            worker,
            instance,
            tuning,
            archive,
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
            models,
            scaler: Arc::new(Scaler::new(tuning)),
            archive,
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

    /// Publishes an Event about `obj` for each condition of `now` that changed since
    /// `before` (see [`super::status::notice`]; a Warning where `warning` says it is a
    /// problem).
    pub async fn announce<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        before: &[Condition],
        now: &[Condition],
        warning: impl Fn(&Condition) -> bool,
    ) {
        for c in now {
            let previous = super::status::find(before, &c.type_);
            if let Some(kind) = super::status::notice(previous, c, warning(c)) {
                self.publish(obj, kind, &c.reason, "Reconcile", c.message.clone())
                    .await;
            }
        }
    }

    fn failures(&self) -> MutexGuard<'_, HashMap<String, u32>> {
        lock(&self.failures)
    }

    /// Backoff after a failed reconcile of `key`: 1 s doubling to 5 min.
    pub(super) fn backoff(&self, key: String) -> Duration {
        let mut failures = self.failures();
        let n = failures.entry(key).or_insert(0);
        *n = n.saturating_add(1);
        Duration::from_secs((1u64 << (*n - 1).min(9)).min(300))
    }

    /// When to reconcile `key` again after `error`: the backoff, and at most 5 s for a pending
    /// cleanup (its deadline is bounded).
    pub(super) fn retry_after(&self, key: String, error: &Error) -> Duration {
        self.backoff(key)
            .min(if error.category() == "cleanup_pending" {
                Duration::from_secs(5)
            } else {
                Duration::from_secs(300)
            })
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
    pub(super) fn applied_hash(&self, key: &str) -> Option<String> {
        lock(&self.applied).get(key).cloned()
    }

    /// Remembers the worker configuration hash applied for `ns/name`.
    pub(super) fn record_applied_hash(&self, key: String, hash: &str) {
        lock(&self.applied).insert(key, hash.to_string());
    }

    /// A reconcile of `key` succeeded: its backoff starts over.
    pub(super) fn succeeded(&self, key: &str) {
        self.failures().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kube::runtime::finalizer::Error as F;

    use super::Error;
    use crate::operator::tests::context;

    #[tokio::test]
    async fn every_reconcile_waiting_for_the_caches_is_woken() {
        let h = context(vec![], vec![], false);
        let ctx = h.ctx.clone();
        let waiters: Vec<_> = (0..16)
            .map(|_| {
                let ctx = ctx.clone();
                tokio::spawn(async move { ctx.caches_synced().await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            waiters.iter().all(|w| !w.is_finished()),
            "nobody passes before the sync"
        );
        ctx.mark_caches_synced();
        for w in waiters {
            tokio::time::timeout(Duration::from_secs(2), w)
                .await
                .expect("a waiter was never woken")
                .unwrap()
                .unwrap();
        }
    }

    fn api(code: u16, reason: &str, message: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure(message, reason)
                .with_code(code)
                .boxed(),
        )
    }

    /// Adding a finalizer to an object read before another reconcile added it fails the
    /// patch's test (422): stale, said in one line without kube's debug dump.
    #[test]
    fn a_finalizer_added_to_a_stale_object_is_stale_and_said_in_one_line() {
        let message = "the server rejected our request due to an error in our request";
        let e = Error::Finalizer(Box::new(F::AddFinalizer(api(422, "Invalid", message))));
        assert!(e.is_stale());
        assert_eq!(e.category(), "stale");
        assert_eq!(
            crate::report::chain(&e),
            format!("adding the finalizer: Kubernetes API: 422 Invalid: {message}")
        );
        let gone = api(
            404,
            "NotFound",
            "spaces.agentfleet.dev \"family\" not found",
        );
        assert!(Error::Finalizer(Box::new(F::RemoveFinalizer(gone))).is_stale());
        let conflict = Error::Kube(api(409, "Conflict", "the object has been modified"));
        assert!(conflict.is_stale());
        assert_eq!(conflict.category(), "stale");
    }

    /// Real refusals stay failures, their cause said once.
    #[test]
    fn other_refusals_are_failures_said_once() {
        let e = Error::Kube(api(403, "Forbidden", "deployments.apps is forbidden"));
        assert!(!e.is_stale());
        assert_eq!(e.category(), "kube_api");
        assert_eq!(
            crate::report::chain(&e),
            "Kubernetes API: 403 Forbidden: deployments.apps is forbidden"
        );
        let inner = Error::CleanupPending("the data plane is unreachable".into());
        let wrapped = Error::Finalizer(Box::new(F::CleanupFailed(inner)));
        assert!(!wrapped.is_stale());
        assert_eq!(wrapped.category(), "cleanup_pending");
        assert_eq!(
            crate::report::chain(&wrapped),
            "the data plane is unreachable"
        );
        let removing = Error::Finalizer(Box::new(F::RemoveFinalizer(api(
            500,
            "InternalError",
            "etcd timed out",
        ))));
        assert!(!removing.is_stale());
        assert_eq!(removing.category(), "finalizer");
    }
}

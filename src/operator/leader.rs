//! Leader election on a `coordination.k8s.io` Lease: only the holder runs the controllers, so
//! two operator replicas are safe.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::PostParams;
use kube::Api;
use tokio::sync::watch;
use tracing::{info, warn};

/// What a replica does with the lease it found.
#[derive(Debug, PartialEq, Eq)]
pub enum LeaseAction {
    /// No lease yet: create it, holding it.
    Create,
    /// We hold it: renew.
    Renew,
    /// Someone else held it and it expired (or was released): take it over.
    TakeOver,
    /// Someone else holds it: wait.
    Follow(String),
}

/// Pure decision from the current lease.
pub fn decide(lease: Option<&Lease>, identity: &str, now: Timestamp) -> LeaseAction {
    let Some(lease) = lease else {
        return LeaseAction::Create;
    };
    let spec = lease.spec.clone().unwrap_or_default();
    match spec.holder_identity.as_deref() {
        Some(h) if h == identity => LeaseAction::Renew,
        None | Some("") => LeaseAction::TakeOver,
        Some(holder) => {
            let duration =
                SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(15)));
            let renewed = spec
                .renew_time
                .map(|t| t.0)
                .unwrap_or(Timestamp::UNIX_EPOCH);
            if renewed + duration < now {
                LeaseAction::TakeOver
            } else {
                LeaseAction::Follow(holder.to_string())
            }
        }
    }
}

/// A replica's view of one Lease.
pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    lease_duration: Duration,
}

impl Elector {
    /// An elector for Lease `name` in the `api`'s namespace, as `identity`.
    pub fn new(
        api: Api<Lease>,
        name: impl Into<String>,
        identity: impl Into<String>,
        lease_duration: Duration,
    ) -> Self {
        Self {
            api,
            name: name.into(),
            identity: identity.into(),
            lease_duration,
        }
    }

    /// One round: acquire or renew. `Ok(true)` when we hold the lease afterwards.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let current = self.api.get_opt(&self.name).await?;
        let duration = i32::try_from(self.lease_duration.as_secs()).unwrap_or(15);
        let result = match decide(current.as_ref(), &self.identity, now) {
            LeaseAction::Follow(_) => return Ok(false),
            LeaseAction::Create => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.identity.clone()),
                        lease_duration_seconds: Some(duration),
                        acquire_time: Some(MicroTime(now)),
                        renew_time: Some(MicroTime(now)),
                        lease_transitions: Some(0),
                        ..LeaseSpec::default()
                    }),
                };
                self.api
                    .create(&PostParams::default(), &lease)
                    .await
                    .map(|_| ())
            }
            decision @ (LeaseAction::Renew | LeaseAction::TakeOver) => {
                let mut lease = current.unwrap_or_default();
                let mut spec = lease.spec.take().unwrap_or_default();
                if decision == LeaseAction::TakeOver {
                    spec.holder_identity = Some(self.identity.clone());
                    spec.acquire_time = Some(MicroTime(now));
                    spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
                    info!(lease = %self.name, "taking over the leader lease");
                }
                spec.lease_duration_seconds = Some(duration);
                spec.renew_time = Some(MicroTime(now));
                lease.spec = Some(spec);
                // `replace` carries the resourceVersion we read: a concurrent writer makes it fail.
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
                    .map(|_| ())
            }
        };
        match result {
            Ok(()) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the lease up (on shutdown), so a standby takes over at once.
    pub async fn release(&self) -> Result<(), kube::Error> {
        if let Some(mut lease) = self.api.get_opt(&self.name).await? {
            let mut spec = lease.spec.take().unwrap_or_default();
            if spec.holder_identity.as_deref() == Some(self.identity.as_str()) {
                spec.holder_identity = None;
                spec.renew_time = None;
                lease.spec = Some(spec);
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await?;
                info!(lease = %self.name, "leader lease released");
            }
        }
        Ok(())
    }

    /// Campaigns forever: publishes `true` on `leader` once this replica holds the lease and
    /// `false` if it could not renew for a whole lease duration (the caller must then stop
    /// acting as leader). `heartbeat` is stamped every round.
    pub async fn run(self, leader: watch::Sender<bool>, heartbeat: impl Fn()) {
        let retry = (self.lease_duration / 5).max(Duration::from_millis(500));
        let mut last_renewed: Option<tokio::time::Instant> = None;
        loop {
            heartbeat();
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    if last_renewed.is_none() {
                        info!(lease = %self.name, identity = %self.identity, "became leader");
                    }
                    last_renewed = Some(tokio::time::Instant::now());
                    leader.send_if_modified(|v| !std::mem::replace(v, true));
                }
                Ok(false) => {}
                Err(e) => warn!(error = %crate::report::chain(&e), "leader lease round failed"),
            }
            if let Some(at) = last_renewed {
                // Stop acting as leader before another replica may take over.
                if at.elapsed() > self.lease_duration.mul_f32(0.8) {
                    warn!(lease = %self.name, "could not renew the leader lease in time");
                    last_renewed = None;
                    leader.send_if_modified(|v| std::mem::replace(v, false));
                }
            }
            tokio::time::sleep(retry).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, renewed: i64, duration: i32) -> Lease {
        Lease {
            metadata: ObjectMeta::default(),
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                renew_time: Some(MicroTime(Timestamp::from_second(renewed).unwrap())),
                lease_duration_seconds: Some(duration),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn decisions() {
        let now = Timestamp::from_second(1_000).unwrap();
        assert_eq!(decide(None, "me", now), LeaseAction::Create);
        assert_eq!(
            decide(Some(&lease(Some("me"), 999, 15)), "me", now),
            LeaseAction::Renew
        );
        assert_eq!(
            decide(Some(&lease(Some("other"), 995, 15)), "me", now),
            LeaseAction::Follow("other".into())
        );
        assert_eq!(
            decide(Some(&lease(Some("other"), 900, 15)), "me", now),
            LeaseAction::TakeOver
        );
        assert_eq!(
            decide(Some(&lease(None, 999, 15)), "me", now),
            LeaseAction::TakeOver
        );
    }
}

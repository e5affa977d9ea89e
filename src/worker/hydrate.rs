//! What a session does before its first cycle (and again after a cycle in flight ends): make
//! the consciousness what it should be.
//!
//! - **Recovery**: a data plane that holds no consciousness of the agent while the archive
//!   does (Redis lost without persistence) — the latest archived checkpoint is taken back.
//! - **Seed** (`spec.consciousness.seedFrom`): a new agent starts as a copy of another's
//!   checkpoint; the source is only read.
//! - **Restore** (`spec.consciousness.restore`): the checkpoint asked for, from the archive
//!   first, else from the data plane's retained checkpoints; once per change of the field.
//!
//! Every document is verified before anything is written (see [`crate::archive::Document`]);
//! a corrupt or foreign one is refused and nothing changes. Each outcome is reported in the
//! data plane (`status.restoredFrom`, the `Restored` condition and its Events).

use tracing::{info, warn};

use super::cycle::Agentlet;
use crate::archive::{self, ArchiveError, Document};
use crate::crd::PendingRestore;
use crate::identity::AgentKey;
use crate::store::{now_ms, Consciousness, Lease, RestoreReport, Restored, StoreError, V1};

/// How a session's settling went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Settled {
    /// Nothing more to do this session.
    Done,
    /// A cycle is in flight: settle again once it has ended.
    AfterTheCycle,
}

/// Why something could not be restored: the archive's error, or none of that checkpoint.
enum Refusal {
    Archive(ArchiveError),
    NotFound(String),
}

impl Refusal {
    fn reason(&self) -> &'static str {
        match self {
            Refusal::Archive(e) => e.reason(),
            Refusal::NotFound(_) => "CheckpointNotFound",
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Archive(e) => e.fmt(f),
            Refusal::NotFound(what) => f.write_str(what),
        }
    }
}

impl From<ArchiveError> for Refusal {
    fn from(e: ArchiveError) -> Self {
        Refusal::Archive(e)
    }
}

/// Where a checkpoint to apply comes from.
enum Source {
    /// A verified archived document, at this URL.
    Archived(Box<Document>, String),
    /// A checkpoint the data plane retains, of this cycle.
    Retained(u64),
}

impl Agentlet {
    /// Recovers, seeds or restores the consciousness as needed (see the module's doc).
    pub(super) async fn settle(&self, lease: &Lease) -> Result<Settled, StoreError> {
        let c = self.store.consciousness(&self.key).await?;
        let c = match self.recover(lease, c).await {
            Ok(c) => c,
            Err(StoreError::CycleInFlight { .. }) => return Ok(Settled::AfterTheCycle),
            Err(e) => return Err(e),
        };
        let spec = &self.agent.spec.consciousness;
        let Some(pending) = spec.pending(c.restored.as_deref(), c.cycle, None) else {
            // The spec asks for no restore any more: the same one asked again is applied again.
            let asked_restore = c
                .restored
                .as_deref()
                .is_some_and(|r| r.starts_with("cycle:") || r.starts_with("ref:"));
            if spec.restore.is_none() && asked_restore {
                self.store.forget_restore(&self.key, lease).await?;
            }
            return Ok(Settled::Done);
        };
        let request = pending.request();
        let source = match self.source(&pending).await {
            Ok(source) => source,
            Err(refused) => {
                warn!(agent = %self.key, request = %request, error = %refused, "restore refused; the consciousness is unchanged");
                self.report(RestoreReport {
                    v: V1,
                    ok: false,
                    reason: refused.reason().into(),
                    message: format!(
                        "{request} was not applied: {refused}; the consciousness is unchanged"
                    ),
                    since_ms: now_ms(),
                    request: Some(request),
                    applied: None,
                })
                .await;
                return Ok(Settled::Done);
            }
        };
        let reason = match pending {
            PendingRestore::Restore(_) => "Restore",
            PendingRestore::Seed(_) => "Seed",
        };
        match self.apply(lease, source, reason, Some(request)).await {
            Err(StoreError::CycleInFlight { .. }) => Ok(Settled::AfterTheCycle),
            Err(e) => Err(e),
            Ok(()) => Ok(Settled::Done),
        }
    }

    /// The consciousness, taken back from the archive when the data plane has none of it and
    /// the archive has.
    async fn recover(&self, lease: &Lease, c: Consciousness) -> Result<Consciousness, StoreError> {
        let Some(archiver) = self.archiver() else {
            return Ok(c);
        };
        if c != Consciousness::default() {
            return Ok(c);
        }
        let archive = archiver.archive();
        let listed = archive.list(&self.key).await.map(|mut all| {
            let highest = all.iter().map(|l| l.cycle).max().unwrap_or(0);
            crate::archive::retention::newest_first(&mut all);
            (all.first().copied(), highest)
        });
        let (latest, highest) = match listed {
            Ok((Some(latest), highest)) => (latest, highest),
            Ok((None, _)) => return Ok(c),
            Err(e) => {
                warn!(agent = %self.key, error = %e, "cannot tell whether the archive holds this agent's consciousness; starting without it");
                self.report(RestoreReport {
                    v: V1,
                    ok: false,
                    reason: e.reason().into(),
                    message: format!("the data plane holds no consciousness of this agent and the archive could not be read ({e}); the agent starts without it"),
                    since_ms: now_ms(),
                    request: None,
                    applied: None,
                })
                .await;
                return Ok(c);
            }
        };
        let url = archive.checkpoint_url(&self.key, latest.cycle);
        match archive.get(&self.key, latest.cycle).await {
            Ok(mut doc) => {
                // The newest object is not always the highest cycle (a restore archives the
                // cycle it went back to): the next commit is numbered past every one.
                doc.snapshot.highest = highest;
                self.apply(
                    lease,
                    Source::Archived(Box::new(doc), url),
                    "Recovery",
                    None,
                )
                .await?;
                self.store.consciousness(&self.key).await
            }
            Err(e) => {
                warn!(agent = %self.key, url = %url, error = %e, "the latest archived checkpoint cannot be recovered; starting without it");
                self.report(RestoreReport {
                    v: V1,
                    ok: false,
                    reason: e.reason().into(),
                    message: format!("the data plane holds no consciousness of this agent; {url} could not be recovered: {e}"),
                    since_ms: now_ms(),
                    request: None,
                    applied: None,
                })
                .await;
                Ok(c)
            }
        }
    }

    /// Finds and verifies the checkpoint a pending restore or seed asks for.
    async fn source(&self, pending: &PendingRestore<'_>) -> Result<Source, Refusal> {
        // This agent's own checkpoints: where they are archived (its prefix), or nowhere.
        let archive = self.archiver().map(|a| a.archive());
        match pending {
            PendingRestore::Restore(r) => match (&r.storage_ref, r.cycle) {
                (Some(url), _) => match crate::store::checkpoint_ref_cycle(url) {
                    Some(cycle) => Ok(Source::Retained(cycle)),
                    None => {
                        let doc = match self.archive() {
                            Some(a) => a.fetch(url).await?,
                            None => archive::fetch(url).await?,
                        };
                        archive::expect(&doc, &self.key, None, url)?;
                        Ok(Source::Archived(Box::new(doc), url.clone()))
                    }
                },
                (None, Some(cycle)) => match archive {
                    Some(a) => match a.get(&self.key, cycle).await {
                        Ok(doc) => Ok(Source::Archived(
                            Box::new(doc),
                            a.checkpoint_url(&self.key, cycle),
                        )),
                        Err(ArchiveError::NotFound(_)) => Ok(Source::Retained(cycle)),
                        Err(e) => Err(e.into()),
                    },
                    None => Ok(Source::Retained(cycle)),
                },
                (None, None) => Err(Refusal::NotFound(
                    "the restore names neither a cycle nor a storageRef".into(),
                )),
            },
            PendingRestore::Seed(s) => {
                let from = AgentKey::new(self.key.namespace.clone(), s.agent.clone());
                // The source's checkpoints, under the archive's own prefix.
                let Some(a) = self.archive() else {
                    return Err(Refusal::NotFound(format!(
                        "seeding from agent {from} needs the archive (--archive)"
                    )));
                };
                let cycle = match s.cycle {
                    Some(c) => c,
                    None => a.latest(&from).await?.map(|l| l.cycle).ok_or_else(|| {
                        Refusal::NotFound(format!("agent {from} has no archived checkpoint"))
                    })?,
                };
                let doc = a.get(&from, cycle).await?;
                Ok(Source::Archived(
                    Box::new(doc),
                    a.checkpoint_url(&from, cycle),
                ))
            }
        }
    }

    /// Writes the checkpoint of `source` as the consciousness, records `request` as applied,
    /// and reports it (`reason`: `Restore`, `Seed` or `Recovery`).
    async fn apply(
        &self,
        lease: &Lease,
        source: Source,
        reason: &str,
        request: Option<String>,
    ) -> Result<(), StoreError> {
        let _between = self.gate.lock().await;
        let (cp, url, own) = match source {
            Source::Archived(doc, url) => {
                let mut snapshot = doc.snapshot;
                if request.is_some() {
                    snapshot.consciousness.restored = request.clone();
                }
                let own = doc.agent == self.key;
                let cp = self
                    .store
                    .replace_consciousness(&self.key, lease, &snapshot)
                    .await?;
                (cp, url, own)
            }
            Source::Retained(cycle) => {
                let restored = self
                    .store
                    .restore_checkpoint(&self.key, lease, cycle, request.as_deref())
                    .await?;
                let Some(cp) = restored else {
                    drop(_between);
                    let what = format!(
                        "no checkpoint of cycle {cycle} in the archive or among the data plane's retained ones"
                    );
                    warn!(agent = %self.key, request = ?request, "{what}");
                    self.report(RestoreReport {
                        v: V1,
                        ok: false,
                        reason: "CheckpointNotFound".into(),
                        message: format!(
                            "{} was not applied: {what}; the consciousness is unchanged",
                            request.as_deref().unwrap_or("the restore")
                        ),
                        since_ms: now_ms(),
                        request,
                        applied: None,
                    })
                    .await;
                    return Ok(());
                };
                (
                    cp.clone(),
                    self.store.checkpoint_ref(&self.key, cycle),
                    false,
                )
            }
        };
        self.forget_cache().await;
        // A recovery took the newest archived checkpoint: it is archived as it is. A restore or a
        // fork is written again, so that the newest archived object is what the agent is now
        // (with the request it applied), should the data plane be lost before its next cycle.
        if let Some(archiver) = self.archiver() {
            if own && reason == "Recovery" {
                super::archiver::archived(self, archiver, cp.cycle, &cp.digest, &url).await;
            } else {
                archiver.changed();
            }
        }
        let (done, verb) = match reason {
            "Recovery" => ("Recovered", "recovered"),
            "Seed" => ("Seeded", "seeded"),
            _ => ("Restored", "restored"),
        };
        info!(agent = %self.key, cycle = cp.cycle, from = %url, "consciousness {verb}");
        let message = match reason {
            "Recovery" => format!(
                "the data plane had lost this agent's consciousness; recovered cycle {} from {url}",
                cp.cycle
            ),
            _ => format!("{verb} cycle {} from {url}", cp.cycle),
        };
        self.report(RestoreReport {
            v: V1,
            ok: true,
            reason: done.into(),
            message,
            since_ms: now_ms(),
            request: request.clone(),
            applied: Some(Restored {
                reason: reason.into(),
                storage_ref: url,
                cycle: cp.cycle,
                digest: cp.digest,
                request,
                time_ms: Some(now_ms()),
            }),
        })
        .await;
        Ok(())
    }

    async fn report(&self, report: RestoreReport) {
        if let Err(e) = self.store.set_restore_report(&self.key, &report).await {
            warn!(agent = %self.key, error = %e, "restore report not recorded");
        }
    }
}

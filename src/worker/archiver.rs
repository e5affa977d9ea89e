//! Archiving an agent's checkpoints, off the cycle's path: after each commit (or restore) the
//! archiver task of the loaded agent (it lives as long as the agent stays loaded in its pool) takes the consciousness and notes between cycles, writes them to
//! the archive as one document, reports it in the data plane (`status.checkpoint`,
//! `CheckpointArchived`), and keeps the archive to its retention. A store that is away never
//! holds a cycle up: the task says so, retries with backoff, and archives the newest state
//! once the store is back (what it missed meanwhile is not written; the newest checkpoint is
//! what a recovery needs).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::cycle::Agentlet;
use super::Backoff;
use crate::archive::{retention, Archive, ArchiveError, Document, Listed};
use crate::crd::ArchiveSpec;
use crate::store::{now_ms, ArchiveReport, Snapshot, StoreError};

/// How long an agent unloaded (or its process ending) waits for its last checkpoint to be
/// archived.
const FLUSH: Duration = Duration::from_secs(15);

/// An agent's archive and what has been written to it.
pub struct Archiver {
    archive: Archive,
    keep_last: u32,
    keep_days: u32,
    /// The least time between two writes.
    interval: Duration,
    /// Bumped when the consciousness changed (a commit, a restore).
    version: watch::Sender<u64>,
    /// The cycle and digest last archived, and its URL.
    last: std::sync::Mutex<Option<(u64, String, String)>>,
    /// Whether archiving works, and since when (a report's `since_ms` moves only when that
    /// flips, as a condition's `lastTransitionTime`).
    state: std::sync::Mutex<Option<(bool, i64)>>,
}

impl Archiver {
    /// Archiving to `archive` (already the agent's: see [`Archive::for_agent`]).
    pub fn new(archive: Archive, spec: &ArchiveSpec) -> Self {
        Self {
            archive,
            keep_last: spec.keep_last.max(1),
            keep_days: spec.keep_days,
            interval: Duration::from_secs(spec.interval_seconds.into()),
            version: watch::channel(0).0,
            last: std::sync::Mutex::new(None),
            state: std::sync::Mutex::new(None),
        }
    }

    /// The agent's archive.
    pub fn archive(&self) -> &Archive {
        &self.archive
    }

    /// The consciousness changed: archive it.
    pub fn changed(&self) {
        self.version.send_modify(|v| *v += 1);
    }

    /// Records that the consciousness of `cycle` with `digest` is in the archive at `url`.
    fn mark(&self, cycle: u64, digest: &str, url: &str) {
        if let Ok(mut last) = self.last.lock() {
            *last = Some((cycle, digest.to_string(), url.to_string()));
        }
    }

    fn last(&self) -> Option<(u64, String, String)> {
        self.last.lock().ok().and_then(|l| l.clone())
    }

    /// Since when archiving has been `ok` (or not): now when that just changed.
    fn since(&self, ok: bool) -> i64 {
        let now = now_ms();
        let Ok(mut state) = self.state.lock() else {
            return now;
        };
        match *state {
            Some((was, since)) if was == ok => since,
            _ => {
                *state = Some((ok, now));
                now
            }
        }
    }
}

/// Why one attempt archived nothing.
enum Failure {
    Store(StoreError),
    Archive(ArchiveError),
}

impl Failure {
    fn reason(&self) -> &'static str {
        match self {
            Failure::Store(_) => "DataPlaneUnavailable",
            Failure::Archive(e) => e.reason(),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Store(e) => write!(f, "reading the checkpoint: {e}"),
            Failure::Archive(e) => e.fmt(f),
        }
    }
}

/// The session's archiving task: archives the consciousness whenever it changed, until
/// `stop`; then archives what is left, for at most [`FLUSH`].
pub(super) async fn run(agentlet: Arc<Agentlet>, mut stop: watch::Receiver<bool>) {
    let Some(archiver) = agentlet.archiver() else {
        forget_report(&agentlet).await;
        return;
    };
    let mut version = archiver.version.subscribe();
    version.mark_changed();
    if archiver.last().is_none() {
        known_archived(&agentlet, archiver).await;
    }
    let mut known: Option<Vec<Listed>> = None;
    let mut retry = Backoff::new(Duration::from_secs(1), Duration::from_secs(300));
    let mut failing: Option<&'static str> = None;
    let mut written: Option<Instant> = None;
    loop {
        let stopped = tokio::select! {
            changed = version.changed() => if changed.is_err() { return } else { false },
            _ = stop.wait_for(|v| *v) => true,
        };
        if stopped {
            break;
        }
        // A busy agent: the newest checkpoint once per interval.
        let due = written.map_or(Duration::ZERO, |w| {
            archiver.interval.saturating_sub(w.elapsed())
        });
        if !due.is_zero() {
            let stopped = tokio::select! {
                _ = tokio::time::sleep(due) => false,
                _ = stop.wait_for(|v| *v) => true,
            };
            if stopped {
                break;
            }
        }
        written = Some(Instant::now());
        loop {
            match archive_once(&agentlet, archiver, &mut known).await {
                Ok(()) => {
                    retry.reset();
                    if failing.take().is_some() {
                        info!(agent = %agentlet.key, "the archive is back; checkpoints are archived again");
                    }
                    break;
                }
                Err(e) => {
                    let wait = retry.take();
                    if failing != Some(e.reason()) {
                        warn!(agent = %agentlet.key, error = %e, retry_in = ?wait, "checkpoint not archived; retrying");
                        failing = Some(e.reason());
                        report_failure(&agentlet, archiver, &e).await;
                    } else {
                        debug!(agent = %agentlet.key, error = %e, retry_in = ?wait, "checkpoint still not archived");
                    }
                    let stopped = tokio::select! {
                        _ = tokio::time::sleep(wait) => false,
                        _ = stop.wait_for(|v| *v) => true,
                    };
                    if stopped {
                        flush(&agentlet, archiver, &mut known).await;
                        return;
                    }
                }
            }
        }
    }
    flush(&agentlet, archiver, &mut known).await;
}

/// One last attempt when the session ends.
async fn flush(agentlet: &Agentlet, archiver: &Archiver, known: &mut Option<Vec<Listed>>) {
    match tokio::time::timeout(FLUSH, archive_once(agentlet, archiver, known)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            warn!(agent = %agentlet.key, error = %e, "the last checkpoint was not archived; the next worker archives it");
            report_failure(agentlet, archiver, &e).await;
        }
        Err(_) => {
            warn!(agent = %agentlet.key, "archiving the last checkpoint took too long; the next worker archives it")
        }
    }
}

/// Archives the consciousness as it is between cycles, unless it is archived already.
async fn archive_once(
    agentlet: &Agentlet,
    archiver: &Archiver,
    known: &mut Option<Vec<Listed>>,
) -> Result<(), Failure> {
    let snapshot = agentlet.between_cycles().await.map_err(Failure::Store)?;
    let c = &snapshot.consciousness;
    if c.cycle == 0 {
        return Ok(());
    }
    if archiver
        .last()
        .is_some_and(|(cycle, digest, _)| cycle == c.cycle && digest == c.digest)
    {
        return Ok(());
    }
    let (cycle, digest) = (c.cycle, c.digest.clone());
    let doc = Document {
        agent: agentlet.key.clone(),
        generation: agentlet.agent.metadata.generation.unwrap_or(0),
        snapshot,
    };
    let [ns, name] = [agentlet.key.namespace.as_str(), agentlet.key.name.as_str()];
    let started = Instant::now();
    let put = archiver.archive.put(&doc).await;
    let outcome = if put.is_ok() { "ok" } else { "error" };
    agentlet
        .metrics
        .archive_writes
        .with_label_values(&[ns, name, outcome])
        .inc();
    let url = put.map_err(Failure::Archive)?;
    agentlet
        .metrics
        .archive_duration
        .with_label_values(&[ns, name])
        .observe(started.elapsed().as_secs_f64());
    debug!(agent = %agentlet.key, cycle, url = %url, "checkpoint archived");
    archived(agentlet, archiver, cycle, &digest, &url).await;
    prune(agentlet, archiver, known, cycle).await;
    Ok(())
}

/// Records (here and in the data plane) that the consciousness of `cycle` with `digest` is in
/// the archive at `url`.
pub(super) async fn archived(
    agentlet: &Agentlet,
    archiver: &Archiver,
    cycle: u64,
    digest: &str,
    url: &str,
) {
    archiver.mark(cycle, digest, url);
    report(
        agentlet,
        &ArchiveReport {
            cycle: Some(cycle),
            url: Some(url.to_string()),
            ok: true,
            reason: "Archived".into(),
            message: format!("cycle {cycle} is archived at {url}"),
            since_ms: archiver.since(true),
        },
    )
    .await;
}

/// Keeps the archive to its retention: the agent's objects are listed once a session, then
/// followed as they are written and removed.
async fn prune(
    agentlet: &Agentlet,
    archiver: &Archiver,
    known: &mut Option<Vec<Listed>>,
    written: u64,
) {
    let objects = match known.take() {
        Some(mut k) => {
            k.retain(|l| l.cycle != written);
            k.push(Listed {
                cycle: written,
                time_ms: now_ms(),
            });
            k
        }
        None => match archiver.archive.list(&agentlet.key).await {
            Ok(listed) => listed,
            Err(e) => {
                debug!(agent = %agentlet.key, error = %e, "archive not listed; pruning later");
                return;
            }
        },
    };
    let keep = retention::keep(&objects, archiver.keep_last, archiver.keep_days, now_ms());
    let drop: Vec<u64> = objects
        .iter()
        .map(|l| l.cycle)
        .filter(|c| !keep.contains(c))
        .collect();
    if !drop.is_empty() {
        if let Err(e) = archiver.archive.delete(&agentlet.key, &drop).await {
            debug!(agent = %agentlet.key, error = %e, "old checkpoints not removed yet");
            return;
        }
    }
    *known = Some(
        objects
            .into_iter()
            .filter(|l| keep.contains(&l.cycle))
            .collect(),
    );
}

/// What the data plane says is archived, when it is the consciousness as it is now (a new
/// session does not write again what the last one did).
async fn known_archived(agentlet: &Agentlet, archiver: &Archiver) {
    let seen = agentlet
        .store
        .observe(std::slice::from_ref(&agentlet.key))
        .await;
    let Some(report) = seen.ok().and_then(|mut s| s.pop()).and_then(|o| o.archive) else {
        return;
    };
    let (Some(cycle), Some(url)) = (report.cycle, report.url) else {
        return;
    };
    if let Ok(c) = agentlet.store.consciousness(&agentlet.key).await {
        if c.cycle == cycle {
            archiver.mark(cycle, &c.digest, &url);
        }
    }
}

/// An agent whose checkpoints are not archived (any more) has no archive report: the status
/// says nothing about an archive rather than something stale.
async fn forget_report(agentlet: &Agentlet) {
    let seen = agentlet
        .store
        .observe(std::slice::from_ref(&agentlet.key))
        .await;
    if seen
        .ok()
        .and_then(|mut s| s.pop())
        .is_some_and(|o| o.archive.is_some())
    {
        if let Err(e) = agentlet.store.forget_archive_report(&agentlet.key).await {
            debug!(agent = %agentlet.key, error = %e, "stale archive report not removed");
        }
    }
}

async fn report_failure(agentlet: &Agentlet, archiver: &Archiver, e: &Failure) {
    let last = archiver.last();
    report(
        agentlet,
        &ArchiveReport {
            cycle: last.as_ref().map(|l| l.0),
            url: last.map(|l| l.2),
            ok: false,
            reason: e.reason().into(),
            message: format!("checkpoints are not archived: {e}; retrying with backoff"),
            since_ms: archiver.since(false),
        },
    )
    .await;
}

async fn report(agentlet: &Agentlet, report: &ArchiveReport) {
    if let Err(e) = agentlet
        .store
        .set_archive_report(&agentlet.key, report)
        .await
    {
        debug!(agent = %agentlet.key, error = %e, "archive report not recorded");
    }
}

impl Agentlet {
    /// The consciousness and notes as they are between cycles (no cycle runs while it is
    /// read): the consciousness this process last committed when it has it, else the store's.
    pub(crate) async fn between_cycles(&self) -> Result<Snapshot, StoreError> {
        let _between = self.gate.lock().await;
        let consciousness = match self.cached_consciousness().await {
            Some(c) => c,
            None => self.store.consciousness(&self.key).await?,
        };
        Ok(Snapshot {
            consciousness,
            notes: crate::store::all_notes(self.store.as_ref(), &self.key).await?,
            highest: 0,
        })
    }
}

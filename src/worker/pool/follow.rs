//! Following manifests that change in place (a mounted ConfigMap, which the kubelet updates
//! without restarting the pod): a pool's directory, a dedicated worker's file. A change is
//! handed to the pool, which runs the next cycle of a changed agent with its new manifest
//! (never the cycle under way).

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tracing::{info, warn};

use super::Pool;
use crate::crd::Agent;

/// What `path` (a file, or the files of a directory) holds now, cheaply: each file's name,
/// size and modification time (a mounted file is a link the kubelet swaps: its target's).
fn fingerprint(path: &std::path::Path) -> Vec<(PathBuf, u64, Option<SystemTime>)> {
    let one = |p: PathBuf| {
        let meta = std::fs::metadata(&p).ok()?;
        meta.is_file()
            .then(|| (p, meta.len(), meta.modified().ok()))
    };
    if path.is_file() {
        return one(path.to_path_buf()).into_iter().collect();
    }
    let mut out: Vec<_> = std::fs::read_dir(path)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| one(e.path()))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Looks at `path` every `every` until `shutdown`; when it changed, `read` gives the agents
/// the pool hosts from now on. Manifests that cannot be read are refused with a warning and
/// the pool goes on with those it has.
pub fn follow(
    pool: Pool,
    path: PathBuf,
    every: Duration,
    read: impl Fn() -> anyhow::Result<Vec<Agent>> + Send + 'static,
    mut shutdown: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let mut seen = fingerprint(&path);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = shutdown.wait_for(|v| *v) => return,
            }
            let now = fingerprint(&path);
            if now == seen {
                continue;
            }
            seen = now;
            match read() {
                Ok(agents) => {
                    info!(path = %path.display(), agents = agents.len(), "the manifests changed");
                    pool.set_manifests(agents);
                }
                Err(e) => {
                    warn!(path = %path.display(), error = %crate::report::chain(&*e), "the changed manifests are refused; going on with those there were");
                }
            }
        }
    })
}

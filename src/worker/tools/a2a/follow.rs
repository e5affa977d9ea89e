//! Following a remote task that outlived its call's wait: the worker reads it now and then
//! until it is over (or interrupted, or the call's time is up) and completes the call itself,
//! which puts the `tool_result` into the agent's inbox and wakes it. Recorded in the call
//! registry (`RemoteTask`), so a restarted worker follows the open ones again; a process
//! follows each call once, and followers outlive the agent's session (an agent that sleeps
//! meanwhile is woken by the result).
//!
//! The model is always told, on time: no wait outlasts the call's time, nor a read by more
//! than [`SHORTEST_READ`], so a task still working then ends the call with an error saying
//! so. A worker that was down when the time was up reads the task once when it starts again
//! and delivers what it finds — its result if it is over by then, else that error: the
//! registry takes the end of a followed call from the worker even past its time
//! (`CallRecord::expired_at`).

use std::collections::HashSet;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use tracing::{debug, info, warn};

use super::reply::{self, Reply};
use super::{client, Shared};
use crate::a2a::Task;
use crate::store::{now_ms, CallId, CallRecord, CallResult, Completion, RemoteTask};

/// The calls this process follows.
static FOLLOWED: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(Default::default);

/// How often a followed task is read, at first and at most.
const FIRST_LOOK: Duration = Duration::from_secs(1);
const SLOWEST_LOOK: Duration = Duration::from_secs(30);

/// The least time one read of a followed task is given, even at the end of the call's time.
const SHORTEST_READ: Duration = Duration::from_secs(5);

/// Follows the open calls of this remote agent that nobody in this process follows.
pub(super) async fn resume(shared: &Arc<Shared>) {
    let open = match shared.store.open_calls(&shared.agent).await {
        Ok(open) => open,
        Err(e) => {
            warn!(agent = %shared.agent, error = %e, "cannot read the open calls; remote tasks left by an earlier worker are not followed");
            return;
        }
    };
    for call in open {
        let ours = call
            .record
            .remote
            .as_ref()
            .is_some_and(|r| r.source == shared.spec.name);
        if ours {
            info!(agent = %shared.agent, call = %call.id, "following a remote task again");
            spawn(shared.clone(), call.id, call.record);
        }
    }
}

/// Follows `call` in the background, unless this process already does.
pub(super) fn spawn(shared: Arc<Shared>, call: CallId, record: CallRecord) {
    if !crate::sync::lock(&FOLLOWED).insert(call.as_str().to_string()) {
        return;
    }
    tokio::spawn(async move {
        follow(&shared, &call, &record).await;
        crate::sync::lock(&FOLLOWED).remove(call.as_str());
    });
}

/// Reads the remote task until it settles or the call's time is up, then completes the call.
async fn follow(shared: &Shared, call: &CallId, record: &CallRecord) {
    let Some(remote) = &record.remote else { return };
    let settled = settled(shared, call, remote, record.expires_ms).await;
    let masks = shared.redactor();
    let answered = match settled {
        Some(task) => Reply::Task(&task).for_model(&remote.source, &masks),
        None => Err(format!(
            "the remote task {} of {} was not over within the call's time ({} s, resultTtlSeconds); it is followed no longer",
            remote.task_id,
            remote.source,
            (record.expires_ms - record.since_ms).max(0) / 1000
        )),
    };
    let result = match reply::masked(answered, &masks) {
        Ok(v) => CallResult::Result(v),
        Err(e) => CallResult::Error(e),
    };
    match shared.store.complete_call(call, None, &result).await {
        Ok(Completion::Accepted(_)) => {
            info!(agent = %shared.agent, %call, "a followed remote task is over: its result is in the inbox")
        }
        Ok(other) => {
            debug!(agent = %shared.agent, %call, outcome = ?other, "a followed call was not completed")
        }
        Err(e) => {
            warn!(agent = %shared.agent, %call, error = %e, "a followed remote task is over, but its result could not be delivered; it is read again after a restart")
        }
    }
}

/// Reads `remote` now and then until it is over or asks something (the task), or `until_ms`
/// is past (`None`). No wait outlasts `until_ms`, nor a read by more than [`SHORTEST_READ`];
/// it is read at least once.
async fn settled(
    shared: &Shared,
    call: &CallId,
    remote: &RemoteTask,
    until_ms: i64,
) -> Option<Task> {
    let left = || Duration::from_millis(u64::try_from(until_ms - now_ms()).unwrap_or(0));
    let mut look = FIRST_LOOK;
    loop {
        tokio::time::sleep(look.min(left())).await;
        look = (look * 2).min(SLOWEST_LOOK);
        let timeout = left().clamp(SHORTEST_READ, SLOWEST_LOOK);
        let read = match (shared.client(), shared.headers(&remote.url)) {
            (Ok(c), Ok(h)) => client::get(c, &remote.url, &h, &remote.task_id, timeout)
                .await
                .map_err(|f| f.message()),
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        match read {
            Ok(task) if task.status.state.is_terminal() || task.status.state.is_interrupted() => {
                return Some(task);
            }
            Ok(_) => {}
            Err(why) => {
                debug!(agent = %shared.agent, %call, error = %shared.redactor().redact(&why), "reading a followed remote task failed; trying again");
            }
        }
        if left().is_zero() {
            return None;
        }
    }
}

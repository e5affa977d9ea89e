//! Following a remote task that outlived its call's wait: the worker reads it now and then
//! until it is over (or interrupted, or the call's time is up) and completes the call itself,
//! which puts the `tool_result` into the agent's inbox and wakes it. Recorded in the call
//! registry (`RemoteTask`), so a restarted worker follows the open ones again; a process
//! follows each call once, and followers outlive the agent's session (an agent that sleeps
//! meanwhile is woken by the result).

use std::collections::HashSet;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use serde_json::json;
use tracing::{debug, info, warn};

use super::{client, task_result, Shared};
use crate::store::{now_ms, CallId, CallRecord, CallResult, Completion};

/// The calls this process follows.
static FOLLOWED: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(Default::default);

/// How often a followed task is read, at first and at most.
const FIRST_LOOK: Duration = Duration::from_secs(1);
const SLOWEST_LOOK: Duration = Duration::from_secs(30);

/// A call is given up this long before it expires, so that its end still reaches the model.
const MARGIN_MS: i64 = 5_000;

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
    let give_up = record.expires_ms.saturating_sub(MARGIN_MS);
    let mut look = FIRST_LOOK;
    let result = loop {
        if now_ms() >= give_up {
            break CallResult::Error(format!(
                "the remote task {} of {} was not over within the call's time (resultTtlSeconds)",
                remote.task_id, remote.source
            ));
        }
        tokio::time::sleep(look).await;
        look = (look * 2).min(SLOWEST_LOOK);
        let read = match (shared.client(), shared.headers()) {
            (Ok(c), Ok(h)) => client::get(c, &remote.url, &h, &remote.task_id, SLOWEST_LOOK)
                .await
                .map_err(|f| f.message()),
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        match read {
            Ok(task) if task.status.state.is_terminal() || task.status.state.is_interrupted() => {
                break CallResult::Result(task_result(&remote.source, &task));
            }
            Ok(_) => {}
            Err(why) => {
                debug!(agent = %shared.agent, %call, error = %shared.redactor().redact(&why), "reading a followed remote task failed; trying again");
            }
        }
    };
    let result = match result {
        CallResult::Result(v) => CallResult::Result(
            serde_json::from_str(&shared.redactor().redact(&v.to_string()))
                .unwrap_or_else(|_| json!({})),
        ),
        other => other,
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

//! What the HTTP providers share: how an HTTP status maps to a [`Failure`], the server's
//! `Retry-After`, and the retry loop for transient failures.

use std::time::Duration;

use tracing::warn;

use super::{Failure, ModelError};

/// Attempts per call for transient errors (the first try included).
pub const ATTEMPTS: u32 = 4;

/// The failure an error status says (529 is Anthropic's "overloaded").
pub fn failure_for(status: u16) -> Failure {
    match status {
        401 | 403 => Failure::Unauthorized,
        429 => Failure::RateLimited,
        s if s >= 500 => Failure::ServerError,
        _ => Failure::Refused,
    }
}

/// The server's `Retry-After` in seconds (at most 30 s are honoured).
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    headers
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|s| Duration::from_secs(s.min(30)))
}

/// When to try a failed call again: a transient failure waits the server's `Retry-After`,
/// else a delay doubling from the first one; after [`ATTEMPTS`] tries it gives up.
pub struct Retries {
    delay: Duration,
    tries: u32,
}

impl Retries {
    /// Retries starting at `backoff`.
    pub fn new(backoff: Duration) -> Self {
        Self {
            delay: backoff,
            tries: 1,
        }
    }

    /// How long to wait before trying again after `e`, or `None`: give up.
    pub fn after(&mut self, e: &ModelError, retry_after: Option<Duration>) -> Option<Duration> {
        if !e.is_transient() || self.tries >= ATTEMPTS {
            return None;
        }
        let wait = retry_after.unwrap_or(self.delay);
        warn!(attempt = self.tries, retry_in = ?wait, error = %e, "model call failed; retrying");
        self.delay *= 2;
        self.tries += 1;
        Some(wait)
    }
}

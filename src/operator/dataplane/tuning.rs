//! How often the operator's data-plane loop looks, writes status, and waits for cleanup.

use std::time::Duration;

/// Timing of the operator's data-plane work.
#[derive(Clone, Debug)]
pub struct Tuning {
    /// Time between sweeps.
    pub sweep: Duration,
    /// Least time between two status writes of one agent.
    pub status_interval: Duration,
    /// How long a deleted Agent waits for its data-plane state to be removed before it is
    /// deleted anyway (the state is then left behind, and an Event says so).
    pub cleanup_timeout: Duration,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            sweep: Duration::from_secs(5),
            status_interval: Duration::from_secs(5),
            cleanup_timeout: Duration::from_secs(60),
        }
    }
}

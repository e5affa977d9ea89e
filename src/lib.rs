//! agentfleet: a Kubernetes operator that runs fleets of living LLM agents.
//!
//! One crate, one binary (`agentfleet`); each subcommand calls one module's `run()`.

pub mod a2a;
pub mod api;
pub mod archive;
pub mod callback;
pub mod cluster_users;
pub mod crd;
pub mod cycles;
pub mod decisions;
pub mod dev;
pub mod gateway;
#[cfg(test)]
pub(crate) mod hostile;
pub mod identity;
pub mod inspect;
pub mod manifests;
pub mod membership;
pub mod models;
pub mod names;
pub mod operator;
pub mod party;
pub mod periods;
pub mod plans;
pub mod rehearsals;
pub mod report;
pub mod secrets;
pub mod store;
pub mod sync;
pub mod telemetry;
pub mod terminal;
// Test helpers: never in a release build (feature `test-support`, on for this crate's tests).
#[cfg(any(test, feature = "test-support"))]
pub mod testing;

pub mod model;

/// Lower-case hex of bytes (digests, random tokens).
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// Installs ring as the process's TLS crypto provider (the one kube uses), once. Safe to call
/// from every place that builds a TLS client.
pub fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // An already installed provider (a test harness, an embedding program) is kept.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
pub mod chat;
pub mod cli;
pub mod worker;

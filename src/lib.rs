//! agentfleet: a Kubernetes operator that runs fleets of living LLM agents.
//!
//! One crate, one binary (`agentfleet`); each subcommand calls one module's `run()`.

pub mod crd;
pub mod membership;
pub mod operator;
pub mod store;
pub mod telemetry;
pub mod testing;

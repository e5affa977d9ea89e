//! A2A (Agent2Agent) protocol v1.0: the wire types of its JSON bindings (JSON-RPC 2.0 and
//! HTTP+JSON), written from the normative `specification/a2a.proto` (package `lf.a2a.v1`,
//! v1.0.1) of `a2aproject/A2A`, plus the error table, the version header check and the
//! constants a server and a client of the protocol share.
//!
//! Data only: no transport, no task store. The gateway serves agents over A2A with these
//! types, and clients of other agents decode their answers with them.

mod card;
mod errors;
mod requests;
pub mod wire;

pub use card::*;
pub use errors::*;
pub use requests::*;
pub use wire::*;

/// The key of a message's metadata that carries an agentfleet agent's causal depth, so that
/// agents calling each other over A2A go on counting their chain (`cycle.maxChainDepth`).
pub const DEPTH_KEY: &str = "agentfleet.dev/depth";

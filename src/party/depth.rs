//! The causal depth of what an outside caller sends (DESIGN "Parties": depth is ours).
//!
//! A chain of agents calling each other is bounded by `cycle.maxChainDepth` on each side. A
//! caller may say how deep its chain is (`agentfleet.dev/depth` in an A2A message's
//! metadata), and the agent goes on counting from there; but a claim can only **continue** a
//! chain within the agent's bound:
//! - a claim at or past `maxChainDepth` is refused at the door (it would jump the chain past
//!   its end; nothing is posted);
//! - a claim never **lowers** the chain the agent knows of: while the agent waits on a remote
//!   A2A agent (a call under way, at most twice its timeout, and [`GRACE_MS`] after it), every
//!   message that reaches it continues that call's chain, at least one deeper — so a remote
//!   that calls back, directly or through others, counts on both sides whether or not it
//!   echoes the metadata.
//!
//! A message's depth only ever affects its own party's cycle (see [`super::split`]).

use std::fmt;

/// How long after a call of a remote agent ended a message still continues its chain: a
/// remote may answer first and call back just after.
pub const GRACE_MS: i64 = 10_000;

/// A claimed depth past the agent's bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooDeep {
    /// What the caller claimed.
    pub claimed: u64,
    /// The agent's `cycle.maxChainDepth`.
    pub max: u32,
}

impl fmt::Display for TooDeep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "metadata agentfleet.dev/depth {} continues a chain of agents past this agent's bound of {} (cycle.maxChainDepth): not delivered",
            self.claimed, self.max
        )
    }
}

/// The depth of an outside caller's message: its claim (`None`: none, a chain starts at 0),
/// at least one deeper than the agent's calls of remote agents under way (`outbound`: the
/// deepest), refused when the claim is at or past `max`.
pub fn inbound(claimed: Option<u64>, outbound: Option<u32>, max: u32) -> Result<u32, TooDeep> {
    let claim = claimed.unwrap_or(0);
    if claim >= u64::from(max) {
        return Err(TooDeep {
            claimed: claim,
            max,
        });
    }
    let claim = u32::try_from(claim).unwrap_or(u32::MAX);
    Ok(claim.max(outbound.map_or(0, |d| d.saturating_add(1))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_continues_a_chain_but_never_lowers_or_jumps_it() {
        // (claimed, calls under way, max) → depth or refused
        let table = [
            (None, None, 8, Ok(0)),
            (Some(3), None, 8, Ok(3)),
            (Some(7), None, 8, Ok(7)),
            (Some(8), None, 8, Err(8)),
            (Some(1000), None, 8, Err(1000)),
            (Some(u64::MAX), None, 8, Err(u64::MAX)),
            // A remote that calls back without the metadata continues the call's chain.
            (None, Some(3), 8, Ok(4)),
            (Some(0), Some(3), 8, Ok(4)),
            (Some(6), Some(3), 8, Ok(6)),
            // At the end of the chain: delivered, and the cycle it wakes calls nobody.
            (None, Some(8), 8, Ok(9)),
        ];
        for (claimed, outbound, max, want) in table {
            let got = inbound(claimed, outbound, max).map_err(|e| e.claimed);
            assert_eq!(got, want, "{claimed:?} {outbound:?} {max}");
        }
        assert!(inbound(Some(1000), None, 8)
            .unwrap_err()
            .to_string()
            .contains("past this agent's bound of 8 (cycle.maxChainDepth)"));
    }
}

//! How many cycle records an agent keeps (`spec.cycle.records`, see [`crate::cycles`]).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What the data plane keeps of an agent's cycles: its newest records, at most `keep` of
/// them in at most `maxBytes` together (the newest is always kept; one record is at most
/// 256 KiB, its texts and lists cut to fit and saying so). They are forgotten with the
/// Agent. Read with `agentfleet trace`, the console's Cycles page, or
/// `GET /v1/agents/{namespace}/{agent}/cycles`, by those who may read the agent's
/// consciousness.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CycleRecordsSpec {
    /// The most records kept (0 keeps none).
    #[serde(default = "default_keep")]
    #[schemars(range(max = 1000))]
    pub keep: u32,
    /// The most bytes the records take together.
    #[serde(default = "default_max_bytes")]
    #[schemars(range(min = 65536, max = 268435456))]
    pub max_bytes: u64,
}

impl Default for CycleRecordsSpec {
    fn default() -> Self {
        Self {
            keep: default_keep(),
            max_bytes: default_max_bytes(),
        }
    }
}

fn default_keep() -> u32 {
    100
}

fn default_max_bytes() -> u64 {
    8 * 1024 * 1024
}

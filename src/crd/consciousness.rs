//! How an agent's consciousness is kept: its window and compaction, its checkpoints, their
//! archive in object storage, and restoring or seeding it declaratively.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How consciousness is kept bounded and checkpointed.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConsciousnessSpec {
    /// Size of the remembered conversation, in tokens; when a cycle's commit goes over it,
    /// the oldest messages are compacted until it is under half of it (so that compaction,
    /// which changes the prompt's cached prefix, is rare).
    #[serde(default = "default_window_tokens")]
    #[schemars(range(min = 1000))]
    pub window_tokens: u64,

    /// How messages that leave the window are handled: `summarize` (a model-written summary of
    /// what drops out is kept) or `slidingWindow` (they are dropped).
    #[serde(default)]
    pub compaction: Compaction,

    /// Messages at the end of the conversation that compaction always keeps.
    #[serde(default = "default_keep_recent_messages")]
    #[schemars(range(min = 1, max = 10_000))]
    pub keep_recent_messages: u32,

    /// How many versioned checkpoints (one per committed cycle) are kept.
    #[serde(default = "default_checkpoints_retained")]
    #[schemars(range(min = 1, max = 1000))]
    pub checkpoints_retained: u32,

    /// Keep the agent's consciousness, inbox and checkpoints in the data plane when the Agent
    /// is deleted.
    #[serde(default)]
    pub retain_on_delete: bool,

    /// Checkpoints written to object storage (when the operator, or `dev`, has an archive:
    /// `--archive URL`).
    #[serde(default)]
    pub archive: ArchiveSpec,

    /// Roll the consciousness back to a checkpoint: applied once each time this field changes,
    /// never while a cycle runs (archive first, the data plane if it still has it);
    /// `status.restoredFrom` records it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<RestoreSpec>,

    /// Start as a copy of another Agent's checkpoint (a fork; the source is untouched). Used
    /// only while this agent has no consciousness of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed_from: Option<SeedSpec>,
}

impl Default for ConsciousnessSpec {
    fn default() -> Self {
        Self {
            window_tokens: default_window_tokens(),
            compaction: Compaction::default(),
            keep_recent_messages: default_keep_recent_messages(),
            checkpoints_retained: default_checkpoints_retained(),
            retain_on_delete: false,
            archive: ArchiveSpec::default(),
            restore: None,
            seed_from: None,
        }
    }
}

fn default_window_tokens() -> u64 {
    32_000
}

fn default_keep_recent_messages() -> u32 {
    12
}

fn default_checkpoints_retained() -> u32 {
    10
}

/// How messages that leave the consciousness window are handled.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Compaction {
    /// Keep a model-written summary of what drops out.
    #[default]
    Summarize,
    /// Drop what leaves the window.
    SlidingWindow,
}

/// Where and how long an agent's checkpoints are archived.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveSpec {
    /// Archive this agent's checkpoints (when an archive is configured). `false`: nothing of
    /// this agent is written to the archive, recovered from it, or removed from it when the
    /// Agent is deleted (the worker still gets the archive's address, so `restore.storageRef`
    /// and `seedFrom` can read archived checkpoints).
    #[serde(default = "yes")]
    pub enabled: bool,

    /// The objects' prefix in the archive's bucket instead of the archive URL's own path;
    /// objects are `PREFIX/NAMESPACE/AGENT/CYCLE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub prefix: Option<String>,

    /// The newest archived checkpoints kept.
    #[serde(default = "default_keep_last")]
    #[schemars(range(min = 1, max = 10_000))]
    pub keep_last: u32,

    /// Besides those, the newest checkpoint of each UTC day is kept for this many days (0:
    /// none).
    #[serde(default = "default_keep_days")]
    #[schemars(range(min = 0, max = 3650))]
    pub keep_days: u32,

    /// Seconds between two writes at most: an agent that commits faster has its newest
    /// checkpoint written once per interval (the first after a quiet spell at once); 0 writes
    /// every checkpoint.
    #[serde(default = "default_interval_seconds")]
    #[schemars(range(min = 0, max = 3600))]
    pub interval_seconds: u32,
}

impl Default for ArchiveSpec {
    fn default() -> Self {
        Self {
            enabled: true,
            prefix: None,
            keep_last: default_keep_last(),
            keep_days: default_keep_days(),
            interval_seconds: default_interval_seconds(),
        }
    }
}

fn default_interval_seconds() -> u32 {
    1
}

fn yes() -> bool {
    true
}

fn default_keep_last() -> u32 {
    10
}

fn default_keep_days() -> u32 {
    30
}

/// The checkpoint to roll back to: one of `cycle` and `storageRef`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreSpec {
    /// The checkpoint after this cycle (from the archive, else from the data plane's retained
    /// checkpoints).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycle: Option<u64>,

    /// An archived checkpoint's URL (`status.checkpoint.storageRef`, `s3://…`, `file:///…`) or
    /// the data plane's reference of a retained one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    pub storage_ref: Option<String>,
}

impl RestoreSpec {
    /// What the request is, as one string: `cycle:N` or `ref:URL` (the data plane records the
    /// last one applied, so a request is applied once per change).
    pub fn request(&self) -> String {
        match (&self.cycle, &self.storage_ref) {
            (_, Some(r)) => format!("ref:{r}"),
            (Some(c), None) => format!("cycle:{c}"),
            (None, None) => "none".into(),
        }
    }
}

/// The checkpoint a new agent starts from.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SeedSpec {
    /// The Agent (in the same namespace) whose checkpoint is copied.
    #[schemars(length(min = 1, max = 63))]
    pub agent: String,

    /// Its checkpoint after this cycle; its latest when not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycle: Option<u64>,
}

impl SeedSpec {
    /// What the request is, as one string: `seed:AGENT@N` or `seed:AGENT@latest`.
    pub fn request(&self) -> String {
        match self.cycle {
            Some(c) => format!("seed:{}@{c}", self.agent),
            None => format!("seed:{}@latest", self.agent),
        }
    }
}

/// A restore the spec asks for and the data plane has not applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PendingRestore<'a> {
    /// `spec.consciousness.restore`.
    Restore(&'a RestoreSpec),
    /// `spec.consciousness.seedFrom`, for an agent without consciousness.
    Seed(&'a SeedSpec),
}

impl PendingRestore<'_> {
    /// The request, as the data plane records it once applied.
    pub fn request(&self) -> String {
        match self {
            PendingRestore::Restore(r) => r.request(),
            PendingRestore::Seed(s) => s.request(),
        }
    }
}

impl ConsciousnessSpec {
    /// What the spec asks for that is not done: `applied` is the request the data plane
    /// recorded last, `cycles` the agent's committed cycles, `failed` a request whose last
    /// attempt failed (it is not asked again until the spec changes or the worker restarts).
    /// A restore comes first; a seed only for an agent that has no consciousness yet.
    pub fn pending(
        &self,
        applied: Option<&str>,
        cycles: u64,
        failed: Option<&str>,
    ) -> Option<PendingRestore<'_>> {
        let open =
            |request: String| applied != Some(request.as_str()) && failed != Some(request.as_str());
        if let Some(r) = self.restore.as_ref().filter(|r| open(r.request())) {
            return Some(PendingRestore::Restore(r));
        }
        self.seed_from
            .as_ref()
            .filter(|s| cycles == 0 && open(s.request()))
            .map(PendingRestore::Seed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restore_is_pending_until_applied_and_a_seed_only_while_empty() {
        let mut spec = ConsciousnessSpec::default();
        assert_eq!(spec.pending(None, 0, None), None);
        spec.restore = Some(RestoreSpec {
            cycle: Some(40),
            storage_ref: None,
        });
        spec.seed_from = Some(SeedSpec {
            agent: "sre".into(),
            cycle: None,
        });
        let restore = spec.restore.as_ref().unwrap();
        assert_eq!(restore.request(), "cycle:40");
        assert_eq!(
            spec.pending(None, 50, None),
            Some(PendingRestore::Restore(restore))
        );
        assert_eq!(
            spec.pending(Some("cycle:7"), 50, None),
            Some(PendingRestore::Restore(restore))
        );
        assert_eq!(spec.pending(Some("cycle:40"), 50, None), None, "applied");
        assert_eq!(
            spec.pending(None, 50, Some("cycle:40")),
            None,
            "failed: not again"
        );
        // The seed, once the restore is done, only while the agent has no cycle.
        let seed = spec.seed_from.as_ref().unwrap();
        assert_eq!(
            spec.pending(Some("cycle:40"), 0, None),
            Some(PendingRestore::Seed(seed))
        );
        spec.restore = None;
        assert_eq!(
            spec.pending(None, 0, None).map(|p| p.request()),
            Some("seed:sre@latest".into())
        );
        assert_eq!(spec.pending(Some("seed:sre@latest"), 0, None), None);
        assert_eq!(spec.pending(None, 3, None), None);
        let by_ref = RestoreSpec {
            cycle: None,
            storage_ref: Some("s3://b/p/ops/sre/40".into()),
        };
        assert_eq!(by_ref.request(), "ref:s3://b/p/ops/sre/40");
    }
}

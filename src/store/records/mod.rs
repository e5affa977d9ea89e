//! The data plane's own records: what it keeps as JSON of the things the cluster's objects
//! describe (a space's members and loop guard, the last restore, the tools a worker has, the
//! plans an agent made). They are defined here, not borrowed from the CRD structs, so that
//! renaming a field of a custom resource cannot change what Redis holds: the operator and
//! the worker convert at their edge, with the conversions all in one place (`From` impls in
//! `records/crd.rs`, the only code of the store that names a CRD type), and the CRDs keep
//! their schemas.
//!
//! # Formats
//!
//! The field names, their order and their omissions are those of the release that still
//! built these records from the CRD structs, so what it wrote reads unchanged, and it reads
//! what this release writes (a rolling upgrade runs both at once). `tests/fixtures/records/`
//! holds records as that release wrote them; the tests read each and write it again byte
//! for byte. Times are RFC 3339 strings to the second (`2026-12-24T18:00:00Z`), as the
//! Kubernetes `Time` of the CRD structs wrote them; the records hold them as milliseconds
//! since the epoch, as everything else in the data plane does, and read any RFC 3339 time.
//!
//! # Versions
//!
//! Each JSON document these records make — [`SpaceRecord`](super::SpaceRecord),
//! [`RestoreReport`](super::RestoreReport), each [`ToolRecord`] of a worker's list, each
//! [`Plan`] note — has a format version in a field `v`; absent means 1, and format 1 is
//! written without it (so the bytes stay those the previous release wrote, which refuses
//! unknown fields of a plan and rewrites a space whose JSON differs). The parts inside a
//! document ([`Member`], [`LoopGuard`], [`Restored`]) are of their document's version.
//!
//! A field added with a default is no new version: readers ignore fields they do not know.
//! A field renamed, retyped or given another meaning is: the release that makes the change
//! must read both formats, and only a later one may write the new format, once no release
//! that reads only the old one runs. A reader that meets a version newer than it knows
//! refuses the record with an error naming the version (`record format v2 is newer than
//! this release reads (v1)`), never guessing at it: where a read serves one agent or space,
//! that is the read's error; where the operator reads every agent at once, an unreadable
//! record is left out of the observation (as any undecodable one is), so one record cannot
//! stall the fleet.
//!
//! The data plane's other JSON — inbox events, space messages, checkpoints, the model's
//! health, archive reports, goals, calls — has always been its own; it is format 1 too,
//! implied, and follows the same rule when it first changes incompatibly (a `v` field that
//! readers check, as [`V1`] does, before a new format is written).

mod crd;
pub use self::crd::{a2a_record, agent_facts};
#[cfg(test)]
mod tests;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The format version of a record, kept in its `v` field: format 1, the only one this release
/// knows. Written as nothing (absent means 1); read from an absent `v` or `"v": 1`, and
/// refused with the version named for anything else (see the [module](self) on versions).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct V1;

impl V1 {
    /// The version number.
    pub const NUMBER: u64 = 1;

    /// Whether the version is written as nothing: format 1 always is (its `skip_serializing_if`).
    pub fn implied(&self) -> bool {
        true
    }
}

impl Serialize for V1 {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(Self::NUMBER)
    }
}

impl<'de> Deserialize<'de> for V1 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match u64::deserialize(deserializer)? {
            Self::NUMBER => Ok(V1),
            v if v > Self::NUMBER => Err(serde::de::Error::custom(format_args!(
                "record format v{v} is newer than this release reads (v{}): finish the upgrade",
                Self::NUMBER
            ))),
            v => Err(serde::de::Error::custom(format_args!(
                "record format v{v} does not exist (this release reads v{})",
                Self::NUMBER
            ))),
        }
    }
}

/// What kind of entity a space member (or a message's sender) is.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
pub enum MemberKind {
    /// An agent.
    Agent,
    /// A human.
    Human,
}

/// A member of a space, as its [`SpaceRecord`](super::SpaceRecord) lists it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    /// `Agent` or `Human`.
    pub kind: MemberKind,
    /// The agent's name, or the human's entity id.
    pub id: String,
    /// Display name.
    pub name: String,
}

/// When agents' messages in a space stop waking other agents (the Space's `loopGuard`).
/// A record without it — written before spaces had one — has the defaults that applied
/// then, whatever the Space's defaults are now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoopGuard {
    /// The longest chain of agent messages that still wakes other agents.
    #[serde(default = "default_max_depth")]
    pub max_depth: u32,
    /// The most agent messages a minute in the space that still wake other agents.
    #[serde(default = "default_max_agent_messages_per_minute")]
    pub max_agent_messages_per_minute: u32,
}

impl Default for LoopGuard {
    fn default() -> Self {
        Self {
            max_depth: default_max_depth(),
            max_agent_messages_per_minute: default_max_agent_messages_per_minute(),
        }
    }
}

fn default_max_depth() -> u32 {
    8
}

fn default_max_agent_messages_per_minute() -> u32 {
    60
}

/// What a restore, fork or recovery applied (the operator shows it as `status.restoredFrom`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Restored {
    /// `Restore`, `Seed` or `Recovery`.
    pub reason: String,
    /// The checkpoint's URL (or the data plane's reference).
    pub storage_ref: String,
    /// The cycle of that checkpoint.
    pub cycle: u64,
    /// Its digest (`sha256:…`).
    pub digest: String,
    /// What was asked for (`cycle:40`, `ref:URL`, `seed:AGENT@N`), for a restore or a seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// When it was applied (ms since the epoch); stored as `time`, RFC 3339 to the second.
    #[serde(
        rename = "time",
        default,
        skip_serializing_if = "Option::is_none",
        with = "rfc3339"
    )]
    pub time_ms: Option<i64>,
}

/// A plan an agent made itself (`set_plans`), as its note holds it: a recurring `schedule`
/// or a one-shot time `at`, and the instruction. Checked when the agent made it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// The note's format.
    #[serde(default, rename = "v", skip_serializing_if = "V1::implied")]
    pub v: V1,
    /// Name, unique among the agent's plans.
    pub name: String,
    /// Cron schedule (five fields or a macro such as `@daily`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// One-shot due time (ms since the epoch); stored as `at`, RFC 3339 to the second.
    #[serde(
        rename = "at",
        default,
        skip_serializing_if = "Option::is_none",
        with = "rfc3339"
    )]
    pub at_ms: Option<i64>,
    /// IANA time zone of `schedule`; UTC when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// What the agent is asked to do when the plan is due.
    pub instruction: String,
}

/// A tool a worker has, as it reports it (the operator shows the list as `status.tools`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolRecord {
    /// The entry's format.
    #[serde(default, rename = "v", skip_serializing_if = "V1::implied")]
    pub v: V1,
    /// The name the model calls it by.
    pub name: String,
    /// `builtin`, `http`, `interactive` or `mcp:SERVER`.
    pub source: String,
    /// Whether it can be called right now.
    pub ready: bool,
    /// Why not, when it cannot (secrets masked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// What was changed to offer it (a description cut to its bound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A time in ms as stored: an RFC 3339 string to the second, in UTC (what a Kubernetes
/// `Time` writes); read from any RFC 3339 time.
mod rfc3339 {
    use jiff::Timestamp;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(ms: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
        let Some(ms) = *ms else {
            return s.serialize_none();
        };
        let t = Timestamp::from_millisecond(ms).map_err(serde::ser::Error::custom)?;
        let text = jiff::fmt::strtime::format("%Y-%m-%dT%H:%M:%SZ", t)
            .map_err(serde::ser::Error::custom)?;
        s.serialize_str(&text)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|text| {
                text.parse::<Timestamp>()
                    .map(|t| t.as_millisecond())
                    .map_err(serde::de::Error::custom)
            })
            .transpose()
    }
}

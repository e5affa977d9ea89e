//! What can go wrong in the data plane.

/// Why a store operation failed. The text never carries credentials.
///
/// The text says the cause (the driver's or the decoder's error) and `source()` does not
/// return it again: `{e}` is the whole story, and a chain printer ([`crate::report::chain`],
/// anyhow's `{:#}`) says the cause once. (thiserror makes a field named `source` the source,
/// hence the hand-written `Display`.)
#[derive(Debug)]
pub enum StoreError {
    /// The store could not be reached or refused the command.
    Redis {
        /// What the store was doing.
        op: &'static str,
        /// The driver's error.
        source: ::redis::RedisError,
    },
    /// The store did not answer in time.
    Timeout {
        /// What the store was doing.
        op: &'static str,
        /// The time limit.
        seconds: u64,
    },
    /// A stored value could not be decoded.
    Decode {
        /// The value being decoded.
        what: String,
        /// The decoder's error.
        source: serde_json::Error,
    },
    /// The store's address is not usable.
    InvalidUrl(String),
    /// The Redis named cannot serve as the data plane (say, a cluster of too old a version).
    Unsupported(String),
    /// A commit that does not fit the stored consciousness (a bug in the caller).
    InvalidCommit {
        /// Whose commit it was (`NS/NAME`).
        agent: String,
        /// What does not fit.
        reason: String,
    },
    /// The sender is not a member of the space (or the space does not exist).
    NotMember {
        /// The space posted to (`NS/NAME`).
        space: String,
        /// The sender's id.
        sender: String,
    },
    /// A message's text is longer than its space takes (`spec.retention.maxMessageBytes`);
    /// nothing was written.
    TooLarge {
        /// The space posted to (`NS/NAME`).
        space: String,
        /// The text's bytes.
        bytes: u64,
        /// The most the space takes.
        max: u64,
    },
    /// The caller's lease is no longer current: another worker holds the agent.
    Fenced {
        /// The agent whose lease was lost (`NS/NAME`).
        agent: String,
    },
    /// A write was done on the primary but fewer replicas than asked for
    /// (`--redis-wait-replicas`) had it within the time allowed: it could be lost if the
    /// primary failed now. A keyed post retried finds it and waits again.
    NotReplicated {
        /// What the store was doing.
        op: &'static str,
        /// Replicas asked for.
        wanted: u32,
        /// Replicas that had it.
        got: u32,
        /// The time allowed.
        ms: u64,
    },
    /// A cycle of the agent is under way, paused for a human or left to resume: its
    /// consciousness is not replaced under it.
    CycleInFlight {
        /// The agent whose cycle is under way (`NS/NAME`).
        agent: String,
    },
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Redis { op, source } => write!(f, "redis {op}: {source}"),
            StoreError::Timeout { op, seconds } => {
                write!(f, "redis {op}: no answer within {seconds}s")
            }
            StoreError::Decode { what, source } => write!(f, "decoding {what}: {source}"),
            StoreError::InvalidUrl(url) => write!(f, "invalid redis URL: {url}"),
            StoreError::Unsupported(why) => write!(f, "unsupported redis: {why}"),
            StoreError::NotReplicated { op, wanted, got, ms } => write!(
                f,
                "redis {op}: written on the primary but on {got} of {wanted} replicas within {ms} ms; not acknowledged (retry with the same key)"
            ),
            StoreError::InvalidCommit { agent, reason } => {
                write!(f, "invalid commit for agent {agent}: {reason}")
            }
            StoreError::NotMember { space, sender } => {
                write!(f, "{sender} is not a member of space {space}")
            }
            StoreError::TooLarge { space, bytes, max } => write!(
                f,
                "the message is {bytes} bytes, more than the {max} bytes space {space} takes; shorten it or send it in parts"
            ),
            StoreError::Fenced { agent } => {
                write!(f, "lease of agent {agent} lost: another worker holds it")
            }
            StoreError::CycleInFlight { agent } => write!(
                f,
                "agent {agent} has a cycle in flight (under way, paused for a human, or left to resume); its consciousness is replaced only between cycles"
            ),
        }
    }
}

impl std::error::Error for StoreError {}

impl StoreError {
    /// A bounded label for metrics.
    pub fn category(&self) -> &'static str {
        match self {
            StoreError::Redis { .. } => "store_unavailable",
            StoreError::Timeout { .. } => "store_timeout",
            StoreError::NotReplicated { .. } => "store_not_replicated",
            StoreError::Decode { .. } => "store_decode",
            StoreError::InvalidUrl(_) | StoreError::Unsupported(_) => "store_config",
            StoreError::Fenced { .. } => "fenced",
            StoreError::NotMember { .. } => "not_member",
            StoreError::TooLarge { .. } => "message_too_large",
            StoreError::InvalidCommit { .. } => "invalid_commit",
            StoreError::CycleInFlight { .. } => "cycle_in_flight",
        }
    }

    /// Whether nothing accepted the connection (nothing listens at the store's address).
    pub fn is_connection_refused(&self) -> bool {
        matches!(self, StoreError::Redis { source, .. } if source.is_connection_refusal())
    }

    /// Whether trying the same step again may succeed: the store did not answer, or the
    /// connection failed (not a refusal by the store, a fence or a bad value).
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            StoreError::Timeout { .. } | StoreError::NotReplicated { .. } => true,
            StoreError::Redis { source, .. } => {
                !matches!(source.retry_method(), ::redis::RetryMethod::NoRetry)
            }
            _ => false,
        }
    }
}

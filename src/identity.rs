//! The identities everything else names: an agent and a space, each by namespace and name
//! (`NS/NAME`), imported from here and nowhere else. One home for both, so the store,
//! membership, the operator and the gateway agree on them without importing each other.

use std::fmt;

use kube::ResourceExt;
use serde::{Deserialize, Serialize};

use crate::crd::Space;

/// How the name of an A2A conversation's space starts (see [`SpaceKey::conversation`]).
pub const CONVERSATION_PREFIX: &str = "a2a_";

/// Whether a space name is an A2A conversation's (see [`SpaceKey::conversation`]).
pub fn is_conversation(space: &str) -> bool {
    space.starts_with(CONVERSATION_PREFIX)
}

/// An agent, by namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AgentKey {
    /// Namespace of the Agent.
    pub namespace: String,
    /// Name of the Agent.
    pub name: String,
}

impl AgentKey {
    /// A key from its parts.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// Parses `NS/NAME`.
    pub fn parse(s: &str) -> Option<Self> {
        let (ns, name) = s.split_once('/')?;
        (!ns.is_empty() && !name.is_empty() && !name.contains('/')).then(|| Self::new(ns, name))
    }

    /// An agent a person named (`NS/NAME`, on a command line): refused, in one sentence that
    /// quotes it escaped, unless both are valid Kubernetes names.
    pub fn named(s: &str) -> Result<Self, String> {
        let (ns, name) = crate::names::parse_namespaced("the agent", s)?;
        Ok(Self::new(ns, name))
    }
}

impl fmt::Display for AgentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A space, by namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SpaceKey {
    /// Namespace of the Space.
    pub namespace: String,
    /// Name of the Space.
    pub name: String,
}

impl SpaceKey {
    /// A key from its parts.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key of a Space object (`default` namespace when unset, as for a manifest file).
    pub fn of(space: &Space) -> Self {
        Self::new(
            space.namespace().unwrap_or_else(|| "default".to_string()),
            space.name_any(),
        )
    }

    /// The space of an A2A conversation: the one a caller (`kind`: `human` or `service`, and
    /// its id) has with `agent` under `context_id`. Its name is `a2a_` and 24 hex digits of a
    /// digest of the four, so another caller's same `contextId` is another conversation,
    /// and, the underscore being no part of a Kubernetes name, no Space object can have it.
    pub fn conversation(agent: &AgentKey, kind: &str, caller: &str, context_id: &str) -> Self {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        for part in [agent.name.as_str(), kind, caller, context_id] {
            h.update(part.len().to_le_bytes());
            h.update(part.as_bytes());
        }
        Self::new(
            agent.namespace.clone(),
            format!("{CONVERSATION_PREFIX}{}", crate::hex(&h.finalize()[..12])),
        )
    }

    /// Whether this is the space of an A2A conversation (see [`SpaceKey::conversation`]).
    pub fn is_conversation(&self) -> bool {
        is_conversation(&self.name)
    }

    /// A space a person named, as [`AgentKey::named`].
    pub fn named(s: &str) -> Result<Self, String> {
        let (ns, name) = crate::names::parse_namespaced("the space", s)?;
        Ok(Self::new(ns, name))
    }
}

impl fmt::Display for SpaceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

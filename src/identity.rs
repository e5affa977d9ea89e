//! The identities everything else names: an agent and a space, each by namespace and name
//! (`NS/NAME`), imported from here and nowhere else. One home for both, so the store,
//! membership, the operator and the gateway agree on them without importing each other.

use std::fmt;

use kube::ResourceExt;
use serde::{Deserialize, Serialize};

use crate::crd::Space;

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

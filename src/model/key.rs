//! Where a model's API key comes from: none, given once (`AGENTFLEET_MODEL_API_KEY`, tests),
//! or read at each request from a mounted Secret, so that a rotated key is used from the next
//! request on without a restart.

use std::sync::Arc;

/// Reads a key now; the error names what is missing, never a value.
pub type ReadKey = Arc<dyn Fn() -> Result<String, String> + Send + Sync>;

/// A model's API key.
#[derive(Clone, Default)]
pub enum ApiKey {
    /// None is sent.
    #[default]
    None,
    /// This one, always.
    Given(String),
    /// Read at each request.
    Read(ReadKey),
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ApiKey::None => "ApiKey::None",
            ApiKey::Given(_) => "ApiKey::Given(…)",
            ApiKey::Read(_) => "ApiKey::Read(…)",
        })
    }
}

impl From<Option<String>> for ApiKey {
    fn from(key: Option<String>) -> Self {
        key.map_or(ApiKey::None, ApiKey::Given)
    }
}

impl ApiKey {
    /// The key to send now (none when empty).
    pub fn current(&self) -> Result<Option<String>, String> {
        let key = match self {
            ApiKey::None => None,
            ApiKey::Given(k) => Some(k.clone()),
            ApiKey::Read(read) => Some(read()?),
        };
        Ok(key.filter(|k| !k.is_empty()))
    }
}

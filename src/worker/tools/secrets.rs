//! The Secrets an agent's tools take headers from. In a pod the operator mounts each one at
//! `/etc/agentfleet/secrets/NAME/` (a file per key); `agentfleet dev` reads them from the
//! `kind: Secret` documents of its directory. Values are read when a tool needs them (a
//! mounted Secret changes in place) and never logged.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

pub use crate::secrets::MOUNT_DIR;

/// The Secrets a worker can read.
#[derive(Clone, Debug)]
pub enum Secrets {
    /// Mounted: `DIR/NAME/KEY` holds the value of key KEY of Secret NAME.
    Dir(PathBuf),
    /// Given in-process (`agentfleet dev`, tests): Secret name → key → value.
    Map(Arc<BTreeMap<String, BTreeMap<String, String>>>),
}

impl Default for Secrets {
    fn default() -> Self {
        Secrets::Dir(PathBuf::from(MOUNT_DIR))
    }
}

impl Secrets {
    /// Secrets given in-process.
    pub fn from_map(map: BTreeMap<String, BTreeMap<String, String>>) -> Self {
        Secrets::Map(Arc::new(map))
    }

    /// The keys and values of Secret `name`; an error names what is missing, never a value.
    pub fn get(&self, name: &str) -> Result<BTreeMap<String, String>, String> {
        match self {
            Secrets::Map(map) => map
                .get(name)
                .cloned()
                .ok_or_else(|| format!("Secret {name:?} is not available to the worker")),
            Secrets::Dir(dir) => {
                let path = dir.join(name);
                let entries = std::fs::read_dir(&path).map_err(|e| {
                    format!("Secret {name:?} is not mounted at {}: {e}", path.display())
                })?;
                let mut out = BTreeMap::new();
                for entry in entries.flatten() {
                    let key = entry.file_name().to_string_lossy().into_owned();
                    // Kubernetes' own bookkeeping entries of a mounted volume.
                    if key.starts_with("..") || !entry.path().is_file() {
                        continue;
                    }
                    let value = std::fs::read_to_string(entry.path())
                        .map_err(|e| format!("Secret {name:?}, key {key:?}: {e}"))?;
                    out.insert(key, value.trim_end_matches(['\n', '\r']).to_string());
                }
                Ok(out)
            }
        }
    }

    /// The value of key `key` of Secret `name`, read now; an error names what is missing.
    pub fn value(&self, name: &str, key: &str) -> Result<String, String> {
        let missing = || format!("Secret {name:?} has no key {key:?}");
        match self {
            Secrets::Map(map) => map
                .get(name)
                .ok_or_else(|| format!("Secret {name:?} is not available to the worker"))?
                .get(key)
                .cloned()
                .ok_or_else(missing),
            Secrets::Dir(dir) => {
                let path = dir.join(name).join(key);
                match std::fs::read_to_string(&path) {
                    Ok(v) => Ok(v.trim_end_matches(['\n', '\r']).to_string()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        if dir.join(name).is_dir() {
                            Err(missing())
                        } else {
                            Err(format!(
                                "Secret {name:?} is not mounted at {}",
                                dir.join(name).display()
                            ))
                        }
                    }
                    Err(e) => Err(format!("Secret {name:?}, key {key:?}: {e}")),
                }
            }
        }
    }

    /// Every value of every Secret that is available: what must never be shown.
    pub fn values(&self, names: &[&str]) -> Vec<String> {
        names
            .iter()
            .filter_map(|n| self.get(n).ok())
            .flat_map(|m| m.into_values())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounted_and_given_secrets_read_alike() {
        let dir = std::env::temp_dir().join(format!("agentfleet-secrets-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("tracker/..data")).unwrap();
        std::fs::write(dir.join("tracker/Authorization"), "Bearer t0k3n\n").unwrap();
        let mounted = Secrets::Dir(dir.clone());
        let got = mounted.get("tracker").unwrap();
        assert_eq!(
            got.get("Authorization").map(String::as_str),
            Some("Bearer t0k3n")
        );
        assert_eq!(got.len(), 1, "bookkeeping entries are skipped");
        let e = mounted.get("missing").unwrap_err();
        assert!(e.contains("\"missing\" is not mounted"), "{e}");
        let given = Secrets::from_map(BTreeMap::from([(
            "tracker".to_string(),
            BTreeMap::from([("Authorization".to_string(), "Bearer t0k3n".to_string())]),
        )]));
        assert_eq!(given.get("tracker").unwrap(), got);
        assert_eq!(given.values(&["tracker", "nope"]), ["Bearer t0k3n"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

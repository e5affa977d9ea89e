//! The checkpoint archive: committed checkpoints written to object storage (S3-compatible
//! stores, GCS, Azure Blob Storage or a local directory, through `object_store`) as
//! self-contained documents at `PREFIX/NAMESPACE/AGENT/CYCLE`, so that an agent's memory
//! outlives the data plane.
//!
//! | file | what it holds |
//! |---|---|
//! | `mod.rs` | [`Archive`]: opening a URL with the store's standard environment, put, list, get, delete |
//! | `document.rs` | [`Document`]: the versioned document, its encoding and its verification |
//! | `retention.rs` | which archived checkpoints stay (pure) |
//!
//! The worker writes (`crate::worker::archiver`) and restores (`crate::worker::hydrate`); the
//! operator removes an agent's archive with its data; `agentfleet consciousness` reads it.

mod document;
pub mod retention;
mod signing;

pub use document::{Document, SCHEMA};
pub use retention::Listed;
pub use signing::{Signer, MIN_KEY_BYTES, SIGNING_KEY_ENV};

use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt as _;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt as _, ObjectStoreScheme};
use url::Url;

use crate::crd::ArchiveSpec;
use crate::identity::AgentKey;
use crate::secrets::Redactor;

/// The environment variable of the archive's URL (`--archive`).
pub const URL_ENV: &str = "AGENTFLEET_ARCHIVE_URL";

/// Prefixes of the environment variables each store reads its credentials and endpoint from
/// (`AWS_ACCESS_KEY_ID`, `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, `GOOGLE_SERVICE_ACCOUNT_KEY`,
/// `AZURE_STORAGE_ACCOUNT_KEY`, …).
pub const CREDENTIAL_ENV_PREFIXES: [&str; 3] = ["AWS_", "GOOGLE_", "AZURE_"];

/// The `--archive URL` flag (env `AGENTFLEET_ARCHIVE_URL`) of `operator`, `worker` and `dev`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ArchiveFlag {
    /// Archive checkpoints to object storage: `s3://BUCKET/PREFIX`, `gs://…`, `az://…` or
    /// `file:///DIR`, with each store's standard credential and endpoint variables
    /// (`AWS_ACCESS_KEY_ID`, `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, …).
    #[arg(long = "archive", env = URL_ENV, value_name = "URL")]
    pub url: Option<String>,
}

impl ArchiveFlag {
    /// The archive, when one is named (said in the log, with whether it signs).
    pub fn open(&self) -> Result<Option<Archive>, ArchiveError> {
        let archive = self.url.as_deref().map(Archive::open).transpose()?;
        match &archive {
            Some(a) if a.signed() => {
                tracing::info!(archive = %a.url(), signed = true, "checkpoints are archived")
            }
            Some(a) => {
                tracing::warn!(archive = %a.url(), signed = false, "checkpoints are archived unsigned: a document planted in the store would be restored; set {SIGNING_KEY_ENV} to sign and check them")
            }
            None => {}
        }
        Ok(archive)
    }
}

/// Why the archive could not do something. Each has a reason for conditions.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// The URL names no store this build knows, or is malformed.
    #[error("archive URL {url:?}: {why}")]
    InvalidUrl {
        /// The URL, as given.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// The store did not answer or refused (its message, secrets masked).
    #[error("object storage: {0}")]
    Unreachable(String),
    /// No such checkpoint.
    #[error("no archived checkpoint at {0}")]
    NotFound(String),
    /// The object is not an intact checkpoint document.
    #[error("the archived checkpoint is corrupt: {0}")]
    Corrupt(String),
    /// A document of a schema this build does not read.
    #[error("the archived checkpoint has schema {0:?}; this agentfleet reads {SCHEMA}")]
    Unsupported(String),
    /// An intact document, but not the one asked for (another agent's, another cycle).
    #[error("the archived checkpoint is not the one asked for: {0}")]
    Foreign(String),
    /// The archive signs its checkpoints and this one is unsigned or wrongly signed.
    #[error("the archived checkpoint is refused: {0}")]
    Signature(String),
    /// The document is larger than a checkpoint may be.
    #[error("the archived checkpoint is refused: {0}")]
    TooLarge(String),
    /// The signing key is unusable.
    #[error("archive signing key: {0}")]
    InvalidKey(String),
}

impl ArchiveError {
    /// The CamelCase reason of a condition that reports it.
    pub fn reason(&self) -> &'static str {
        match self {
            ArchiveError::InvalidUrl { .. } => "InvalidArchiveUrl",
            ArchiveError::Unreachable(_) => "StoreUnreachable",
            ArchiveError::NotFound(_) => "CheckpointNotFound",
            ArchiveError::Corrupt(_) => "CheckpointCorrupt",
            ArchiveError::Unsupported(_) => "UnsupportedSchema",
            ArchiveError::Foreign(_) => "ForeignCheckpoint",
            ArchiveError::Signature(_) => "SignatureInvalid",
            ArchiveError::TooLarge(_) => "CheckpointTooLarge",
            ArchiveError::InvalidKey(_) => "InvalidSigningKey",
        }
    }

    /// Whether trying again later may succeed (the store was away).
    pub fn is_transient(&self) -> bool {
        matches!(self, ArchiveError::Unreachable(_))
    }
}

/// One archive: a store and the prefix under which agents' checkpoints live.
#[derive(Clone)]
pub struct Archive {
    store: Arc<dyn ObjectStore>,
    /// `SCHEME://BUCKET` (`file://` for a directory): what object URLs start with.
    root: String,
    /// The prefix inside the store.
    prefix: Path,
    /// The credentials of the environment, masked in every error.
    redactor: Redactor,
    /// Signs what is written and checks what is read, when the environment has a key.
    signer: Option<Signer>,
    /// The environment it was opened with (a URL outside it is opened with the same).
    env: Arc<Vec<(String, String)>>,
}

impl std::fmt::Debug for Archive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Archive").field("url", &self.url()).finish()
    }
}

/// How long one request may take, and how often it is retried, before the archive says the
/// store is away (the archiver retries later with its own backoff).
fn retry() -> object_store::RetryConfig {
    object_store::RetryConfig {
        backoff: object_store::BackoffConfig::default(),
        max_retries: 2,
        retry_timeout: Duration::from_secs(20),
    }
}

fn client_options() -> object_store::ClientOptions {
    object_store::ClientOptions::new()
        .with_timeout(Duration::from_secs(30))
        .with_connect_timeout(Duration::from_secs(5))
}

/// The credential and endpoint variables of this process's environment, and the signing key.
fn credential_env() -> Vec<(String, String)> {
    std::env::vars()
        .filter(|(k, _)| {
            k == SIGNING_KEY_ENV || CREDENTIAL_ENV_PREFIXES.iter().any(|p| k.starts_with(p))
        })
        .collect()
}

/// Values of the environment that are secrets (keys, tokens, passwords, service accounts).
fn secret_values(env: &[(String, String)]) -> Redactor {
    Redactor::new(env.iter().filter_map(|(k, v)| {
        let k = k.to_ascii_uppercase();
        let secret = [
            "KEY",
            "SECRET",
            "TOKEN",
            "PASSWORD",
            "SERVICE_ACCOUNT",
            "SAS",
        ]
        .iter()
        .any(|w| k.contains(w));
        secret.then_some(v.as_str())
    }))
}

/// A store builder with our timeouts and retries, then `env` applied (each variable its store
/// knows; after the client options, which would replace `AWS_ALLOW_HTTP` and the like).
macro_rules! configured {
    ($builder:expr, $env:expr, $url:expr) => {{
        let mut b = $builder
            .with_url($url.as_str())
            .with_retry(retry())
            .with_client_options(client_options());
        for (k, v) in $env {
            if let Ok(key) = k.to_ascii_lowercase().parse() {
                b = b.with_config(key, v.clone());
            }
        }
        b
    }};
}

/// What `url` names: the URL parsed, its kind of store and the prefix inside the store;
/// refused unless it is an archive this build opens (`s3://`, `s3a://`, `gs://`, `az://`,
/// `azure://`, `abfs://`, `abfss://`, an object store's `https://` URL, `file:///DIR`).
fn parse(url: &str) -> Result<(Url, ObjectStoreScheme, Path), ArchiveError> {
    let invalid = |why: String| ArchiveError::InvalidUrl {
        url: url.to_string(),
        why,
    };
    let parsed = Url::parse(url).map_err(|e| invalid(e.to_string()))?;
    let (scheme, path) = ObjectStoreScheme::parse(&parsed).map_err(|e| invalid(e.to_string()))?;
    match scheme {
        ObjectStoreScheme::Local if !url.starts_with("file:///") => {
            return Err(invalid("a directory must be an absolute path".into()))
        }
        ObjectStoreScheme::Local
        | ObjectStoreScheme::AmazonS3
        | ObjectStoreScheme::GoogleCloudStorage
        | ObjectStoreScheme::MicrosoftAzure => {}
        other => {
            return Err(invalid(format!(
                "{other:?} is not an archive; use s3://, gs://, az:// or file:///"
            )))
        }
    }
    let prefix = Path::parse(path).map_err(|e| invalid(e.to_string()))?;
    Ok((parsed, scheme, prefix))
}

/// Whether `url` names an archive: what [`Archive::open`] accepts, checked without opening
/// it (no environment, no client).
pub fn check_url(url: &str) -> Result<(), ArchiveError> {
    parse(url).map(|_| ())
}

impl Archive {
    /// Opens the archive at `url` (`s3://BUCKET/PREFIX`, `gs://…`, `az://…`, `file:///DIR`),
    /// configured from this process's environment as each store documents it.
    pub fn open(url: &str) -> Result<Self, ArchiveError> {
        Self::open_with(url, &credential_env())
    }

    /// Opens the archive at `url` configured from `env` (the variables of
    /// [`CREDENTIAL_ENV_PREFIXES`] as the environment would give them).
    pub fn open_with(url: &str, env: &[(String, String)]) -> Result<Self, ArchiveError> {
        crate::install_crypto_provider();
        let invalid = |why: String| ArchiveError::InvalidUrl {
            url: url.to_string(),
            why,
        };
        let (parsed, scheme, prefix) = parse(url)?;
        let redactor = secret_values(env);
        let signer = Signer::from_env(env)?;
        let built = |r: Result<Arc<dyn ObjectStore>, object_store::Error>| {
            r.map_err(|e| invalid(redactor.redact(&e.to_string())))
        };
        let store: Arc<dyn ObjectStore> = match scheme {
            ObjectStoreScheme::Local => Arc::new(object_store::local::LocalFileSystem::new()),
            ObjectStoreScheme::AmazonS3 => built(
                configured!(object_store::aws::AmazonS3Builder::new(), env, parsed)
                    .build()
                    .map(|s| Arc::new(s) as _),
            )?,
            ObjectStoreScheme::GoogleCloudStorage => built(
                configured!(
                    object_store::gcp::GoogleCloudStorageBuilder::new(),
                    env,
                    parsed
                )
                .build()
                .map(|s| Arc::new(s) as _),
            )?,
            ObjectStoreScheme::MicrosoftAzure => built(
                configured!(
                    object_store::azure::MicrosoftAzureBuilder::new(),
                    env,
                    parsed
                )
                .build()
                .map(|s| Arc::new(s) as _),
            )?,
            other => return Err(invalid(format!("{other:?} is not an archive"))),
        };
        let root = match scheme {
            ObjectStoreScheme::Local => "file://".to_string(),
            _ => format!(
                "{}://{}",
                parsed.scheme(),
                parsed.host_str().unwrap_or_default()
            ),
        };
        Ok(Self {
            store,
            root,
            prefix,
            redactor,
            signer,
            env: Arc::new(env.to_vec()),
        })
    }

    /// Whether what it writes is signed and what it reads must be.
    pub fn signed(&self) -> bool {
        self.signer.is_some()
    }

    /// The credential and endpoint variables it was opened with, the signing key among them:
    /// what another process needs in its environment to open the same archive (secrets among
    /// them: never log them).
    pub fn env(&self) -> &[(String, String)] {
        &self.env
    }

    /// The archive's URL (no credentials: they come from the environment).
    pub fn url(&self) -> String {
        self.object_url(&self.prefix)
    }

    fn object_url(&self, path: &Path) -> String {
        if path.as_ref().is_empty() {
            self.root.clone()
        } else {
            format!("{}/{}", self.root, path)
        }
    }

    /// The archive an agent's checkpoints go to, as its spec says: `None` when it turned
    /// archiving off; its own prefix when it names one.
    pub fn for_agent(&self, spec: &ArchiveSpec) -> Option<Self> {
        if !spec.enabled {
            return None;
        }
        let mut this = self.clone();
        if let Some(p) = &spec.prefix {
            this.prefix = Path::from(p.trim_matches('/'));
        }
        Some(this)
    }

    fn agent_dir(&self, agent: &AgentKey) -> Path {
        self.prefix
            .clone()
            .join(agent.namespace.as_str())
            .join(agent.name.as_str())
    }

    fn path(&self, agent: &AgentKey, cycle: u64) -> Path {
        self.agent_dir(agent).join(cycle.to_string())
    }

    /// The URL under which `agent`'s checkpoints are (`…/NAMESPACE/AGENT`).
    pub fn agent_url(&self, agent: &AgentKey) -> String {
        self.object_url(&self.agent_dir(agent))
    }

    /// The URL of `agent`'s checkpoint after `cycle`.
    pub fn checkpoint_url(&self, agent: &AgentKey, cycle: u64) -> String {
        self.object_url(&self.path(agent, cycle))
    }

    fn unreachable(&self, e: object_store::Error) -> ArchiveError {
        ArchiveError::Unreachable(self.redactor.redact(&crate::report::chain(&e)))
    }

    /// Writes `doc` at its agent's path for its cycle; returns the object's URL.
    pub async fn put(&self, doc: &Document) -> Result<String, ArchiveError> {
        let bytes = doc.encode(self.signer.as_ref())?;
        let path = self.path(&doc.agent, doc.snapshot.consciousness.cycle);
        self.store
            .put(&path, bytes.into())
            .await
            .map_err(|e| self.unreachable(e))?;
        Ok(self.object_url(&path))
    }

    /// `agent`'s archived checkpoints (any order).
    pub async fn list(&self, agent: &AgentKey) -> Result<Vec<Listed>, ArchiveError> {
        let dir = self.agent_dir(agent);
        let metas: Vec<object_store::ObjectMeta> =
            match self.store.list(Some(&dir)).try_collect().await {
                Ok(m) => m,
                // A directory that does not exist yet holds nothing.
                Err(object_store::Error::NotFound { .. }) => Vec::new(),
                Err(e) => return Err(self.unreachable(e)),
            };
        Ok(metas
            .iter()
            .filter_map(|m| {
                let rest = m.location.prefix_match(&dir)?.collect::<Vec<_>>();
                let [name] = rest.as_slice() else { return None };
                let cycle = name.as_ref().parse::<u64>().ok()?;
                Some(Listed {
                    cycle,
                    time_ms: m.last_modified.timestamp_millis(),
                })
            })
            .collect())
    }

    /// `agent`'s newest archived checkpoint, if any (see [`retention::newest_first`]).
    pub async fn latest(&self, agent: &AgentKey) -> Result<Option<Listed>, ArchiveError> {
        let mut all = self.list(agent).await?;
        retention::newest_first(&mut all);
        Ok(all.first().copied())
    }

    /// `agent`'s checkpoint after `cycle`, verified to be that one.
    pub async fn get(&self, agent: &AgentKey, cycle: u64) -> Result<Document, ArchiveError> {
        let path = self.path(agent, cycle);
        let doc = self.read(&path).await?;
        expect(&doc, agent, Some(cycle), &self.object_url(&path))?;
        Ok(doc)
    }

    async fn read(&self, path: &Path) -> Result<Document, ArchiveError> {
        let got = match self.store.get(path).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(ArchiveError::NotFound(self.object_url(path)))
            }
            Err(e) => return Err(self.unreachable(e)),
        };
        let bytes = got.bytes().await.map_err(|e| self.unreachable(e))?;
        let doc = Document::decode(&bytes, self.signer.as_ref())?;
        // An object named for a cycle holds that cycle (a document copied over another).
        let url = self.object_url(path);
        if let Some(named) = path.filename().and_then(|n| n.parse::<u64>().ok()) {
            expect(&doc, &doc.agent, Some(named), &url)?;
        }
        Ok(doc)
    }

    /// Removes `agent`'s checkpoints of these cycles.
    pub async fn delete(&self, agent: &AgentKey, cycles: &[u64]) -> Result<(), ArchiveError> {
        for &cycle in cycles {
            match self.store.delete(&self.path(agent, cycle)).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.unreachable(e)),
            }
        }
        Ok(())
    }

    /// Removes every archived checkpoint of `agent`; how many there were.
    pub async fn purge(&self, agent: &AgentKey) -> Result<usize, ArchiveError> {
        let cycles: Vec<u64> = self.list(agent).await?.iter().map(|l| l.cycle).collect();
        self.delete(agent, &cycles).await?;
        Ok(cycles.len())
    }

    /// Reads the document at `url`: through this archive when the URL is inside it, else
    /// through a store opened for that URL (with the same environment).
    pub async fn fetch(&self, url: &str) -> Result<Document, ArchiveError> {
        match self.path_of(url) {
            Some(path) => self.read(&path).await,
            None => Self::open_with(url, &self.env)?.read_here().await,
        }
    }

    /// The document at the archive's own URL (opened for one object).
    async fn read_here(&self) -> Result<Document, ArchiveError> {
        self.read(&self.prefix).await
    }

    /// The path of `url` in this archive's store, when it is there.
    fn path_of(&self, url: &str) -> Option<Path> {
        let rest = url.strip_prefix(&self.root)?.strip_prefix('/')?;
        Path::parse(rest).ok()
    }
}

/// Reads the document at `url` (a store opened for it, configured from the environment).
pub async fn fetch(url: &str) -> Result<Document, ArchiveError> {
    Archive::open(url)?.read_here().await
}

/// Refuses `doc` unless it is `agent`'s (and of `cycle`, when given); `url` names it.
pub fn expect(
    doc: &Document,
    agent: &AgentKey,
    cycle: Option<u64>,
    url: &str,
) -> Result<(), ArchiveError> {
    if &doc.agent != agent {
        return Err(ArchiveError::Foreign(format!(
            "{url} holds agent {}'s consciousness, not {agent}'s",
            doc.agent
        )));
    }
    let got = doc.snapshot.consciousness.cycle;
    match cycle {
        Some(c) if c != got => Err(ArchiveError::Foreign(format!(
            "{url} holds cycle {got}, not cycle {c}"
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
pub(crate) mod tests;

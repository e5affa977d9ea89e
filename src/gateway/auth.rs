//! Who is calling: bearer tokens mapped to entities, from a file of hashed tokens (a mounted
//! Secret), and a per-entity rate limit.
//!
//! The file holds the SHA-256 of each token, never the token itself:
//!
//! ```yaml
//! tokens:
//!   - sha256: 2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae
//!     kind: human          # human | service
//!     id: husam            # a human's member id in Space.spec.members (no colon)
//!     name: Husam          # optional display name
//!     groups: [sre]        # optional: groups that approver lists may name (group:sre)
//!   - sha256: fcde2b2edba56bf408601fb721fe9b5c338d10ee429ea04fae5511b68fbf8fb9
//!     kind: service
//!     id: alertmanager
//!     agents: [ops/oncall] # agents it may trigger: NS/NAME, NS/* or *
//! ```
//!
//! `printf %s "$TOKEN" | sha256sum` gives the hash. Tokens are random secrets, so an unsalted
//! hash is enough, and a lookup by hash leaks nothing about other tokens.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tracing::{info, warn};

use super::error::ApiError;
use super::Gateway;
use crate::identity::AgentKey;
use crate::store::SpaceRecord;

/// What kind of entity a token stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntityKind {
    /// A person: posts and reads in the spaces that list them as a member.
    Human,
    /// A program: triggers the agents it is granted with service events.
    Service,
}

/// The authenticated caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entity {
    /// Human or service.
    pub kind: EntityKind,
    /// A human's member id, or a service's name.
    pub id: String,
    /// Display name.
    pub name: String,
    /// For services: the agents it may trigger (`NS/NAME`, `NS/*`, `*`).
    pub agents: Vec<String>,
    /// For humans: the groups approver lists may name (`group:NAME`).
    pub groups: Vec<String>,
}

impl EntityKind {
    /// How the API names the kind.
    pub fn as_str(self) -> &'static str {
        match self {
            EntityKind::Human => "human",
            EntityKind::Service => "service",
        }
    }
}

impl Entity {
    /// Whether this entity reads and posts in a space of these members: a human it lists.
    /// The one membership rule of the gateway (requests and open streams alike).
    pub fn is_member(&self, space: &SpaceRecord) -> bool {
        space.admits(&self.sender())
    }

    /// This entity as the sender of what it posts or triggers (a human member, or a service).
    pub fn sender(&self) -> crate::store::Sender {
        crate::store::Sender {
            groups: self.groups.clone(),
            id: self.id.clone(),
            name: self.name.clone(),
            kind: match self.kind {
                EntityKind::Human => Some(crate::store::MemberKind::Human),
                EntityKind::Service => None,
            },
        }
    }

    /// This entity as the party rules know it (who may answer a call, who a caller is).
    pub fn principal(&self) -> crate::party::Principal {
        crate::party::Principal {
            kind: match self.kind {
                EntityKind::Human => crate::party::PrincipalKind::Human,
                EntityKind::Service => crate::party::PrincipalKind::Service,
            },
            id: self.id.clone(),
            name: self.name.clone(),
            groups: self.groups.clone(),
        }
    }

    /// Whether this entity may send service events to `agent`.
    pub fn may_trigger(&self, agent: &AgentKey) -> bool {
        self.kind == EntityKind::Service
            && self.agents.iter().any(|grant| {
                grant == "*"
                    || *grant == agent.to_string()
                    || grant
                        .strip_suffix("/*")
                        .is_some_and(|ns| ns == agent.namespace)
            })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenFile {
    #[serde(default)]
    tokens: Vec<TokenEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenEntry {
    sha256: String,
    kind: EntityKind,
    id: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    agents: Vec<String>,
    #[serde(default)]
    groups: Vec<String>,
}

/// The hex SHA-256 of a token, as the token file holds it.
pub fn hash_token(token: &str) -> String {
    crate::hex(&Sha256::digest(token.as_bytes()))
}

/// A fresh random token (32 bytes from the system's generator, URL-safe hex).
pub fn new_token(prefix: &str) -> anyhow::Result<String> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 24];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| anyhow::anyhow!("the system's random generator failed"))?;
    Ok(format!("{prefix}{}", crate::hex(&bytes)))
}

/// Token hashes → entities. Cheap to clone; reloadable in place.
#[derive(Clone)]
pub struct Tokens {
    by_hash: Arc<RwLock<HashMap<String, Entity>>>,
    /// Bumped on every reload that changes the tokens (open streams look again then).
    changes: Arc<watch::Sender<u64>>,
}

impl Default for Tokens {
    fn default() -> Self {
        Self::from_map(HashMap::new())
    }
}

impl Tokens {
    fn from_map(map: HashMap<String, Entity>) -> Self {
        Self {
            by_hash: Arc::new(RwLock::new(map)),
            changes: Arc::new(watch::channel(0).0),
        }
    }

    /// A token set from `(token, entity)` pairs (for `agentfleet dev` and tests).
    pub fn from_plain(pairs: impl IntoIterator<Item = (String, Entity)>) -> Self {
        Self::from_map(
            pairs
                .into_iter()
                .map(|(token, entity)| (hash_token(&token), entity))
                .collect(),
        )
    }

    /// Parses a token file's text.
    pub fn parse(text: &str) -> anyhow::Result<HashMap<String, Entity>> {
        let file: TokenFile = serde_yaml::from_str(text).context("not a token file")?;
        let mut map = HashMap::new();
        for (i, e) in file.tokens.into_iter().enumerate() {
            let hash = e.sha256.trim().to_ascii_lowercase();
            if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
                anyhow::bail!("tokens[{i}] ({}): sha256 must be 64 hex digits", e.id);
            }
            if e.id.is_empty() {
                anyhow::bail!("tokens[{i}]: id is required");
            }
            // A person's id is a Space member's: never a reserved form like `service:ID`, so
            // no person can pose as a service (or anyone else) anywhere.
            if e.kind == EntityKind::Human && !crate::party::answers::is_human_id(&e.id) {
                anyhow::bail!(
                    "tokens[{i}] ({}): a human's id is a Space member's id (letters, digits, -_.@, starting with a letter or digit; no colon)",
                    e.id
                );
            }
            if e.kind == EntityKind::Human && !e.agents.is_empty() {
                anyhow::bail!("tokens[{i}] ({}): only services are granted agents", e.id);
            }
            if e.kind == EntityKind::Service && !e.groups.is_empty() {
                anyhow::bail!("tokens[{i}] ({}): only humans are in groups", e.id);
            }
            if e.kind == EntityKind::Service
                && (e.id.contains(':') || e.id.is_empty() || e.id.len() > 253)
            {
                anyhow::bail!("tokens[{i}] ({}): a service's id has no colon", e.id);
            }
            for g in &e.groups {
                if crate::party::Subject::parse(&format!("group:{g}")).is_err() {
                    anyhow::bail!("tokens[{i}] ({}): group {g:?} is not a group name", e.id);
                }
            }
            for grant in &e.agents {
                let valid = grant == "*"
                    || grant
                        .split_once('/')
                        .is_some_and(|(ns, n)| !ns.is_empty() && !n.is_empty() && !n.contains('/'));
                if !valid {
                    anyhow::bail!(
                        "tokens[{i}] ({}): agent grant {grant:?} is not NS/NAME, NS/* or *",
                        e.id
                    );
                }
            }
            let entity = Entity {
                kind: e.kind,
                name: e.name.unwrap_or_else(|| e.id.clone()),
                id: e.id,
                agents: e.agents,
                groups: e.groups,
            };
            if map.insert(hash, entity).is_some() {
                anyhow::bail!("tokens[{i}]: the same token hash appears twice");
            }
        }
        Ok(map)
    }

    /// Loads a token file.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading token file {}", path.display()))?;
        let map = Self::parse(&text).with_context(|| format!("token file {}", path.display()))?;
        Ok(Self::from_map(map))
    }

    /// Reloads `path` every `every` (a mounted Secret changes in place); a file that stops
    /// parsing keeps the tokens in force and is reported.
    pub fn watch(&self, path: PathBuf, every: Duration) -> tokio::task::JoinHandle<()> {
        let tokens = self.clone();
        tokio::spawn(async move {
            // Compared by content with the tokens in force (not with the text first seen, which
            // may already be the changed file), and an invalid text is reported once.
            let mut invalid: Option<String> = None;
            loop {
                tokio::time::sleep(every).await;
                let text = match std::fs::read_to_string(&path) {
                    Ok(t) => t,
                    Err(e) => {
                        warn!(path = %path.display(), error = %e, "token file unreadable; keeping the tokens in force");
                        continue;
                    }
                };
                match Self::parse(&text) {
                    Ok(map) => {
                        invalid = None;
                        let changed = match tokens.by_hash.write() {
                            Ok(mut m) if *m != map => {
                                info!(path = %path.display(), tokens = map.len(), "token file reloaded");
                                *m = map;
                                true
                            }
                            _ => false,
                        };
                        if changed {
                            tokens.changes.send_modify(|n| *n += 1);
                        }
                    }
                    Err(e) => {
                        if invalid.as_deref() != Some(text.as_str()) {
                            warn!(path = %path.display(), error = %crate::report::chain(&*e), "token file invalid; keeping the tokens in force");
                            invalid = Some(text);
                        }
                    }
                }
            }
        })
    }

    /// The entity of a presented token.
    pub fn entity(&self, token: &str) -> Option<Entity> {
        self.entity_of(&hash_token(token))
    }

    /// The entity of a token by its hash.
    fn entity_of(&self, hash: &str) -> Option<Entity> {
        self.by_hash.read().ok()?.get(hash).cloned()
    }

    /// Whether the token of this hash still stands for `entity` (same kind and id): false once
    /// it is revoked or given to someone else. A Kubernetes token is not the token file's to
    /// revoke: its open streams have it reviewed again (see `stream.rs`).
    pub fn still_grants(&self, hash: &TokenHash, entity: &Entity) -> bool {
        let TokenHash::File(hash) = hash else {
            return true;
        };
        self.by_hash.read().is_ok_and(|m| {
            m.get(hash)
                .is_some_and(|e| e.kind == entity.kind && e.id == entity.id)
        })
    }

    /// Changes whenever a reload changes the tokens.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// How many tokens are configured.
    pub fn len(&self) -> usize {
        self.by_hash.read().map(|m| m.len()).unwrap_or(0)
    }

    /// Whether no token is configured.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a caller's token was (the token itself is not kept).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenHash {
    /// A token of the token file, by its hash.
    File(String),
    /// A token the Kubernetes API server reviewed, as the username it gave (what RBAC
    /// decides for).
    Kubernetes {
        /// The review's username.
        user: String,
        /// The token, held in memory only while its request or stream lasts, so that an open
        /// stream has it reviewed again (a Kubernetes token expires, or its ServiceAccount
        /// goes).
        token: Bearer,
    },
}

/// A bearer token kept in memory: never printed (its `Debug` says only that it is one).
#[derive(Clone, PartialEq, Eq)]
pub struct Bearer(String);

impl Bearer {
    /// The token.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// A bearer for tests of what holds one.
#[cfg(test)]
pub fn testing_bearer(token: &str) -> Bearer {
    Bearer(token.to_string())
}

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Bearer(***)")
    }
}

/// The token of an `Authorization` header value: scheme `Bearer` in any case (RFC 7235),
/// then one or more spaces or tabs, then the token (one word).
pub fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, rest) = value.trim().split_once([' ', '\t'])?;
    let token = rest.trim_start_matches([' ', '\t']);
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() && !token.contains([' ', '\t']))
        .then_some(token)
}

/// The authenticated, rate-limited caller, and the hash of the token it presented (so that
/// a long-lived stream can tell when that token is revoked).
pub struct Caller(pub Entity, pub TokenHash);

impl FromRequestParts<Gateway> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, gw: &Gateway) -> Result<Self, ApiError> {
        let value = parts.headers.get(header::AUTHORIZATION).ok_or_else(|| {
            ApiError::unauthenticated("missing bearer token (Authorization: Bearer TOKEN)")
        })?;
        let token = value.to_str().ok().and_then(bearer_token).ok_or_else(|| {
            ApiError::unauthenticated("the Authorization header is not a bearer token")
        })?;
        let (entity, hash) = authenticate(gw, token).await?;
        gw.check_rate(&entity)?;
        Ok(Caller(entity, hash))
    }
}

/// Who presents `token`: a token of the token file, else — when the gateway takes them —
/// whoever the Kubernetes API server says it is. The one authentication of every route.
pub async fn authenticate(gw: &Gateway, token: &str) -> Result<(Entity, TokenHash), ApiError> {
    // Hashed once: the lookup and what an open stream looks up again.
    let hash = hash_token(token);
    if let Some(entity) = gw.tokens().entity_of(&hash) {
        return Ok((entity, TokenHash::File(hash)));
    }
    match gw.kubernetes() {
        Some(reviewer) => {
            let entity = reviewer.review(token).await?;
            // The reviewer names a person by the review's username.
            let user = entity.name.clone();
            let token = Bearer(token.to_string());
            Ok((entity, TokenHash::Kubernetes { user, token }))
        }
        None => Err(ApiError::unauthenticated("unknown or revoked token")),
    }
}

/// A token bucket per entity: `rate` requests per second, bursts up to `burst`.
pub struct RateLimiter {
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl RateLimiter {
    /// A limiter; a `rate` of 0 turns it off.
    pub fn new(rate: f64, burst: u32) -> Self {
        Self {
            rate,
            burst: f64::from(burst.max(1)),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one request from `who`'s bucket; `Err(wait)` when it is empty.
    pub fn check(&self, who: &str) -> Result<(), Duration> {
        if self.rate <= 0.0 {
            return Ok(());
        }
        let now = Instant::now();
        let Ok(mut buckets) = self.buckets.lock() else {
            return Ok(());
        };
        if buckets.len() > 100_000 {
            // Drop full buckets so a churn of entities cannot grow the map without bound.
            let (rate, burst) = (self.rate, self.burst);
            buckets.retain(|_, (level, at)| {
                *level + now.duration_since(*at).as_secs_f64() * rate < burst
            });
        }
        let (level, at) = buckets.entry(who.to_string()).or_insert((self.burst, now));
        *level = (*level + now.duration_since(*at).as_secs_f64() * self.rate).min(self.burst);
        *at = now;
        if *level >= 1.0 {
            *level -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - *level) / self.rate))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_file_maps_hashes_to_entities() {
        let file = format!(
            "tokens:\n- sha256: {}\n  kind: human\n  id: husam\n  name: Husam\n- sha256: {}\n  kind: service\n  id: alerts\n  agents: [ops/oncall, 'dev/*']\n",
            hash_token("secret-1"),
            hash_token("secret-2").to_uppercase()
        );
        let tokens = Tokens::from_map(Tokens::parse(&file).unwrap());
        let husam = tokens.entity("secret-1").unwrap();
        assert_eq!(
            (husam.kind, husam.name.as_str()),
            (EntityKind::Human, "Husam")
        );
        let alerts = tokens.entity("secret-2").unwrap();
        assert_eq!(alerts.name, "alerts");
        assert!(alerts.may_trigger(&AgentKey::new("ops", "oncall")));
        assert!(alerts.may_trigger(&AgentKey::new("dev", "anything")));
        assert!(!alerts.may_trigger(&AgentKey::new("ops", "reviewer")));
        assert!(!husam.may_trigger(&AgentKey::new("ops", "oncall")));
        assert_eq!(tokens.entity("secret-3"), None);
        assert_eq!(tokens.entity(""), None);
    }

    #[test]
    fn bad_token_files_are_refused_with_the_reason() {
        let cases = [
            ("tokens:\n- sha256: abc\n  kind: human\n  id: x\n", "64 hex digits"),
            ("tokens:\n- sha256: {h}\n  kind: robot\n  id: x\n", "unknown variant"),
            ("tokens:\n- sha256: {h}\n  kind: human\n  id: x\n  agents: ['*']\n", "only services"),
            ("tokens:\n- sha256: {h}\n  kind: service\n  id: x\n  agents: [oncall]\n", "NS/NAME"),
            ("tokens:\n- sha256: {h}\n  kind: human\n  id: x\n- sha256: {h}\n  kind: human\n  id: y\n", "twice"),
            ("tokens:\n- sha256: {h}\n  kind: human\n  id: x\n  token: plain\n", "unknown field"),
            // Issue 40, item 8: a person posing as a service.
            ("tokens:\n- sha256: {h}\n  kind: human\n  id: 'service:probe'\n", "no colon"),
            ("tokens:\n- sha256: {h}\n  kind: human\n  id: 'group:sre'\n", "no colon"),
            ("tokens:\n- sha256: {h}\n  kind: service\n  id: 'a:b'\n", "no colon"),
            ("tokens:\n- sha256: {h}\n  kind: service\n  id: x\n  groups: [sre]\n", "only humans"),
            ("tokens:\n- sha256: {h}\n  kind: human\n  id: x\n  groups: ['a b']\n", "not a group name"),
        ];
        for (text, want) in cases {
            let text = text.replace("{h}", &hash_token("t"));
            let err = format!("{:#}", Tokens::parse(&text).unwrap_err());
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    #[test]
    fn rate_limit_allows_bursts_then_refuses_with_a_wait() {
        let limiter = RateLimiter::new(2.0, 3);
        for _ in 0..3 {
            limiter.check("a").unwrap();
        }
        let wait = limiter.check("a").unwrap_err();
        assert!(wait > Duration::ZERO && wait <= Duration::from_millis(500));
        limiter.check("b").unwrap();
        let off = RateLimiter::new(0.0, 1);
        for _ in 0..100 {
            off.check("a").unwrap();
        }
    }

    #[tokio::test]
    async fn the_token_file_is_reloaded_and_a_broken_one_keeps_the_tokens() {
        let path = std::env::temp_dir().join(format!("agentfleet-tokens-{}", std::process::id()));
        let file = |token: &str, id: &str| {
            format!(
                "tokens:\n- sha256: {}\n  kind: human\n  id: {id}\n",
                hash_token(token)
            )
        };
        std::fs::write(&path, file("one", "husam")).unwrap();
        let tokens = Tokens::load(&path).unwrap();
        let watcher = tokens.watch(path.clone(), Duration::from_millis(20));
        assert_eq!(tokens.entity("one").unwrap().id, "husam");

        std::fs::write(&path, file("two", "muhammad")).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while tokens.entity("two").is_none() {
            assert!(Instant::now() < deadline, "not reloaded");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(tokens.entity("one"), None, "the old token is revoked");

        std::fs::write(&path, "tokens: [{kind: robot}]").unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            tokens.entity("two").unwrap().id,
            "muhammad",
            "kept in force"
        );
        watcher.abort();
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        for value in [
            "Bearer t",
            "bearer t",
            "BEARER t",
            "bEaReR   t",
            "Bearer\tt",
            " Bearer t ",
        ] {
            assert_eq!(bearer_token(value), Some("t"), "{value:?}");
        }
        for value in [
            "Bearer",
            "Bearer ",
            "Bearert",
            "Basic t",
            "Bearer t u",
            "Token t",
            "",
        ] {
            assert_eq!(bearer_token(value), None, "{value:?}");
        }
    }

    #[tokio::test]
    async fn a_reload_that_changes_the_tokens_is_announced() {
        let path =
            std::env::temp_dir().join(format!("agentfleet-tokens-changes-{}", std::process::id()));
        let file = |id: &str| {
            format!(
                "tokens:\n- sha256: {}\n  kind: human\n  id: {id}\n",
                hash_token("one")
            )
        };
        std::fs::write(&path, file("husam")).unwrap();
        let tokens = Tokens::load(&path).unwrap();
        let mut changes = tokens.changes();
        let husam = tokens.entity("one").unwrap();
        let hash = TokenHash::File(hash_token("one"));
        assert!(tokens.still_grants(&hash, &husam));
        let watcher = tokens.watch(path.clone(), Duration::from_millis(20));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !changes.has_changed().unwrap(),
            "the same file is no change"
        );

        std::fs::write(&path, file("muhammad")).unwrap();
        tokio::time::timeout(Duration::from_secs(5), changes.changed())
            .await
            .unwrap()
            .unwrap();
        assert!(
            !tokens.still_grants(&hash, &husam),
            "the token stands for someone else now"
        );
        watcher.abort();
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn new_tokens_are_random() {
        let a = new_token("af_").unwrap();
        assert!(a.starts_with("af_") && a.len() == 51);
        assert_ne!(a, new_token("af_").unwrap());
    }
}

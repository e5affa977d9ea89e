//! Callers who present a Kubernetes token: a ServiceAccount's (`kubectl create token`), or
//! whatever the cluster's API server itself accepts — an OIDC ID token when the API server
//! trusts the issuer, so a cluster with single sign-on gives it here too. The API server says
//! who the token is with a `TokenReview`; the answer (a username and groups) becomes a person
//! by the one rule of [`crate::cluster_users`].
//!
//! Reviews are cached by the token's hash for `--kubernetes-auth-cache-seconds` (a refusal
//! for at most 10 s), at most [`MAX_CACHED`] of them, and at most [`AT_ONCE`] are asked at
//! once. The API server unreachable is a 503, never a 401: the token may be good. Neither
//! the token nor the review is ever logged.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use kube::api::PostParams;
use kube::Api;
use tokio::sync::Semaphore;
use tracing::warn;

use super::auth::{hash_token, Entity, EntityKind};
use super::error::ApiError;

/// The most reviews kept.
pub const MAX_CACHED: usize = 10_000;

/// The most reviews asked of the API server at once; more wait for one to end.
pub const AT_ONCE: usize = 16;

/// The longest token sent for review: longer ones are refused at once.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// The most groups of a review kept; the most bytes of one group's name.
const MAX_GROUPS: usize = 256;

/// The longest a review (or an access review) may take, its client's own retries included:
/// an API server that answers 503 again and again would otherwise hold the request for
/// half a minute.
pub const REVIEW_DEADLINE: Duration = Duration::from_secs(5);

/// How long a refusal is kept at most (a token just made is tried again soon).
const REFUSAL_TTL: Duration = Duration::from_secs(10);

/// What a review said of a token.
#[derive(Clone, Debug)]
enum Verdict {
    /// Who it is.
    Person(Entity),
    /// Why it is no one here: the sentence for the 401.
    Refused(String),
}

/// Reviews Kubernetes tokens with the API server.
pub struct Reviewer {
    client: kube::Client,
    audiences: Vec<String>,
    ttl: Duration,
    cache: Mutex<HashMap<String, (Instant, Verdict)>>,
    at_once: Semaphore,
}

impl Reviewer {
    /// A reviewer asking `client`'s API server; `audiences` (empty: the API server's own) are
    /// the ones a token must be for; a review is kept `ttl`.
    pub fn new(client: kube::Client, audiences: Vec<String>, ttl: Duration) -> Self {
        Self {
            client,
            audiences,
            ttl,
            cache: Mutex::new(HashMap::new()),
            at_once: Semaphore::new(AT_ONCE),
        }
    }

    /// How long a review is kept: an open stream has its token reviewed again this often.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Who `token` is; a 401 with its sentence when the API server does not know it or it is
    /// no one who can be a member; a 503 when the API server cannot be asked.
    pub async fn review(&self, token: &str) -> Result<Entity, ApiError> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(ApiError::unauthenticated("unknown or revoked token"));
        }
        let key = hash_token(token);
        if let Some(verdict) = self.cached(&key) {
            return verdict.into_result();
        }
        let _turn = self
            .at_once
            .acquire()
            .await
            .map_err(|_| ApiError::unavailable_auth())?;
        // Another request may have asked while this one waited.
        if let Some(verdict) = self.cached(&key) {
            return verdict.into_result();
        }
        let verdict = self.ask(token).await?;
        self.keep(key, verdict.clone());
        verdict.into_result()
    }

    fn cached(&self, key: &str) -> Option<Verdict> {
        let cache = self.cache.lock().ok()?;
        let (at, verdict) = cache.get(key)?;
        let ttl = match verdict {
            Verdict::Person(_) => self.ttl,
            Verdict::Refused(_) => self.ttl.min(REFUSAL_TTL),
        };
        (at.elapsed() < ttl).then(|| verdict.clone())
    }

    fn keep(&self, key: String, verdict: Verdict) {
        let Ok(mut cache) = self.cache.lock() else {
            return;
        };
        if cache.len() >= MAX_CACHED {
            let ttl = self.ttl;
            cache.retain(|_, (at, _)| at.elapsed() < ttl);
            if cache.len() >= MAX_CACHED {
                // Still full of live reviews: start again rather than grow (each is asked
                // again at most once).
                cache.clear();
            }
        }
        cache.insert(key, (Instant::now(), verdict));
    }

    async fn ask(&self, token: &str) -> Result<Verdict, ApiError> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: (!self.audiences.is_empty()).then(|| self.audiences.clone()),
            },
            ..TokenReview::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let params = PostParams::default();
        let asked = tokio::time::timeout(REVIEW_DEADLINE, api.create(&params, &review));
        let answer = match asked.await {
            Ok(Ok(answer)) => answer,
            Err(_) => {
                warn!(
                    seconds = REVIEW_DEADLINE.as_secs(),
                    "a Kubernetes token could not be reviewed: the API server did not answer in time"
                );
                return Err(ApiError::unavailable_auth());
            }
            Ok(Err(e)) => {
                // Never the error's whole text: some echo the request.
                let why = match &e {
                    kube::Error::Api(status) => format!(
                        "the API server answered {} {} (may the gateway's ServiceAccount create tokenreviews?)",
                        status.code, status.reason
                    ),
                    _ => "the API server could not be reached".to_string(),
                };
                warn!(why, "a Kubernetes token could not be reviewed");
                return Err(ApiError::unavailable_auth());
            }
        };
        Ok(verdict(&answer, &self.audiences))
    }
}

impl Verdict {
    fn into_result(self) -> Result<Entity, ApiError> {
        match self {
            Verdict::Person(entity) => Ok(entity),
            Verdict::Refused(why) => Err(ApiError::unauthenticated(why)),
        }
    }
}

/// What a review's answer makes of its token (see the module's doc).
fn verdict(answer: &TokenReview, audiences: &[String]) -> Verdict {
    let Some(status) = answer.status.as_ref() else {
        return Verdict::Refused("unknown or revoked token".into());
    };
    if status.authenticated != Some(true) {
        return Verdict::Refused("unknown, expired or revoked token".into());
    }
    if !audiences.is_empty() {
        let for_us = status
            .audiences
            .as_ref()
            .is_some_and(|a| a.iter().any(|x| audiences.contains(x)));
        if !for_us {
            return Verdict::Refused("the token is not for this gateway's audience".into());
        }
    }
    let Some(user) = status.user.as_ref() else {
        return Verdict::Refused("unknown or revoked token".into());
    };
    let username = user.username.clone().unwrap_or_default();
    let id = match crate::cluster_users::member_id(&username) {
        Ok(id) => id,
        Err(why) => return Verdict::Refused(why),
    };
    let groups: Vec<String> = user
        .groups
        .iter()
        .flatten()
        .filter(|g| crate::cluster_users::is_group(g))
        .take(MAX_GROUPS)
        .cloned()
        .collect();
    Verdict::Person(Entity {
        kind: EntityKind::Human,
        name: username,
        id,
        agents: Vec::new(),
        groups,
    })
}

#[cfg(test)]
mod tests;

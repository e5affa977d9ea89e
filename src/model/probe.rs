//! Whether a model's provider answers, cheaply: it lists its models (`GET /models`; no tokens
//! are spent), within [`PROBE_TIMEOUT`] and reading at most [`MAX_LIST_BYTES`] of the list.
//! The key goes only to the model's own endpoint and never into what is said.

use std::time::Duration;

use super::http::Endpoint;
use super::{ApiKey, Failure};
use crate::crd::{ModelProvider, ModelSettings};

/// The most a probe takes.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of a model list read.
pub const MAX_LIST_BYTES: usize = 1 << 20;

/// Every reason a probe gives.
pub const REASONS: [&str; 8] = [
    "Answers",
    "Builtin",
    "KeyRefused",
    "Unreachable",
    "TimedOut",
    "ServerError",
    "RateLimited",
    "Refused",
];

/// What a probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// Whether the provider answers with this key.
    pub ok: bool,
    /// A condition's reason: `Answers`, `Builtin`, `KeyRefused`, `Unreachable`, `TimedOut`,
    /// `ServerError`, `RateLimited`, `Refused`.
    pub reason: &'static str,
    /// For people (never the key).
    pub message: String,
}

/// Asks the provider of `settings` for its models with `key`.
pub async fn probe(settings: &ModelSettings, key: ApiKey) -> Probe {
    let provider = settings.provider();
    let base = match provider {
        ModelProvider::Scripted => {
            return Probe {
                ok: true,
                reason: "Builtin",
                message: "the scripted model is built in".into(),
            }
        }
        ModelProvider::Openai => settings
            .base_url
            .as_deref()
            .unwrap_or(super::openai::DEFAULT_BASE_URL),
        ModelProvider::Anthropic => settings
            .base_url
            .as_deref()
            .unwrap_or(super::anthropic::DEFAULT_BASE_URL),
    }
    .trim_end_matches('/')
    .to_string();
    let url = match provider {
        ModelProvider::Anthropic => match base.strip_suffix("/v1") {
            Some(root) => format!("{root}/v1/models"),
            None => format!("{base}/v1/models"),
        },
        _ => format!("{base}/models"),
    };
    match tokio::time::timeout(
        PROBE_TIMEOUT,
        ask(&base, &url, provider, key, &settings.name),
    )
    .await
    {
        Ok(probe) => probe,
        Err(_) => Probe {
            ok: false,
            reason: "TimedOut",
            message: format!("{url} did not answer within {}s", PROBE_TIMEOUT.as_secs()),
        },
    }
}

async fn ask(base: &str, url: &str, provider: ModelProvider, key: ApiKey, name: &str) -> Probe {
    let failed = |reason, message| Probe {
        ok: false,
        reason,
        message,
    };
    let endpoint = match Endpoint::new(base, key) {
        Ok(e) => e,
        Err(e) => return failed("Refused", e.detail),
    };
    let key = match endpoint.key() {
        Ok(k) => k,
        Err((e, _)) => return failed("KeyRefused", e.detail),
    };
    let mut req = endpoint.http.get(url);
    match (provider, key) {
        (ModelProvider::Anthropic, Some(k)) => {
            req = req
                .header("x-api-key", k)
                .header("anthropic-version", super::anthropic::API_VERSION);
        }
        (_, Some(k)) => req = req.bearer_auth(k),
        (_, None) => {}
    }
    let resp = match endpoint.send(req, url).await {
        Ok(resp) => resp,
        Err((e, _)) => {
            let status_answered = e.failure != Failure::Unreachable;
            let reason = match e.failure {
                Failure::Unauthorized => "KeyRefused",
                Failure::RateLimited => "RateLimited",
                Failure::ServerError => "ServerError",
                Failure::Unreachable => "Unreachable",
                _ => "Refused",
            };
            // A server without a model list (404, 405) still answers.
            if status_answered && e.failure == Failure::Refused {
                return Probe {
                    ok: true,
                    reason: "Answers",
                    message: format!("{url} answers (it lists no models)"),
                };
            }
            return failed(reason, e.detail);
        }
    };
    let listed = listed(resp, name).await;
    Probe {
        ok: true,
        reason: "Answers",
        message: match listed {
            Some(true) => format!("{url} lists {name}"),
            Some(false) => format!("{url} answers, but does not list {name} among its models"),
            None => format!("{url} answers"),
        },
    }
}

/// Whether the list (`{"data": [{"id": …}]}`, its first [`MAX_LIST_BYTES`]) names `name`;
/// none when it cannot be read as one.
async fn listed(resp: reqwest::Response, name: &str) -> Option<bool> {
    use futures::StreamExt as _;
    let mut stream = resp.bytes_stream();
    let mut body = Vec::new();
    while let Some(chunk) = stream.next().await {
        body.extend_from_slice(&chunk.ok()?);
        if body.len() > MAX_LIST_BYTES {
            return None;
        }
    }
    let list: serde_json::Value = serde_json::from_slice(&body).ok()?;
    let data = list.get("data")?.as_array()?;
    Some(
        data.iter()
            .any(|m| m.get("id").and_then(|i| i.as_str()) == Some(name)),
    )
}

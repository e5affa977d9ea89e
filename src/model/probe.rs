//! Whether a model's provider answers, cheaply: it lists its models (`GET /models`; no tokens
//! are spent), within [`PROBE_TIMEOUT`] and reading at most [`MAX_LIST_BYTES`] of the list.
//! The key goes only to the model's own endpoint and never into what is said.

use std::time::Duration;

use super::http::{without_credentials, Endpoint};
use super::{ApiKey, Failure};
use crate::crd::{ModelProvider, ModelSettings};

/// The most a probe takes.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of what a probe says (a server's error is cut to it).
pub const MAX_MESSAGE: usize = 1024;
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
    let (base, url) = match provider {
        ModelProvider::Scripted => {
            return Probe {
                ok: true,
                reason: "Builtin",
                message: "the scripted model is built in".into(),
            }
        }
        ModelProvider::Openai => {
            let base = super::openai::base_of(settings);
            let url = format!("{base}/models");
            (base, url)
        }
        ModelProvider::Anthropic => {
            let base = super::anthropic::base_of(settings);
            let url = super::anthropic::url_of(&base, "models");
            (base, url)
        }
    };
    match tokio::time::timeout(
        PROBE_TIMEOUT,
        ask(&base, &url, provider, key, &settings.name),
    )
    .await
    {
        // A server's words, bounded: they go into a status and an Event.
        Ok(probe) => Probe {
            message: crate::names::cut(&probe.message, MAX_MESSAGE),
            ..probe
        },
        Err(_) => Probe {
            ok: false,
            reason: "TimedOut",
            message: format!(
                "{} did not answer within {}s",
                without_credentials(&url),
                PROBE_TIMEOUT.as_secs()
            ),
        },
    }
}

async fn ask(base: &str, url: &str, provider: ModelProvider, key: ApiKey, name: &str) -> Probe {
    let failed = |reason, message| Probe {
        ok: false,
        reason,
        message,
    };
    // What is said names the endpoint without any credentials in its URL.
    let shown = without_credentials(url);
    let url = url.to_string();
    let url = url.as_str();
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
                Failure::Unauthorized | Failure::NoKey => "KeyRefused",
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
                    message: format!("{shown} answers (it lists no models)"),
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
            Some(true) => format!("{shown} lists {name}"),
            Some(false) => format!("{shown} answers, but does not list {name} among its models"),
            None => format!("{shown} answers"),
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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, StatusCode};
    use axum::routing::get;

    /// A provider's model list at `/v1/models` on a free port: `sk-right` is the only key it
    /// takes (as a bearer or as `x-api-key`); `/broken/v1/models` answers 500, `/big/v1/models`
    /// more than a probe reads.
    async fn provider() -> String {
        fn key(h: &HeaderMap) -> Option<&str> {
            h.get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .or_else(|| h.get("x-api-key").and_then(|v| v.to_str().ok()))
        }
        let app = axum::Router::new()
            .route(
                "/v1/models",
                get(|h: HeaderMap| async move {
                    if key(&h) != Some("sk-right") {
                        return (
                            StatusCode::UNAUTHORIZED,
                            r#"{"error":{"message":"bad key sk-wrong"}}"#.to_string(),
                        );
                    }
                    (
                        StatusCode::OK,
                        r#"{"data":[{"id":"gpt-small"},{"id":"other"}]}"#.to_string(),
                    )
                }),
            )
            .route(
                "/broken/v1/models",
                get(|| async { (StatusCode::BAD_GATEWAY, "upstream gone".to_string()) }),
            )
            .route(
                "/big/v1/models",
                get(|| async { (StatusCode::OK, "x".repeat(MAX_LIST_BYTES + 10)) }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        format!("http://127.0.0.1:{port}")
    }

    fn settings(provider: &str, base: &str, name: &str) -> ModelSettings {
        serde_yaml::from_str(&format!(
            "{{provider: {provider}, name: {name}, baseUrl: '{base}'}}"
        ))
        .unwrap()
    }

    fn key(k: &str) -> ApiKey {
        ApiKey::Given(k.into())
    }

    #[tokio::test]
    async fn a_probe_lists_the_models_and_says_what_it_found_without_the_key() {
        crate::install_crypto_provider();
        let base = provider().await;
        let openai = settings("openai", &format!("{base}/v1"), "gpt-small");
        let p = probe(&openai, key("sk-right")).await;
        assert_eq!((p.ok, p.reason), (true, "Answers"), "{p:?}");
        assert!(p.message.ends_with("lists gpt-small"), "{p:?}");
        let missing = settings("openai", &format!("{base}/v1"), "gpt-huge");
        let p = probe(&missing, key("sk-right")).await;
        assert!(
            p.ok && p.message.contains("does not list gpt-huge"),
            "{p:?}"
        );
        // Anthropic's header, at a base URL without `/v1`.
        let anthropic = settings("anthropic", &base, "other");
        let p = probe(&anthropic, key("sk-right")).await;
        assert!(p.ok && p.message.ends_with("lists other"), "{p:?}");

        let p = probe(&openai, key("sk-wrong")).await;
        assert_eq!((p.ok, p.reason), (false, "KeyRefused"), "{p:?}");
        assert!(!p.message.contains("sk-wrong"), "the key is masked: {p:?}");
        let p = probe(&openai, ApiKey::None).await;
        assert_eq!(p.reason, "KeyRefused");

        let broken = settings("openai", &format!("{base}/broken/v1"), "gpt-small");
        let p = probe(&broken, key("sk-right")).await;
        assert_eq!((p.ok, p.reason), (false, "ServerError"), "{p:?}");
        // A server without a model list answers all the same.
        let bare = settings("openai", &format!("{base}/nothing/v1"), "gpt-small");
        let p = probe(&bare, key("sk-right")).await;
        assert!(p.ok && p.message.contains("lists no models"), "{p:?}");
        // A list past what a probe reads is not read to its end.
        let big = settings("openai", &format!("{base}/big/v1"), "gpt-small");
        let p = probe(&big, key("sk-right")).await;
        assert!(p.ok && p.message.ends_with("answers"), "{p:?}");

        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let gone = settings(
            "openai",
            &format!("http://127.0.0.1:{port}/v1"),
            "gpt-small",
        );
        let p = probe(&gone, key("sk-right")).await;
        assert_eq!((p.ok, p.reason), (false, "Unreachable"), "{p:?}");
        // A password in the base URL is said nowhere.
        let secretive = settings(
            "openai",
            &base.replace("http://", "http://me:pa55word@"),
            "gpt-small",
        );
        let p = probe(&secretive, key("sk-right")).await;
        assert!(p.ok && !p.message.contains("pa55word"), "{p:?}");
        let p = probe(
            &settings(
                "openai",
                &format!("http://me:pa55word@127.0.0.1:{port}/v1"),
                "x",
            ),
            ApiKey::None,
        )
        .await;
        assert!(!p.ok && !p.message.contains("pa55word"), "{p:?}");
        let scripted = settings("scripted", "http://unused", "s");
        assert_eq!(probe(&scripted, ApiKey::None).await.reason, "Builtin");
    }
}

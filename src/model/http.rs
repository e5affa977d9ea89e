//! What the HTTP providers share: how an HTTP status maps to a [`Failure`], the server's
//! `Retry-After`, and the retry loop for transient failures.

use std::time::Duration;

use tracing::warn;

use super::{ApiKey, Failure, ModelError};
use crate::secrets::Redactor;

/// A provider's way to its endpoint: the HTTP client, the key (read at each request), and
/// what keeps secrets out of its errors (the key and any password in the base URL).
pub struct Endpoint {
    pub http: reqwest::Client,
    api_key: ApiKey,
    url_password: Option<String>,
    /// The key last sent (a rotated key echoed by a late error is masked too).
    sent: std::sync::Mutex<Option<String>>,
}

impl Endpoint {
    /// The endpoint at `base` with `api_key`.
    pub fn new(base: &str, api_key: ApiKey) -> Result<Self, ModelError> {
        crate::install_crypto_provider();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .read_timeout(Duration::from_secs(120))
            .build()
            .map_err(|e| {
                ModelError::new(
                    Failure::BadResponse,
                    format!("building the HTTP client: {e}"),
                )
            })?;
        let url_password = reqwest::Url::parse(base)
            .ok()
            .and_then(|u| u.password().map(str::to_string));
        Ok(Self {
            http,
            api_key,
            url_password,
            sent: std::sync::Mutex::new(None),
        })
    }

    /// The key to send now; a key that cannot be read refuses the call (its Secret is
    /// not mounted, or lacks the key: no other endpoint's key is tried).
    pub fn key(&self) -> Result<Option<String>, (ModelError, Option<Duration>)> {
        let key = self.api_key.current().map_err(|e| {
            (
                ModelError::new(Failure::NoKey, format!("the API key: {e}")),
                None,
            )
        })?;
        if key.is_some() {
            *crate::sync::lock(&self.sent) = key.clone();
        }
        Ok(key)
    }

    /// An error whose text has every known secret masked (an endpoint may echo the key): the
    /// key last sent, the key now, a password of the base URL.
    pub fn error(&self, failure: Failure, detail: String) -> ModelError {
        let now = self.api_key.current().ok().flatten();
        let sent = crate::sync::lock(&self.sent).clone();
        let redactor = Redactor::new(
            now.iter()
                .chain(sent.iter())
                .chain(self.url_password.iter()),
        );
        ModelError::new(failure, redactor.redact(&detail))
    }

    /// Sends `req` to `url`: the answer when its status is a success, else the error (with
    /// the answer's `Retry-After`).
    pub async fn send(
        &self,
        req: reqwest::RequestBuilder,
        url: &str,
    ) -> Result<reqwest::Response, (ModelError, Option<Duration>)> {
        let resp = req.send().await.map_err(|e| {
            let detail = crate::report::chain(&e.without_url());
            (
                self.error(
                    Failure::Unreachable,
                    format!("calling {}: {detail}", without_credentials(url)),
                ),
                None,
            )
        })?;
        if resp.status().is_success() {
            Ok(resp)
        } else {
            Err(self.refusal(resp, url).await)
        }
    }

    /// Feeds the `data:` payload of each line of a server-sent event stream to `on_data`
    /// until it has the answer (`Some`); `None` when the stream ended first. A stream longer
    /// than [`MAX_ANSWER_BYTES`] fails as a bad response: what a server sends is its choice,
    /// what we hold of it is ours.
    pub async fn each_data<T>(
        &self,
        resp: reqwest::Response,
        mut on_data: impl FnMut(&str) -> Result<Option<T>, (ModelError, Option<Duration>)>,
    ) -> Result<Option<T>, (ModelError, Option<Duration>)> {
        use futures::StreamExt as _;
        let url = without_credentials(resp.url().as_str());
        let mut stream = resp.bytes_stream();
        let mut buf: Vec<u8> = Vec::new();
        let mut read = 0usize;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                let detail = crate::report::chain(&e.without_url());
                (
                    self.error(
                        Failure::Unreachable,
                        format!("reading the stream: {detail}"),
                    ),
                    None,
                )
            })?;
            read += chunk.len();
            if read > MAX_ANSWER_BYTES {
                let limit = MAX_ANSWER_BYTES >> 20;
                return Err((
                    self.error(
                        Failure::BadResponse,
                        format!("{url} streamed more than {limit} MiB for one answer"),
                    ),
                    None,
                ));
            }
            buf.extend_from_slice(&chunk);
            while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=pos).collect();
                let line = String::from_utf8_lossy(&line);
                if let Some(data) = line.trim().strip_prefix("data:").map(str::trim) {
                    if let Some(answer) = on_data(data)? {
                        return Ok(Some(answer));
                    }
                }
            }
        }
        Ok(None)
    }

    /// The error of an answer with an error status from `url` (its own `error.message` when
    /// it has one), and its `Retry-After`.
    pub async fn refusal(
        &self,
        resp: reqwest::Response,
        url: &str,
    ) -> (ModelError, Option<Duration>) {
        let status = resp.status();
        let wait = retry_after(resp.headers());
        let text = bounded_text(resp).await;
        let detail = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
            .unwrap_or_else(|| text.chars().take(300).collect());
        let msg = format!("{} answered {status}: {detail}", without_credentials(url));
        (self.error(failure_for(status.as_u16()), msg), wait)
    }
}

/// The base URL of `spec`'s endpoint, `default` when it names none (without a trailing `/`).
pub fn base_of(spec: &crate::crd::ModelSettings, default: &str) -> String {
    spec.base_url
        .as_deref()
        .unwrap_or(default)
        .trim_end_matches('/')
        .to_string()
}

/// `url` without the user and password it may carry: what messages name.
pub fn without_credentials(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string()
        }
        Err(_) => "the model's endpoint".to_string(),
    }
}

/// The start of an error answer's body (what a status page says fits in it; the rest of a
/// server's page is not read).
async fn bounded_text(resp: reqwest::Response) -> String {
    use futures::StreamExt as _;
    const MAX_ERROR_BYTES: usize = 64 << 10;
    let mut stream = resp.bytes_stream();
    let mut body = Vec::new();
    while let Some(Ok(chunk)) = stream.next().await {
        body.extend_from_slice(&chunk);
        if body.len() >= MAX_ERROR_BYTES {
            body.truncate(MAX_ERROR_BYTES);
            break;
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

/// The most of one streamed answer read (its events, whatever they hold); far beyond any
/// `maxOutputTokens` a real model is given.
pub const MAX_ANSWER_BYTES: usize = 16 << 20;

/// Attempts per call for transient errors (the first try included).
pub const ATTEMPTS: u32 = 4;

/// The failure an error status says (529 is Anthropic's "overloaded").
pub fn failure_for(status: u16) -> Failure {
    match status {
        401 | 403 => Failure::Unauthorized,
        429 => Failure::RateLimited,
        s if s >= 500 => Failure::ServerError,
        _ => Failure::Refused,
    }
}

/// The server's `Retry-After` in seconds (at most 30 s are honoured).
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    headers
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|s| Duration::from_secs(s.min(30)))
}

/// When to try a failed call again: a transient failure waits the server's `Retry-After`,
/// else a delay doubling from the first one; after [`ATTEMPTS`] tries it gives up.
pub struct Retries {
    delay: Duration,
    tries: u32,
}

impl Retries {
    /// Retries starting at `backoff`.
    pub fn new(backoff: Duration) -> Self {
        Self {
            delay: backoff,
            tries: 1,
        }
    }

    /// How long to wait before trying again after `e`, or `None`: give up.
    pub fn after(&mut self, e: &ModelError, retry_after: Option<Duration>) -> Option<Duration> {
        if !e.is_transient() || self.tries >= ATTEMPTS {
            return None;
        }
        let wait = retry_after.unwrap_or(self.delay);
        warn!(attempt = self.tries, retry_in = ?wait, error = %e, "model call failed; retrying");
        self.delay *= 2;
        self.tries += 1;
        Some(wait)
    }
}

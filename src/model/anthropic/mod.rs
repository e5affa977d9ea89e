//! `provider: anthropic`: Anthropic's native Messages API, streamed (text and tool-use
//! deltas), with prompt caching (`cache_control` breakpoints after the tools, the system
//! prompt and the conversation), retries on 429 and 529 (overloaded) honouring
//! `retry-after`, and the key from `apiKeySecretRef` (`AGENTFLEET_MODEL_API_KEY`). The wire
//! types are in `wire.rs`.

mod wire;

use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;

use self::wire::{BlockDelta, Body, Event, StartBlock, WireUsage};
use super::http::{failure_for, retry_after, Retries};
use super::{Delta, Failure, FinishReason, Model, ModelError, Request, ToolCall, Turn, Usage};
use crate::crd::ModelSpec;
use crate::secrets::Redactor;

/// The public endpoint when an Agent names no `baseUrl`.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// The API version this provider speaks.
pub const API_VERSION: &str = "2023-06-01";

/// The Anthropic provider.
pub struct Anthropic {
    http: reqwest::Client,
    url: String,
    model: String,
    api_key: Option<String>,
    max_tokens: u32,
    temperature: Option<f64>,
    backoff: Duration,
    redactor: Redactor,
}

impl Anthropic {
    /// A provider for the Agent's model spec (`baseUrl` with or without `/v1`).
    pub fn new(spec: &ModelSpec, api_key: Option<String>) -> Result<Self, ModelError> {
        crate::install_crypto_provider();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .read_timeout(Duration::from_secs(120))
            .build()
            .map_err(|e| ModelError::new(Failure::Refused, format!("HTTP client: {e}")))?;
        let base = spec
            .base_url
            .as_deref()
            .unwrap_or(DEFAULT_BASE_URL)
            .trim_end_matches('/');
        let url = match base.strip_suffix("/v1") {
            Some(root) => format!("{root}/v1/messages"),
            None => format!("{base}/v1/messages"),
        };
        let api_key = api_key.filter(|k| !k.is_empty());
        let url_password = reqwest::Url::parse(base)
            .ok()
            .and_then(|u| u.password().map(str::to_string));
        Ok(Self {
            redactor: Redactor::new(api_key.iter().chain(url_password.iter())),
            http,
            url,
            model: spec.name.clone(),
            api_key,
            max_tokens: spec.max_output_tokens,
            temperature: spec.temperature,
            backoff: Duration::from_millis(500),
        })
    }

    /// Sets the first retry delay (doubling after each failure).
    pub fn with_backoff(mut self, backoff: Duration) -> Self {
        self.backoff = backoff;
        self
    }

    /// An error whose text has every known secret masked (an endpoint may echo the key).
    fn error(&self, failure: Failure, detail: String) -> ModelError {
        ModelError::new(failure, self.redactor.redact(&detail))
    }

    async fn attempt(
        &self,
        body: &Body,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<Turn, (ModelError, Option<Duration>)> {
        let mut req = self
            .http
            .post(&self.url)
            .header("anthropic-version", API_VERSION)
            .json(body);
        if let Some(key) = &self.api_key {
            req = req.header("x-api-key", key);
        }
        let resp = req.send().await.map_err(|e| {
            let detail = crate::report::chain(&e.without_url());
            (
                self.error(
                    Failure::Unreachable,
                    format!("calling {}: {detail}", self.url),
                ),
                None,
            )
        })?;
        let status = resp.status();
        if !status.is_success() {
            let wait = retry_after(resp.headers());
            let text = resp.text().await.unwrap_or_default();
            let detail = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
                .unwrap_or_else(|| text.chars().take(300).collect());
            let msg = format!("{} answered {status}: {detail}", self.url);
            return Err((self.error(failure_for(status.as_u16()), msg), wait));
        }
        let mut stream = resp.bytes_stream();
        let mut acc = Accumulator::default();
        let mut buf: Vec<u8> = Vec::new();
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
            buf.extend_from_slice(&chunk);
            while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=pos).collect();
                let line = String::from_utf8_lossy(&line);
                let Some(data) = line.trim().strip_prefix("data:").map(str::trim) else {
                    continue;
                };
                let event: Event = serde_json::from_str(data).map_err(|e| {
                    (
                        self.error(
                            Failure::BadResponse,
                            format!("malformed stream event from {}: {e}", self.url),
                        ),
                        None,
                    )
                })?;
                match event {
                    Event::Error { error } => {
                        // Mid-stream: what it says decides whether to try again.
                        let failure = match error.kind.as_str() {
                            "overloaded_error" | "api_error" => Failure::ServerError,
                            "rate_limit_error" => Failure::RateLimited,
                            "authentication_error" | "permission_error" => Failure::Unauthorized,
                            _ => Failure::Refused,
                        };
                        let msg = format!(
                            "{} failed mid-stream: {} ({})",
                            self.url, error.message, error.kind
                        );
                        return Err((self.error(failure, msg), None));
                    }
                    Event::MessageStop => return Ok(acc.finish()),
                    other => acc.add(other, on_delta),
                }
            }
        }
        Err((
            self.error(
                Failure::Unreachable,
                format!("{} closed the stream before message_stop", self.url),
            ),
            None,
        ))
    }
}

#[async_trait]
impl Model for Anthropic {
    async fn complete(
        &self,
        request: &Request,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<Turn, ModelError> {
        let body = Body::new(request, &self.model, self.max_tokens, self.temperature);
        let mut retries = Retries::new(self.backoff);
        loop {
            match self.attempt(&body, on_delta).await {
                Ok(turn) => return Ok(turn.or_estimated(request)),
                Err((e, wait)) => match retries.after(&e, wait) {
                    Some(wait) => tokio::time::sleep(wait).await,
                    None => return Err(e),
                },
            }
        }
    }
}

/// A streamed answer, as it comes.
#[derive(Default)]
struct Accumulator {
    text: String,
    /// Tool calls, and the content block index of each.
    calls: Vec<(usize, ToolCall)>,
    usage: WireUsage,
    stop: Option<String>,
}

impl Accumulator {
    fn add(&mut self, event: Event, on_delta: &mut (dyn FnMut(Delta) + Send)) {
        match event {
            Event::MessageStart { message } => self.usage = message.usage,
            Event::ContentBlockStart {
                index,
                content_block,
            } => match content_block {
                StartBlock::ToolUse { id, name } => self.calls.push((
                    index,
                    ToolCall {
                        id,
                        name,
                        arguments: String::new(),
                    },
                )),
                StartBlock::Text { text } if !text.is_empty() => {
                    self.text.push_str(&text);
                    on_delta(Delta::Text(text));
                }
                _ => {}
            },
            Event::ContentBlockDelta { index, delta } => match delta {
                BlockDelta::TextDelta { text } if !text.is_empty() => {
                    self.text.push_str(&text);
                    on_delta(Delta::Text(text));
                }
                BlockDelta::InputJsonDelta { partial_json } if !partial_json.is_empty() => {
                    if let Some((position, (_, call))) = self
                        .calls
                        .iter_mut()
                        .enumerate()
                        .find(|(_, (i, _))| *i == index)
                    {
                        call.arguments.push_str(&partial_json);
                        on_delta(Delta::ToolArguments {
                            index: position,
                            name: call.name.clone(),
                            delta: partial_json,
                        });
                    }
                }
                _ => {}
            },
            Event::MessageDelta { delta, usage } => {
                if delta.stop_reason.is_some() {
                    self.stop = delta.stop_reason;
                }
                if usage.output_tokens.is_some() {
                    self.usage.output_tokens = usage.output_tokens;
                }
                for (ours, theirs) in [
                    (&mut self.usage.input_tokens, usage.input_tokens),
                    (
                        &mut self.usage.cache_read_input_tokens,
                        usage.cache_read_input_tokens,
                    ),
                    (
                        &mut self.usage.cache_creation_input_tokens,
                        usage.cache_creation_input_tokens,
                    ),
                ] {
                    if theirs.is_some() {
                        *ours = theirs;
                    }
                }
            }
            _ => {}
        }
    }

    fn finish(self) -> Turn {
        let u = self.usage;
        let (read, write) = (
            u.cache_read_input_tokens.unwrap_or(0),
            u.cache_creation_input_tokens.unwrap_or(0),
        );
        Turn {
            text: (!self.text.is_empty()).then_some(self.text),
            tool_calls: self
                .calls
                .into_iter()
                .map(|(_, mut c)| {
                    if c.arguments.trim().is_empty() {
                        c.arguments = "{}".into();
                    }
                    c
                })
                .collect(),
            usage: Usage {
                input: u.input_tokens.unwrap_or(0) + read + write,
                output: u.output_tokens.unwrap_or(0),
                cache_read: read,
                cache_write: write,
            },
            finish_reason: self.stop.as_deref().map(|r| match r {
                "tool_use" => FinishReason::ToolCalls,
                "max_tokens" => FinishReason::Length,
                "refusal" => FinishReason::ContentFilter,
                _ => FinishReason::Stop,
            }),
        }
    }
}

#[cfg(test)]
mod tests;

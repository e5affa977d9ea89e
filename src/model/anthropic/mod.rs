//! `provider: anthropic`: Anthropic's native Messages API, streamed (text and tool-use
//! deltas), with prompt caching (`cache_control` breakpoints after the tools, the system
//! prompt and the conversation), retries on 429 and 529 (overloaded) honouring
//! `retry-after`, and the key from `apiKeySecretRef` (`AGENTFLEET_MODEL_API_KEY`). The wire
//! types are in `wire.rs`.

mod wire;

use std::time::Duration;

use async_trait::async_trait;

use self::wire::{BlockDelta, Body, Event, StartBlock, WireUsage};
use super::http::{Endpoint, Retries};
use super::{
    ApiKey, Delta, Failure, FinishReason, Model, ModelError, Request, ToolCall, Turn, Usage,
};
use crate::crd::ModelSettings;

/// The public endpoint when an Agent names no `baseUrl`.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// The API version this provider speaks.
pub const API_VERSION: &str = "2023-06-01";

/// The Anthropic provider.
pub struct Anthropic {
    /// The client, the key, and what keeps secrets out of errors.
    endpoint: Endpoint,
    url: String,
    model: String,
    max_tokens: u32,
    temperature: Option<f64>,
    backoff: Duration,
    /// Whether requests carry cache breakpoints.
    caching: bool,
}

/// The base URL of `spec`'s endpoint (without a trailing `/`).
pub(crate) fn base_of(spec: &ModelSettings) -> String {
    super::http::base_of(spec, DEFAULT_BASE_URL)
}

/// The URL of API `path` (`messages`, `models`) at `base`, which may end in `/v1` or not.
pub(crate) fn url_of(base: &str, path: &str) -> String {
    match base.strip_suffix("/v1") {
        Some(root) => format!("{root}/v1/{path}"),
        None => format!("{base}/v1/{path}"),
    }
}

impl Anthropic {
    /// A provider for the Agent's model spec (`baseUrl` with or without `/v1`).
    pub fn new(spec: &ModelSettings, api_key: ApiKey) -> Result<Self, ModelError> {
        let base = base_of(spec);
        Ok(Self {
            endpoint: Endpoint::new(&base, api_key)?,
            url: url_of(&base, "messages"),
            model: spec.name.clone(),
            max_tokens: spec.max_output_tokens(),
            temperature: spec.temperature,
            backoff: Duration::from_millis(500),
            caching: spec.prompt_caching(),
        })
    }

    /// Sets the first retry delay (doubling after each failure).
    pub fn with_backoff(mut self, backoff: Duration) -> Self {
        self.backoff = backoff;
        self
    }

    fn error(&self, failure: Failure, detail: String) -> ModelError {
        self.endpoint.error(failure, detail)
    }

    /// The endpoint as messages name it (no credentials).
    fn shown(&self) -> String {
        super::http::without_credentials(&self.url)
    }

    async fn attempt(
        &self,
        body: &Body,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<Turn, (ModelError, Option<Duration>)> {
        let mut req = self
            .endpoint
            .http
            .post(&self.url)
            .header("anthropic-version", API_VERSION)
            .json(body);
        if let Some(key) = self.endpoint.key()? {
            req = req.header("x-api-key", key);
        }
        let resp = self.endpoint.send(req, &self.url).await?;
        let mut acc = Accumulator::default();
        let answer = self
            .endpoint
            .each_data(resp, |data| {
                let event: Event = serde_json::from_str(data).map_err(|e| {
                    (
                        self.error(
                            Failure::BadResponse,
                            format!("malformed stream event from {}: {e}", self.shown()),
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
                        Err((self.error(failure, msg), None))
                    }
                    Event::MessageStop => Ok(Some(())),
                    other => {
                        acc.add(other, on_delta);
                        Ok(None)
                    }
                }
            })
            .await?;
        match answer {
            Some(()) => Ok(acc.finish()),
            None => Err((
                self.error(
                    Failure::Unreachable,
                    format!("{} closed the stream before message_stop", self.shown()),
                ),
                None,
            )),
        }
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
        let body = if self.caching { body } else { body.uncached() };
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

//! The gateway's flags and limits.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Flags of `agentfleet gateway`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Address to serve the API, `/openapi.json`, `/metrics`, `/healthz` and `/readyz` on.
    #[arg(long, env = "AGENTFLEET_GATEWAY_ADDR", default_value = "0.0.0.0:8080")]
    pub addr: SocketAddr,
    /// The data plane (`--redis`).
    #[command(flatten)]
    pub redis: crate::store::RedisArgs,
    /// The token file: SHA-256 hashes of bearer tokens → entities (a mounted Secret; reloaded
    /// when it changes). Optional with `--kubernetes-auth`.
    #[arg(
        long,
        env = "AGENTFLEET_GATEWAY_TOKENS",
        required_unless_present = "kubernetes_auth"
    )]
    pub tokens: Option<PathBuf>,
    /// Take Kubernetes tokens too: a token not in the token file is reviewed by the API
    /// server (`TokenReview`), and is the person it names (a ServiceAccount's, or a user's —
    /// with OIDC if the API server trusts the issuer).
    #[arg(long, env = "AGENTFLEET_GATEWAY_KUBERNETES_AUTH")]
    pub kubernetes_auth: bool,
    /// An audience a Kubernetes token must be for (repeatable; none: the API server's own).
    #[arg(
        long = "kubernetes-audience",
        env = "AGENTFLEET_GATEWAY_KUBERNETES_AUDIENCES",
        value_delimiter = ','
    )]
    pub kubernetes_audiences: Vec<String>,
    /// How long a review of a Kubernetes token is kept (a refusal at most 10 s): a revoked
    /// token stops working within this time.
    #[arg(long = "kubernetes-auth-cache-seconds", default_value = "30", value_parser = parse_seconds)]
    pub kubernetes_auth_cache: Duration,
    /// How often the token file is read again; a revoked token stops working (and its open
    /// streams end) within this time.
    #[arg(long = "tokens-reload-seconds", default_value = "2", value_parser = parse_seconds)]
    pub tokens_reload: Duration,
    /// The gateway's URL as callers reach it (`https://agents.example.com`): A2A agent cards
    /// name their interfaces under it. Unset: the scheme and host of each card request
    /// (`X-Forwarded-Proto` honoured).
    #[arg(long, env = "AGENTFLEET_GATEWAY_PUBLIC_URL", value_parser = parse_public_url)]
    pub public_url: Option<String>,
    /// Where a trace is shown in your tracing UI, with `{traceId}` where its id goes
    /// (`https://jaeger.example.com/trace/{traceId}`): a cycle's page links to its trace.
    #[arg(long, env = "AGENTFLEET_GATEWAY_TRACE_URL", value_parser = parse_trace_url)]
    pub trace_url: Option<String>,
    #[command(flatten)]
    pub limits: Limits,
}

/// An absolute `http(s)` URL without query or fragment, kept without a trailing `/`.
fn parse_public_url(s: &str) -> Result<String, String> {
    let url = url::Url::parse(s).map_err(|e| format!("{s:?} is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(format!("{s:?}: an http or https URL with a host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!("{s:?}: no query or fragment"));
    }
    Ok(s.trim_end_matches('/').to_string())
}

/// An absolute `http(s)` URL with `{traceId}` in it.
fn parse_trace_url(s: &str) -> Result<String, String> {
    if !s.contains(crate::gateway::cycles::TRACE_ID) {
        return Err(format!(
            "{s:?}: put {} where the trace's id goes",
            crate::gateway::cycles::TRACE_ID
        ));
    }
    let url = url::Url::parse(&s.replace(crate::gateway::cycles::TRACE_ID, "0"))
        .map_err(|e| format!("{s:?} is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(format!("{s:?}: an http or https URL with a host"));
    }
    Ok(s.to_string())
}

/// Request and connection limits.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct Limits {
    /// Largest request body accepted, in bytes.
    #[arg(long, default_value_t = 64 * 1024)]
    pub max_body_bytes: usize,
    /// Requests per second per token (0: no limit).
    #[arg(long, default_value_t = 20.0)]
    pub rate_limit: f64,
    /// Requests a token may burst above the rate.
    #[arg(long, default_value_t = 60)]
    pub rate_burst: u32,
    /// Longest request target (path and query) accepted, in bytes; longer ones get a JSON
    /// 414 `uri_too_long`.
    #[arg(long, default_value_t = 8 * 1024)]
    pub max_uri_bytes: usize,
    /// Connections served at once. At the limit the gateway stops accepting (new connections
    /// wait in the listen backlog) until one closes.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
    /// Streams one caller (a token's entity) may hold open at once: SSE of spaces and A2A
    /// `SendStreamingMessage`/`SubscribeToTask` together. One more is refused with a 429.
    #[arg(
        long,
        env = "AGENTFLEET_GATEWAY_MAX_STREAMS_PER_CALLER",
        default_value_t = 32,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub max_streams_per_caller: u32,
    /// Time a client has to send a request's whole head (request line and headers), also
    /// between requests on a kept-alive connection; then the connection is closed.
    #[arg(long = "header-timeout-seconds", default_value = "10", value_parser = parse_seconds)]
    pub header_timeout: Duration,
    /// A connection on which no byte is read or written for this long is closed. SSE streams
    /// send a keep-alive comment at half this (at most every 15 s), so only a client that
    /// stops reading is cut.
    #[arg(long = "idle-timeout-seconds", default_value = "60", value_parser = parse_seconds)]
    pub idle_timeout: Duration,
    /// Time from a request's head to its response's head (reading the body included); then a
    /// JSON 408 `request_timeout`. An SSE stream's head comes at once, so its body is not cut.
    #[arg(long = "request-timeout-seconds", default_value = "30", value_parser = parse_seconds)]
    pub request_timeout: Duration,
    /// How often a streamed space's members are read again; a removed member's open stream
    /// ends within this time.
    #[arg(long = "sse-recheck-seconds", default_value = "3", value_parser = parse_seconds)]
    pub sse_recheck: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: 64 * 1024,
            rate_limit: 20.0,
            rate_burst: 60,
            max_uri_bytes: 8 * 1024,
            max_connections: 10_000,
            max_streams_per_caller: 32,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            request_timeout: Duration::from_secs(30),
            sse_recheck: Duration::from_secs(3),
        }
    }
}

impl Limits {
    /// How often an SSE stream with nothing to send writes a keep-alive comment: well within
    /// the idle timeout, so an idle stream is never taken for an idle connection.
    pub fn sse_keep_alive(&self) -> Duration {
        (self.idle_timeout / 2).min(Duration::from_secs(15))
    }
}

/// A duration flag in seconds, fractions allowed (`0.5`), more than 0 and at most a day.
fn parse_seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(secs > 0.0 && secs <= 86_400.0) {
        return Err(format!("{s}: between 0 (excluded) and 86400 seconds"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_url_is_an_http_url_with_a_place_for_the_id() {
        let ok = "https://jaeger.example.com/trace/{traceId}";
        assert_eq!(parse_trace_url(ok).as_deref(), Ok(ok));
        for bad in [
            "https://jaeger.example.com/trace/",
            "jaeger/{traceId}",
            "ftp://x/{traceId}",
        ] {
            assert!(parse_trace_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn seconds_take_fractions_and_refuse_nonsense() {
        assert_eq!(parse_seconds("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_seconds("0.25"), Ok(Duration::from_millis(250)));
        for bad in ["0", "-1", "x", "NaN", "inf", "100000"] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn keep_alive_stays_within_the_idle_timeout() {
        let mut limits = Limits::default();
        assert_eq!(limits.sse_keep_alive(), Duration::from_secs(15));
        limits.idle_timeout = Duration::from_secs(2);
        assert_eq!(limits.sse_keep_alive(), Duration::from_secs(1));
    }

    #[test]
    fn defaults_match_the_flags() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            limits: Limits,
        }
        let parsed = <Cli as clap::Parser>::parse_from(["x"]).limits;
        let defaults = Limits::default();
        assert_eq!(format!("{parsed:?}"), format!("{defaults:?}"));
    }
}

//! Tracing and Prometheus metrics shared by every role, and the small HTTP server that exposes
//! `/metrics`, `/healthz` and `/readyz`. Log lines: [`logs`]; spans over OTLP: [`traces`].

use std::net::SocketAddr;

use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder,
};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer};

/// The subscriber every layer sits on.
type Base = tracing_subscriber::Registry;

pub mod logs;
pub mod traces;

pub use logs::LogFormat;

pub mod data_plane;
mod operator;
mod pool;

pub use operator::OperatorMetrics;
pub use pool::PoolMetrics;

/// What [`init_tracing`] started; [`Telemetry::shutdown`] at exit exports the spans not
/// exported yet.
#[must_use = "call shutdown() at exit, or the last spans are lost"]
pub struct Telemetry {
    traces: Option<traces::Traces>,
}

impl Telemetry {
    /// Exports what is left and stops. Blocks (at most the export timeout): call it outside
    /// the runtime's `block_on`, while the runtime still runs.
    pub fn shutdown(self) {
        if let Some(traces) = self.traces {
            traces.shutdown();
        }
    }
}

/// Installs the global tracing subscriber: log lines on stderr (level from `RUST_LOG`; by
/// default `info`, and nothing of the MCP SDK's own: the worker says what an MCP server's
/// failure means, once, where rmcp would log each of its internal errors again), and, when
/// the environment names an OTLP endpoint ([`traces::requested`]), this crate's spans over
/// OTLP — started on the current tokio runtime, for the process's `role`.
pub fn init_tracing(format: LogFormat, role: &str) -> Telemetry {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,rmcp=off"));
    // Colours only on a terminal: a log file or a pod's log never carries escape codes.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let lines = logs::layer::<Base, _>(format, std::io::stderr, ansi);
    let mut layers = vec![Layer::with_filter(lines, filter).boxed()];
    // Only a command that runs on the runtime can export (`crd` prints and ends).
    let requested = traces::requested(|name| std::env::var(name).ok())
        && tokio::runtime::Handle::try_current().is_ok();
    let (traces, failed) = match requested.then(|| traces::Traces::start(role)) {
        Some(Ok(traces)) => {
            layers.push(spans_layer(&traces));
            (Some(traces), None)
        }
        Some(Err(e)) => (None, Some(e)),
        None => (None, None),
    };
    // A second initialisation (tests) keeps the first subscriber.
    let _ = tracing_subscriber::registry().with(layers).try_init();
    match (&traces, failed) {
        (Some(traces), _) => traces.announce(),
        (None, Some(e)) => tracing::warn!(error = %e, "traces are not exported"),
        (None, None) => tracing::debug!("traces are off (no OTEL_EXPORTER_OTLP_ENDPOINT)"),
    }
    Telemetry { traces }
}

/// The layer that turns this crate's spans (info and above) into OpenTelemetry spans. Events
/// stay out of them: a log line may quote what a model or a tool said.
fn spans_layer(traces: &traces::Traces) -> Box<dyn Layer<Base> + Send + Sync> {
    let only_ours = tracing_subscriber::filter::filter_fn(|meta| {
        meta.is_span()
            && meta.target().starts_with("agentfleet")
            && *meta.level() <= tracing::Level::INFO
    });
    tracing_opentelemetry::layer()
        .with_tracer(traces.tracer())
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_filter(only_ours)
        .boxed()
}

/// A worker's metrics, all prefixed `agentfleet_`, labelled by namespace and agent.
#[derive(Clone)]
pub struct WorkerMetrics {
    /// The registry they are registered in.
    pub registry: Registry,
    /// Cycles by result (`completed`, `skipped`, `failed`).
    pub cycles: IntCounterVec,
    /// Cycle duration.
    pub cycle_duration: HistogramVec,
    /// Event enqueued → first model request of its cycle.
    pub wake_latency: HistogramVec,
    /// Model tokens by direction: `input` (prompt tokens billed in full), `cache_read` and
    /// `cache_write` (prompt tokens read from or written to the provider's cache), `output`.
    pub tokens: IntCounterVec,
    /// Tool calls by tool and outcome (`ok`, `error`).
    pub tool_calls: IntCounterVec,
    /// How long tool calls take, by tool.
    pub tool_duration: HistogramVec,
    /// Time from asking a human about a call to their answer, by tool.
    pub decision_time: HistogramVec,
    /// Estimated tokens of the consciousness after the last commit.
    pub consciousness_tokens: prometheus::IntGaugeVec,
    /// Compactions done.
    pub compactions: IntCounterVec,
    /// Compactions postponed because the summary failed (the window is kept whole).
    pub compaction_failures: IntCounterVec,
    /// Agents' messages the space's loop guard kept from other agents, by reason
    /// (`depth`, `rate`).
    pub loop_guard: IntCounterVec,
    /// Cycles stopped before the model was done, by reason (`max_steps`, `token_budget`,
    /// `chain`); each also tells the space.
    pub cycle_stops: IntCounterVec,
    /// Cycles woken by a human whose model was told, once, that its plain text reached nobody.
    pub cycle_nudges: IntCounterVec,
    /// Model turns read leniently, by kind (`tool_call_in_text`, `context_echo`, `empty`).
    pub model_readings: IntCounterVec,
    /// Failed model calls, by reason (`unauthorized`, `unreachable`, `rate_limited`,
    /// `server_error`, `bad_request`, `bad_response`).
    pub model_errors: IntCounterVec,
    /// Changes of the model an agent asks (its `Model`'s fallback list), by the model now
    /// asked and why (`server_error`, `rate_limited`, `timed_out`, `unreachable`, or
    /// `recovered` when the first answers again).
    pub model_fallbacks: IntCounterVec,
    /// Agent tasks restarted after they stopped, by reason (`data_plane`, `lease_lost`,
    /// `panic`, `error`).
    pub agent_restarts: IntCounterVec,
    /// How the pools of the process are doing.
    pub pool: PoolMetrics,
    /// 1 while the agent can work (its pool hears its wake signals and its last session went
    /// well), else 0.
    pub agent_ready: prometheus::IntGaugeVec,
    /// Checkpoints written to the archive, by outcome (`ok`, `error`).
    pub archive_writes: IntCounterVec,
    /// How long writing a checkpoint to the archive takes.
    pub archive_duration: HistogramVec,
}

impl WorkerMetrics {
    /// Creates and registers the metrics in a fresh registry.
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let agent = ["namespace", "agent"];
        let cycles = IntCounterVec::new(
            Opts::new("agentfleet_cycles_total", "Think cycles, by result."),
            &["namespace", "agent", "result"],
        )?;
        let cycle_duration = HistogramVec::new(
            HistogramOpts::new(
                "agentfleet_cycle_duration_seconds",
                "Duration of a think cycle.",
            )
            .buckets(vec![
                0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
            ]),
            &agent,
        )?;
        let wake_latency = HistogramVec::new(
            HistogramOpts::new(
                "agentfleet_wake_latency_seconds",
                "Time from an event entering the inbox to the first model request of its cycle.",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0,
            ]),
            &agent,
        )?;
        let tokens = IntCounterVec::new(
            Opts::new(
                "agentfleet_model_tokens_total",
                "Model tokens, by the model that spent them (its Model's name, else its own) and direction: input (prompt tokens billed in full), cache_read and cache_write (prompt tokens read from or written to the provider's prompt cache), output.",
            ),
            &["namespace", "agent", "model", "direction"],
        )?;
        let tool_calls = IntCounterVec::new(
            Opts::new(
                "agentfleet_tool_calls_total",
                "Tool calls, by tool and outcome.",
            ),
            &["namespace", "agent", "tool", "outcome"],
        )?;
        let tool_duration = HistogramVec::new(
            HistogramOpts::new(
                "agentfleet_tool_duration_seconds",
                "How long tool calls take, by tool.",
            )
            .buckets(vec![
                0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0,
            ]),
            &["namespace", "agent", "tool"],
        )?;
        let decision_time = HistogramVec::new(
            HistogramOpts::new(
                "agentfleet_decision_seconds",
                "Time from asking a human about a tool call (approval, interactive tool) to their answer, by tool.",
            )
            .buckets(vec![
                5.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 14400.0, 86400.0,
            ]),
            &["namespace", "agent", "tool"],
        )?;
        let consciousness_tokens = prometheus::IntGaugeVec::new(
            Opts::new(
                "agentfleet_consciousness_tokens",
                "Estimated tokens of the consciousness after the last commit.",
            ),
            &agent,
        )?;
        let compactions = IntCounterVec::new(
            Opts::new("agentfleet_compactions_total", "Consciousness compactions."),
            &agent,
        )?;
        let compaction_failures = IntCounterVec::new(
            Opts::new(
                "agentfleet_compaction_failures_total",
                "Compactions postponed because the summary failed; the window was kept whole.",
            ),
            &agent,
        )?;
        let loop_guard = IntCounterVec::new(
            Opts::new(
                "agentfleet_loop_guard_total",
                "Agents' messages that woke no other agent because of the space's loop guard, by reason.",
            ),
            &["namespace", "space", "reason"],
        )?;
        let cycle_stops = IntCounterVec::new(
            Opts::new(
                "agentfleet_cycle_stops_total",
                "Cycles stopped before the model was done, by reason: max_steps (cycle.maxSteps), token_budget (cycle.tokenBudget), chain (an async call refused at cycle.maxChainDepth).",
            ),
            &["namespace", "agent", "reason"],
        )?;
        let cycle_nudges = IntCounterVec::new(
            Opts::new(
                "agentfleet_cycle_nudges_total",
                "Cycles woken by a human's message whose model ended with plain text (no send_message, no skip) and was told once to answer or skip.",
            ),
            &["namespace", "agent"],
        )?;
        let model_readings = IntCounterVec::new(
            Opts::new(
                "agentfleet_model_readings_total",
                "Model turns that did not follow the protocol and were read as a person would: tool calls written as text (made), copies of the context (dropped), empty turns (remembered as nothing).",
            ),
            &["namespace", "agent", "kind"],
        )?;
        let model_errors = IntCounterVec::new(
            Opts::new(
                "agentfleet_model_errors_total",
                "Failed model calls (after the provider's own retries), by reason.",
            ),
            &["namespace", "agent", "reason"],
        )?;
        let model_fallbacks = IntCounterVec::new(
            Opts::new(
                "agentfleet_model_fallbacks_total",
                "Changes of the model an agent asks, by the model now asked and why (the failure of the one left, or recovered when the first answers again).",
            ),
            &["namespace", "agent", "model", "reason"],
        )?;
        let agent_restarts = IntCounterVec::new(
            Opts::new(
                "agentfleet_agent_restarts_total",
                "Agent tasks restarted after they stopped, by reason.",
            ),
            &["namespace", "agent", "reason"],
        )?;
        let agent_ready = prometheus::IntGaugeVec::new(
            Opts::new(
                "agentfleet_agent_ready",
                "1 while the agent can work (its pool hears its wake signals and reaches the data plane), else 0.",
            ),
            &agent,
        )?;
        let archive_writes = IntCounterVec::new(
            Opts::new(
                "agentfleet_archive_writes_total",
                "Checkpoints written to the archive (object storage), by outcome.",
            ),
            &["namespace", "agent", "outcome"],
        )?;
        let archive_duration = HistogramVec::new(
            HistogramOpts::new(
                "agentfleet_archive_write_seconds",
                "How long writing a checkpoint to the archive takes.",
            )
            .buckets(vec![
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 30.0,
            ]),
            &agent,
        )?;
        registry.register(Box::new(archive_writes.clone()))?;
        registry.register(Box::new(archive_duration.clone()))?;
        registry.register(Box::new(compaction_failures.clone()))?;
        registry.register(Box::new(loop_guard.clone()))?;
        registry.register(Box::new(cycle_stops.clone()))?;
        registry.register(Box::new(cycle_nudges.clone()))?;
        registry.register(Box::new(model_readings.clone()))?;
        registry.register(Box::new(model_errors.clone()))?;
        registry.register(Box::new(model_fallbacks.clone()))?;
        registry.register(Box::new(agent_restarts.clone()))?;
        registry.register(Box::new(agent_ready.clone()))?;
        registry.register(Box::new(cycles.clone()))?;
        registry.register(Box::new(cycle_duration.clone()))?;
        registry.register(Box::new(wake_latency.clone()))?;
        registry.register(Box::new(tokens.clone()))?;
        registry.register(Box::new(tool_calls.clone()))?;
        registry.register(Box::new(tool_duration.clone()))?;
        registry.register(Box::new(decision_time.clone()))?;
        registry.register(Box::new(consciousness_tokens.clone()))?;
        registry.register(Box::new(compactions.clone()))?;
        let pool = PoolMetrics::register(&registry)?;
        Ok(Self {
            registry,
            cycles,
            cycle_duration,
            wake_latency,
            tokens,
            tool_calls,
            tool_duration,
            decision_time,
            consciousness_tokens,
            compactions,
            compaction_failures,
            loop_guard,
            cycle_stops,
            cycle_nudges,
            model_readings,
            model_errors,
            model_fallbacks,
            agent_restarts,
            agent_ready,
            archive_writes,
            archive_duration,
            pool,
        })
    }
}

/// The gateway's metrics, all prefixed `agentfleet_gateway_`.
#[derive(Clone)]
pub struct GatewayMetrics {
    /// Requests by route (the route's pattern), method and status.
    pub requests: IntCounterVec,
    /// Time to the response's head, by route.
    pub request_duration: HistogramVec,
    /// SSE clients connected.
    pub sse_clients: prometheus::IntGauge,
    /// SSE clients cut off because they fell behind (they resume with `Last-Event-ID`).
    pub sse_lagged: prometheus::IntCounter,
    /// Message posted → written to an SSE client.
    pub fanout_latency: prometheus::Histogram,
    /// Connections open.
    pub connections: prometheus::IntGauge,
    /// Times the connection limit was reached (accepting paused until a connection closed).
    pub connection_limit_reached: prometheus::IntCounter,
    /// Connections the gateway closed, by reason: `header_timeout`, `idle_timeout`, and the
    /// requests that are not HTTP (`bad_request`, `uri_too_long`, `headers_too_large`).
    pub connections_closed: IntCounterVec,
}

/// The reasons of `agentfleet_gateway_connections_closed_total`.
pub const CONNECTION_CLOSE_REASONS: [&str; 5] = [
    "header_timeout",
    "idle_timeout",
    "bad_request",
    "uri_too_long",
    "headers_too_large",
];

impl GatewayMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let requests = IntCounterVec::new(
            Opts::new(
                "agentfleet_gateway_requests_total",
                "Gateway requests, by route, method and status.",
            ),
            &["route", "method", "status"],
        )?;
        let request_duration = HistogramVec::new(
            HistogramOpts::new(
                "agentfleet_gateway_request_duration_seconds",
                "Time from a request to its response's head, by route.",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0,
            ]),
            &["route"],
        )?;
        let sse_clients =
            prometheus::IntGauge::new("agentfleet_gateway_sse_clients", "SSE clients connected.")?;
        let sse_lagged = prometheus::IntCounter::new(
            "agentfleet_gateway_sse_lagged_total",
            "SSE clients cut off for falling behind (they resume with Last-Event-ID).",
        )?;
        let fanout_latency = prometheus::Histogram::with_opts(
            HistogramOpts::new(
                "agentfleet_gateway_fanout_latency_seconds",
                "Time from a message being posted to it being written to an SSE client.",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
            ]),
        )?;
        let connections =
            prometheus::IntGauge::new("agentfleet_gateway_connections", "Connections open.")?;
        let connection_limit_reached = prometheus::IntCounter::new(
            "agentfleet_gateway_connection_limit_reached_total",
            "Times the connection limit was reached: accepting paused until a connection closed (new connections waited in the listen backlog).",
        )?;
        let connections_closed = IntCounterVec::new(
            Opts::new(
                "agentfleet_gateway_connections_closed_total",
                "Connections the gateway closed, by reason (header_timeout, idle_timeout, bad_request, uri_too_long, headers_too_large).",
            ),
            &["reason"],
        )?;
        for reason in CONNECTION_CLOSE_REASONS {
            connections_closed.with_label_values(&[reason]);
        }
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(request_duration.clone()))?;
        registry.register(Box::new(sse_clients.clone()))?;
        registry.register(Box::new(sse_lagged.clone()))?;
        registry.register(Box::new(fanout_latency.clone()))?;
        registry.register(Box::new(connections.clone()))?;
        registry.register(Box::new(connection_limit_reached.clone()))?;
        registry.register(Box::new(connections_closed.clone()))?;
        Ok(Self {
            requests,
            request_duration,
            sse_clients,
            sse_lagged,
            fanout_latency,
            connections,
            connection_limit_reached,
            connections_closed,
        })
    }
}

/// The registry's metrics in the Prometheus text format.
pub fn encode(registry: &Registry) -> impl IntoResponse {
    let mut buf = Vec::new();
    match TextEncoder::new().encode(&registry.gather(), &mut buf) {
        Ok(()) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)],
            buf,
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding metrics: {e}"),
        )
            .into_response(),
    }
}

/// Serves `router` plus nothing else on `addr` until `shutdown` resolves.
pub async fn serve(
    addr: SocketAddr,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /metrics, /healthz, /readyz");
    axum::serve(listener, router.into_make_service())
        .with_graceful_shutdown(shutdown)
        .await
}

/// A router with `/metrics` for `registry`.
pub fn metrics_router(registry: Registry) -> Router {
    Router::new().route(
        "/metrics",
        get(move || {
            let registry = registry.clone();
            async move { encode(&registry) }
        }),
    )
}

/// This process's identity in a lease: `given`, else `HOSTNAME-PID` (`fallback-PID`).
pub fn process_identity(given: Option<&str>, fallback: &str) -> String {
    given.map(str::to_string).unwrap_or_else(|| {
        format!(
            "{}-{}",
            std::env::var("HOSTNAME").unwrap_or_else(|_| fallback.into()),
            std::process::id()
        )
    })
}

/// A channel that turns `true` on SIGTERM or Ctrl-C (logging `message`). The signals are
/// caught from the moment this returns.
pub fn shutdown_channel(message: &'static str) -> tokio::sync::watch::Receiver<bool> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    let signal = shutdown_signal();
    tokio::spawn(async move {
        signal.await;
        tracing::info!("{message}");
        let _ = tx.send(true);
    });
    rx
}

/// Resolves on SIGTERM or Ctrl-C. The handlers are installed when this is called (not when
/// the future is first polled), so a signal that arrives in between is not lost. Call it
/// inside the runtime.
///
/// What follows is a graceful shutdown, which may wait for a model's answer; a second Ctrl-C
/// (SIGINT) after it started ends the process at once (`force_on`).
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let handlers = {
        use tokio::signal::unix::{signal, SignalKind};
        (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        )
    };
    async move {
        #[cfg(unix)]
        match handlers {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {},
                    _ = int.recv() => {},
                }
                force_on(async move { int.recv().await.is_some() });
            }
            (term, int) => {
                let e = term.err().or(int.err());
                tracing::warn!(error = ?e, "cannot listen for SIGTERM; Ctrl-C only");
                if tokio::signal::ctrl_c().await.is_err() {
                    std::future::pending::<()>().await;
                }
                force_on(async { tokio::signal::ctrl_c().await.is_ok() });
            }
        }
        #[cfg(not(unix))]
        {
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
            force_on(async { tokio::signal::ctrl_c().await.is_ok() });
        }
    }
}

/// Exit status of a process ended by Ctrl-C (128 + SIGINT), as shells report it.
pub const INTERRUPTED: i32 = 130;

/// Once `interrupted` resolves to true (a second Ctrl-C during a graceful shutdown), says so
/// on one line and ends the process at once with [`INTERRUPTED`]: a user who presses Ctrl-C
/// again does not want to wait for the cycles under way.
fn force_on(interrupted: impl std::future::Future<Output = bool> + Send + 'static) {
    tokio::spawn(async move {
        if interrupted.await {
            eprintln!("agentfleet: interrupted again: stopped at once, without finishing (forced)");
            std::process::exit(INTERRUPTED);
        }
    });
}

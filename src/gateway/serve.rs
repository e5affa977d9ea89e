//! Serving connections: the gateway's own accept loop on hyper.
//!
//! `axum::serve` reads request heads with no time limit, keeps silent connections forever and
//! accepts without bound, so a few hundred clients sending half a request line hold the
//! gateway. Here every connection has:
//! - a **header timeout**: the whole request head within `--header-timeout-seconds` (also
//!   between requests on a kept-alive connection), else the connection is closed (hyper's own
//!   timer);
//! - an **idle timeout**: no byte read or written for `--idle-timeout-seconds` closes it (an
//!   SSE stream writes a keep-alive comment well within it, so only a client that stopped
//!   reading is cut);
//! - a place among at most `--max-connections`: at the limit the loop stops accepting until
//!   a connection closes;
//! - JSON answers for requests hyper refuses itself ([`super::wire`]).
//!
//! Every request is also held to the URI length and request timeout ([`limit_requests`]).
//! Shutdown: stop accepting, let each connection finish its request (hyper's graceful
//! shutdown; open SSE streams end on the same signal), then return.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use prometheus::Registry;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tracing::{debug, error, warn};

use super::error::ApiError;
use super::wire::{Activity, Wire};
use super::{router, Gateway, Limits};
use crate::telemetry::GatewayMetrics;

/// The largest request head (request line and headers) hyper parses; a larger complete head
/// gets a JSON 431. Above hyper's 64 KiB request-target limit, so an over-long target still
/// gets its 414; and a head is refused once read whole, so the client reads the answer rather
/// than a reset.
const MAX_HEAD_BYTES: usize = 128 * 1024;

/// Serves the gateway's routes ([`router`]) on `listener`, within the gateway's limits, until
/// the gateway's shutdown signal; returns once every connection has finished.
pub async fn serve(listener: TcpListener, gw: Gateway, registry: Registry) -> io::Result<()> {
    let limits = gw.inner.limits;
    let metrics = gw.inner.metrics.clone();
    let mut shutdown = gw.inner.shutdown.clone();
    let app = router(gw, registry);
    let max = limits.max_connections;
    let slots = Arc::new(Semaphore::new(max as usize));
    let mut last_warned: Option<Instant> = None;
    loop {
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                metrics.connection_limit_reached.inc();
                // Under a flood the limit is reached again at every close: say so once a
                // minute, the metric counts every time.
                if last_warned.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
                    last_warned = Some(Instant::now());
                    warn!(
                        limit = max,
                        times = metrics.connection_limit_reached.get(),
                        "connection limit reached; accepting again when a connection closes"
                    );
                }
                tokio::select! {
                    slot = slots.clone().acquire_owned() => match slot {
                        Ok(slot) => slot,
                        Err(_) => break,
                    },
                    () = stopping(&mut shutdown) => break,
                }
            }
        };
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            () = stopping(&mut shutdown) => break,
        };
        tokio::spawn(connection(
            tcp,
            app.clone(),
            limits,
            metrics.clone(),
            shutdown.clone(),
            slot,
        ));
    }
    drop(listener);
    // Every slot free again: every connection has finished.
    let _all = slots.acquire_many(max).await;
    Ok(())
}

/// Resolves when the shutdown signal turns true (or its sender is gone).
async fn stopping(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|v| *v).await;
}

/// A failed accept: the peer gave up (go on), or the process is out of descriptors or memory
/// (wait a moment for connections to close rather than spin).
async fn accept_failed(e: io::Error) {
    match e.kind() {
        io::ErrorKind::ConnectionAborted
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionRefused
        | io::ErrorKind::Interrupted => debug!(error = %e, "accept"),
        _ => {
            error!(error = %e, "accepting connections failed; retrying in 1s");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// One connection, from accept to close; holds its `slot` until then.
async fn connection(
    tcp: TcpStream,
    app: Router,
    limits: Limits,
    metrics: GatewayMetrics,
    mut shutdown: watch::Receiver<bool>,
    slot: OwnedSemaphorePermit,
) {
    let _slot = slot;
    metrics.connections.inc();
    let _open = OpenConnection(metrics.connections.clone());
    let _ = tcp.set_nodelay(true);
    let activity = Activity::new();
    let io = Wire::new(
        tcp,
        activity.clone(),
        limits.max_uri_bytes,
        metrics.connections_closed.clone(),
    );
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_header_size(MAX_HEAD_BYTES);
    let conn = builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(app));
    tokio::pin!(conn);
    let mut draining = false;
    loop {
        tokio::select! {
            served = conn.as_mut() => {
                match served {
                    Err(e) if e.is_timeout() => metrics
                        .connections_closed
                        .with_label_values(&["header_timeout"])
                        .inc(),
                    Err(e) => debug!(error = %e, "connection ended"),
                    Ok(()) => {}
                }
                return;
            }
            () = stopping(&mut shutdown), if !draining => {
                draining = true;
                conn.as_mut().graceful_shutdown();
            }
            () = activity.idle_for(limits.idle_timeout) => {
                metrics.connections_closed.with_label_values(&["idle_timeout"]).inc();
                return;
            }
        }
    }
}

/// Counts an open connection while it lives.
struct OpenConnection(prometheus::IntGauge);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Holds every request to the limits: a request target no longer than `--max-uri-bytes`
/// (else a JSON 414, well before hyper's own 64 KiB limit), and its response's head within
/// `--request-timeout-seconds` (else a JSON 408, and the connection closes: the body may be
/// half read). An SSE stream's head comes at once, so a stream is never cut by this.
pub(super) async fn limit_requests(
    State(gw): State<Gateway>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let limits = &gw.inner.limits;
    let uri = request.uri();
    let target = uri.path_and_query().map_or(0, |p| p.as_str().len())
        + uri.authority().map_or(0, |a| a.as_str().len());
    if target > limits.max_uri_bytes {
        return ApiError::uri_too_long(limits.max_uri_bytes).into_response();
    }
    match tokio::time::timeout(limits.request_timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            let mut response = ApiError::request_timeout(limits.request_timeout).into_response();
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            response
        }
    }
}

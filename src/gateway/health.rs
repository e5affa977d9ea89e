//! The gateway's probes: `/healthz` (the process serves) and `/readyz` (the data plane
//! answers, and whatever readiness check the gateway was given passes).

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;

use super::{Gateway, RequestRefusals};

/// Liveness: the process serves.
#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses((status = 200, description = "Serving", body = String), RequestRefusals))]
pub(super) async fn healthz() -> &'static str {
    "ok\n"
}

/// Readiness: the data plane answers.
#[utoipa::path(get, path = "/readyz", tag = "operations",
    responses(
        (status = 200, description = "Ready", body = String),
        (status = 503, description = "The data plane does not answer", body = String),
        RequestRefusals,
    ))]
pub(super) async fn readyz(State(gw): State<Gateway>) -> (StatusCode, String) {
    match tokio::time::timeout(Duration::from_secs(2), gw.inner.store.ping()).await {
        Ok(Ok(())) => match gw.inner.readiness.get().map_or(Ok(()), |check| check()) {
            Ok(()) => (StatusCode::OK, "ok\n".into()),
            Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
        },
        Ok(Err(e)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("data plane: {e}\n"),
        ),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "data plane: no answer within 2s\n".into(),
        ),
    }
}

//! `POST /v1/agents/{namespace}/{agent}/events`: a service triggers an agent it is granted
//! (a webhook): the event goes to the agent's inbox once, whatever retries send.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;

use super::auth::{self, Caller};
use super::error::{quote, ApiError, JsonBody};
use super::{idempotency_key, valid_name, Gateway, RequestRefusals};
use crate::api::{ErrorBody, TriggerEvent, Triggered};
use crate::identity::AgentKey;
use crate::store::{now_ms, EventKind, InboxEvent};

/// Triggers an agent with a service event (a webhook).
#[utoipa::path(
    post,
    path = "/v1/agents/{namespace}/{agent}/events",
    tag = "agents",
    params(
        ("namespace" = String, Path, description = "Namespace of the Agent"),
        ("agent" = String, Path, description = "Name of the Agent"),
        ("Idempotency-Key" = Option<String>, Header, description = "The event id, when the body has none: sending it again is dropped"),
    ),
    request_body = TriggerEvent,
    responses(
        (status = 202, description = "Queued in the agent's inbox (or dropped as a duplicate)", body = Triggered),
        (status = 400, description = "Invalid body", body = ErrorBody),
        (status = 401, description = "No or unknown token", body = ErrorBody),
        (status = 403, description = "The token may not trigger this agent", body = ErrorBody),
        (status = 404, description = "No such agent", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 429, description = "Rate limited", body = ErrorBody),
        (status = 503, description = "Data plane unavailable", body = ErrorBody),
        RequestRefusals,
    ),
    security(("bearer" = []))
)]
pub(super) async fn trigger_agent(
    State(gw): State<Gateway>,
    Caller(caller, _): Caller,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<TriggerEvent>,
) -> Result<(StatusCode, Json<Triggered>), ApiError> {
    let key = AgentKey::new(ns.clone(), name.clone());
    if !caller.may_trigger(&key) {
        return Err(ApiError::forbidden(format!(
            "{} {} may not trigger agent {}",
            caller.kind.as_str(),
            quote(&caller.id),
            quote(&key.to_string())
        )));
    }
    let known = valid_name(&ns)
        && valid_name(&name)
        && gw
            .inner
            .store
            .agent_registered(&key)
            .await
            .map_err(|e| ApiError::unavailable(&e))?;
    if !known {
        return Err(ApiError::not_found(format!(
            "no agent {}",
            quote(&key.to_string())
        )));
    }
    let text = body.text.filter(|t| !t.trim().is_empty());
    if text.is_none() && body.data.is_none() {
        return Err(ApiError::invalid("give text, data or both"));
    }
    let id = match body.id {
        Some(id) if id.is_empty() || id.len() > 200 => {
            return Err(ApiError::invalid("id: 1 to 200 characters"))
        }
        Some(id) => id,
        None => match idempotency_key(&headers)? {
            Some(k) => k,
            None => auth::new_token("svc-").map_err(|e| ApiError::invalid(e.to_string()))?,
        },
    };
    let event = InboxEvent {
        id: format!("service:{}:{id}", caller.id),
        kind: EventKind::Service,
        time_ms: now_ms(),
        urgent: body.urgent,
        space: None,
        sender: Some(caller.sender()),
        text,
        data: body.data,
        depth: 0,
    };
    let pushed = gw
        .inner
        .store
        .push_event(&key, &event)
        .await
        .map_err(|e| ApiError::unavailable(&e))?;
    Ok((
        StatusCode::ACCEPTED,
        Json(Triggered {
            id,
            duplicate: !pushed.queued,
            woke: pushed.woke,
        }),
    ))
}

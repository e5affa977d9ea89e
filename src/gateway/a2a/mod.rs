//! The gateway's A2A (v1.0) side: every Agent with `spec.a2a` served at
//! `/a2a/NAMESPACE/NAME`, one URL for both bindings.
//!
//! - `GET  …/.well-known/agent-card.json`: its card ([`card`]), public.
//! - `POST …` (and `…/`): JSON-RPC 2.0 — `SendMessage`, `SendStreamingMessage`, `GetTask`,
//!   `ListTasks`, `CancelTask`, `SubscribeToTask`.
//! - HTTP+JSON: `POST …/message:send`, `POST …/message:stream`, `GET …/tasks`,
//!   `GET …/tasks/{id}`, `POST …/tasks/{id}:cancel`, `GET|POST …/tasks/{id}:subscribe`.
//!
//! Every call needs a gateway token that `spec.a2a.callers` admits and the `A2A-Version`
//! header (`1.x`; also as a query parameter); refusals are the protocol's errors in each
//! binding's shape. What a task is: [`tasks`]; how it streams: [`watch`].

mod answers;
pub mod card;
mod methods;
mod tasks;
mod watch;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures::{Stream, StreamExt as _};
use serde_json::Value;

use crate::a2a::{
    jsonrpc_result, negotiate, A2aError, JsonRpcRequest, StreamResponse, REST_CONTENT_TYPE,
    VERSION_HEADER,
};
use crate::identity::AgentKey;
use crate::store::A2aRecord;

use super::auth::{bearer_token, Entity};
use super::Gateway;
pub use methods::Call;

/// Client input quoted in an error message (escaped, cut short).
fn quote(s: &str) -> String {
    super::error::quote(s)
}

/// The A2A routes (state still to provide).
pub fn routes() -> Router<Gateway> {
    Router::new()
        .route(
            "/a2a/{namespace}/{agent}/.well-known/agent-card.json",
            get(agent_card),
        )
        .route("/a2a/{namespace}/{agent}", post(jsonrpc))
        .route("/a2a/{namespace}/{agent}/", post(jsonrpc))
        .route("/a2a/{namespace}/{agent}/message:send", post(rest_send))
        .route("/a2a/{namespace}/{agent}/message:stream", post(rest_stream))
        .route("/a2a/{namespace}/{agent}/tasks", get(rest_list))
        .route(
            "/a2a/{namespace}/{agent}/tasks/{task}",
            get(rest_task_get).post(rest_task_post),
        )
}

/// The agent a route names, if it is served over A2A.
async fn served(gw: &Gateway, ns: &str, name: &str) -> Result<(AgentKey, A2aRecord), A2aError> {
    let key = AgentKey::new(ns, name);
    let missing = || {
        A2aError::MethodNotFound(format!(
            "no agent {} is served over A2A here",
            quote(&key.to_string())
        ))
    };
    if !super::valid_name(ns) || !super::valid_name(name) {
        return Err(missing());
    }
    let store = &gw.inner.store;
    let (registered, record) = tokio::try_join!(store.agent_registered(&key), store.a2a(&key))
        .map_err(|e| tasks::unavailable(&e))?;
    match record {
        Some(r) if registered => Ok((key, r)),
        _ => Err(missing()),
    }
}

/// The gateway's URL as callers reach it: `--public-url`, else from the request's `Host`
/// (and `X-Forwarded-Proto`). `true` when it came from the request.
fn base_url(gw: &Gateway, headers: &HeaderMap) -> (String, bool) {
    if let Some(url) = gw.inner.public_url.get() {
        return (url.trim_end_matches('/').to_string(), false);
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic()))
        .unwrap_or("localhost");
    let scheme = headers
        .get("x-forwarded-proto")
        .and_then(|h| h.to_str().ok())
        .filter(|p| *p == "https" || *p == "http")
        .unwrap_or("http");
    (format!("{scheme}://{host}"), true)
}

/// `GET /a2a/{ns}/{agent}/.well-known/agent-card.json`. With `--public-url` every caller
/// gets the same card, which any cache may keep. Without it the card names what the request
/// said (`Host`, `X-Forwarded-Proto`), so it is the requester's alone: `private` (a shared
/// cache keeps none, so no request can put its URL in the card others get) and `Vary` on
/// the headers it came from.
async fn agent_card(
    State(gw): State<Gateway>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    match served(&gw, &ns, &name).await {
        Ok((key, record)) => {
            let (base, from_request) = base_url(&gw, &headers);
            let card = card::card(&base, &key, &record);
            let mut response = axum::Json(card).into_response();
            let h = response.headers_mut();
            if from_request {
                h.insert(
                    header::CACHE_CONTROL,
                    HeaderValue::from_static("private, max-age=60"),
                );
                h.insert(
                    header::VARY,
                    HeaderValue::from_static("Host, X-Forwarded-Proto"),
                );
            } else {
                h.insert(
                    header::CACHE_CONTROL,
                    HeaderValue::from_static("public, max-age=60"),
                );
            }
            response
        }
        Err(e) => rest_error(&e),
    }
}

/// Who calls, checked: a known token (401), admitted by the agent's callers (403), within
/// the rate limit (429), speaking a version this gateway speaks (400).
async fn admit(
    gw: &Gateway,
    headers: &HeaderMap,
    query: Option<&str>,
    record: &A2aRecord,
    agent: &AgentKey,
) -> Result<Entity, A2aError> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token)
        .ok_or_else(|| {
            A2aError::Unauthenticated("missing bearer token (Authorization: Bearer TOKEN)".into())
        })?;
    let (caller, _) = crate::gateway::auth::authenticate(gw, token)
        .await
        .map_err(|e| match e.status {
            axum::http::StatusCode::SERVICE_UNAVAILABLE => A2aError::Unavailable(e.message),
            _ => A2aError::Unauthenticated(e.message),
        })?;
    gw.check_rate(&caller)
        .map_err(|e| A2aError::RateLimited(e.message))?;
    if !record.admits(caller.kind.as_str(), &caller.id) {
        return Err(A2aError::PermissionDenied(format!(
            "{} {} may not call agent {} (spec.a2a.callers)",
            caller.kind.as_str(),
            quote(&caller.id),
            quote(&agent.to_string())
        )));
    }
    let version = headers
        .get(VERSION_HEADER)
        .and_then(|v| v.to_str().ok())
        // An empty header says nothing: the query parameter (or the default) decides.
        .filter(|v| !v.trim().is_empty())
        .map(str::to_string)
        .or_else(|| query.and_then(version_in_query));
    negotiate(version.as_deref())?;
    Ok(caller)
}

/// `A2A-Version` given as a query parameter.
fn version_in_query(query: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| k.eq_ignore_ascii_case(VERSION_HEADER))
        .map(|(_, v)| v.to_string())
}

/// A refusal in the HTTP+JSON binding's shape.
fn rest_error(e: &A2aError) -> Response {
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::BAD_REQUEST);
    let mut response = (status, axum::Json(e.to_rest_body())).into_response();
    decorate(&mut response, e, true);
    response
}

/// The content type of the binding, and the challenge of a 401.
fn decorate(response: &mut Response, e: &A2aError, rest: bool) {
    if rest {
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(REST_CONTENT_TYPE),
        );
    }
    if matches!(e, A2aError::Unauthenticated(_)) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
}

/// A refusal in the JSON-RPC binding's shape: HTTP 200 with the error object, except for
/// the refusals HTTP itself names (401, 403, 429), which keep their status.
fn jsonrpc_error(id: Value, e: &A2aError) -> Response {
    let status = match e {
        A2aError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
        A2aError::PermissionDenied(_) => StatusCode::FORBIDDEN,
        A2aError::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
        _ => StatusCode::OK,
    };
    let mut response = (status, axum::Json(e.to_jsonrpc(id))).into_response();
    decorate(&mut response, e, false);
    response
}

/// Server-sent events of `updates`, each (an update or the error that ends the stream)
/// framed by `frame` in its binding's shape.
fn sse<S>(
    updates: S,
    frame: impl Fn(Result<&StreamResponse, &A2aError>) -> Value + Send + 'static,
) -> Response
where
    S: Stream<Item = Result<StreamResponse, A2aError>> + Send + 'static,
{
    let events = updates.map(move |item| {
        let data = frame(item.as_ref());
        Ok::<_, std::convert::Infallible>(Event::default().data(data.to_string()))
    });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// `POST /a2a/{ns}/{agent}`: one JSON-RPC request.
async fn jsonrpc(
    State(gw): State<Gateway>,
    Path((ns, name)): Path<(String, String)>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(b) => b,
        Err(e) => return jsonrpc_error(Value::Null, &unreadable(&e)),
    };
    let request = match JsonRpcRequest::parse(&body) {
        Ok(r) => r,
        Err(e) => return jsonrpc_error(Value::Null, &e),
    };
    let id = request.id.clone();
    match answer(&gw, &ns, &name, &uri, &headers, || Call::parse(&request)).await {
        Ok(methods::Answer::One(value)) => axum::Json(jsonrpc_result(id, &value)).into_response(),
        Ok(methods::Answer::Stream(updates)) => sse(updates, move |item| match item {
            Ok(u) => jsonrpc_result(id.clone(), u),
            Err(e) => e.to_jsonrpc(id.clone()),
        }),
        Err(e) => jsonrpc_error(id, &e),
    }
}

/// One call of either binding: the agent served, the caller admitted, then the call `make`
/// reads from the request, run.
async fn answer(
    gw: &Gateway,
    ns: &str,
    name: &str,
    uri: &axum::http::Uri,
    headers: &HeaderMap,
    make: impl FnOnce() -> Result<Call, A2aError>,
) -> Result<methods::Answer, A2aError> {
    let (agent, record) = served(gw, ns, name).await?;
    let caller = admit(gw, headers, uri.query(), &record, &agent).await?;
    methods::run(gw, &agent, &record, &caller, make()?).await
}

/// Runs one HTTP+JSON call, answered in that binding's shape.
async fn rest(
    gw: Gateway,
    ns: String,
    name: String,
    uri: axum::http::Uri,
    headers: HeaderMap,
    make: impl FnOnce() -> Result<Call, A2aError>,
) -> Response {
    match answer(&gw, &ns, &name, &uri, &headers, make).await {
        Ok(methods::Answer::One(value)) => {
            let mut response = axum::Json(value).into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(REST_CONTENT_TYPE),
            );
            response
        }
        Ok(methods::Answer::Stream(updates)) => sse(updates, |item| match item {
            Ok(u) => serde_json::to_value(u).unwrap_or(Value::Null),
            Err(e) => e.to_rest_body(),
        }),
        Err(e) => rest_error(&e),
    }
}

/// A request body of the HTTP+JSON binding.
fn body<T: serde::de::DeserializeOwned>(
    bytes: Result<Bytes, BytesRejection>,
) -> Result<T, A2aError> {
    let bytes = bytes.map_err(|e| unreadable(&e))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| A2aError::InvalidParams(format!("the body does not fit the method: {e}")))
}

/// A body that could not be read (over the gateway's `--max-body-bytes`, or broken off).
fn unreadable(e: &BytesRejection) -> A2aError {
    A2aError::InvalidRequest(format!("the body could not be read: {}", e.body_text()))
}

async fn rest_send(
    State(gw): State<Gateway>,
    Path((ns, name)): Path<(String, String)>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    rest(gw, ns, name, uri, headers, || Ok(Call::Send(body(bytes)?))).await
}

async fn rest_stream(
    State(gw): State<Gateway>,
    Path((ns, name)): Path<(String, String)>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    rest(gw, ns, name, uri, headers, || {
        Ok(Call::Stream(body(bytes)?))
    })
    .await
}

async fn rest_list(
    State(gw): State<Gateway>,
    Path((ns, name)): Path<(String, String)>,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Response {
    let query = uri.query().unwrap_or("").to_string();
    rest(gw, ns, name, uri, headers, || {
        Ok(Call::List(methods::list_from_query(&query)?))
    })
    .await
}

/// `GET …/tasks/{id}` and `GET …/tasks/{id}:subscribe`.
async fn rest_task_get(
    State(gw): State<Gateway>,
    Path((ns, name, task)): Path<(String, String, String)>,
    Query(q): Query<std::collections::HashMap<String, String>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Response {
    rest(gw, ns, name, uri, headers, || {
        if let Some(id) = task.strip_suffix(":subscribe") {
            return Ok(Call::Subscribe(id.to_string()));
        }
        let history = q
            .get("historyLength")
            .map(|h| {
                h.parse::<i32>()
                    .map_err(|_| A2aError::InvalidParams("historyLength: a whole number".into()))
            })
            .transpose()?;
        Ok(Call::Get { id: task, history })
    })
    .await
}

/// `POST …/tasks/{id}:cancel` and `POST …/tasks/{id}:subscribe`.
async fn rest_task_post(
    State(gw): State<Gateway>,
    Path((ns, name, task)): Path<(String, String, String)>,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Response {
    rest(gw, ns, name, uri, headers, || {
        if let Some(id) = task.strip_suffix(":cancel") {
            Ok(Call::Cancel(id.to_string()))
        } else if let Some(id) = task.strip_suffix(":subscribe") {
            Ok(Call::Subscribe(id.to_string()))
        } else {
            Err(A2aError::MethodNotFound(format!(
                "no method {}: POST tasks/ID:cancel or tasks/ID:subscribe",
                quote(&task)
            )))
        }
    })
    .await
}

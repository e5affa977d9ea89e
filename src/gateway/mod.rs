//! `agentfleet gateway`: spaces over JSON/HTTP and SSE for humans and services.
//!
//! - `POST /v1/spaces/{namespace}/{space}/messages`: post as the caller (a member human);
//!   fan-out to the member agents' inboxes is the store's one atomic step.
//! - `GET  /v1/spaces/{namespace}/{space}/messages`: pages, newest first or since an id.
//! - `GET  /v1/spaces/{namespace}/{space}/stream`: SSE (messages, agents' text as it streams,
//!   activity), resumable with `Last-Event-ID`.
//! - `GET  /v1/spaces/{namespace}/{space}`, `GET /v1/me`; `GET /v1/spaces` and `GET /v1/calls`:
//!   the caller's spaces and the calls waiting for it there (`mine.rs`).
//! - `POST /v1/spaces/{namespace}/{space}/tool-calls/{callId}`: answer a call ([`decisions`]).
//! - `GET  /v1/agents/{namespace}/{agent}`: an agent, for the members of its spaces (`agents.rs`).
//! - `POST /v1/agents/{namespace}/{agent}/events`: a service triggers an agent (webhook).
//! - `POST /v1/tool-results/{callId}`: the service of an async tool call posts its result
//!   with the call's own token ([`results`]).
//! - `/openapi.json` (generated from these handlers), `/healthz`, `/readyz`, `/metrics`.
//!
//! Bearer tokens map to entities through a file of hashed tokens ([`auth`]). Errors are JSON
//! with a stable `code` ([`error::ApiError`]).

pub mod a2a;
pub mod access;
mod agents;
pub mod auth;
mod config;
pub mod console;
pub(crate) mod cycles;
pub mod decisions;
pub mod error;
mod health;
mod inspect;
pub mod kubernetes;
mod mine;
pub mod rehearsals;
pub mod results;
mod serve;
pub mod sse;
mod start;
pub mod stream;
mod streams;
mod trigger;
mod wire;

use std::sync::Arc;
use std::time::Instant;

use axum::extract::rejection::QueryRejection;
use axum::extract::{DefaultBodyLimit, MatchedPath, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use prometheus::Registry;
use serde::Deserialize;
use tokio::sync::watch;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{IntoParams, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::{ErrorBody, Me, Message, MessagePage, PostMessage, Posted, SpaceInfo};
use crate::identity::SpaceKey;
use crate::store::{NewMessage, ReadQuery, SpaceRecord, Store, StoreError, PAGE_BYTES};
use crate::telemetry::{self, GatewayMetrics};
use auth::{Caller, Entity, RateLimiter, Tokens};
pub use config::{Args, Limits};
use error::{quote, ApiError, JsonBody};
pub use serve::serve;
use sse::Hub;
pub use start::run;

/// The most messages one page returns.
const MAX_PAGE: usize = 500;

/// The gateway's shared state.
#[derive(Clone)]
pub struct Gateway {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn Store>,
    tokens: Tokens,
    limiter: RateLimiter,
    limits: Limits,
    hub: Hub,
    /// The streams each caller holds open.
    streams: streams::Streams,
    metrics: GatewayMetrics,
    shutdown: watch::Receiver<bool>,
    /// More that `/readyz` checks (in `agentfleet dev`: that every agent can work).
    readiness: std::sync::OnceLock<Readiness>,
    /// The gateway's URL as callers reach it, for A2A cards (else from each request's `Host`).
    public_url: std::sync::OnceLock<String>,
    /// Where a trace is shown (`{traceId}` where its id goes), if anywhere.
    trace_url: std::sync::OnceLock<String>,
    /// Who Kubernetes tokens are, when the gateway takes them.
    kubernetes: std::sync::OnceLock<kubernetes::Reviewer>,
    /// Who may inspect and restore agents.
    access: std::sync::OnceLock<access::Access>,
    /// What runs rehearsals in place (`agentfleet dev`'s), if anything.
    rehearser: std::sync::OnceLock<Arc<dyn rehearsals::Rehearser>>,
}

/// A readiness check beyond the data plane's: `Err` says why the process is not ready.
pub type Readiness = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

impl Gateway {
    /// A gateway over `store`, registering its metrics in `registry`. When `shutdown` turns
    /// true, [`serve`] stops accepting and open SSE streams end.
    pub fn new(
        store: Arc<dyn Store>,
        tokens: Tokens,
        limits: Limits,
        registry: &Registry,
        shutdown: watch::Receiver<bool>,
    ) -> Result<Self, prometheus::Error> {
        Ok(Self {
            inner: Arc::new(Inner {
                hub: Hub::new(store.clone(), limits.sse_recheck),
                streams: streams::Streams::new(limits.max_streams_per_caller),
                store,
                tokens,
                limiter: RateLimiter::new(limits.rate_limit, limits.rate_burst),
                limits,
                metrics: GatewayMetrics::register(registry)?,
                shutdown,
                readiness: std::sync::OnceLock::new(),
                public_url: std::sync::OnceLock::new(),
                trace_url: std::sync::OnceLock::new(),
                kubernetes: std::sync::OnceLock::new(),
                access: std::sync::OnceLock::new(),
                rehearser: std::sync::OnceLock::new(),
            }),
        })
    }

    /// Runs rehearsals in place with `rehearser` (`agentfleet dev`); once.
    pub fn set_rehearser(&self, rehearser: Arc<dyn rehearsals::Rehearser>) {
        let _ = self.inner.rehearser.set(rehearser);
    }

    /// Makes `/readyz` also require `check` to pass (set once; later calls are ignored).
    pub fn set_readiness(&self, check: Readiness) {
        let _ = self.inner.readiness.set(check);
    }

    /// Sets the gateway's URL as callers reach it (A2A cards name it); once.
    pub fn set_public_url(&self, url: impl Into<String>) {
        let _ = self.inner.public_url.set(url.into());
    }

    /// Sets where a trace is shown, `{traceId}` where its id goes; once.
    pub fn set_trace_url(&self, url: impl Into<String>) {
        let _ = self.inner.trace_url.set(url.into());
    }

    /// Takes Kubernetes tokens too, reviewed by `reviewer` (once; later calls are ignored).
    pub fn set_kubernetes(&self, reviewer: kubernetes::Reviewer) {
        let _ = self.inner.kubernetes.set(reviewer);
    }

    fn kubernetes(&self) -> Option<&kubernetes::Reviewer> {
        self.inner.kubernetes.get()
    }

    /// How often an open stream of a Kubernetes token has it reviewed again.
    fn review_every(&self) -> Option<std::time::Duration> {
        self.kubernetes().map(kubernetes::Reviewer::ttl)
    }

    /// Decides who may inspect and restore agents with `access` (once).
    pub fn set_access(&self, access: access::Access) {
        let _ = self.inner.access.set(access);
    }

    fn access(&self) -> Option<&access::Access> {
        self.inner.access.get()
    }

    /// The body size limit.
    pub fn max_body_bytes(&self) -> usize {
        self.inner.limits.max_body_bytes
    }

    /// The token map.
    fn tokens(&self) -> &Tokens {
        &self.inner.tokens
    }

    /// Takes one request from the caller's rate-limit bucket.
    fn check_rate(&self, caller: &Entity) -> Result<(), ApiError> {
        self.check_rate_of(&format!("{}:{}", caller.kind.as_str(), caller.id))
    }

    /// Takes one request from the rate-limit bucket `who`.
    fn check_rate_of(&self, who: &str) -> Result<(), ApiError> {
        self.inner
            .limiter
            .check(who)
            .map_err(ApiError::rate_limited)
    }

    /// The space, if the caller is a member of it.
    async fn member_space(
        &self,
        caller: &Entity,
        ns: &str,
        name: &str,
    ) -> Result<(SpaceKey, SpaceRecord), ApiError> {
        if !valid_name(ns) || !valid_name(name) {
            return Err(ApiError::not_found(format!(
                "no space {}",
                quote(&format!("{ns}/{name}"))
            )));
        }
        let key = SpaceKey::new(ns, name);
        let record = self
            .inner
            .store
            .space(&key)
            .await
            .map_err(|e| ApiError::unavailable(&e))?;
        let record = admit(caller, &key, record)?;
        Ok((key, record))
    }
}

/// The space `record` describes (`None`: no such space), if the caller may read and post in
/// it: the one answer for requests and open streams alike.
fn admit(
    caller: &Entity,
    key: &SpaceKey,
    record: Option<SpaceRecord>,
) -> Result<SpaceRecord, ApiError> {
    match record {
        None => Err(ApiError::not_found(format!(
            "no space {}",
            quote(&key.to_string())
        ))),
        Some(r) if caller.is_member(&r) => Ok(r),
        Some(_) => Err(ApiError::not_member(format!(
            "{} is not a member of space {}",
            quote(&caller.id),
            quote(&key.to_string())
        ))),
    }
}

/// A Kubernetes object name (DNS subdomain).
fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

/// The id of a message (`MILLIS-SEQ`), or a 400.
fn message_id(what: &str, id: &str) -> Result<String, ApiError> {
    crate::store::parse_message_id(id)
        .map(|_| id.to_string())
        .ok_or_else(|| ApiError::invalid(format!("{what}: {} is not a message id", quote(id))))
}

/// A space in a route.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct SpacePath {
    /// Namespace of the Space.
    pub namespace: String,
    /// Name of the Space.
    pub space: String,
}

/// The refusals every space route documents.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)] // documentation only: the answers are built by `ApiError`
enum SpaceRefusals {
    /// No or unknown token.
    #[response(status = 401)]
    Unauthenticated(ErrorBody),
    /// Not a member of the space.
    #[response(status = 403)]
    NotMember(ErrorBody),
    /// No such space.
    #[response(status = 404)]
    NotFound(ErrorBody),
    /// Rate limited (see `Retry-After`).
    #[response(status = 429)]
    RateLimited(ErrorBody),
    /// Data plane unavailable.
    #[response(status = 503)]
    Unavailable(ErrorBody),
}

/// The refusals of every route, before it is reached or while it runs (the connection-level
/// `bad_request` 400 and `headers_too_large` 431 are in the API's description).
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)] // documentation only: the answers are built by `ApiError`
enum RequestRefusals {
    /// The request did not reach its response in time (`request_timeout`).
    #[response(status = 408)]
    RequestTimeout(ErrorBody),
    /// The request target is too long (`uri_too_long`).
    #[response(status = 414)]
    UriTooLong(ErrorBody),
}

/// Posts a message in a space as the caller.
#[utoipa::path(
    post,
    path = "/v1/spaces/{namespace}/{space}/messages",
    tag = "spaces",
    params(
        SpacePath,
        ("Idempotency-Key" = Option<String>, Header, description = "Posting again with the same key returns the first message and delivers nothing new"),
    ),
    request_body = PostMessage,
    responses(
        (status = 201, description = "Posted and delivered to the member agents", body = Posted),
        (status = 200, description = "An earlier post had this Idempotency-Key", body = Posted),
        (status = 400, description = "Invalid body", body = ErrorBody),
        (status = 413, description = "Body too large, or the text longer than the space takes (its `retention.maxMessageBytes`)", body = ErrorBody),
        SpaceRefusals,
        RequestRefusals,
    ),
    security(("bearer" = []))
)]
async fn post_message(
    State(gw): State<Gateway>,
    Caller(caller, _): Caller,
    Path(SpacePath {
        namespace: ns,
        space: name,
    }): Path<SpacePath>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<PostMessage>,
) -> Result<(StatusCode, Json<Posted>), ApiError> {
    let (key, record) = gw.member_space(&caller, &ns, &name).await?;
    if body.text.trim().is_empty() {
        return Err(ApiError::invalid("text: must not be empty"));
    }
    if let Some(m) = &body.mention {
        if !record.has_agent(m) {
            return Err(ApiError::invalid(format!(
                "mention: {} is not an agent of space {}",
                quote(m),
                quote(&key.to_string())
            )));
        }
    }
    let idempotency_key = idempotency_key(&headers)?;
    let posted = gw
        .inner
        .store
        .post_message(
            &key,
            &NewMessage {
                sender: caller.sender(),
                text: body.text,
                mention: body.mention,
                idempotency_key,
                urgent: body.urgent,
                depth: 0,
            },
        )
        .await
        .map_err(|e| match e {
            StoreError::NotMember { .. } => ApiError::not_member(e.to_string()),
            StoreError::TooLarge { .. } => ApiError::message_too_large(e.to_string()),
            e => ApiError::unavailable(&e),
        })?;
    let status = if posted.duplicate {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((
        status,
        Json(Posted {
            id: posted.id,
            duplicate: posted.duplicate,
            delivered: posted.delivered,
        }),
    ))
}

fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(v) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let v = v
        .to_str()
        .map_err(|_| ApiError::invalid("Idempotency-Key: not visible ASCII"))?;
    if v.is_empty() || v.len() > 200 {
        return Err(ApiError::invalid("Idempotency-Key: 1 to 200 characters"));
    }
    Ok(Some(v.to_string()))
}

/// Which messages to read.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ReadParams {
    /// The most messages returned (1–500, default 50); a page also stops before 1 MiB of
    /// messages (`next` says where to go on).
    pub limit: Option<usize>,
    /// Newest first, older than this message id.
    pub before: Option<String>,
    /// Oldest first, newer than this message id (takes precedence over `before`).
    pub after: Option<String>,
}

/// Reads a space's messages.
#[utoipa::path(
    get,
    path = "/v1/spaces/{namespace}/{space}/messages",
    tag = "spaces",
    params(
        SpacePath,
        ReadParams,
    ),
    responses(
        (status = 200, description = "A page of messages", body = MessagePage),
        (status = 400, description = "Invalid query", body = ErrorBody),
        SpaceRefusals,
        RequestRefusals,
    ),
    security(("bearer" = []))
)]
async fn read_messages(
    State(gw): State<Gateway>,
    Caller(caller, _): Caller,
    Path(SpacePath {
        namespace: ns,
        space: name,
    }): Path<SpacePath>,
    query: Result<Query<ReadParams>, QueryRejection>,
) -> Result<Json<MessagePage>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::invalid(e.body_text()))?;
    let (key, _) = gw.member_space(&caller, &ns, &name).await?;
    let limit = q.limit.unwrap_or(50);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::invalid(format!("limit: 1 to {MAX_PAGE}")));
    }
    let query = ReadQuery {
        limit,
        before: q
            .before
            .as_deref()
            .map(|b| message_id("before", b))
            .transpose()?,
        after: q
            .after
            .as_deref()
            .map(|a| message_id("after", a))
            .transpose()?,
        max_bytes: PAGE_BYTES,
    };
    let page = gw
        .inner
        .store
        .read_page(&key, &query)
        .await
        .map_err(|e| ApiError::unavailable(&e))?;
    Ok(Json(MessagePage {
        messages: page.messages.iter().map(Message::from).collect(),
        next: page.next().map(str::to_string),
    }))
}

/// A space and its members.
#[utoipa::path(
    get,
    path = "/v1/spaces/{namespace}/{space}",
    tag = "spaces",
    params(
        SpacePath,
    ),
    responses(
        (status = 200, description = "The space", body = SpaceInfo),
        SpaceRefusals,
        RequestRefusals,
    ),
    security(("bearer" = []))
)]
async fn space_info(
    State(gw): State<Gateway>,
    Caller(caller, _): Caller,
    Path(SpacePath {
        namespace: ns,
        space: name,
    }): Path<SpacePath>,
) -> Result<Json<SpaceInfo>, ApiError> {
    let (key, record) = gw.member_space(&caller, &ns, &name).await?;
    Ok(Json(mine::space_info(&key, &record)))
}

/// The caller.
#[utoipa::path(
    get,
    path = "/v1/me",
    tag = "auth",
    responses(
        (status = 200, description = "Who the token stands for", body = Me),
        (status = 401, description = "No or unknown token", body = ErrorBody),
        (status = 429, description = "Rate limited", body = ErrorBody),
        RequestRefusals,
    ),
    security(("bearer" = []))
)]
async fn me(Caller(caller, _): Caller) -> Json<Me> {
    Json(Me {
        kind: caller.kind.as_str().into(),
        id: caller.id,
        name: caller.name,
    })
}

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "agentfleet gateway",
        description = "Spaces over JSON/HTTP and SSE: humans post and read messages and watch agents answer as they write; services trigger agents and post the results of their asynchronous tool calls. Errors are `{\"error\": {\"code\", \"message\"}}` with a stable code, including those answered before a route is reached: `bad_request` 400 (not HTTP/1.1), `request_timeout` 408, `uri_too_long` 414, `headers_too_large` 431. Error messages quote client input cut to 64 characters. `/metrics` serves Prometheus metrics."
    ),
    modifiers(&BearerAuth),
    components(schemas(crate::api::DeltaEvent, crate::api::ActivityEvent, crate::api::ToolRequestEvent)),
    tags(
        (name = "spaces", description = "Messages of the spaces the caller is a member of"),
        (name = "agents", description = "Service events for agents"),
        (name = "tools", description = "Results of agents' asynchronous tool calls"),
        (name = "auth", description = "The caller"),
        (name = "operations", description = "Probes"),
    )
)]
struct ApiDoc;

/// The API's routes (state still to provide) and its OpenAPI document, built from the same
/// handler annotations so they cannot disagree.
pub fn api() -> (Router<Gateway>, utoipa::openapi::OpenApi) {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(post_message, read_messages))
        .routes(routes!(space_info))
        .routes(routes!(mine::my_spaces))
        .routes(routes!(mine::my_calls))
        .routes(routes!(agents::fleet))
        .routes(routes!(agents::agent_view))
        .routes(routes!(inspect::consciousness))
        .routes(routes!(inspect::restore))
        .routes(routes!(inspect::calls))
        .routes(routes!(cycles::cycles))
        .routes(routes!(cycles::cycle))
        .routes(routes!(rehearsals::rehearsals, rehearsals::rehearse))
        .routes(routes!(rehearsals::rehearsal))
        .routes(routes!(stream::stream_space))
        .routes(routes!(trigger::trigger_agent))
        .routes(routes!(results::post_tool_result))
        .routes(routes!(decisions::answer_call))
        .routes(routes!(me))
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .split_for_parts()
}

/// The whole HTTP surface: the API, `/openapi.json`, `/metrics` (of `registry`), JSON 404/405;
/// every request within the request limits (`serve::limit_requests`) and counted.
pub fn router(gw: Gateway, registry: Registry) -> Router {
    let (api, doc) = api();
    let doc = Arc::new(doc);
    api.route(
        "/openapi.json",
        get(move || {
            let doc = doc.clone();
            async move { Json(doc.as_ref().clone()) }
        }),
    )
    .merge(a2a::routes())
    .merge(console::routes())
    .fallback(|| async { ApiError::not_found("no such route") })
    .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
    .layer(DefaultBodyLimit::max(gw.max_body_bytes()))
    .with_state(gw.clone())
    .merge(telemetry::metrics_router(registry))
    .layer(axum::middleware::from_fn_with_state(
        gw.clone(),
        serve::limit_requests,
    ))
    .layer(axum::middleware::from_fn_with_state(gw, track))
}

/// Counts requests by route pattern, method and status.
async fn track(
    State(gw): State<Gateway>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = request.method().as_str().to_string();
    let start = Instant::now();
    let response = next.run(request).await;
    let m = &gw.inner.metrics;
    m.request_duration
        .with_label_values(&[route.as_str()])
        .observe(start.elapsed().as_secs_f64());
    m.requests
        .with_label_values(&[route.as_str(), method.as_str(), response.status().as_str()])
        .inc();
    response.into_response()
}

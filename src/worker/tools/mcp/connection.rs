//! One connection to an MCP server: headers from its Secret, the Streamable HTTP transport on
//! our own HTTP client, the handshake, the tool list, and waiting until the list changes or
//! the connection is lost.
//!
//! The handshake prefers the stateless protocol (`server/discover`, 2026-07-28) and falls back
//! to `initialize` (2025-11-25) for servers that do not know it. Such a server says its tools
//! changed on its session's stream, which [`Listener`] hears; a current one says it on a
//! `subscriptions/listen` stream the connection opens when the server offers it. The list is
//! also read again every [`RELIST`], which notices a server that went away without a word.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, PaginatedRequestParams, ProtocolVersion,
    SubscriptionFilter,
};
use rmcp::service::{ClientInitializeError, NotificationContext, RunningService, Subscription};
use rmcp::transport::common::client_side_sse::ExponentialBackoff;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{
    ClientCacheConfig, ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient,
    ServiceError,
};
use tokio::sync::Notify;

use super::keyed::Keyed;
use super::offer::{Listing, Offer, OverLimit};
use crate::crd::McpServerSpec;
use crate::secrets::Redactor;
use crate::worker::tools::secrets::Secrets;

/// How long connecting and the handshake may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long listing the tools may take.
const LIST_TIMEOUT: Duration = Duration::from_secs(30);

/// How often the tool list is read again without being told it changed.
pub const RELIST: Duration = Duration::from_secs(30);

/// The largest answer of a server read whatever its `limits.maxListBytes` (4 MiB).
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// Why a listing gave no tools.
pub enum Unlisted {
    /// The request failed (the connection is lost): why.
    Failed(String),
    /// The listing went over a bound of the server's `limits`.
    OverLimit(OverLimit),
}

/// What a connection needs before it is made: the headers and what must never be shown.
pub struct Credentials {
    headers: HashMap<HeaderName, HeaderValue>,
    /// Masks the header values in everything said about this server.
    pub redactor: Redactor,
}

impl Credentials {
    /// The headers of `spec.headersFrom` (none without it); the error names the Secret or the
    /// key at fault, never a value.
    pub fn read(spec: &McpServerSpec, secrets: &Secrets) -> Result<Self, String> {
        let Some(from) = &spec.headers_from else {
            return Ok(Self {
                headers: HashMap::new(),
                redactor: Redactor::default(),
            });
        };
        let values = secrets.get(&from.secret_name)?;
        let redactor = Redactor::new(values.values());
        let mut headers = HashMap::new();
        for (key, value) in &values {
            let name = HeaderName::from_bytes(key.as_bytes()).map_err(|_| {
                format!(
                    "key {key:?} of Secret {:?} is not a header name",
                    from.secret_name
                )
            })?;
            let mut value = HeaderValue::from_str(value).map_err(|_| {
                format!(
                    "the value of key {key:?} of Secret {:?} is not a header value",
                    from.secret_name
                )
            })?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        Ok(Self { headers, redactor })
    }
}

/// Hears a server on an older protocol say its tools changed.
#[derive(Clone)]
struct Listener {
    changed: Arc<Notify>,
}

impl ClientHandler for Listener {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed.notify_one();
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("agentfleet", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }
}

/// What [`Connection::changed`] heard.
enum Heard {
    /// The server said its tools changed.
    Changed,
    /// Nothing, for [`RELIST`].
    Nothing,
    /// The `subscriptions/listen` stream ended.
    StreamEnded,
}

/// A live connection and the tools it lists.
pub struct Connection {
    running: RunningService<RoleClient, Listener>,
    changed: Arc<Notify>,
    subscription: Option<Subscription>,
    /// Whether the server sends `tools/list_changed` on a `subscriptions/listen` stream.
    listens: bool,
    /// The most bytes of one answer read.
    most: usize,
    /// The HTTP client under the transport (it tells of answers over `most`).
    http: Keyed,
}

impl Connection {
    /// Connects to `spec.url` with `credentials` and completes the handshake. The error is
    /// the cause, unmasked (the caller masks it).
    pub async fn open(spec: &McpServerSpec, credentials: &Credentials) -> Result<Self, String> {
        crate::install_crypto_provider();
        let http = Keyed::new(
            reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                // Headers carry credentials: never follow a redirect to wherever it points.
                .redirect(reqwest::redirect::Policy::none())
                // rmcp's advice: a reused connection whose last body was not read stalls.
                .pool_max_idle_per_host(0)
                .build()
                .map_err(|e| format!("building the HTTP client: {}", crate::report::chain(&e)))?,
        );
        // One answer (a page of tools, a call's result) is read up to this many bytes.
        let most = (spec.limits.max_list_bytes as usize).max(MAX_ANSWER_BYTES);
        let mut config = StreamableHttpClientTransportConfig::with_uri(spec.url.as_str())
            .custom_headers(credentials.headers.clone())
            .max_json_response_size(most)
            .max_sse_event_size(most);
        // A stream that breaks is tried again a few times; after that the connection is lost
        // and reconnected from the start, with its own backoff.
        let mut retry = ExponentialBackoff::default();
        retry.max_times = Some(3);
        retry.base_duration = Duration::from_millis(500);
        retry.max_delay = Some(Duration::from_secs(2));
        config.retry_config = Arc::new(retry);
        let changed = Arc::new(Notify::new());
        let listener = Listener {
            changed: changed.clone(),
        };
        let current = ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
        };
        let running = match handshake(&listener, &http, &config, current).await {
            // A server that knows `server/discover` but speaks only older versions: those
            // start with `initialize`.
            Err(e) if only_initialize(&e) => {
                handshake(&listener, &http, &config, ClientLifecycleMode::Initialize).await
            }
            other => other,
        }
        .map_err(|e| {
            http.last_failure()
                .unwrap_or_else(|| describe_handshake(&e))
        })?;
        // This connection keeps its own list; a cached one would hide an outage.
        running
            .peer()
            .set_response_cache_config(ClientCacheConfig::disabled())
            .await;
        let info = running.peer().peer_info();
        let listens = info.is_some_and(|i| {
            !i.protocol_version.has_initialize()
                && i.capabilities
                    .tools
                    .as_ref()
                    .and_then(|t| t.list_changed)
                    .unwrap_or(false)
        });
        let mut connection = Self {
            running,
            changed,
            subscription: None,
            listens,
            most,
            http,
        };
        connection.listen().await;
        Ok(connection)
    }

    /// What to call tools through.
    pub fn peer(&self) -> rmcp::Peer<RoleClient> {
        self.running.peer().clone()
    }

    /// The server's tools, every page, as `spec` offers them, read within `spec.limits`.
    pub async fn list(&self, spec: &McpServerSpec) -> Result<Offer, Unlisted> {
        let mut listing = Listing::new(spec);
        let pages = async {
            let mut cursor = None;
            loop {
                let params = cursor.map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
                let page = self.running.peer().list_tools(params).await.map_err(|e| {
                    if self.http.take_oversized() {
                        Unlisted::OverLimit(listing.answer_too_large(self.most))
                    } else {
                        Unlisted::Failed(format!("tools/list failed: {}", describe(&e)))
                    }
                })?;
                let more = page.next_cursor.is_some();
                listing
                    .page(page.tools, more)
                    .map_err(Unlisted::OverLimit)?;
                match page.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => return Ok(()),
                }
            }
        };
        tokio::time::timeout(LIST_TIMEOUT, pages)
            .await
            .map_err(|_| {
                Unlisted::Failed(format!(
                    "tools/list got no answer within {}s",
                    LIST_TIMEOUT.as_secs()
                ))
            })??;
        Ok(listing.finish())
    }

    /// Waits until the tools should be listed again: the server said they changed, or
    /// [`RELIST`] passed; never before `not_before` (what the server says meanwhile is
    /// answered by one listing then). An error is why the connection is lost.
    pub async fn changed(&mut self, not_before: Instant) -> Result<(), String> {
        self.heard().await?;
        tokio::time::sleep_until(not_before.into()).await;
        if let Some(subscription) = self.subscription.as_mut() {
            // Whatever else it said in the meantime is answered by the same listing.
            while let Some(Ok(Some(_))) = subscription.next().now_or_never() {}
        }
        Ok(())
    }

    /// Waits until the server says its tools changed, or [`RELIST`] passed.
    async fn heard(&mut self) -> Result<(), String> {
        if self.running.peer().is_transport_closed() {
            return Err("the connection closed".into());
        }
        let heard = match self.subscription.as_mut() {
            Some(subscription) => tokio::select! {
                _ = self.changed.notified() => Heard::Changed,
                _ = tokio::time::sleep(RELIST) => Heard::Nothing,
                next = subscription.next() => match next {
                    Ok(Some(_)) => Heard::Changed,
                    Ok(None) | Err(_) => Heard::StreamEnded,
                },
            },
            None => tokio::select! {
                _ = self.changed.notified() => Heard::Changed,
                _ = tokio::time::sleep(RELIST) => Heard::Nothing,
            },
        };
        match heard {
            Heard::Changed => {}
            // Listening is tried again (a server that restarted may offer it again).
            Heard::Nothing => self.listen().await,
            // Listing again tells whether the server is still there.
            Heard::StreamEnded => self.subscription = None,
        }
        Ok(())
    }

    /// Opens the `subscriptions/listen` stream, when the server offers one and none is open.
    async fn listen(&mut self) {
        if !self.listens || self.subscription.is_some() {
            return;
        }
        let filter = SubscriptionFilter::builder().tools_list_changed().build();
        match tokio::time::timeout(LIST_TIMEOUT, self.running.peer().listen(filter)).await {
            Ok(Ok(subscription)) => self.subscription = Some(subscription),
            Ok(Err(e)) => {
                tracing::debug!(error = %crate::report::chain(&e), "MCP subscriptions/listen refused; relisting on a timer")
            }
            Err(_) => {
                tracing::debug!("MCP subscriptions/listen not acknowledged; relisting on a timer")
            }
        }
    }
}

/// What went wrong with a request to the server, in one sentence of plain words (rmcp's own
/// text names its transport's Rust types), cut to [`MAX_SAID`] characters.
pub(super) fn describe(error: &ServiceError) -> String {
    let said = match error {
        ServiceError::McpError(e) => format!("the server answered with an error: {}", e.message),
        ServiceError::TransportSend(e) => crate::report::chain(&*e.error),
        ServiceError::TransportClosed => "the connection closed".into(),
        ServiceError::Timeout { timeout } => format!("no answer within {}s", timeout.as_secs()),
        other => crate::report::chain(other),
    };
    plain(&said)
}

/// Why the handshake failed, in one sentence of plain words (rmcp's own text names its
/// transport's types, or quotes whatever the server sent in full).
fn describe_handshake(error: &ClientInitializeError) -> String {
    let said = match error {
        ClientInitializeError::TransportError { error, context } => {
            format!("{context}: {}", crate::report::chain(&*error.error))
        }
        ClientInitializeError::ExpectedInitResponse(_)
        | ClientInitializeError::ExpectedInitResult(_) => {
            "it answered the handshake with something other than its result".into()
        }
        ClientInitializeError::JsonRpcError(e) => {
            format!("it refused the handshake: {}", e.message)
        }
        ClientInitializeError::NoCompatibleProtocolVersion { .. } => {
            "it speaks none of the MCP protocol versions this worker does".into()
        }
        other => crate::report::chain(other),
    };
    plain(&said)
}

/// `said` without the transport's type names rmcp puts in its errors
/// (`Transport [rmcp::transport::worker::WorkerTransport<…>] error: `), cut to [`MAX_SAID`].
fn plain(said: &str) -> String {
    static TYPE_NAME: std::sync::OnceLock<Option<regex::Regex>> = std::sync::OnceLock::new();
    let said =
        match TYPE_NAME.get_or_init(|| regex::Regex::new(r"Transport \[[^\]]*\] error: ?").ok()) {
            Some(re) => re.replace_all(said, "").into_owned(),
            None => said.to_string(),
        };
    crate::names::cut(&said, MAX_SAID)
}

/// The most characters of a server's own words (an error message) repeated anywhere.
pub(super) const MAX_SAID: usize = 1024;

/// Connects and completes the handshake of `lifecycle`, within [`CONNECT_TIMEOUT`].
async fn handshake(
    listener: &Listener,
    http: &Keyed,
    config: &StreamableHttpClientTransportConfig,
    lifecycle: ClientLifecycleMode,
) -> Result<RunningService<RoleClient, Listener>, Box<ClientInitializeError>> {
    let transport = StreamableHttpClientTransport::with_client(http.clone(), config.clone());
    match tokio::time::timeout(
        CONNECT_TIMEOUT,
        listener.clone().serve_with_lifecycle(transport, lifecycle),
    )
    .await
    {
        Ok(done) => done.map_err(Box::new),
        Err(_) => Err(Box::new(ClientInitializeError::ConnectionClosed(format!(
            "no answer within {}s",
            CONNECT_TIMEOUT.as_secs()
        )))),
    }
}

/// Whether the server refused the current protocol but speaks one that starts with
/// `initialize`.
fn only_initialize(error: &ClientInitializeError) -> bool {
    matches!(error, ClientInitializeError::NoCompatibleProtocolVersion { server_supported, .. }
        if server_supported.iter().any(ProtocolVersion::has_initialize))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn spec(yaml: &str) -> McpServerSpec {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn secrets(keys: &[(&str, &str)]) -> Secrets {
        Secrets::from_map(BTreeMap::from([(
            "tracker-auth".to_string(),
            keys.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )]))
    }

    #[test]
    fn headers_come_from_the_secret_and_errors_name_no_value() {
        let with = spec("{name: t, url: 'http://x/mcp', headersFrom: {secretName: tracker-auth}}");
        let c = Credentials::read(&with, &secrets(&[("Authorization", "Bearer s3cr3t-t0k3n")]))
            .unwrap();
        let v = &c.headers[&HeaderName::from_static("authorization")];
        assert_eq!(v.to_str().unwrap(), "Bearer s3cr3t-t0k3n");
        assert!(v.is_sensitive());
        assert_eq!(c.redactor.redact("Bearer s3cr3t-t0k3n"), "***");

        let missing = Credentials::read(&with, &Secrets::from_map(BTreeMap::new()))
            .err()
            .unwrap();
        assert!(missing.contains("\"tracker-auth\""), "{missing}");

        let bad = Credentials::read(&with, &secrets(&[("Authorization", "s3cr3t\nvalue")]))
            .err()
            .unwrap();
        assert!(
            bad.contains("\"Authorization\"") && !bad.contains("s3cr3t"),
            "{bad}"
        );
        let bad = Credentials::read(&with, &secrets(&[("bad header", "s3cr3t-value")]))
            .err()
            .unwrap();
        assert!(!bad.contains("s3cr3t"), "{bad}");

        let without = spec("{name: t, url: 'http://x/mcp'}");
        let c = Credentials::read(&without, &Secrets::from_map(BTreeMap::new())).unwrap();
        assert!(c.headers.is_empty() && c.redactor.is_empty());
    }

    #[test]
    fn what_goes_wrong_is_said_without_type_names_and_bounded() {
        let said = plain("Send message error Transport [rmcp::transport::worker::WorkerTransport<rmcp::transport::streamable_http_client::StreamableHttpClientWorker<agentfleet::Keyed>>] error: Client error: error sending request, when send initialize request");
        assert_eq!(
            said,
            "Send message error Client error: error sending request, when send initialize request"
        );
        assert!(plain(&"x".repeat(100_000)).chars().count() <= MAX_SAID);
        let echoed = ClientInitializeError::ExpectedInitResponse(None);
        assert_eq!(
            describe_handshake(&echoed),
            "it answered the handshake with something other than its result"
        );
        let closed = ClientInitializeError::ConnectionClosed("no answer within 30s".into());
        assert_eq!(
            describe_handshake(&closed),
            "connection closed: no answer within 30s"
        );
    }
}

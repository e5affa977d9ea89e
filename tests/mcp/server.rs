//! The MCP server of these tests: rmcp's own server side over Streamable HTTP on a loopback
//! port, serving a tool list (two tools a page, or as a [`Paging`] says) and a few tools.

use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentfleet::testing::free_port;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
    SubscriptionFilter, Tool,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext, SubscriptionSink};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler};
use serde_json::{json, Value};

/// Which protocol the server speaks.
#[derive(Clone, Copy, Debug)]
pub enum Era {
    /// 2026-07-28 (stateless, `subscriptions/listen`), and 2025-11-25 for older clients.
    Current,
    /// Only 2025-11-25: `initialize`, a session, notifications on its stream.
    Legacy,
}

/// How the server pages its tool list.
#[derive(Clone, Copy, Debug)]
pub enum Paging {
    /// Two tools a page, so that the client has to follow the cursor.
    Two,
    /// This many tools a page, in order, the last page without a cursor.
    By(usize),
    /// Without end: every answer this many new tools whose descriptions are this many bytes,
    /// and always another cursor.
    Endless { tools: usize, description: usize },
}

/// What the server knows and saw.
pub struct World {
    pub era: Era,
    pub paging: Mutex<Paging>,
    pub tools: Mutex<Vec<Tool>>,
    /// Sessions of older clients, told when the tools change.
    pub peers: Mutex<Vec<Peer<RoleServer>>>,
    /// `subscriptions/listen` streams of current clients.
    pub sinks: Mutex<Vec<SubscriptionSink>>,
    /// The `authorization` header of every request.
    pub authorization: Mutex<Vec<Option<String>>>,
    /// The `Idempotency-Key` header of every request that had one.
    pub idempotency_headers: Mutex<Vec<String>>,
    /// The idempotency key in the `_meta` of every `tools/call`.
    pub idempotency_meta: Mutex<Vec<Option<String>>>,
    /// How many `tools/list` requests it answered.
    pub lists: AtomicUsize,
    /// Every `tools/call`: the tool and its arguments.
    pub calls: Mutex<Vec<(String, Value)>>,
}

#[derive(Clone)]
struct Handler(Arc<World>);

pub fn tool(name: &str, description: &str) -> Tool {
    let schema = json!({"type": "object", "properties": {"text": {"type": "string"}}});
    Tool::new(
        name.to_string(),
        description.to_string(),
        schema.as_object().cloned().unwrap(),
    )
}

pub fn text(t: impl Into<String>) -> ContentBlock {
    ContentBlock::text(t)
}

impl ServerHandler for Handler {
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        match self.0.era {
            Era::Current => {
                Cow::Borrowed(&[ProtocolVersion::V_2026_07_28, ProtocolVersion::V_2025_11_25])
            }
            Era::Legacy => Cow::Borrowed(&[ProtocolVersion::V_2025_11_25]),
        }
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("test-tracker", "1.0.0"))
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.supported_by(&self.get_info().capabilities))
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        self.0.sinks.lock().unwrap().push(context.sink().clone());
        context.cancelled().await;
        Ok(())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.0.peers.lock().unwrap().push(context.peer);
    }

    /// A page as [`Paging`] says.
    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.0.lists.fetch_add(1, Ordering::SeqCst);
        let start: usize = request
            .and_then(|r| r.cursor)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let per_page = match *self.0.paging.lock().unwrap() {
            Paging::Two => 2,
            Paging::By(n) => n,
            Paging::Endless { tools, description } => {
                let d = "d".repeat(description);
                let page = (start..start + tools)
                    .map(|i| tool(&format!("t{i}"), &d))
                    .collect();
                let mut page = ListToolsResult::with_all_items(page);
                page.next_cursor = Some((start + tools).to_string());
                return Ok(page);
            }
        };
        let tools = self.0.tools.lock().unwrap();
        let end = (start + per_page).min(tools.len());
        let mut page = ListToolsResult::with_all_items(tools[start.min(end)..end].to_vec());
        page.next_cursor = (end < tools.len()).then(|| end.to_string());
        Ok(page)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arg = |k: &str| {
            request
                .arguments
                .as_ref()
                .and_then(|a| a.get(k))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        // rmcp hands the request's `_meta` over in the context.
        let key = context
            .meta
            .get(agentfleet::worker::tools::mcp::META_KEY)
            .and_then(Value::as_str)
            .map(str::to_string);
        self.0.idempotency_meta.lock().unwrap().push(key);
        self.0.calls.lock().unwrap().push((
            request.name.to_string(),
            Value::Object(request.arguments.clone().unwrap_or_default()),
        ));
        let result = match request.name.as_ref() {
            "echo" => CallToolResult::success(vec![text(format!("echo: {}", arg("text")))]),
            "count" => CallToolResult::structured(json!({"open": 3, "closed": 7})),
            "fail" => CallToolResult::error(vec![text("the ticket system is read-only today")]),
            "slow" => {
                tokio::time::sleep(Duration::from_secs(5)).await;
                CallToolResult::success(vec![text("finally")])
            }
            "whoami" => {
                let seen = self.0.authorization.lock().unwrap().last().cloned();
                CallToolResult::success(vec![text(format!(
                    "you sent {}",
                    seen.flatten().unwrap_or_default()
                ))])
            }
            other => return Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        };
        Ok(CallToolResponse::Complete(result))
    }
}

/// A running MCP server; stopped when dropped.
pub struct McpTestServer {
    pub url: String,
    pub world: Arc<World>,
    /// Cancels the server's token: every session and stream ends, the listener closes.
    stop: Box<dyn Fn() + Send + Sync>,
    task: tokio::task::JoinHandle<()>,
}

impl McpTestServer {
    pub async fn start(era: Era, tools: Vec<Tool>) -> Self {
        Self::start_on(free_port().unwrap(), era, tools).await
    }

    /// A server paging its tools as `paging` says.
    pub async fn start_paging(paging: Paging, tools: Vec<Tool>) -> Self {
        let server = Self::start(Era::Current, tools).await;
        *server.world.paging.lock().unwrap() = paging;
        server
    }

    pub async fn start_on(port: u16, era: Era, tools: Vec<Tool>) -> Self {
        let world = Arc::new(World {
            era,
            paging: Mutex::new(Paging::Two),
            lists: AtomicUsize::new(0),
            calls: Mutex::new(Vec::new()),
            tools: Mutex::new(tools),
            peers: Mutex::new(Vec::new()),
            sinks: Mutex::new(Vec::new()),
            authorization: Mutex::new(Vec::new()),
            idempotency_headers: Mutex::new(Vec::new()),
            idempotency_meta: Mutex::new(Vec::new()),
        });
        Self::serve(port, world).await
    }

    pub async fn serve(port: u16, world: Arc<World>) -> Self {
        let config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(true)
            .with_sse_keep_alive(Some(Duration::from_millis(200)));
        let token = config.cancellation_token.clone();
        let handler = Handler(world.clone());
        let service: StreamableHttpService<Handler, LocalSessionManager> =
            StreamableHttpService::new(move || Ok(handler.clone()), Default::default(), config);
        let seen = world.clone();
        let router =
            axum::Router::new()
                .nest_service("/mcp", service)
                .layer(axum::middleware::from_fn(
                    move |request: axum::extract::Request, next: axum::middleware::Next| {
                        let seen = seen.clone();
                        async move {
                            let auth = request
                                .headers()
                                .get("authorization")
                                .and_then(|v| v.to_str().ok())
                                .map(str::to_string);
                            seen.authorization.lock().unwrap().push(auth);
                            if let Some(key) = request
                                .headers()
                                .get("idempotency-key")
                                .and_then(|v| v.to_str().ok())
                            {
                                seen.idempotency_headers
                                    .lock()
                                    .unwrap()
                                    .push(key.to_string());
                            }
                            next.run(request).await
                        }
                    },
                ));
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        let shutdown = token.clone();
        let stop = Box::new(move || token.cancel());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(async move { shutdown.cancelled_owned().await })
                .await;
        });
        Self {
            url: format!("http://127.0.0.1:{port}/mcp"),
            world,
            stop,
            task,
        }
    }

    /// Adds a tool and tells every client.
    pub async fn add_tool(&self, tool: Tool) {
        self.world.tools.lock().unwrap().push(tool);
        self.tell_changed().await;
    }

    /// Tells every client that the tools changed.
    pub async fn tell_changed(&self) {
        let peers = self.world.peers.lock().unwrap().clone();
        for peer in peers {
            let _ = peer.notify_tool_list_changed().await;
        }
        let sinks = self.world.sinks.lock().unwrap().clone();
        for sink in sinks {
            let _ = sink.notify_tool_list_changed().await;
        }
    }

    /// How many `tools/list` requests it answered.
    pub fn lists(&self) -> usize {
        self.world.lists.load(Ordering::SeqCst)
    }

    /// Stops serving, closing every session and stream.
    pub async fn stop(mut self) {
        (self.stop)();
        let _ = tokio::time::timeout(Duration::from_secs(5), &mut self.task).await;
    }
}

impl Drop for McpTestServer {
    fn drop(&mut self) {
        (self.stop)();
        self.task.abort();
    }
}

pub fn tracker_tools() -> Vec<Tool> {
    vec![
        tool("echo", "Echo the text back."),
        tool("count", "Count tickets by state."),
        tool("fail", "Always fails."),
        tool("slow", "Takes five seconds."),
        tool("whoami", "Say which credentials arrived."),
        tool("delete_everything", "Not for agents."),
    ]
}

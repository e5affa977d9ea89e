//! What an Agent may call: built-in tools, HTTP endpoints and MCP servers, and what its
//! worker reports it actually has.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The tools an agent may call.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolsSpec {
    /// Built-in tools to enable. Defaults to all of them. A cycle offers those that apply:
    /// `enter_space` to an agent of more than one space, `read_messages` to an agent of more
    /// than one space or whose conversation was compacted (either also when a phase names
    /// it), the memory, goal and plan tools where the agent's memory is kept, and
    /// `delete_memories` only when a phase names it (`set_memories` forgets a key given an
    /// empty fact). A tool not offered still works when the model calls it.
    #[serde(default = "BuiltinTool::all")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub builtin: Vec<BuiltinTool>,

    /// HTTP endpoints the agent calls as tools (at most 64).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub http: Vec<HttpToolSpec>,

    /// MCP servers (Streamable HTTP) whose tools the agent calls (at most 16).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub mcp: Vec<McpServerSpec>,

    /// Remote agents called over A2A, each skill a tool `NAME__SKILL` (at most 16).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub a2a: Vec<super::A2aAgentToolSpec>,

    /// Tools whose result a human supplies (a form answer, a choice, a confirmation): a call
    /// pauses the cycle until a member of the active space answers it through the gateway
    /// (`POST /v1/spaces/{ns}/{space}/tool-calls/{callId}`) or it times out. At most 32.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub interactive: Vec<InteractiveToolSpec>,

    /// How long a call that needs approval (`requireApproval`) waits for a human's decision,
    /// in seconds; after that the model is told it timed out.
    #[serde(default = "default_approval_timeout_seconds")]
    #[schemars(range(min = 1, max = 2592000))]
    pub approval_timeout_seconds: u32,

    /// Who may answer the calls asked of people (approvals, interactive tools), by tool: the
    /// first rule one of whose patterns matches the tool's name names them. A call no rule
    /// matches is answered by the humans of the space it was asked in. An outside caller
    /// (A2A) never approves a call its own conversation provoked, so an approval asked in a
    /// conversation needs a rule here, or it is refused at once. At most 32 rules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub approvers: Vec<ApproverRule>,
}

/// Who may answer the calls of some tools.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApproverRule {
    /// The tools, by the names the model calls them (`status.tools` lists them): matched
    /// without regard to case, `*` standing for any run of characters (`billing__*`; at most
    /// four in a pattern). A pattern that matches no tool the agent has is a warning
    /// (`ApproversMatchTools`).
    #[schemars(length(min = 1, max = 64))]
    #[schemars(inner(length(min = 1, max = 128), regex(pattern = r"^[^*]*(\*[^*]*){0,4}$")))]
    pub tools: Vec<String>,

    /// Who may answer them: `human:ID` (a Space member's id, as the gateway's tokens name
    /// people) or `group:NAME` (a group of the gateway's token file).
    #[schemars(length(min = 1, max = 64))]
    #[schemars(inner(regex(
        pattern = r"^(human:[A-Za-z0-9][-A-Za-z0-9_.@]{0,127}|group:[^\s]{1,256})$"
    )))]
    pub subjects: Vec<String>,
}

/// A tool whose result a human supplies.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InteractiveToolSpec {
    /// The name the model calls it by.
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[a-zA-Z0-9_-]+$"))]
    pub name: String,

    /// What it asks, for the model.
    #[schemars(length(min = 1, max = 1024))]
    pub description: String,

    /// JSON Schema of the model's arguments (what the human is shown and asked).
    #[serde(default = "empty_object_schema")]
    #[schemars(schema_with = "any_object")]
    pub input_schema: serde_json::Value,

    /// JSON Schema the human's answer must match (any JSON when empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object_or_null")]
    pub result_schema: Option<serde_json::Value>,

    /// How long the call waits for an answer, in seconds; after that the model is told it
    /// timed out.
    #[serde(default = "default_interactive_timeout_seconds")]
    #[schemars(range(min = 1, max = 2592000))]
    pub timeout_seconds: u32,
}

impl Default for ToolsSpec {
    fn default() -> Self {
        Self {
            builtin: BuiltinTool::all(),
            http: Vec::new(),
            mcp: Vec::new(),
            a2a: Vec::new(),
            interactive: Vec::new(),
            approval_timeout_seconds: default_approval_timeout_seconds(),
            approvers: Vec::new(),
        }
    }
}

impl ToolsSpec {
    /// The Secrets whose keys become headers of the agent's HTTP tools, MCP servers and A2A
    /// agents, each once, in a stable order.
    pub fn secrets(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .http
            .iter()
            .filter_map(|t| t.headers_from.as_ref())
            .chain(self.mcp.iter().filter_map(|m| m.headers_from.as_ref()))
            .chain(self.a2a.iter().filter_map(|a| a.headers_from.as_ref()))
            .map(|h| h.secret_name.as_str())
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// The HTTP tools and MCP servers that take headers from one of `secrets`, for a message
    /// (`HTTP tool a, MCP server m`).
    pub fn secret_users(&self, secrets: &[&str]) -> String {
        let uses = |h: &Option<HeadersFrom>| {
            h.as_ref()
                .is_some_and(|h| secrets.contains(&h.secret_name.as_str()))
        };
        let http = self
            .http
            .iter()
            .filter(|t| uses(&t.headers_from))
            .map(|t| format!("HTTP tool {}", t.name));
        let mcp = self
            .mcp
            .iter()
            .filter(|s| uses(&s.headers_from))
            .map(|s| format!("MCP server {}", s.name));
        let a2a = self
            .a2a
            .iter()
            .filter(|a| uses(&a.headers_from))
            .map(|a| format!("A2A agent {}", a.name));
        http.chain(mcp).chain(a2a).collect::<Vec<_>>().join(", ")
    }
}

/// An HTTP endpoint the agent calls as a tool. Its arguments are validated against
/// `inputSchema` before any request is made; whatever goes wrong (a timeout, a status other
/// than 2xx, an oversized or non-JSON answer) comes back to the model as an error result.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpToolSpec {
    /// The name the model calls it by: letters, digits, `_` and `-`, unique among the agent's
    /// tools (the built-in names are taken).
    #[schemars(
        length(min = 1, max = 64),
        regex(pattern = r"^[A-Za-z][A-Za-z0-9_-]*$")
    )]
    pub name: String,

    /// What it does and when to use it, for the model.
    #[schemars(length(min = 1, max = 4096))]
    pub description: String,

    /// JSON Schema (an object schema) of the arguments; the model sees it, and arguments are
    /// checked against it before the request.
    #[serde(default = "empty_object_schema")]
    #[schemars(schema_with = "any_object")]
    pub input_schema: serde_json::Value,

    /// The URL to call. `{arg}` placeholders are filled from the arguments of that name
    /// (strings, numbers or booleans), percent-encoded; the arguments used there are not sent
    /// again. Redirects are not followed: a 3xx answer is an error result.
    #[schemars(length(min = 1, max = 2048), regex(pattern = r"^https?://"))]
    pub url: String,

    /// HTTP method. With `GET` and `DELETE` the remaining arguments are sent as query
    /// parameters (a list as the parameter repeated, an object as JSON text, null left out),
    /// otherwise as a JSON body. Every request carries `Idempotency-Key`, the same for every
    /// try of one call.
    #[serde(default)]
    pub method: HttpMethod,

    /// Headers sent with every call.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,

    /// A Secret (in the Agent's namespace) whose keys become headers (key = header name,
    /// value = header value), for credentials. Never logged or shown: every value of it is
    /// masked (`***`) in results, errors, logs and status. While it is missing the tool is
    /// not ready and its calls are error results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers_from: Option<HeadersFrom>,

    /// How long a call may take, in seconds.
    #[serde(default = "default_timeout_seconds")]
    #[schemars(range(min = 1, max = 600))]
    pub timeout_seconds: u32,

    /// The longest answer kept, in bytes; a longer body is cut and the result says so
    /// (`"truncated": true` and the body's size). The result is
    /// `{"status": 200, "body": …, "truncated": false}`, the body as JSON when it is JSON,
    /// else as text; any other status than 2xx is an error result with the status and body, and
    /// so is a whole answer whose `Content-Type` says JSON that is not valid JSON.
    #[serde(default = "default_max_response_bytes")]
    #[schemars(range(min = 1, max = 1048576))]
    pub max_response_bytes: u32,

    /// `sync`: the result is the answer. `async`: the request carries a callback URL and a
    /// one-time token (headers `X-Agentfleet-Callback` and `X-Agentfleet-Callback-Token`), the
    /// model gets `{"status": "pending", "callId": …}` once the service accepted the request
    /// (2xx; any other answer is an error result and no result is taken for the call), and
    /// the service's later POST to the callback (`Authorization: Bearer TOKEN`, body
    /// `{"result": …}` or `{"error": "…"}`) comes back to the agent as a `tool_result` inbox
    /// event, once. An async tool needs the worker's `--callback-url` (the gateway's address).
    #[serde(default)]
    pub mode: ToolMode,

    /// For `async` tools: how long the service has to post the result, in seconds (default a
    /// day). A later result is refused (`410 expired`) for another day, then as unknown (404).
    #[serde(default = "default_result_ttl_seconds")]
    #[schemars(range(min = 1, max = 2592000))]
    pub result_ttl_seconds: u32,

    /// Whether repeating the call is harmless. A call whose outcome is unknown (the worker
    /// died during it) is retried, with the same `Idempotency-Key` header, only when this is
    /// true; otherwise the model is told it was not repeated. Defaults to true for `GET`,
    /// false otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,

    /// Ask before each call: the cycle pauses (durably; the worker sleeps) until one of its
    /// approvers (`tools.approvers`; by default the humans of the space the call is asked
    /// in) approves or denies it, or `tools.approvalTimeoutSeconds` pass.
    #[serde(default)]
    pub require_approval: bool,

    /// Show the call's arguments and result to the humans of the active space (a live
    /// `activity` event `tool_result` whose `detail` is JSON `{"arguments", "result"}`,
    /// secrets masked); by default only the tool's name shows ("is using …").
    #[serde(default)]
    pub visible: bool,
}

impl HttpToolSpec {
    /// Whether repeating the call is harmless (`idempotent`, else by method).
    pub fn is_idempotent(&self) -> bool {
        self.idempotent
            .unwrap_or(matches!(self.method, HttpMethod::Get))
    }
}

/// An HTTP method of a tool.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum HttpMethod {
    /// GET (arguments as query parameters), HTTP's own default: a tool that says nothing
    /// reads, it never acts by accident.
    #[default]
    Get,
    /// POST (arguments as a JSON body).
    Post,
    /// PUT (arguments as a JSON body).
    Put,
    /// PATCH (arguments as a JSON body).
    Patch,
    /// DELETE (arguments as query parameters).
    Delete,
}

/// Whether a tool's result is its answer or arrives later.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ToolMode {
    /// The answer is the result.
    #[default]
    Sync,
    /// The result is posted back later to the gateway.
    Async,
}

/// A Secret whose keys become headers.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeadersFrom {
    /// Name of the Secret, in the Agent's namespace.
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    )]
    pub secret_name: String,
}

/// An MCP server (Streamable HTTP transport) whose tools the agent may call, each as
/// `NAME__TOOL`. Its tools are listed when the worker starts and again when the server says
/// they changed; while it cannot be reached its tools are unavailable (the agent keeps
/// working) and it is retried with backoff.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpServerSpec {
    /// Prefix of its tools' names: letters, digits, `_` and `-`.
    #[schemars(
        length(min = 1, max = 32),
        regex(pattern = r"^[A-Za-z][A-Za-z0-9_-]*$")
    )]
    pub name: String,

    /// The server's Streamable HTTP endpoint.
    #[schemars(length(min = 1, max = 2048), regex(pattern = r"^https?://"))]
    pub url: String,

    /// A Secret (in the Agent's namespace) whose keys become headers of every request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers_from: Option<HeadersFrom>,

    /// The server's tools the agent may call (by the server's names); empty: all of them (up
    /// to `limits.maxTools`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 128))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub tools: Vec<String>,

    /// How long a call may take, in seconds.
    #[serde(default = "default_timeout_seconds")]
    #[schemars(range(min = 1, max = 600))]
    pub timeout_seconds: u32,

    /// Whether repeating a call whose outcome is unknown (the worker died during it) is
    /// harmless; only then is it retried.
    #[serde(default)]
    pub idempotent: bool,

    /// Tools of this server (as it names them; without regard to case, `*` for any run of
    /// characters) whose calls one of their approvers must approve first; see the HTTP tools'
    /// `requireApproval`. A pattern that matches none of the server's tools is a warning
    /// (`ApproversMatchTools`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 128))]
    #[schemars(inner(length(min = 1, max = 128), regex(pattern = r"^[^*]*(\*[^*]*){0,4}$")))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub require_approval: Vec<String>,

    /// Bounds on what the server may send. Over a bound of its tool list the server offers
    /// no tools (`status.tools` and `ToolsReady` say which bound); tools beyond `maxTools` are
    /// not offered and long descriptions are cut (`status.tools` says so). Nothing else of
    /// the agent is affected.
    #[serde(default, skip_serializing_if = "McpLimits::is_default")]
    pub limits: McpLimits,
}

/// Bounds on one MCP server (each has a default; see the fields).
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpLimits {
    /// The most pages (`tools/list` answers followed by their cursor) one listing of the
    /// server's tools may take; a server that pages on longer offers no tools.
    #[serde(default = "default_max_list_pages")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_list_pages: u32,

    /// The most tools one listing may hold, every page together and before the allowlist
    /// (`tools`); a server that lists more offers no tools.
    #[serde(default = "default_max_listed_tools")]
    #[schemars(range(min = 1, max = 100000))]
    pub max_listed_tools: u32,

    /// The most bytes one listing may hold (every page together, its tools as JSON); a
    /// server that lists more offers no tools. A single answer of the server (a page, or the
    /// result of a call) is refused beyond this or 4 MiB, whichever is larger.
    #[serde(default = "default_max_list_bytes")]
    #[schemars(range(min = 1024, max = 67108864))]
    pub max_list_bytes: u32,

    /// The most of its tools offered to the model, in the order the server lists them (model
    /// providers refuse more than 128 tools in all); the rest are in `status.tools` as not
    /// offered. Choose which with the allowlist (`tools`).
    #[serde(default = "default_max_tools")]
    #[schemars(range(min = 1, max = 128))]
    pub max_tools: u32,

    /// The longest description of a tool the model is shown, in bytes; a longer one is cut
    /// (`status.tools` notes it).
    #[serde(default = "default_max_description_bytes")]
    #[schemars(range(min = 64, max = 65536))]
    pub max_description_bytes: u32,

    /// The longest input schema of a tool, in bytes of JSON; a tool with a longer one is not
    /// offered.
    #[serde(default = "default_max_schema_bytes")]
    #[schemars(range(min = 256, max = 1048576))]
    pub max_schema_bytes: u32,

    /// The least time between two listings, in seconds: however often the server says its
    /// tools changed (`notifications/tools/list_changed`), they are listed again at most
    /// this often.
    #[serde(default = "default_min_relist_seconds")]
    #[schemars(range(min = 1, max = 3600))]
    pub min_relist_seconds: u32,
}

impl Default for McpLimits {
    fn default() -> Self {
        Self {
            max_list_pages: default_max_list_pages(),
            max_listed_tools: default_max_listed_tools(),
            max_list_bytes: default_max_list_bytes(),
            max_tools: default_max_tools(),
            max_description_bytes: default_max_description_bytes(),
            max_schema_bytes: default_max_schema_bytes(),
            min_relist_seconds: default_min_relist_seconds(),
        }
    }
}

impl McpLimits {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

fn default_max_list_pages() -> u32 {
    20
}

fn default_max_listed_tools() -> u32 {
    1000
}

fn default_max_list_bytes() -> u32 {
    4 * 1024 * 1024
}

fn default_max_tools() -> u32 {
    64
}

fn default_max_description_bytes() -> u32 {
    2048
}

fn default_max_schema_bytes() -> u32 {
    16 * 1024
}

fn default_min_relist_seconds() -> u32 {
    2
}

/// A tool the worker actually has, as `status.tools` shows it.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolStatus {
    /// The name the model calls it by.
    pub name: String,
    /// `builtin`, `http`, or `mcp:SERVER`.
    pub source: String,
    /// Whether it can be called right now.
    pub ready: bool,
    /// Why not, when it cannot (secrets masked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// What was changed to offer it (a description cut to its bound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

fn empty_object_schema() -> serde_json::Value {
    serde_json::json!({"type": "object"})
}

fn default_timeout_seconds() -> u32 {
    30
}

fn default_approval_timeout_seconds() -> u32 {
    3600
}

fn default_interactive_timeout_seconds() -> u32 {
    3600
}

/// [`any_object`], or nothing.
fn any_object_or_null(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut s = any_object(g);
    s.insert("nullable".into(), true.into());
    s
}

fn default_max_response_bytes() -> u32 {
    64 * 1024
}

fn default_result_ttl_seconds() -> u32 {
    86_400
}

/// The schema of a free-form JSON object (a JSON Schema written by the user).
fn any_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// A tool that every worker provides.
#[derive(
    Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum BuiltinTool {
    /// Post a message to the active space or to another space the agent is a member of.
    SendMessage,
    /// Make a space the active one and see its recent messages.
    EnterSpace,
    /// Read messages of a space the agent is a member of.
    ReadMessages,
    /// End the cycle without acting; nothing of it is remembered.
    Skip,
    /// Store facts the agent keeps across cycles.
    SetMemories,
    /// Remove stored memories.
    DeleteMemories,
    /// Set the goals the agent is working towards.
    SetGoals,
    /// Schedule (or cancel) plans: instructions the agent gets back at a time it chooses.
    SetPlans,
}

impl BuiltinTool {
    /// Every built-in tool, in a stable order.
    pub fn all() -> Vec<BuiltinTool> {
        vec![
            BuiltinTool::SendMessage,
            BuiltinTool::EnterSpace,
            BuiltinTool::ReadMessages,
            BuiltinTool::Skip,
            BuiltinTool::SetMemories,
            BuiltinTool::DeleteMemories,
            BuiltinTool::SetGoals,
            BuiltinTool::SetPlans,
        ]
    }

    /// The name the model calls it by (and `cycle.phases[].activeTools` names it by).
    pub fn name(self) -> &'static str {
        match self {
            BuiltinTool::SendMessage => "send_message",
            BuiltinTool::EnterSpace => "enter_space",
            BuiltinTool::ReadMessages => "read_messages",
            BuiltinTool::Skip => "skip",
            BuiltinTool::SetMemories => "set_memories",
            BuiltinTool::DeleteMemories => "delete_memories",
            BuiltinTool::SetGoals => "set_goals",
            BuiltinTool::SetPlans => "set_plans",
        }
    }

    /// Whether it reads or changes the agent's long memory (memories, goals, plans): not
    /// offered to an A2A conversation with a memory of its own (`spec.a2a.memory`); a
    /// cycle's record keeps what the notes it changed were.
    pub fn long_memory(self) -> bool {
        matches!(
            self,
            BuiltinTool::SetMemories
                | BuiltinTool::DeleteMemories
                | BuiltinTool::SetGoals
                | BuiltinTool::SetPlans
        )
    }

    /// The built-in tool called `name`, if there is one.
    pub fn from_name(name: &str) -> Option<BuiltinTool> {
        Self::all().into_iter().find(|t| t.name() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_tool_names_are_what_the_manifest_says() {
        for tool in BuiltinTool::all() {
            let manifest = serde_json::to_value(tool).unwrap();
            assert_eq!(manifest, tool.name(), "{tool:?}");
            assert_eq!(BuiltinTool::from_name(tool.name()), Some(tool));
        }
        assert_eq!(BuiltinTool::from_name("Send_Message"), None);
        assert_eq!(BuiltinTool::from_name("http"), None);
    }
}

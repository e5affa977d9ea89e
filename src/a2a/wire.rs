//! The ProtoJSON form of the A2A v1.0 messages (`lf.a2a.v1`), as serde types.
//!
//! The rules, from the proto and ProtoJSON:
//! * field names are camelCase; enums are their proto names (`TASK_STATE_COMPLETED`);
//! * reading, a missing field is its default (proto3 checks no presence on the wire, so the
//!   proto's `REQUIRED` fields are checked where they matter, e.g. [`Message::validate`]);
//!   unknown fields are ignored, unknown enum names read as `UNSPECIFIED`, and int32 fields
//!   take JSON numbers and numeric strings;
//! * writing, unset optional fields, empty lists and maps and `false` are left out, as
//!   ProtoJSON printers do; strings, numbers, enums and messages are always written;
//! * `google.protobuf.Struct` is a [`JsonObject`], `Value` a [`serde_json::Value`] and
//!   `Timestamp` an RFC 3339 string ([`now_timestamp`]).

use std::collections::BTreeMap;

use serde::de::{self, DeserializeOwned, Deserializer};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{json, Value};

/// The protocol version this module speaks (`Major.Minor`, the `A2A-Version` header's value).
pub const PROTOCOL_VERSION: &str = "1.0";
/// The HTTP header (gRPC metadata key) a client names its protocol version in.
pub const VERSION_HEADER: &str = "A2A-Version";
/// Where an agent's card is served, relative to the agent's base URL.
pub const CARD_PATH: &str = "/.well-known/agent-card.json";
/// The content type of HTTP+JSON (REST) bodies; JSON-RPC uses `application/json`.
pub const REST_CONTENT_TYPE: &str = "application/a2a+json";
/// `AgentInterface.protocolBinding` of the JSON-RPC 2.0 binding.
pub const BINDING_JSONRPC: &str = "JSONRPC";
/// `AgentInterface.protocolBinding` of the HTTP+JSON (REST) binding.
pub const BINDING_HTTP_JSON: &str = "HTTP+JSON";
/// `ErrorInfo.domain` of every A2A error.
pub const ERROR_DOMAIN: &str = "a2a-protocol.org";
/// The ProtoJSON `@type` of `google.rpc.ErrorInfo` in error details.
pub const ERROR_INFO_TYPE: &str = "type.googleapis.com/google.rpc.ErrorInfo";

/// A `google.protobuf.Struct`: a JSON object (metadata, extension parameters).
pub type JsonObject = serde_json::Map<String, Value>;

/// Whether ProtoJSON leaves a field's value out when writing: unset, empty or `false`.
trait Skip {
    fn skip(&self) -> bool {
        false
    }
}

impl<T> Skip for Option<T> {
    fn skip(&self) -> bool {
        self.is_none()
    }
}

impl<T> Skip for Vec<T> {
    fn skip(&self) -> bool {
        self.is_empty()
    }
}

impl<K, V> Skip for BTreeMap<K, V> {
    fn skip(&self) -> bool {
        self.is_empty()
    }
}

impl Skip for bool {
    fn skip(&self) -> bool {
        !*self
    }
}

impl Skip for String {}

/// A proto message as a public struct: camelCase fields, each read as its default when absent
/// and left out when [`Skip`] says so.
macro_rules! wire_struct {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $field:ident: $ty:ty,)+ }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
        #[serde(rename_all = "camelCase", default)]
        pub struct $name {
            $($(#[$fm])* #[serde(skip_serializing_if = "Skip::skip")] pub $field: $ty,)+
        }

        impl Skip for $name {}
    };
}

/// An int32 as ProtoJSON writes it: a JSON number or a numeric string.
#[derive(Deserialize)]
#[serde(untagged)]
enum Int32 {
    Number(i64),
    Text(String),
}

fn opt_int32<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i32>, D::Error> {
    let n = match Option::<Int32>::deserialize(d)? {
        None => return Ok(None),
        Some(Int32::Number(n)) => i32::try_from(n).ok(),
        Some(Int32::Text(s)) => s.trim().parse().ok(),
    };
    n.map(Some)
        .ok_or_else(|| de::Error::custom("expected an int32 (a number or a numeric string)"))
}

fn int32<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
    opt_int32(d).map(Option::unwrap_or_default)
}

/// A proto enum as ProtoJSON has it: written and read as its name (an unknown name reads as
/// the default, `UNSPECIFIED`).
macro_rules! proto_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident = $wire:literal,)+ }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub enum $name { $($(#[$vm])* $variant,)+ }

        impl $name {
            /// The proto name of this value, as ProtoJSON writes it.
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $wire,)+ }
            }

            /// The value of this proto name (`None` for an unknown name).
            pub fn from_name(name: &str) -> Option<Self> {
                match name { $($wire => Some(Self::$variant),)+ _ => None }
            }
        }

        impl Skip for $name {}

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let name = std::borrow::Cow::<str>::deserialize(d)?;
                Ok(Self::from_name(&name).unwrap_or_default())
            }
        }
    };
}

proto_enum! {
    /// The lifecycle state of a task (`TaskState`).
    TaskState {
        /// Unknown or indeterminate.
        #[default]
        Unspecified = "TASK_STATE_UNSPECIFIED",
        /// Submitted and acknowledged.
        Submitted = "TASK_STATE_SUBMITTED",
        /// Being processed.
        Working = "TASK_STATE_WORKING",
        /// Finished successfully (terminal).
        Completed = "TASK_STATE_COMPLETED",
        /// Finished with an error (terminal).
        Failed = "TASK_STATE_FAILED",
        /// Canceled before completion (terminal).
        Canceled = "TASK_STATE_CANCELED",
        /// Waiting for input from the user (interrupted).
        InputRequired = "TASK_STATE_INPUT_REQUIRED",
        /// The agent will not perform the task (terminal).
        Rejected = "TASK_STATE_REJECTED",
        /// Waiting for authentication (interrupted).
        AuthRequired = "TASK_STATE_AUTH_REQUIRED",
    }
}

impl TaskState {
    /// Completed, failed, canceled or rejected: the task will not change again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Failed | Self::Canceled | Self::Rejected
        )
    }

    /// Input or authentication required: the task waits for the client.
    pub fn is_interrupted(self) -> bool {
        matches!(self, Self::InputRequired | Self::AuthRequired)
    }
}

proto_enum! {
    /// Who sent a message (`Role`).
    Role {
        /// Unspecified.
        #[default]
        Unspecified = "ROLE_UNSPECIFIED",
        /// From the client to the server.
        User = "ROLE_USER",
        /// From the server (the agent) to the client.
        Agent = "ROLE_AGENT",
    }
}

/// What a [`Part`] holds: exactly one of the proto's `content` oneof.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum PartContent {
    /// Text.
    Text(String),
    /// File bytes, base64-encoded (proto `bytes`).
    Raw(String),
    /// A URL pointing at the file's content.
    Url(String),
    /// Any JSON value (`null` included).
    Data(Value),
}

/// A piece of message or artifact content (`Part`): one of `text` / `raw` / `url` / `data`,
/// with optional `metadata`, `filename` and `mediaType`. Reading a part with none or several
/// of the four fails.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", try_from = "PartWire")]
pub struct Part {
    /// The content.
    #[serde(flatten)]
    pub content: PartContent,
    /// Metadata of this part.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
    /// A file name, e.g. `document.pdf`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    /// The media (MIME) type of the content, e.g. `text/plain`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
}

/// A [`Part`] as read, before its oneof is checked.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct PartWire {
    text: Option<String>,
    raw: Option<String>,
    url: Option<String>,
    /// `Some(Value::Null)` for `"data": null`, `None` when absent.
    #[serde(deserialize_with = "present")]
    data: Option<Value>,
    metadata: Option<JsonObject>,
    filename: Option<String>,
    media_type: Option<String>,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

impl TryFrom<PartWire> for Part {
    type Error = String;

    fn try_from(w: PartWire) -> Result<Self, String> {
        let mut contents = [
            w.text.map(PartContent::Text),
            w.raw.map(PartContent::Raw),
            w.url.map(PartContent::Url),
            w.data.map(PartContent::Data),
        ]
        .into_iter()
        .flatten();
        let (Some(content), None) = (contents.next(), contents.next()) else {
            return Err("a part needs exactly one of text, raw, url and data".to_string());
        };
        Ok(Part {
            content,
            metadata: w.metadata,
            filename: w.filename,
            media_type: w.media_type,
        })
    }
}

impl Part {
    /// A text part.
    pub fn text(s: impl Into<String>) -> Self {
        Self {
            content: PartContent::Text(s.into()),
            metadata: None,
            filename: None,
            media_type: None,
        }
    }

    /// The text of a text part (`None` for other kinds).
    pub fn as_text(&self) -> Option<&str> {
        match &self.content {
            PartContent::Text(t) => Some(t),
            _ => None,
        }
    }
}

wire_struct! {
    /// One unit of communication between client and agent (`Message`).
    Message {
        /// Unique id, chosen by the message's creator (required).
        message_id: String,
        /// The conversation; an agent's messages always carry it.
        context_id: Option<String>,
        /// The task this message belongs to.
        task_id: Option<String>,
        /// Who sent it (required).
        role: Role,
        /// The content (required, at least one part).
        parts: Vec<Part>,
        /// Metadata.
        metadata: Option<JsonObject>,
        /// URIs of the extensions present in or contributing to this message.
        extensions: Vec<String>,
        /// Ids of tasks this message refers to for context.
        reference_task_ids: Vec<String>,
    }
}

impl Message {
    /// The text parts' texts, joined by newlines.
    pub fn text(&self) -> String {
        self.parts
            .iter()
            .filter_map(Part::as_text)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Checks the fields the proto marks required: a message id, a role and a part.
    pub fn validate(&self) -> Result<(), A2aError> {
        let missing = [
            (self.message_id.is_empty(), "messageId"),
            (self.role == Role::Unspecified, "role"),
            (self.parts.is_empty(), "parts"),
        ];
        match missing.into_iter().find(|(absent, _)| *absent) {
            Some((_, field)) => Err(A2aError::InvalidParams(format!(
                "the message has no {field}"
            ))),
            None => Ok(()),
        }
    }
}

wire_struct! {
    /// An output of a task (`Artifact`).
    Artifact {
        /// Unique id within the task (required).
        artifact_id: String,
        /// A human-readable name.
        name: Option<String>,
        /// A human-readable description.
        description: Option<String>,
        /// The content (required, at least one part).
        parts: Vec<Part>,
        /// Metadata.
        metadata: Option<JsonObject>,
        /// URIs of the extensions present in or contributing to this artifact.
        extensions: Vec<String>,
    }
}

wire_struct! {
    /// The status of a task (`TaskStatus`).
    TaskStatus {
        /// The state (required).
        state: TaskState,
        /// A message about the status (the question of `INPUT_REQUIRED`, say).
        message: Option<Message>,
        /// When the status was recorded: RFC 3339 UTC, e.g. `2026-11-27T06:45:24.458Z`.
        timestamp: Option<String>,
    }
}

wire_struct! {
    /// The unit of work of A2A (`Task`).
    Task {
        /// Unique id, generated by the server (required).
        id: String,
        /// The conversation the task belongs to.
        context_id: Option<String>,
        /// The current status (required).
        status: TaskStatus,
        /// The outputs so far.
        artifacts: Vec<Artifact>,
        /// The messages exchanged.
        history: Vec<Message>,
        /// Metadata.
        metadata: Option<JsonObject>,
    }
}

wire_struct! {
    /// A change of a task's status, in a stream (`TaskStatusUpdateEvent`).
    TaskStatusUpdateEvent {
        /// The task (required).
        task_id: String,
        /// The task's conversation (required).
        context_id: String,
        /// The new status (required).
        status: TaskStatus,
        /// Metadata.
        metadata: Option<JsonObject>,
    }
}

wire_struct! {
    /// An artifact generated or extended, in a stream (`TaskArtifactUpdateEvent`).
    TaskArtifactUpdateEvent {
        /// The task (required).
        task_id: String,
        /// The task's conversation (required).
        context_id: String,
        /// The artifact, or a chunk of it (required).
        artifact: Artifact,
        /// Append these parts to the artifact with the same id sent before.
        append: bool,
        /// This is the artifact's last chunk.
        last_chunk: bool,
        /// Metadata.
        metadata: Option<JsonObject>,
    }
}

/// One event of a stream, and the body of a push notification (`StreamResponse`): an object
/// with exactly one of `task`, `message`, `statusUpdate`, `artifactUpdate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StreamResponse {
    /// The task (a stream's first event).
    Task(Task),
    /// A message from the agent (the only event of a task-less answer).
    Message(Message),
    /// A status change.
    StatusUpdate(TaskStatusUpdateEvent),
    /// An artifact (chunk).
    ArtifactUpdate(TaskArtifactUpdateEvent),
}

/// The answer to `SendMessage` (`SendMessageResponse`): `{"task": …}` or `{"message": …}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SendMessageResponse {
    /// The task created or updated by the message.
    Task(Task),
    /// A direct message from the agent.
    Message(Message),
}

wire_struct! {
    /// An agent's self-description, served at [`CARD_PATH`] (`AgentCard`). Required: `name`,
    /// `description`, `supportedInterfaces`, `version`, `capabilities`, the default modes and
    /// `skills`.
    AgentCard {
        /// A human-readable name.
        name: String,
        /// What the agent does.
        description: String,
        /// Where and how to reach the agent, preferred first.
        supported_interfaces: Vec<AgentInterface>,
        /// Who provides the agent.
        provider: Option<AgentProvider>,
        /// The agent's own version (not the protocol's).
        version: String,
        /// Documentation URL.
        documentation_url: Option<String>,
        /// Optional features supported (always written, maybe `{}`).
        capabilities: AgentCapabilities,
        /// Security schemes by name.
        security_schemes: BTreeMap<String, SecurityScheme>,
        /// Alternatives of schemes a client must satisfy.
        security_requirements: Vec<SecurityRequirement>,
        /// Media types accepted as input by default.
        default_input_modes: Vec<String>,
        /// Media types produced by default.
        default_output_modes: Vec<String>,
        /// What the agent can do.
        skills: Vec<AgentSkill>,
        /// JWS signatures of the card.
        signatures: Vec<AgentCardSignature>,
        /// Icon URL.
        icon_url: Option<String>,
    }
}

wire_struct! {
    /// A URL, binding and protocol version an agent is reachable at (`AgentInterface`).
    AgentInterface {
        /// Absolute URL (gRPC: `host:port`).
        url: String,
        /// [`BINDING_JSONRPC`], [`BINDING_HTTP_JSON`], `GRPC` or a custom URI.
        protocol_binding: String,
        /// A routing value the client must copy into every request's `tenant`.
        tenant: Option<String>,
        /// `Major.Minor`, e.g. [`PROTOCOL_VERSION`].
        protocol_version: String,
    }
}

wire_struct! {
    /// The provider of an agent (`AgentProvider`).
    AgentProvider {
        /// The provider's website.
        url: String,
        /// The provider's organization.
        organization: String,
    }
}

wire_struct! {
    /// Optional features of an agent; absent means unsupported (`AgentCapabilities`).
    AgentCapabilities {
        /// Streaming (`SendStreamingMessage`, `SubscribeToTask`).
        streaming: Option<bool>,
        /// Push notifications.
        push_notifications: Option<bool>,
        /// Protocol extensions supported.
        extensions: Vec<AgentExtension>,
        /// An extended card for authenticated clients (`GetExtendedAgentCard`).
        extended_agent_card: Option<bool>,
    }
}

wire_struct! {
    /// A protocol extension an agent supports (`AgentExtension`).
    AgentExtension {
        /// The extension's URI.
        uri: Option<String>,
        /// How the agent uses it.
        description: Option<String>,
        /// Clients must understand and comply with it.
        required: bool,
        /// Extension-specific parameters.
        params: Option<JsonObject>,
    }
}

wire_struct! {
    /// Something an agent can do (`AgentSkill`). Required: `id`, `name`, `description`, `tags`.
    AgentSkill {
        /// Unique id.
        id: String,
        /// A human-readable name.
        name: String,
        /// What the skill does.
        description: String,
        /// Keywords.
        tags: Vec<String>,
        /// Example prompts.
        examples: Vec<String>,
        /// Input media types, overriding the card's defaults.
        input_modes: Vec<String>,
        /// Output media types, overriding the card's defaults.
        output_modes: Vec<String>,
        /// Security requirements of this skill.
        security_requirements: Vec<SecurityRequirement>,
    }
}

wire_struct! {
    /// A JWS (RFC 7515) signature of a card (`AgentCardSignature`).
    AgentCardSignature {
        /// The protected header, base64url-encoded JSON.
        protected: String,
        /// The signature, base64url-encoded.
        signature: String,
        /// The unprotected header.
        header: Option<JsonObject>,
    }
}

wire_struct! {
    /// One way to authenticate (`SecurityScheme`, a oneof: set exactly one field). OAuth 2.0 and
    /// OpenID Connect are kept as read, not modeled.
    SecurityScheme {
        /// An API key in a header, query parameter or cookie.
        api_key_security_scheme: Option<ApiKeySecurityScheme>,
        /// HTTP authentication (`Bearer`, `Basic`, …).
        http_auth_security_scheme: Option<HttpAuthSecurityScheme>,
        /// OAuth 2.0: `{flows, oauth2MetadataUrl?, description?}`.
        oauth2_security_scheme: Option<JsonObject>,
        /// OpenID Connect: `{openIdConnectUrl, description?}`.
        open_id_connect_security_scheme: Option<JsonObject>,
        /// Mutual TLS: `{description?}`.
        mtls_security_scheme: Option<JsonObject>,
    }
}

impl SecurityScheme {
    /// HTTP `Bearer` authentication, with an optional token format hint (`JWT`, `opaque`).
    pub fn bearer(bearer_format: Option<&str>) -> Self {
        let http = HttpAuthSecurityScheme {
            scheme: "Bearer".to_string(),
            bearer_format: bearer_format.map(str::to_string),
            description: None,
        };
        Self {
            http_auth_security_scheme: Some(http),
            ..Self::default()
        }
    }
}

wire_struct! {
    /// An API key scheme (`APIKeySecurityScheme`).
    ApiKeySecurityScheme {
        /// A description.
        description: Option<String>,
        /// `query`, `header` or `cookie`.
        location: String,
        /// The header, query parameter or cookie name.
        name: String,
    }
}

wire_struct! {
    /// An HTTP authentication scheme (`HTTPAuthSecurityScheme`).
    HttpAuthSecurityScheme {
        /// A description.
        description: Option<String>,
        /// The `Authorization` scheme, e.g. `Bearer`.
        scheme: String,
        /// A hint at the token's format, e.g. `JWT`.
        bearer_format: Option<String>,
    }
}

wire_struct! {
    /// Schemes to satisfy together, each with its required scopes (`SecurityRequirement`):
    /// `{"schemes": {"bearer": {"list": []}}}`.
    SecurityRequirement {
        /// Scheme name → scopes.
        schemes: BTreeMap<String, StringList>,
    }
}

wire_struct! {
    /// A list of strings (`StringList`); an empty one is written `{}`.
    StringList {
        /// The strings.
        list: Vec<String>,
    }
}

wire_struct! {
    /// Parameters of `SendMessage` and `SendStreamingMessage` (`SendMessageRequest`).
    SendMessageRequest {
        /// Routing value from the card's interface.
        tenant: Option<String>,
        /// The message (required).
        message: Message,
        /// How to answer.
        configuration: Option<SendMessageConfiguration>,
        /// Metadata.
        metadata: Option<JsonObject>,
    }
}

wire_struct! {
    /// How to answer a message (`SendMessageConfiguration`).
    SendMessageConfiguration {
        /// Media types the client accepts in answers.
        accepted_output_modes: Vec<String>,
        /// Where to push updates (`TaskPushNotificationConfig`, kept as read).
        task_push_notification_config: Option<JsonObject>,
        /// At most this many recent history messages in the answer (`0`: none).
        #[serde(deserialize_with = "opt_int32")]
        history_length: Option<i32>,
        /// Answer right after creating the task instead of waiting for a terminal or
        /// interrupted state.
        return_immediately: bool,
    }
}

wire_struct! {
    /// Parameters of `GetTask` (`GetTaskRequest`).
    GetTaskRequest {
        /// Routing value from the card's interface.
        tenant: Option<String>,
        /// The task (required).
        id: String,
        /// At most this many recent history messages (`0`: none).
        #[serde(deserialize_with = "opt_int32")]
        history_length: Option<i32>,
    }
}

wire_struct! {
    /// Parameters of `ListTasks` (`ListTasksRequest`); also its REST query.
    ListTasksRequest {
        /// Routing value from the card's interface.
        tenant: Option<String>,
        /// Only tasks of this conversation.
        context_id: Option<String>,
        /// Only tasks in this state.
        status: Option<TaskState>,
        /// At most this many tasks (1..=100, default 50).
        #[serde(deserialize_with = "opt_int32")]
        page_size: Option<i32>,
        /// The `nextPageToken` of the previous page.
        page_token: Option<String>,
        /// At most this many history messages per task.
        #[serde(deserialize_with = "opt_int32")]
        history_length: Option<i32>,
        /// Only tasks whose status timestamp is at or after this RFC 3339 time.
        status_timestamp_after: Option<String>,
        /// Include artifacts (default: no).
        include_artifacts: Option<bool>,
    }
}

/// The answer to `ListTasks` (`ListTasksResponse`); every field is always written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ListTasksResponse {
    /// The tasks of this page, newest status first.
    pub tasks: Vec<Task>,
    /// The next page's token; empty on the last page.
    pub next_page_token: String,
    /// The page size used.
    #[serde(deserialize_with = "int32")]
    pub page_size: i32,
    /// The number of matching tasks over all pages.
    #[serde(deserialize_with = "int32")]
    pub total_size: i32,
}

wire_struct! {
    /// Parameters of `CancelTask` (`CancelTaskRequest`).
    CancelTaskRequest {
        /// Routing value from the card's interface.
        tenant: Option<String>,
        /// The task (required).
        id: String,
        /// Metadata.
        metadata: Option<JsonObject>,
    }
}

wire_struct! {
    /// Parameters of `SubscribeToTask` (`SubscribeToTaskRequest`).
    SubscribeToTaskRequest {
        /// Routing value from the card's interface.
        tenant: Option<String>,
        /// The task (required).
        id: String,
    }
}

/// A JSON-RPC 2.0 request; `params` is the ProtoJSON of the method's request message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JsonRpcRequest {
    /// Always `"2.0"`.
    pub jsonrpc: String,
    /// A string, a number or null, echoed in the response.
    #[serde(default)]
    pub id: Value,
    /// The method, e.g. `SendMessage`.
    pub method: String,
    /// The parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
}

impl JsonRpcRequest {
    /// Reads a request body: not JSON is a [`A2aError::ParseError`], JSON that is no single
    /// JSON-RPC 2.0 request (a batch included) an [`A2aError::InvalidRequest`].
    pub fn parse(body: &[u8]) -> Result<Self, A2aError> {
        let value: Value = serde_json::from_slice(body)
            .map_err(|e| A2aError::ParseError(format!("the body is not JSON: {e}")))?;
        let req: Self = serde_json::from_value(value).map_err(|e| {
            A2aError::InvalidRequest(format!("the body is not a JSON-RPC 2.0 request: {e}"))
        })?;
        if req.jsonrpc != "2.0" {
            return Err(A2aError::InvalidRequest(
                "\"jsonrpc\" must be \"2.0\"".to_string(),
            ));
        }
        if !matches!(req.id, Value::String(_) | Value::Number(_) | Value::Null) {
            return Err(A2aError::InvalidRequest(
                "\"id\" must be a string, a number or null".to_string(),
            ));
        }
        Ok(req)
    }

    /// The parameters as `T` (absent ones as `{}`); a mismatch is an
    /// [`A2aError::InvalidParams`].
    pub fn params<T: DeserializeOwned>(&self) -> Result<T, A2aError> {
        let params = self.params.clone().unwrap_or_else(|| json!({}));
        serde_json::from_value(params)
            .map_err(|e| A2aError::InvalidParams(format!("invalid params of {}: {e}", self.method)))
    }
}

/// The JSON-RPC 2.0 success response carrying `result`; a result that cannot be written as
/// JSON becomes an [`A2aError::Internal`] response.
pub fn jsonrpc_result<T: Serialize>(id: Value, result: &T) -> Value {
    match serde_json::to_value(result) {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(e) => A2aError::Internal(format!("the result is not JSON: {e}")).to_jsonrpc(id),
    }
}

/// The error enum from its table: variant = JSON-RPC code, HTTP status, gRPC status, reason.
macro_rules! a2a_errors {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident = $code:literal, $http:literal, $grpc:literal, $reason:literal;)+ }) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
        pub enum $name { $($(#[$vm])* #[error("{0}")] $variant(String),)+ }

        impl $name {
            /// (JSON-RPC code, HTTP status, gRPC status, `ErrorInfo.reason`).
            fn mapping(&self) -> (i64, u16, &'static str, &'static str) {
                match self { $(Self::$variant(_) => ($code, $http, $grpc, $reason),)+ }
            }

            /// The human-readable message.
            pub fn message(&self) -> &str {
                match self { $(Self::$variant(m))|+ => m }
            }

            /// The error of a JSON-RPC code, with `message` (`None` for an unknown code).
            pub fn from_code(code: i64, message: impl Into<String>) -> Option<Self> {
                match code { $($code => Some(Self::$variant(message.into())),)+ _ => None }
            }
        }
    };
}

a2a_errors! {
    /// An A2A error, with a human-readable message, and its mapping to each binding (SPEC
    /// §5.4 of v1.0.1, and the JSON-RPC 2.0 standard codes).
    ///
    /// The spec gives authentication, authorization and rate-limit errors no JSON-RPC code
    /// ("a custom error"). This server uses -32040 (unauthenticated), -32041 (permission
    /// denied) and -32042 (rate limited): JSON-RPC 2.0 leaves -32000..-32099 to
    /// implementations, and A2A, which claims -32001..-32099 for its own errors, uses only
    /// -32001..-32009 so far. Should a later spec assign these codes, follow it.
    A2aError {
        /// No such task (or not visible to the caller).
        TaskNotFound = -32001, 404, "NOT_FOUND", "TASK_NOT_FOUND";
        /// The task cannot be canceled (already terminal).
        TaskNotCancelable = -32002, 400, "FAILED_PRECONDITION", "TASK_NOT_CANCELABLE";
        /// Push notifications are not supported.
        PushNotificationNotSupported = -32003, 400, "FAILED_PRECONDITION", "PUSH_NOTIFICATION_NOT_SUPPORTED";
        /// The operation is not supported (by the agent, or in the task's state).
        UnsupportedOperation = -32004, 400, "FAILED_PRECONDITION", "UNSUPPORTED_OPERATION";
        /// A media type is not supported.
        ContentTypeNotSupported = -32005, 400, "INVALID_ARGUMENT", "CONTENT_TYPE_NOT_SUPPORTED";
        /// The agent's answer was invalid.
        InvalidAgentResponse = -32006, 500, "INTERNAL", "INVALID_AGENT_RESPONSE";
        /// An extended card is declared but not configured.
        ExtendedAgentCardNotConfigured = -32007, 400, "FAILED_PRECONDITION", "EXTENDED_AGENT_CARD_NOT_CONFIGURED";
        /// The client must support an extension it did not declare.
        ExtensionSupportRequired = -32008, 400, "FAILED_PRECONDITION", "EXTENSION_SUPPORT_REQUIRED";
        /// The requested protocol version is not supported (see [`negotiate`]).
        VersionNotSupported = -32009, 400, "FAILED_PRECONDITION", "VERSION_NOT_SUPPORTED";
        /// The body is not JSON.
        ParseError = -32700, 400, "INVALID_ARGUMENT", "PARSE_ERROR";
        /// The JSON is not a valid request.
        InvalidRequest = -32600, 400, "INVALID_ARGUMENT", "INVALID_REQUEST";
        /// No such method.
        MethodNotFound = -32601, 404, "NOT_FOUND", "METHOD_NOT_FOUND";
        /// The parameters are invalid.
        InvalidParams = -32602, 400, "INVALID_ARGUMENT", "INVALID_PARAMS";
        /// An internal error.
        Internal = -32603, 500, "INTERNAL", "INTERNAL_ERROR";
        /// Missing or invalid credentials (JSON-RPC code ours, see above).
        Unauthenticated = -32040, 401, "UNAUTHENTICATED", "UNAUTHENTICATED";
        /// The caller may not do this (JSON-RPC code ours, see above).
        PermissionDenied = -32041, 403, "PERMISSION_DENIED", "PERMISSION_DENIED";
        /// Too many requests (JSON-RPC code ours, see above).
        RateLimited = -32042, 429, "RESOURCE_EXHAUSTED", "RATE_LIMITED";
    }
}

impl A2aError {
    /// The JSON-RPC error code.
    pub fn code(&self) -> i64 {
        self.mapping().0
    }

    /// The HTTP status of the HTTP+JSON binding.
    pub fn http_status(&self) -> u16 {
        self.mapping().1
    }

    /// The gRPC status name, e.g. `NOT_FOUND` (also `status` of a REST error body).
    pub fn grpc_status(&self) -> &'static str {
        self.mapping().2
    }

    /// `ErrorInfo.reason`: the error's name in UPPER_SNAKE_CASE, e.g. `TASK_NOT_FOUND`.
    pub fn reason(&self) -> &'static str {
        self.mapping().3
    }

    /// The `google.rpc.ErrorInfo` detail (ProtoJSON `Any`) of this error, with `metadata`.
    pub fn error_info(&self, metadata: &BTreeMap<String, String>) -> Value {
        json!({
            "@type": ERROR_INFO_TYPE,
            "reason": self.reason(),
            "domain": ERROR_DOMAIN,
            "metadata": metadata,
        })
    }

    /// The JSON-RPC 2.0 error response to request `id`, `ErrorInfo` in `data`.
    pub fn to_jsonrpc(&self, id: Value) -> Value {
        self.to_jsonrpc_with(id, &BTreeMap::new())
    }

    /// [`Self::to_jsonrpc`] with `ErrorInfo.metadata` (e.g. `{"taskId": …}`).
    pub fn to_jsonrpc_with(&self, id: Value, metadata: &BTreeMap<String, String>) -> Value {
        json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {
                "code": self.code(),
                "message": self.message(),
                "data": [self.error_info(metadata)],
            },
        })
    }

    /// The HTTP+JSON error body (a `google.rpc.Status` under `error`), sent with
    /// [`Self::http_status`].
    pub fn to_rest_body(&self) -> Value {
        self.to_rest_body_with(&BTreeMap::new())
    }

    /// [`Self::to_rest_body`] with `ErrorInfo.metadata`.
    pub fn to_rest_body_with(&self, metadata: &BTreeMap<String, String>) -> Value {
        json!({
            "error": {
                "code": self.http_status(),
                "status": self.grpc_status(),
                "message": self.message(),
                "details": [self.error_info(metadata)],
            },
        })
    }
}

/// Checks a request's `A2A-Version` value: any 1.x is accepted (the minor and a patch are
/// ignored); a missing or empty one means 0.3 and, like any other, is refused with
/// [`A2aError::VersionNotSupported`].
pub fn negotiate(header: Option<&str>) -> Result<(), A2aError> {
    let version = header
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .unwrap_or("0.3");
    let mut parts = version.split('.');
    let major = parts.next().unwrap_or_default();
    if major == "1" && parts.all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())) {
        return Ok(());
    }
    let shown: String = version.chars().take(32).collect();
    Err(A2aError::VersionNotSupported(format!(
        "A2A version {shown:?} is not supported; this server speaks {PROTOCOL_VERSION} (send the {VERSION_HEADER}: {PROTOCOL_VERSION} header)"
    )))
}

/// `ms` milliseconds since the Unix epoch as a protocol timestamp: RFC 3339 UTC with
/// milliseconds, e.g. `2026-11-27T06:45:24.458Z` (clamped to the representable range).
pub fn now_timestamp(ms: i64) -> String {
    let ts = jiff::Timestamp::from_millisecond(ms).unwrap_or(if ms < 0 {
        jiff::Timestamp::MIN
    } else {
        jiff::Timestamp::MAX
    });
    format!("{ts:.3}")
}

/// A protocol timestamp (RFC 3339 with `Z` or an offset) as milliseconds since the Unix
/// epoch; `None` if it is not one.
pub fn timestamp_millis(s: &str) -> Option<i64> {
    s.parse::<jiff::Timestamp>()
        .ok()
        .map(|t| t.as_millisecond())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `json` as `T`, re-encodes it and checks the result is the same JSON.
    fn round_trip<T: Serialize + DeserializeOwned>(json: &str) -> T {
        let value: Value = serde_json::from_str(json).unwrap();
        let decoded: T = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(serde_json::to_value(&decoded).unwrap(), value, "{json}");
        decoded
    }

    /// The card the a2a-sdk 1.3.0 server served (research notes §2.4), verbatim.
    const SDK_CARD: &str = r#"{"name":"quick","description":"Completes immediately",
 "supportedInterfaces":[{"url":"http://127.0.0.1:8765/agents/quick/","protocolBinding":"JSONRPC","protocolVersion":"1.0"},
                        {"url":"http://127.0.0.1:8765/agents/quick/rest","protocolBinding":"HTTP+JSON","protocolVersion":"1.0"}],
 "version":"0.1.0","capabilities":{"streaming":true,"pushNotifications":false},
 "securitySchemes":{"bearer":{"httpAuthSecurityScheme":{"scheme":"Bearer","bearerFormat":"opaque"}}},
 "securityRequirements":[{"schemes":{"bearer":{}}}],
 "defaultInputModes":["text/plain"],"defaultOutputModes":["text/plain"],
 "skills":[{"id":"quick","name":"quick","description":"Completes immediately","tags":["demo"]}]}"#;

    #[test]
    fn the_sdk_card_round_trips() {
        let card: AgentCard = round_trip(SDK_CARD);
        assert_eq!(
            card.supported_interfaces[1].protocol_binding,
            BINDING_HTTP_JSON
        );
        assert_eq!(card.capabilities.streaming, Some(true));
        assert_eq!(
            card.security_schemes["bearer"],
            SecurityScheme::bearer(Some("opaque"))
        );
        assert!(card.security_requirements[0].schemes["bearer"]
            .list
            .is_empty());
    }

    #[test]
    fn a_full_card_round_trips() {
        let card: AgentCard = round_trip(
            r#"{"name":"a","description":"d","version":"1","provider":{"url":"https://x","organization":"X"},
            "documentationUrl":"https://x/doc","iconUrl":"https://x/i.png",
            "supportedInterfaces":[{"url":"https://x/a2a","protocolBinding":"JSONRPC","tenant":"ns/a","protocolVersion":"1.0"}],
            "capabilities":{"extendedAgentCard":true,"extensions":[{"uri":"urn:e","required":true,"params":{"k":1}}]},
            "securitySchemes":{"key":{"apiKeySecurityScheme":{"location":"header","name":"X-Key"}},
                "oidc":{"openIdConnectSecurityScheme":{"openIdConnectUrl":"https://x/.well-known/openid-configuration"}},
                "oauth":{"oauth2SecurityScheme":{"flows":{"clientCredentials":{"tokenUrl":"https://x/t","scopes":{}}}}},
                "mtls":{"mtlsSecurityScheme":{"description":"m"}}},
            "securityRequirements":[{"schemes":{"oauth":{"list":["read","write"]}}}],
            "defaultInputModes":["text/plain"],"defaultOutputModes":["application/json"],
            "skills":[{"id":"s","name":"s","description":"d","tags":["t"],"examples":["e"],"inputModes":["text/plain"],
                "outputModes":["text/plain"],"securityRequirements":[{"schemes":{"key":{}}}]}],
            "signatures":[{"protected":"eyJ","signature":"c2ln","header":{"kid":"1"}}]}"#,
        );
        assert_eq!(card.supported_interfaces[0].tenant.as_deref(), Some("ns/a"));
    }

    #[test]
    fn the_sdk_jsonrpc_exchange_round_trips() {
        // Research notes §1.2, verbatim but for the elided ids and history, filled in.
        let request = r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"raw"}]}}}"#;
        let req = JsonRpcRequest::parse(request.as_bytes()).unwrap();
        assert_eq!((req.method.as_str(), &req.id), ("SendMessage", &json!(1)));
        let params: SendMessageRequest = req.params().unwrap();
        assert_eq!(params.message.text(), "raw");
        assert_eq!(params.message.role, Role::User);
        assert_eq!(
            serde_json::to_value(&req).unwrap(),
            serde_json::from_str::<Value>(request).unwrap()
        );
        assert_eq!(
            serde_json::to_value(&params).unwrap(),
            serde_json::from_str::<Value>(request).unwrap()["params"]
        );

        let response = r#"{"result":{"task":{"id":"3d04","contextId":"9709","status":{"state":"TASK_STATE_COMPLETED","timestamp":"2026-11-27T06:45:24.458341Z"},
            "artifacts":[{"artifactId":"b4b8","name":"answer","parts":[{"text":"echo: raw"}]}],
            "history":[{"messageId":"m1","contextId":"9709","taskId":"3d04","role":"ROLE_USER","parts":[{"text":"raw"}]}]}},"id":1,"jsonrpc":"2.0"}"#;
        let resp: Value = serde_json::from_str(response).unwrap();
        let result: SendMessageResponse = serde_json::from_value(resp["result"].clone()).unwrap();
        let SendMessageResponse::Task(task) = &result else {
            panic!("not a task: {result:?}")
        };
        assert!(task.status.state.is_terminal());
        assert_eq!(task.artifacts[0].parts[0].as_text(), Some("echo: raw"));
        assert_eq!(jsonrpc_result(json!(1), &result), resp);
    }

    fn task() -> Task {
        Task {
            id: "t1".into(),
            context_id: Some("c1".into()),
            status: TaskStatus {
                state: TaskState::InputRequired,
                message: Some(Message {
                    message_id: "m2".into(),
                    context_id: Some("c1".into()),
                    task_id: Some("t1".into()),
                    role: Role::Agent,
                    parts: vec![Part::text("Which colour?")],
                    metadata: None,
                    extensions: vec![],
                    reference_task_ids: vec!["t0".into()],
                }),
                timestamp: Some(now_timestamp(1_795_761_924_458)),
            },
            artifacts: vec![],
            history: vec![],
            metadata: Some(json!({"k": "v"}).as_object().unwrap().clone()),
        }
    }

    #[test]
    fn a_task_round_trips() {
        let json = serde_json::to_string(&task()).unwrap();
        let back: Task = round_trip(&json);
        assert_eq!(back, task());
        assert!(back.status.state.is_interrupted() && !back.status.state.is_terminal());
        assert_eq!(
            serde_json::to_value(task()).unwrap()["status"]["state"],
            "TASK_STATE_INPUT_REQUIRED"
        );
    }

    #[test]
    fn each_stream_response_kind_round_trips_with_one_key() {
        let artifact = Artifact {
            artifact_id: "a1".into(),
            name: Some("answer".into()),
            description: None,
            parts: vec![Part::text("chunk")],
            metadata: None,
            extensions: vec![],
        };
        let events = [
            StreamResponse::Task(task()),
            StreamResponse::Message(task().status.message.unwrap()),
            StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
                task_id: "t1".into(),
                context_id: "c1".into(),
                status: TaskStatus {
                    state: TaskState::Working,
                    message: None,
                    timestamp: None,
                },
                metadata: None,
            }),
            StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
                task_id: "t1".into(),
                context_id: "c1".into(),
                artifact,
                append: true,
                last_chunk: true,
                metadata: None,
            }),
        ];
        let keys = ["task", "message", "statusUpdate", "artifactUpdate"];
        for (event, key) in events.iter().zip(keys) {
            let value = serde_json::to_value(event).unwrap();
            let object = value.as_object().unwrap();
            assert_eq!(object.keys().collect::<Vec<_>>(), [key]);
            let back: StreamResponse = round_trip(&value.to_string());
            assert_eq!(&back, event);
        }
        let value = serde_json::to_value(&events[3]).unwrap();
        assert_eq!(value["artifactUpdate"]["lastChunk"], true);
        assert_eq!(value["artifactUpdate"]["append"], true);
        // False bools are left out, as ProtoJSON does.
        let value = json!({"artifactUpdate": {"taskId": "t", "contextId": "c",
            "artifact": {"artifactId": "a", "parts": [{"text": "x"}]}}});
        round_trip::<StreamResponse>(&value.to_string());
        assert!(
            serde_json::from_value::<StreamResponse>(json!({"task": task(), "message": {}}))
                .is_err()
        );
    }

    #[test]
    fn parts_of_each_kind_round_trip() {
        for json in [
            r#"{"text":"hi","mediaType":"text/plain"}"#,
            r#"{"raw":"aGk=","filename":"hi.txt","mediaType":"text/plain"}"#,
            r#"{"url":"https://x/f.pdf","metadata":{"k":[1]}}"#,
            r#"{"data":{"a":1}}"#,
            r#"{"data":null}"#,
            r#"{"text":""}"#,
        ] {
            round_trip::<Part>(json);
        }
        let part: Part = serde_json::from_str(r#"{"data":null}"#).unwrap();
        assert_eq!(part.content, PartContent::Data(Value::Null));
    }

    #[test]
    fn a_part_with_none_or_two_kinds_is_refused() {
        for json in [
            r#"{"text":"a","url":"https://x"}"#,
            r#"{"raw":"aGk=","data":null}"#,
            r#"{"mediaType":"text/plain"}"#,
            r#"{}"#,
        ] {
            let err = serde_json::from_str::<Part>(json).unwrap_err();
            assert!(err.to_string().contains("exactly one"), "{json}: {err}");
        }
        let msg =
            json!({"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "a", "data": 1}]});
        assert!(serde_json::from_value::<Message>(msg).is_err());
    }

    #[test]
    fn message_text_joins_the_text_parts() {
        let mut m = task().status.message.unwrap();
        m.parts.push(Part {
            content: PartContent::Url("https://x".into()),
            ..Part::text("")
        });
        m.parts.push(Part::text("Blue?"));
        assert_eq!(m.text(), "Which colour?\nBlue?");
    }

    #[test]
    fn messages_missing_required_fields_are_invalid_params() {
        let ok = task().status.message.unwrap();
        assert_eq!(ok.validate(), Ok(()));
        let req: SendMessageRequest = serde_json::from_value(json!({"tenant": "x"})).unwrap();
        let err = req.message.validate().unwrap_err();
        assert_eq!(
            (err.code(), err.message()),
            (-32602, "the message has no messageId")
        );
        let no_parts = Message {
            parts: vec![],
            ..ok
        };
        assert_eq!(
            no_parts.validate().unwrap_err().message(),
            "the message has no parts"
        );
    }

    #[test]
    fn int32_fields_take_numbers_and_numeric_strings() {
        let r: ListTasksRequest = serde_json::from_value(json!({
            "pageSize": "20", "historyLength": 3, "status": "TASK_STATE_WORKING", "includeArtifacts": true
        }))
        .unwrap();
        assert_eq!((r.page_size, r.history_length), (Some(20), Some(3)));
        assert_eq!(r.status, Some(TaskState::Working));
        let g: GetTaskRequest =
            serde_json::from_value(json!({"id": "t", "historyLength": "0"})).unwrap();
        assert_eq!(g.history_length, Some(0));
        let g: GetTaskRequest =
            serde_json::from_value(json!({"id": "t", "historyLength": null})).unwrap();
        assert_eq!(g.history_length, None);
        let l: ListTasksResponse =
            serde_json::from_value(json!({"tasks": [], "pageSize": "50", "totalSize": "2"}))
                .unwrap();
        assert_eq!(
            (l.page_size, l.total_size, l.next_page_token.as_str()),
            (50, 2, "")
        );
        for bad in [json!("x"), json!(1.5), json!("3000000000"), json!(true)] {
            assert!(serde_json::from_value::<GetTaskRequest>(
                json!({"id": "t", "historyLength": bad})
            )
            .is_err());
        }
        // Unknown enum names read as UNSPECIFIED.
        let s: TaskStatus = serde_json::from_value(json!({"state": "completed"})).unwrap();
        assert_eq!(s.state, TaskState::Unspecified);
    }

    #[test]
    fn requests_round_trip_and_list_responses_always_carry_the_token() {
        round_trip::<SendMessageRequest>(
            r#"{"tenant":"ns/a","message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"x"}],"taskId":"t"},
            "configuration":{"acceptedOutputModes":["text/plain"],"historyLength":0,"returnImmediately":true,
            "taskPushNotificationConfig":{"url":"https://hook","token":"k","authentication":{"scheme":"Bearer","credentials":"c"}}},
            "metadata":{"a":1}}"#,
        );
        round_trip::<GetTaskRequest>(r#"{"id":"t","historyLength":2}"#);
        round_trip::<ListTasksRequest>(
            r#"{"contextId":"c","status":"TASK_STATE_COMPLETED","pageSize":10,"pageToken":"p","historyLength":0,
            "statusTimestampAfter":"2026-01-01T00:00:00.000Z","includeArtifacts":false}"#,
        );
        round_trip::<CancelTaskRequest>(r#"{"tenant":"x","id":"t","metadata":{}}"#);
        round_trip::<SubscribeToTaskRequest>(r#"{"id":"t"}"#);
        let last = ListTasksResponse {
            tasks: vec![],
            next_page_token: String::new(),
            page_size: 50,
            total_size: 0,
        };
        assert_eq!(
            serde_json::to_value(&last).unwrap(),
            json!({"tasks": [], "nextPageToken": "", "pageSize": 50, "totalSize": 0})
        );
    }

    #[test]
    fn jsonrpc_requests_are_checked() {
        let bad = |body: &str| JsonRpcRequest::parse(body.as_bytes()).unwrap_err();
        assert_eq!(bad("{").code(), -32700);
        assert_eq!(bad("[]").code(), -32600);
        assert_eq!(
            bad(r#"{"jsonrpc":"1.0","id":1,"method":"GetTask"}"#).code(),
            -32600
        );
        assert_eq!(
            bad(r#"{"jsonrpc":"2.0","id":{},"method":"GetTask"}"#).code(),
            -32600
        );
        assert_eq!(bad(r#"{"jsonrpc":"2.0","id":1}"#).code(), -32600);
        let req = JsonRpcRequest::parse(
            br#"{"jsonrpc":"2.0","id":"a","method":"GetTask","params":{"id":5}}"#,
        )
        .unwrap();
        assert_eq!(req.params::<GetTaskRequest>().unwrap_err().code(), -32602);
        let req =
            JsonRpcRequest::parse(br#"{"jsonrpc":"2.0","id":null,"method":"ListTasks"}"#).unwrap();
        assert_eq!(
            req.params::<ListTasksRequest>().unwrap(),
            ListTasksRequest::default()
        );
    }

    #[test]
    fn errors_have_the_jsonrpc_shape() {
        let err = A2aError::TaskNotFound("Task not found".into());
        let metadata = BTreeMap::from([("taskId".to_string(), "nonexistent-task-id".to_string())]);
        assert_eq!(
            err.to_jsonrpc_with(json!(2), &metadata),
            json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32001, "message": "Task not found",
                "data": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "TASK_NOT_FOUND",
                    "domain": "a2a-protocol.org", "metadata": {"taskId": "nonexistent-task-id"}}]}})
        );
        let value = A2aError::MethodNotFound("Method not found".into()).to_jsonrpc(json!("x"));
        assert_eq!(
            (&value["id"], &value["error"]["code"]),
            (&json!("x"), &json!(-32601))
        );
        assert_eq!(
            A2aError::from_code(-32601, "Method not found"),
            Some(A2aError::MethodNotFound("Method not found".into()))
        );
        assert_eq!(A2aError::from_code(-32099, "?"), None);
    }

    #[test]
    fn errors_have_the_rest_shape() {
        let err = A2aError::TaskNotFound("Task not found".into());
        assert_eq!(
            err.to_rest_body(),
            json!({"error": {"code": 404, "status": "NOT_FOUND", "message": "Task not found",
                "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "TASK_NOT_FOUND",
                    "domain": "a2a-protocol.org", "metadata": {}}]}})
        );
        let rl = A2aError::RateLimited("slow down".into());
        assert_eq!(
            (
                rl.code(),
                rl.http_status(),
                rl.grpc_status(),
                rl.reason(),
                rl.to_string()
            ),
            (
                -32042,
                429,
                "RESOURCE_EXHAUSTED",
                "RATE_LIMITED",
                "slow down".to_string()
            )
        );
        let body = A2aError::Unauthenticated("no token".into()).to_rest_body();
        assert_eq!(
            (&body["error"]["code"], &body["error"]["status"]),
            (&json!(401), &json!("UNAUTHENTICATED"))
        );
        // Every code maps back to its error.
        for err in [
            A2aError::TaskNotCancelable(String::new()),
            A2aError::PushNotificationNotSupported(String::new()),
            A2aError::UnsupportedOperation(String::new()),
            A2aError::ContentTypeNotSupported(String::new()),
            A2aError::InvalidAgentResponse(String::new()),
            A2aError::ExtendedAgentCardNotConfigured(String::new()),
            A2aError::ExtensionSupportRequired(String::new()),
            A2aError::VersionNotSupported(String::new()),
            A2aError::ParseError(String::new()),
            A2aError::InvalidRequest(String::new()),
            A2aError::InvalidParams(String::new()),
            A2aError::Internal(String::new()),
            A2aError::PermissionDenied(String::new()),
        ] {
            assert_eq!(A2aError::from_code(err.code(), ""), Some(err));
        }
    }

    #[test]
    fn negotiate_accepts_1_x_only() {
        for ok in ["1.0", "1.5", " 1.0 ", "1.0.1", "1"] {
            assert_eq!(negotiate(Some(ok)), Ok(()), "{ok}");
        }
        for bad in [
            None,
            Some(""),
            Some("0.3"),
            Some("2.0"),
            Some("10.0"),
            Some("1.x"),
            Some("v1.0"),
            Some("1."),
        ] {
            let err = negotiate(bad).unwrap_err();
            assert_eq!((err.code(), err.http_status()), (-32009, 400), "{bad:?}");
        }
        assert_eq!(
            negotiate(None).unwrap_err().message(),
            r#"A2A version "0.3" is not supported; this server speaks 1.0 (send the A2A-Version: 1.0 header)"#
        );
    }

    #[test]
    fn timestamps_are_rfc3339_utc_with_milliseconds() {
        assert_eq!(now_timestamp(1_795_761_924_458), "2026-11-27T06:45:24.458Z");
        assert_eq!(now_timestamp(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            timestamp_millis("2026-11-27T06:45:24.458Z"),
            Some(1_795_761_924_458)
        );
        assert_eq!(
            timestamp_millis("2026-11-27T07:45:24.458+01:00"),
            Some(1_795_761_924_458)
        );
        assert_eq!(timestamp_millis("yesterday"), None);
        assert!(now_timestamp(i64::MAX).ends_with('Z'));
    }
}

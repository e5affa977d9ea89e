//! The ProtoJSON form of the A2A v1.0 messages (`lf.a2a.v1`), as serde types: the task, its
//! messages, parts, artifacts and stream events here; the card in `card.rs`, the requests in
//! `requests.rs`, the errors in `errors.rs`.
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

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

use super::A2aError;

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
pub(super) trait Skip {
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
pub(super) use wire_struct;

/// An int32 as ProtoJSON writes it: a JSON number or a numeric string.
#[derive(Deserialize)]
#[serde(untagged)]
enum Int32 {
    Number(i64),
    Text(String),
}

pub(super) fn opt_int32<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i32>, D::Error> {
    let n = match Option::<Int32>::deserialize(d)? {
        None => return Ok(None),
        Some(Int32::Number(n)) => i32::try_from(n).ok(),
        Some(Int32::Text(s)) => s.trim().parse().ok(),
    };
    n.map(Some)
        .ok_or_else(|| de::Error::custom("expected an int32 (a number or a numeric string)"))
}

pub(super) fn int32<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
    opt_int32(d).map(Option::unwrap_or_default)
}

/// A task state filter: a known name, else refused (`TASK_STATE_UNSPECIFIED`, the proto's
/// unset value, filters nothing).
pub(super) fn opt_task_state<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<TaskState>, D::Error> {
    let Some(name) = Option::<std::borrow::Cow<str>>::deserialize(d)? else {
        return Ok(None);
    };
    match TaskState::from_name(&name) {
        Some(TaskState::Unspecified) => Ok(None),
        Some(state) => Ok(Some(state)),
        None => Err(de::Error::custom(format!(
            "status: no task state {:?} (TASK_STATE_SUBMITTED, TASK_STATE_WORKING, TASK_STATE_COMPLETED, …)",
            name.chars().take(40).collect::<String>()
        ))),
    }
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
    use crate::a2a::*;
    use serde::de::DeserializeOwned;
    use serde_json::json;

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

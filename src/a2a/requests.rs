//! The methods' requests and the JSON-RPC 2.0 envelope.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::wire::*;
use super::*;

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
        /// Only tasks in this state (an unknown name is refused).
        #[serde(deserialize_with = "opt_task_state")]
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
    /// The tasks of this page, newest first.
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

//! The A2A client side the worker needs: read a remote agent's card, send it a message,
//! read one of its tasks — JSON-RPC over HTTP, every answer bounded in size and time.

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::a2a::{
    AgentCard, Message, SendMessageResponse, Task, BINDING_JSONRPC, CARD_PATH, PROTOCOL_VERSION,
    VERSION_HEADER,
};

/// The largest answer read from a remote agent (card, task), in bytes.
pub const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// The longest interface URL taken from a card, in bytes (as long as an Agent's `url` may be):
/// it is kept with every call that goes on asynchronously.
const MAX_URL_BYTES: usize = 2048;

/// A remote agent as its card says: where to send, what it can.
#[derive(Clone, Debug)]
pub struct Remote {
    /// Its JSON-RPC 1.0 URL.
    pub url: String,
    /// The card.
    pub card: AgentCard,
}

/// The card's URL for `url` (a card URL, or the URL an agent is served at).
pub fn card_url(url: &str) -> String {
    if url.ends_with(".json") {
        url.to_string()
    } else {
        format!("{}{CARD_PATH}", url.trim_end_matches('/'))
    }
}

/// An answer's body, refused past [`MAX_ANSWER_BYTES`].
async fn bounded(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    if response
        .content_length()
        .is_some_and(|n| n > MAX_ANSWER_BYTES as u64)
    {
        return Err(format!("its answer is over {MAX_ANSWER_BYTES} bytes"));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("its answer broke off: {}", crate::report::chain(&e)))?
    {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(format!("its answer is over {MAX_ANSWER_BYTES} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Reads the card at `url` (see [`card_url`]) and picks its JSON-RPC 1.0 interface.
pub async fn read_card(
    client: &reqwest::Client,
    url: &str,
    headers: &HeaderMap,
    timeout: Duration,
) -> Result<Remote, String> {
    let at = card_url(url);
    let response = client
        .get(&at)
        .headers(headers.clone())
        .timeout(timeout)
        .send()
        .await
        .map_err(|e| format!("reading its card: {}", crate::report::chain(&e)))?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("reading its card: HTTP {}", status.as_u16()));
    }
    let body = bounded(response).await?;
    let card: AgentCard =
        serde_json::from_slice(&body).map_err(|e| format!("its card is not a card: {e}"))?;
    let url = card
        .supported_interfaces
        .iter()
        .find(|i| {
            i.protocol_binding == BINDING_JSONRPC
                && i.protocol_version.split('.').next() == Some("1")
                && (i.url.starts_with("http://") || i.url.starts_with("https://"))
                && i.url.len() <= MAX_URL_BYTES
        })
        .map(|i| i.url.clone())
        .ok_or(
            "its card offers no JSON-RPC interface of A2A 1.x (at a URL of at most 2,048 bytes)",
        )?;
    Ok(Remote { url, card })
}

/// Calls `method` with `params` at `url`: the `result`, or why not (the remote's error
/// message included, cut short).
async fn call<T: DeserializeOwned>(
    client: &reqwest::Client,
    url: &str,
    headers: &HeaderMap,
    method: &str,
    params: Value,
    timeout: Duration,
) -> Result<T, Failure> {
    let mut headers = headers.clone();
    headers.insert(VERSION_HEADER, HeaderValue::from_static(PROTOCOL_VERSION));
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let response = client
        .post(url)
        .headers(headers)
        .timeout(timeout)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .map_err(|e| {
            let why = crate::report::chain(&e);
            if e.is_connect() {
                Failure::NotSent(why)
            } else {
                Failure::Unknown(why)
            }
        })?;
    let status = response.status();
    let body = bounded(response).await.map_err(Failure::Unknown)?;
    let answer: Value = serde_json::from_slice(&body)
        .map_err(|_| Failure::Refused(format!("HTTP {}, not JSON-RPC", status.as_u16())))?;
    if let Some(error) = answer.get("error") {
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("no message");
        let code = error.get("code").and_then(Value::as_i64).unwrap_or(0);
        let message: String = message.chars().take(300).collect();
        return Err(Failure::Refused(format!("{message} (A2A error {code})")));
    }
    let result = answer
        .get("result")
        .cloned()
        .ok_or_else(|| Failure::Refused(format!("HTTP {}, no result", status.as_u16())))?;
    serde_json::from_value(result)
        .map_err(|e| Failure::Refused(format!("its answer does not fit {method}: {e}")))
}

/// Why a call of the remote agent failed.
#[derive(Debug)]
pub enum Failure {
    /// The request never reached it: nothing happened.
    NotSent(String),
    /// It answered with a refusal or something unusable.
    Refused(String),
    /// The exchange broke after the request went out: it may have acted.
    Unknown(String),
}

impl Failure {
    /// For the model and people.
    pub fn message(&self) -> String {
        match self {
            Failure::NotSent(why) => format!("not sent: {why}"),
            Failure::Refused(why) => format!("refused: {why}"),
            Failure::Unknown(why) => {
                format!("no answer ({why}); it may or may not have received the message")
            }
        }
    }
}

/// Sends `message`, asking for the task at once (`returnImmediately`).
pub async fn send(
    client: &reqwest::Client,
    url: &str,
    headers: &HeaderMap,
    message: &Message,
    timeout: Duration,
) -> Result<SendMessageResponse, Failure> {
    call(
        client,
        url,
        headers,
        "SendMessage",
        json!({"message": message, "configuration": {"returnImmediately": true}}),
        timeout,
    )
    .await
}

/// Reads task `id` (without its history).
pub async fn get(
    client: &reqwest::Client,
    url: &str,
    headers: &HeaderMap,
    id: &str,
    timeout: Duration,
) -> Result<Task, Failure> {
    call(
        client,
        url,
        headers,
        "GetTask",
        json!({"id": id, "historyLength": 0}),
        timeout,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;

    /// Serves `card` (any body) at the card path of a free port; its base URL.
    async fn serve(body: String) -> String {
        let app = axum::Router::new().route(
            "/agent/.well-known/agent-card.json",
            get(move || {
                let body = body.clone();
                async move {
                    (
                        [(axum::http::header::CONTENT_TYPE, "application/json")],
                        body,
                    )
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}/agent")
    }

    fn card(interfaces: &str) -> String {
        format!(
            r#"{{"name":"x","description":"d","version":"1","supportedInterfaces":{interfaces},"capabilities":{{}},"defaultInputModes":["text/plain"],"defaultOutputModes":["text/plain"],"skills":[{{"id":"s","name":"s","description":"d","tags":["t"]}}]}}"#
        )
    }

    #[tokio::test]
    async fn a_card_is_read_bounded_and_needs_a_json_rpc_interface() {
        crate::install_crypto_provider();
        let client = reqwest::Client::new();
        let read = |url: String| {
            let client = client.clone();
            async move { read_card(&client, &url, &HeaderMap::new(), Duration::from_secs(5)).await }
        };
        let good = serve(card(
            r#"[{"url":"http://h/rest","protocolBinding":"HTTP+JSON","protocolVersion":"1.0"},{"url":"http://h/rpc","protocolBinding":"JSONRPC","protocolVersion":"1.0"}]"#,
        ))
        .await;
        assert_eq!(read(good).await.unwrap().url, "http://h/rpc");

        let old = serve(card(
            r#"[{"url":"http://h/rpc","protocolBinding":"JSONRPC","protocolVersion":"0.3"}]"#,
        ))
        .await;
        assert!(read(old)
            .await
            .unwrap_err()
            .contains("no JSON-RPC interface"));

        let long = serve(card(&format!(
            r#"[{{"url":"http://h/{}","protocolBinding":"JSONRPC","protocolVersion":"1.0"}}]"#,
            "r".repeat(MAX_URL_BYTES)
        )))
        .await;
        assert!(read(long)
            .await
            .unwrap_err()
            .contains("no JSON-RPC interface"));

        let huge = serve(format!(
            r#"{{"name":"{}"}}"#,
            "x".repeat(MAX_ANSWER_BYTES + 10)
        ))
        .await;
        assert!(read(huge).await.unwrap_err().contains("over"));

        let junk = serve("<html>hello</html>".into()).await;
        assert!(read(junk).await.unwrap_err().contains("not a card"));

        let missing = format!("{}/nothing-here", serve(String::new()).await);
        assert!(read(missing).await.unwrap_err().contains("HTTP 404"));
    }

    #[test]
    fn the_card_is_found_below_an_agent_url() {
        assert_eq!(
            card_url("https://a.example/a2a/ns/x/"),
            "https://a.example/a2a/ns/x/.well-known/agent-card.json"
        );
        assert_eq!(
            card_url("https://a.example/card.json"),
            "https://a.example/card.json"
        );
    }
}

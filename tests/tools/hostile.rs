//! HTTP tools against a model that fills their URLs with anything and services that echo
//! credentials back (issue 26): a placeholder never chooses where the request goes, a value
//! never leaves its own path segment, and a Secret is masked however it comes back.

use base64::Engine;
use serde_json::json;

use super::{call, http_tools, secrets, specs, tool_server, SECRET};

#[tokio::test]
async fn a_filled_in_value_never_leaves_its_path_segment() {
    let server = tool_server().await;
    let base = &server.base;
    let tools = http_tools(
        &specs(&format!(
            r#"
- {{name: get, description: d, url: "{base}/api/v1/{{path}}", headersFrom: {{secretName: tracker}}}}
- {{name: detail, description: d, url: "{base}/items/{{a}}/{{b}}/detail", headersFrom: {{secretName: tracker}}}}
"#
        )),
        secrets(),
    );
    // The build before issue 26 sent `GET /api/` and `GET /detail`, with the Secret's headers.
    for (tool, args) in [
        ("get", json!({"path": ".."})),
        ("get", json!({"path": "."})),
        ("detail", json!({"a": "..", "b": ".."})),
        ("detail", json!({"a": "x", "b": ""})),
    ] {
        let (v, ok) = call(&tools, tool, &args.to_string()).await;
        assert!(!ok, "{tool} {args}: {v}");
        let error = v["error"].as_str().unwrap();
        assert!(
            error.contains("may not make a segment empty, '.' or '..' (nothing was sent)"),
            "{error}"
        );
    }
    assert!(server.seen().is_empty(), "{:?}", server.seen());
    // A slash stays inside its segment; dots inside a segment are a value like any other.
    let (v, ok) = call(&tools, "get", r#"{"path": "../../admin"}"#).await;
    assert!(ok, "{v}");
    assert_eq!(v["body"]["uri"], "/api/v1/..%2F..%2Fadmin");
}

#[tokio::test]
async fn a_placeholder_cannot_choose_where_the_secret_goes() {
    let server = tool_server().await;
    let port = server.base.rsplit(':').next().unwrap().to_string();
    // What validation refuses (operator and dev) is refused again at call time, should a
    // manifest reach the worker another way.
    let tools = http_tools(
        &specs(
            r#"
- {name: where, description: d, url: "http://127.0.0.1:{port}/x", headersFrom: {secretName: tracker}}
- {name: host, description: d, url: "http://{h}/x", headersFrom: {secretName: tracker}}
"#,
        ),
        secrets(),
    );
    let (v, ok) = call(&tools, "where", &json!({"port": port}).to_string()).await;
    assert!(
        !ok && v["error"]
            .as_str()
            .unwrap()
            .contains("scheme, host or port"),
        "{v}"
    );
    let (v, ok) = call(
        &tools,
        "host",
        &json!({"h": format!("127.0.0.1:{port}")}).to_string(),
    )
    .await;
    assert!(
        !ok && v["error"]
            .as_str()
            .unwrap()
            .contains("scheme, host or port"),
        "{v}"
    );
    assert!(server.seen().is_empty(), "{:?}", server.seen());
}

#[tokio::test]
async fn a_secret_echoed_in_another_case_or_encoding_is_masked() {
    let server = tool_server().await;
    let base = &server.base;
    let tools = http_tools(
        &specs(&format!(
            r#"
- {{name: shout, description: d, url: "{base}/shout", headersFrom: {{secretName: tracker}}}}
- {{name: encoded, description: d, url: "{base}/encoded", headersFrom: {{secretName: tracker}}}}
"#
        )),
        secrets(),
    );
    let (v, ok) = call(&tools, "shout", "{}").await;
    assert!(ok, "{v}");
    assert_eq!(v["body"]["you sent"], "***");
    let (v, ok) = call(&tools, "encoded", "{}").await;
    assert!(ok, "{v}");
    let shown = v.to_string();
    let credential = SECRET.split_once(' ').unwrap().1;
    assert!(
        !shown.to_lowercase().contains(&credential.to_lowercase()),
        "{shown}"
    );
    // No field decodes back to the credential any more.
    let b64 = base64::engine::general_purpose::STANDARD;
    for field in ["token", "raw"] {
        let text = v["body"][field].as_str().unwrap();
        assert!(text.contains("***"), "{field}: {text}");
        let decodable: String = text.split("***").collect();
        let decoded = b64
            .decode(decodable.trim_end_matches('='))
            .unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&decoded).contains(credential),
            "{field}: {text}"
        );
    }
    assert_eq!(v["body"]["hex"], "***");
}

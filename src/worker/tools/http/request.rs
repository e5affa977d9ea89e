//! From the model's arguments to an HTTP request: parsed, checked against the tool's
//! `inputSchema`, `{arg}` placeholders of the URL filled (percent-encoded), the other
//! arguments as query parameters (`GET`, `DELETE`) or a JSON body, and the headers.

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, Url};
use serde_json::{Map, Value};

use crate::crd::url::json_type;
use crate::crd::validate::check_arguments;
use crate::crd::{HttpMethod, HttpToolSpec};

/// A request ready to send (headers apart).
#[derive(Debug, PartialEq)]
pub(super) struct Target {
    /// The tool's HTTP method (`spec.tools.http[].method`).
    pub method: Method,
    /// The URL, placeholders filled and query added.
    pub url: Url,
    /// The JSON body, for methods that send one.
    pub body: Option<Vec<u8>>,
}

/// The arguments as the model wrote them, as a JSON object checked against `spec`'s
/// `inputSchema`; an error names every problem. Empty text is no arguments.
pub(super) fn arguments(spec: &HttpToolSpec, text: &str) -> Result<Map<String, Value>, String> {
    let value: Value = if text.trim().is_empty() {
        Value::Object(Map::new())
    } else {
        serde_json::from_str(text).map_err(|e| format!("the arguments are not JSON: {e}"))?
    };
    let problems = check_arguments(&spec.input_schema, &value);
    if !problems.is_empty() {
        return Err(format!(
            "the arguments do not match the tool's inputSchema (nothing was sent): {}",
            problems.join("; ")
        ));
    }
    match value {
        Value::Object(map) => Ok(map),
        other => Err(format!(
            "the arguments must be a JSON object, not {} (nothing was sent)",
            json_type(&other)
        )),
    }
}

/// The request `spec` makes with `args`.
pub(super) fn target(spec: &HttpToolSpec, mut args: Map<String, Value>) -> Result<Target, String> {
    let filled = crate::crd::url::fill(&spec.url, &mut args)?;
    let mut url = Url::parse(&filled).map_err(|e| format!("the URL {filled:?} is invalid: {e}"))?;
    let (method, in_query) = match spec.method {
        HttpMethod::Get => (Method::GET, true),
        HttpMethod::Delete => (Method::DELETE, true),
        HttpMethod::Post => (Method::POST, false),
        HttpMethod::Put => (Method::PUT, false),
        HttpMethod::Patch => (Method::PATCH, false),
    };
    let body = if in_query {
        if args.values().any(|v| !v.is_null()) {
            let mut query = url.query_pairs_mut();
            for (name, value) in &args {
                match value {
                    Value::Null => {}
                    Value::Array(items) => {
                        for item in items {
                            query.append_pair(name, &query_text(item));
                        }
                    }
                    other => {
                        query.append_pair(name, &query_text(other));
                    }
                }
            }
        }
        None
    } else {
        Some(
            serde_json::to_vec(&Value::Object(args))
                .map_err(|e| format!("encoding the body: {e}"))?,
        )
    };
    Ok(Target { method, url, body })
}

/// A query parameter's text: strings as they are, other values as JSON.
fn query_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The spec's own headers, parsed; an error names the header, never a value.
pub(super) fn static_headers(spec: &HttpToolSpec) -> Result<HeaderMap, String> {
    let mut out = HeaderMap::new();
    for (name, value) in &spec.headers {
        let (n, v) = header(name, value)
            .map_err(|what| format!("headers: {name:?} is not a valid header {what}"))?;
        out.insert(n, v);
    }
    Ok(out)
}

/// The headers a Secret's keys make; an error names the Secret and key, never a value.
pub(crate) fn secret_headers(
    secret: &str,
    entries: &std::collections::BTreeMap<String, String>,
) -> Result<HeaderMap, String> {
    let mut out = HeaderMap::new();
    for (key, value) in entries {
        let (n, mut v) = header(key, value)
            .map_err(|what| format!("Secret {secret:?}, key {key:?}: not a valid header {what}"))?;
        v.set_sensitive(true);
        out.insert(n, v);
    }
    Ok(out)
}

/// A header from a name and a value; `Err` says which of the two is invalid.
fn header(name: &str, value: &str) -> Result<(HeaderName, HeaderValue), &'static str> {
    let n = HeaderName::from_bytes(name.as_bytes()).map_err(|_| "name")?;
    let v = HeaderValue::from_str(value).map_err(|_| "value")?;
    Ok((n, v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(yaml: &str) -> HttpToolSpec {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn get_sends_the_rest_as_query_and_post_as_a_json_body() {
        let get = spec("{name: t, description: d, url: 'http://h/items/{id}?v=1', method: GET}");
        let t = target(
            &get,
            args(json!({"id": "a/b", "q": "x y", "tags": ["a", "b"], "skip": null, "n": 3})),
        )
        .unwrap();
        assert_eq!(t.method, Method::GET);
        assert_eq!(
            t.url.as_str(),
            "http://h/items/a%2Fb?v=1&n=3&q=x+y&tags=a&tags=b"
        );
        assert_eq!(t.body, None);
        let plain = target(&get, args(json!({"id": "1"}))).unwrap();
        assert_eq!(plain.url.as_str(), "http://h/items/1?v=1");

        let post = spec("{name: t, description: d, url: 'http://h/items/{id}', method: POST}");
        let t = target(&post, args(json!({"id": 7, "title": "disk full"}))).unwrap();
        assert_eq!(t.method, Method::POST);
        assert_eq!(t.url.as_str(), "http://h/items/7");
        assert_eq!(
            serde_json::from_slice::<Value>(&t.body.unwrap()).unwrap(),
            json!({"title": "disk full"})
        );
        let delete = spec("{name: t, description: d, url: 'http://h/x', method: DELETE}");
        assert_eq!(
            target(&delete, args(json!({"force": true})))
                .unwrap()
                .url
                .as_str(),
            "http://h/x?force=true"
        );
    }

    #[test]
    fn arguments_are_parsed_and_checked_before_anything_is_sent() {
        let s = spec(
            "{name: t, description: d, url: 'http://h', inputSchema: {type: object, properties: {title: {type: string}}, required: [title]}}",
        );
        assert_eq!(
            arguments(&s, r#"{"title": "x"}"#).unwrap(),
            args(json!({"title": "x"}))
        );
        let e = arguments(&s, r#"{"title": 3}"#).unwrap_err();
        assert!(
            e.contains("inputSchema") && e.contains("title: must be string, not integer"),
            "{e}"
        );
        let e = arguments(&s, "").unwrap_err();
        assert!(e.contains("title: Required value"), "{e}");
        let e = arguments(&s, "{nope").unwrap_err();
        assert!(e.starts_with("the arguments are not JSON"), "{e}");
        let any = spec("{name: t, description: d, url: 'http://h', inputSchema: {}}");
        assert!(arguments(&any, "[1]")
            .unwrap_err()
            .contains("JSON object, not an array"));
        assert!(arguments(&any, "  ").unwrap().is_empty());
    }

    #[test]
    fn bad_headers_are_named_without_their_values() {
        let s = spec(
            "{name: t, description: d, url: 'http://h', headers: {'X-Ok': 'v', 'Bad Name': 'v'}}",
        );
        let e = static_headers(&s).unwrap_err();
        assert!(e.contains("\"Bad Name\" is not a valid header name"), "{e}");
        let secret = [("Authorization".to_string(), "Bearer s3cr3t\n".to_string())].into();
        let e = secret_headers("tracker", &secret).unwrap_err();
        assert!(
            e.contains("\"tracker\", key \"Authorization\": not a valid header value"),
            "{e}"
        );
        assert!(!e.contains("s3cr3t"), "{e}");
        let ok = [("Authorization".to_string(), "Bearer s3cr3t".to_string())].into();
        let h = secret_headers("tracker", &ok).unwrap();
        assert!(h["authorization"].is_sensitive());
        assert!(!format!("{h:?}").contains("s3cr3t"));
    }
}

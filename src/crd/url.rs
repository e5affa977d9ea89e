//! An HTTP tool's URL template (`tools.http[].url`): its `{arg}` placeholders, where they may
//! stand, and how they are filled. One rule for the operator's and `dev`'s validation and
//! for the worker that fills them in.
//!
//! The model chooses what fills a placeholder, so a placeholder may only stand in the path or
//! the query: never in the scheme, the user, the host or the port, which decide where the
//! request (and the Secret's headers) go. A filled-in value is percent-encoded (a `/`, `?`,
//! `#`, `&` or `=` in it stays inside its own segment or value), and a path segment it fills
//! may not end up `.`, `..` or empty, which would move the request to another path.

use serde_json::{Map, Value};

use crate::secrets::percent_encode;

/// The names of the placeholders of `url`, in order; an error says what is wrong (a brace
/// without its pair, a name that is not one, a placeholder outside the path and the query).
pub fn placeholders(url: &str) -> Result<Vec<&str>, String> {
    let mut out = Vec::new();
    let mut rest = url;
    let mut at = 0;
    let path_start = path_start(url);
    while let Some(open) = rest.find(['{', '}']) {
        if rest[open..].starts_with('}') {
            return Err("a '}' without its '{'".into());
        }
        let after = &rest[open + 1..];
        let close = after
            .find('}')
            .ok_or_else(|| "a '{' without its '}'".to_string())?;
        let name = &after[..close];
        let valid = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            return Err(format!(
                "placeholder {{{name}}} is not a property name (letters, digits, _ and -)"
            ));
        }
        if path_start.is_none_or(|start| at + open < start) {
            return Err(format!(
                "placeholder {{{name}}} is in the scheme, host or port; placeholders may only fill path segments and query values, so that the model cannot choose where the request and its headers go"
            ));
        }
        out.push(name);
        at += open + 1 + close + 1;
        rest = &after[close + 1..];
    }
    Ok(out)
}

/// Where the path of `url` starts (the first `/` after `scheme://` and the authority), if it
/// has one; a URL without `://` has no authority the rule can find, so no path either.
fn path_start(url: &str) -> Option<usize> {
    let authority = url.find("://")? + 3;
    let end = url[authority..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| authority + i);
    (end < url.len()).then_some(end)
}

/// `url` with every `{name}` filled from the argument `name` (percent-encoded), and the
/// arguments used removed from `args`. The error says why nothing can be sent.
pub fn fill(url: &str, args: &mut Map<String, Value>) -> Result<String, String> {
    placeholders(url).map_err(|why| format!("the tool's URL is invalid: {why}"))?;
    let Some(start) = path_start(url) else {
        return Ok(url.to_string());
    };
    let (head, rest) = url.split_at(start);
    let path_end = rest.find(['?', '#']).unwrap_or(rest.len());
    let (path, tail) = rest.split_at(path_end);
    let mut used = Vec::new();
    let mut out = head.to_string();
    for (i, segment) in path.split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        let filled = fill_part(segment, args, &mut used)?;
        if filled != segment {
            let plain = filled.to_ascii_lowercase().replace("%2e", ".");
            if plain.is_empty() || plain == "." || plain == ".." {
                return Err(format!(
                    "the path segment {segment:?} of the URL would be {filled:?}: a filled-in value may not make a segment empty, '.' or '..' (nothing was sent)"
                ));
            }
        }
        out.push_str(&filled);
    }
    out.push_str(&fill_part(tail, args, &mut used)?);
    for name in used {
        args.remove(&name);
    }
    Ok(out)
}

/// `part` of a valid template with its placeholders filled; the names used are noted.
fn fill_part(
    part: &str,
    args: &Map<String, Value>,
    used: &mut Vec<String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(part.len());
    let mut rest = part;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let close = after.find('}').unwrap_or(after.len());
        let name = &after[..close];
        let value = args.get(name).ok_or_else(|| {
            format!("the argument {name:?} is required: the URL has a placeholder {{{name}}} for it (nothing was sent)")
        })?;
        let text = match value {
            Value::String(s) => s.clone(),
            Value::Number(_) | Value::Bool(_) => value.to_string(),
            other => {
                return Err(format!(
                    "the argument {name:?} fills a URL placeholder: it must be a string, a number or a boolean, not {} (nothing was sent)",
                    json_type(other)
                ))
            }
        };
        out.push_str(&percent_encode(&text));
        used.push(name.to_string());
        rest = after.get(close + 1..).unwrap_or_default();
    }
    out.push_str(rest);
    Ok(out)
}

/// A JSON value's type, as a message names it.
pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn placeholders_stand_only_in_the_path_and_the_query() {
        assert_eq!(
            placeholders("https://t.example/teams/{team}/t/{id}?open={open}#{frag}").unwrap(),
            ["team", "id", "open", "frag"]
        );
        assert_eq!(placeholders("http://h?q={q}").unwrap(), ["q"]);
        for bad in [
            "http://{region}:19102/api",
            "http://127.0.0.1:{port}/api",
            "http://{h}.example/api",
            "http://user:{password}@h/api",
            "{scheme}://h/api",
            "http://h{path}",
            "http://h:80{path}",
        ] {
            let e = placeholders(bad).unwrap_err();
            assert!(e.contains("scheme, host or port"), "{bad}: {e}");
        }
        assert!(placeholders("http://h/{a")
            .unwrap_err()
            .contains("without its '}'"));
        assert!(placeholders("http://h/a}")
            .unwrap_err()
            .contains("without its '{'"));
        assert!(placeholders("http://h/{a.b}")
            .unwrap_err()
            .contains("not a property name"));
    }

    #[test]
    fn placeholders_are_filled_percent_encoded_and_not_sent_again() {
        let mut a = args(json!({"team": "ops/sre", "id": 42, "q": "a b&c", "open": true}));
        let url = fill(
            "https://t.example/teams/{team}/tickets/{id}?open={open}",
            &mut a,
        )
        .unwrap();
        assert_eq!(
            url,
            "https://t.example/teams/ops%2Fsre/tickets/42?open=true"
        );
        assert_eq!(a, args(json!({"q": "a b&c"})));
        let mut a = args(json!({"x": "é"}));
        assert_eq!(
            fill("http://h/{x}/{x}", &mut a).unwrap(),
            "http://h/%C3%A9/%C3%A9"
        );
        let e = fill("http://h/{missing}", &mut args(json!({}))).unwrap_err();
        assert!(e.contains("\"missing\" is required"), "{e}");
        let e = fill("http://h/{o}", &mut args(json!({"o": {"a": 1}}))).unwrap_err();
        assert!(e.contains("not an object"), "{e}");
        let e = fill("http://{h}/x", &mut args(json!({"h": "evil"}))).unwrap_err();
        assert!(e.starts_with("the tool's URL is invalid"), "{e}");
    }

    #[test]
    fn a_value_never_leaves_its_own_path_segment() {
        for (template, values) in [
            ("http://h/api/v1/{path}", json!({"path": ".."})),
            ("http://h/api/v1/{path}", json!({"path": "."})),
            (
                "http://h/items/{a}/{b}/detail",
                json!({"a": "..", "b": ".."}),
            ),
            ("http://h/items/{a}{b}/detail", json!({"a": ".", "b": "."})),
            ("http://h/items/{a}/detail", json!({"a": ""})),
            ("http://h/items/%2e{a}/detail", json!({"a": "."})),
        ] {
            let e = fill(template, &mut args(values.clone())).unwrap_err();
            assert!(
                e.contains("may not make a segment"),
                "{template} {values}: {e}"
            );
        }
        // Dots inside a segment, and anything in the query, are values like others.
        let url = fill(
            "http://h/files/{name}?q={q}",
            &mut args(json!({"name": "..x..", "q": ".."})),
        )
        .unwrap();
        assert_eq!(url, "http://h/files/..x..?q=..");
        let url = fill("http://h/f/{a}.json", &mut args(json!({"a": "."}))).unwrap();
        assert_eq!(url, "http://h/f/..json");
        let parsed = reqwest::Url::parse(&url).unwrap();
        assert_eq!(parsed.path(), "/f/..json");
        // A slash is encoded: still one segment.
        let url = fill("http://h/a/{p}/b", &mut args(json!({"p": "../../x"}))).unwrap();
        assert_eq!(
            reqwest::Url::parse(&url).unwrap().path(),
            "/a/..%2F..%2Fx/b"
        );
    }
}

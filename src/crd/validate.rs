//! Checks a value against a schema, by one of two sets of rules:
//! - a manifest against its CRD's structural schema, as the API server does on `kubectl apply`
//!   (types, required fields, enums, ranges, lengths, patterns, unique `set` lists, unknown
//!   fields as with kubectl's strict validation), where there is no API server: `agentfleet
//!   dev` refuses exactly what a cluster would ([`check`]);
//! - a tool's arguments against its JSON Schema `inputSchema`, before any request is made
//!   ([`check_arguments`]): the same keywords (`type`, also a list of types; `properties`,
//!   `required`, `enum`, `minimum`/`maximum`, `minLength`/`maxLength`, `pattern`, `items`,
//!   `minItems`/`maxItems`, `additionalProperties`) read as JSON Schema reads them: `null` is
//!   a value like any other, and properties the schema does not name are allowed unless
//!   `additionalProperties` is `false`. Other keywords are not checked.

use serde_json::Value;

/// The rules a schema is read by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dialect {
    /// A CRD's structural schema as the API server applies it: nulls are dropped, unknown
    /// fields refused unless preserved, `apiVersion`/`kind`/`metadata` checked elsewhere.
    Structural,
    /// JSON Schema as tools' input schemas use it.
    JsonSchema,
}

/// Problems of `object` against the openAPIV3Schema `schema`, each with its field path.
pub fn check(schema: &Value, object: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    walk(Dialect::Structural, schema, object, "", &mut problems);
    problems
}

/// Problems of a tool's `arguments` against its JSON Schema `inputSchema`, each with its
/// argument path (`<root>` for the arguments as a whole).
pub fn check_arguments(schema: &Value, arguments: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    walk(Dialect::JsonSchema, schema, arguments, "", &mut problems);
    problems
}

/// The openAPIV3Schema of a kind's first version, as JSON (generated once: `dev` checks every
/// document against it).
pub fn schema_of(kind: &str) -> Option<&'static Value> {
    static SCHEMAS: std::sync::OnceLock<Vec<(String, Value)>> = std::sync::OnceLock::new();
    let schemas = SCHEMAS.get_or_init(|| {
        super::definitions()
            .into_iter()
            .filter_map(|crd| {
                let schema = crd
                    .spec
                    .versions
                    .first()?
                    .schema
                    .as_ref()?
                    .open_api_v3_schema
                    .as_ref()?;
                Some((crd.spec.names.kind, serde_json::to_value(schema).ok()?))
            })
            .collect()
    });
    schemas.iter().find(|(k, _)| k == kind).map(|(_, s)| s)
}

/// `pattern` compiled, once per pattern (a manifest of a thousand spaces checks the same few
/// patterns a thousand times). Patterns come from schemas: the CRDs' own, or a tool's
/// `inputSchema`, whose count is bounded by the manifests.
fn compiled(pattern: &str) -> Result<regex::Regex, regex::Error> {
    static CACHE: std::sync::OnceLock<
        std::sync::Mutex<std::collections::HashMap<String, regex::Regex>>,
    > = std::sync::OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(re) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(pattern) {
        return Ok(re.clone());
    }
    let re = regex::Regex::new(pattern)?;
    let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    if cache.len() < 1024 {
        cache.insert(pattern.to_string(), re.clone());
    }
    Ok(re)
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Whether `v` is of JSON Schema type `want`.
fn fits(dialect: Dialect, want: &str, v: &Value) -> bool {
    let actual = type_name(v);
    want == actual
        || (want == "number" && actual == "integer")
        // JSON Schema counts 2.0 as an integer; the API server does not.
        || (dialect == Dialect::JsonSchema
            && want == "integer"
            && v.as_f64().is_some_and(|x| x.fract() == 0.0))
}

/// The types a schema allows (`type` as a string, or a list in JSON Schema); empty: any.
fn types(dialect: Dialect, schema: &Value) -> Vec<&str> {
    match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) if dialect == Dialect::JsonSchema => {
            ts.iter().filter_map(Value::as_str).collect()
        }
        _ => Vec::new(),
    }
}

fn walk(dialect: Dialect, schema: &Value, v: &Value, path: &str, out: &mut Vec<String>) {
    let at = if path.is_empty() { "<root>" } else { path };
    let structural = dialect == Dialect::Structural;
    if v.is_null() && structural {
        // The API server drops nulls (and so does our deserialisation into defaults).
        return;
    }
    if structural && schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        if !(v.is_string() || v.is_i64() || v.is_u64()) {
            out.push(format!("{at}: must be an integer or a string"));
        }
        return;
    }
    if structural
        && schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
        && schema.get("properties").is_none()
    {
        return;
    }
    let want = types(dialect, schema);
    if !want.is_empty() && !want.iter().any(|t| fits(dialect, t, v)) {
        out.push(format!(
            "{at}: must be {}, not {}",
            want.join(" or "),
            type_name(v)
        ));
        return;
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array) {
        if !options.contains(v) {
            let list: Vec<String> = options.iter().map(|o| o.to_string()).collect();
            out.push(format!(
                "{at}: unsupported value {v}; supported values: {}",
                list.join(", ")
            ));
        }
    }
    match v {
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(0.0);
            if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
                if x < min {
                    out.push(format!("{at}: must be greater than or equal to {min}"));
                }
            }
            if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
                if x > max {
                    out.push(format!("{at}: must be less than or equal to {max}"));
                }
            }
        }
        Value::String(s) => {
            let len = s.chars().count() as u64;
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64) {
                if len < min {
                    out.push(format!("{at}: must be at least {min} characters"));
                }
            }
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64) {
                if len > max {
                    out.push(format!("{at}: may not be more than {max} characters"));
                }
            }
            if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
                match compiled(pattern) {
                    Ok(re) if !re.is_match(s) => {
                        out.push(format!("{at}: {s:?} should match '{pattern}'"));
                    }
                    Ok(_) => {}
                    Err(e) => out.push(format!("{at}: schema pattern {pattern:?} invalid: {e}")),
                }
            }
        }
        Value::Array(items) => {
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64) {
                if (items.len() as u64) < min {
                    out.push(format!("{at}: must have at least {min} items"));
                }
            }
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64) {
                if items.len() as u64 > max {
                    out.push(format!("{at}: must have at most {max} items"));
                }
            }
            let list_type = schema.get("x-kubernetes-list-type").and_then(Value::as_str);
            if list_type == Some("set") {
                for (i, item) in items.iter().enumerate() {
                    if items[..i].contains(item) {
                        out.push(format!("{at}[{i}]: duplicate value {item}"));
                    }
                }
            }
            if list_type == Some("map") {
                let keys: Vec<&str> = schema
                    .get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|k| k.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                for (i, item) in items.iter().enumerate() {
                    let key: Vec<&Value> = keys.iter().filter_map(|k| item.get(*k)).collect();
                    let dup = items[..i].iter().any(|other| {
                        keys.iter()
                            .filter_map(|k| other.get(*k))
                            .collect::<Vec<_>>()
                            == key
                    });
                    if dup && !key.is_empty() {
                        out.push(format!(
                            "{at}[{i}]: duplicate entry for key {}",
                            keys.join(",")
                        ));
                    }
                }
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    walk(dialect, item_schema, item, &format!("{path}[{i}]"), out);
                }
            }
        }
        Value::Object(map) => {
            if let Some(required) = schema.get("required").and_then(Value::as_array) {
                for r in required.iter().filter_map(Value::as_str) {
                    let missing = match map.get(r) {
                        None => true,
                        Some(v) => structural && v.is_null(),
                    };
                    if missing {
                        out.push(format!("{}: Required value", join(path, r)));
                    }
                }
            }
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            for (k, child) in map {
                if structural
                    && path.is_empty()
                    && matches!(k.as_str(), "apiVersion" | "kind" | "metadata")
                {
                    continue;
                }
                match (properties.and_then(|p| p.get(k)), additional) {
                    (Some(s), _) | (None, Some(s @ Value::Object(_))) => {
                        walk(dialect, s, child, &join(path, k), out)
                    }
                    (None, Some(Value::Bool(true))) => {}
                    (None, Some(Value::Bool(false))) => {
                        out.push(format!("{}: unknown field", join(path, k)))
                    }
                    (None, _) => {
                        if structural
                            && schema.get("x-kubernetes-preserve-unknown-fields")
                                != Some(&Value::Bool(true))
                        {
                            out.push(format!("{}: unknown field", join(path, k)));
                        }
                    }
                }
            }
        }
        _ => {}
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn agent(spec: Value) -> Value {
        json!({"apiVersion": "agentfleet.dev/v1alpha1", "kind": "Agent", "metadata": {"name": "a"}, "spec": spec})
    }

    #[test]
    fn agents_are_checked_like_the_api_server_does() {
        let schema = schema_of("Agent").unwrap();
        let ok =
            agent(json!({"model": {"provider": "scripted", "name": "a"}, "spaces": ["family"]}));
        assert_eq!(check(schema, &ok), Vec::<String>::new());
        let cases = [
            (
                json!({"model": {"provider": "nope", "name": "a"}}),
                "spec.model.provider: unsupported value \"nope\"",
            ),
            (
                json!({"model": {"provider": "scripted", "name": "a"}, "cycle": {"maxSteps": 0}}),
                "spec.cycle.maxSteps: must be greater than or equal to 1",
            ),
            (
                json!({"model": {"provider": "scripted", "name": "a"}, "cycle": {"maxSteps": "many"}}),
                "spec.cycle.maxSteps: must be integer, not string",
            ),
            (
                json!({"model": {"ref": "Big_Model"}}),
                "spec.model.ref: \"Big_Model\" should match",
            ),
            (
                json!({"model": {"provider": "scripted", "name": "a"}, "spaces": ["Family!"]}),
                "spec.spaces[0]: \"Family!\" should match",
            ),
            (
                json!({"model": {"provider": "scripted", "name": "a"}, "spaces": ["a", "a"]}),
                "spec.spaces[1]: duplicate value",
            ),
            (
                json!({"model": {"provider": "scripted", "name": "a", "temprature": 1}}),
                "spec.model.temprature: unknown field",
            ),
            (
                json!({"model": {"provider": "openai", "name": "a", "temperature": 7}}),
                "spec.model.temperature: must be less than or equal to 2",
            ),
            (
                json!({"model": {"provider": "scripted", "name": "a"}, "scaling": {"minReplicas": 3}}),
                "spec.scaling.minReplicas: must be less than or equal to 1",
            ),
        ];
        for (spec, want) in cases {
            let problems = check(schema, &agent(spec.clone()));
            assert!(
                problems.iter().any(|p| p.starts_with(want)),
                "{spec}: {problems:?}"
            );
        }
    }

    #[test]
    fn tool_arguments_are_checked_as_json_schema() {
        let schema = json!({
            "type": "object",
            "properties": {
                "title": {"type": "string", "minLength": 1, "maxLength": 10},
                "priority": {"type": "integer", "minimum": 1, "maximum": 5},
                "team": {"type": "string", "enum": ["ops", "dev"]},
                "labels": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"}, "minItems": 1},
                "due": {"type": ["string", "null"]},
                "meta": {"type": "object", "additionalProperties": false, "properties": {"a": {"type": "boolean"}}}
            },
            "required": ["title"]
        });
        let ok = json!({"title": "disk", "priority": 2.0, "team": "ops", "labels": ["x"], "due": null, "extra": 1, "meta": {"a": true}});
        assert_eq!(check_arguments(&schema, &ok), Vec::<String>::new());
        let cases = [
            (json!({}), "title: Required value"),
            (json!({"title": null}), "title: must be string, not null"),
            (json!({"title": ""}), "title: must be at least 1 characters"),
            (
                json!({"title": "x", "priority": "high"}),
                "priority: must be integer, not string",
            ),
            (
                json!({"title": "x", "priority": 1.5}),
                "priority: must be integer, not number",
            ),
            (
                json!({"title": "x", "priority": 9}),
                "priority: must be less than or equal to 5",
            ),
            (
                json!({"title": "x", "team": "sales"}),
                "team: unsupported value \"sales\"",
            ),
            (
                json!({"title": "x", "labels": []}),
                "labels: must have at least 1 items",
            ),
            (
                json!({"title": "x", "labels": ["A"]}),
                "labels[0]: \"A\" should match",
            ),
            (
                json!({"title": "x", "due": 3}),
                "due: must be string or null, not integer",
            ),
            (
                json!({"title": "x", "meta": {"b": 1}}),
                "meta.b: unknown field",
            ),
            (json!([1]), "<root>: must be object, not array"),
        ];
        for (args, want) in cases {
            let problems = check_arguments(&schema, &args);
            assert!(
                problems.iter().any(|p| p.starts_with(want)),
                "{args}: {problems:?}"
            );
        }
        // With no schema keywords, anything goes.
        assert!(check_arguments(&json!({}), &json!({"any": [null]})).is_empty());
    }

    #[test]
    fn spaces_are_checked_too() {
        let schema = schema_of("Space").unwrap();
        let space = |spec: Value| json!({"apiVersion": "agentfleet.dev/v1alpha1", "kind": "Space", "metadata": {"name": "s"}, "spec": spec});
        assert_eq!(
            check(schema, &space(json!({"members": [{"id": "husam"}]}))),
            Vec::<String>::new()
        );
        let p = check(
            schema,
            &space(json!({"members": [{"id": "husam"}, {"id": "husam"}]})),
        );
        assert!(p.iter().any(|p| p.contains("duplicate entry")), "{p:?}");
    }
}

//! The Kubernetes name rules, in one place: what the API server accepts as a namespace and as
//! an object name. `agentfleet dev`, the gateway and the CLI check names with these, so a name
//! that would be refused by `kubectl apply` is refused everywhere.

/// A DNS-1123 label: at most 63 lowercase letters, digits and `-`, starting and ending with a
/// letter or digit (namespaces, Agent names used in labels).
pub fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A DNS-1123 subdomain: at most 253 characters, dot-separated DNS-1123 labels (the names of
/// most objects, custom resources included).
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

/// The name the model calls a tool of an MCP server or a remote A2A agent by:
/// `PREFIX__NAME`, every character of the name but letters, digits, `_` and `-` made `_`.
/// With `pattern`, `*` is kept: the name a tool pattern (`requireApproval`) takes on, to be
/// matched against model names (see [`crate::party::tool_matches`]).
pub fn prefixed_tool(prefix: &str, name: &str, pattern: bool) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' || (pattern && c == '*') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{prefix}__{safe}")
}

/// Why `name` is not a valid name for an object (`None` when it is).
pub fn object_name_problem(name: &str) -> Option<String> {
    (!is_dns1123_subdomain(name)).then(|| {
        format!(
            "{:?} is not a valid name: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters (RFC 1123 subdomain)",
            shorten(name)
        )
    })
}

/// Why `namespace` is not a valid namespace (`None` when it is).
pub fn namespace_problem(namespace: &str) -> Option<String> {
    (!is_dns1123_label(namespace)).then(|| {
        format!(
            "{:?} is not a valid namespace: lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters (RFC 1123 label)",
            shorten(namespace)
        )
    })
}

/// Parses `NAMESPACE/NAME` with both parts valid; the error says what is wrong.
pub fn parse_namespaced(what: &str, s: &str) -> Result<(String, String), String> {
    let Some((ns, name)) = s.split_once('/') else {
        return Err(format!(
            "{what} must be written NAMESPACE/NAME, got {:?}",
            shorten(s)
        ));
    };
    if let Some(p) = namespace_problem(ns).or_else(|| object_name_problem(name)) {
        return Err(format!("{what}: {p}"));
    }
    Ok((ns.to_string(), name.to_string()))
}

/// `text`, at most `max` characters of it (an ellipsis, counted, says it was cut): for text
/// from outside (a server's error, a model's words) in what the system says.
pub fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// At most 64 characters of `s` (with `…` when cut), for quoting user input in messages.
pub fn shorten(s: &str) -> String {
    const MAX: usize = 64;
    match s.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names_follow_the_api_server() {
        for ok in ["a", "family", "on-call", "a1", &"x".repeat(63)] {
            assert!(is_dns1123_label(ok), "{ok}");
            assert!(is_dns1123_subdomain(ok), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "Bad_Name!",
            "../etc",
            "NS",
            "a/b",
            &"x".repeat(64),
        ] {
            assert!(!is_dns1123_label(bad), "{bad}");
        }
        assert!(is_dns1123_subdomain("a.b-c.d"));
        for bad in ["", "a..b", ".a", "a.", "../etc", "Bad_Name!", "a_b"] {
            assert!(!is_dns1123_subdomain(bad), "{bad}");
        }
        assert!(!is_dns1123_subdomain(&"a.".repeat(127)));
        assert!(parse_namespaced("the space", "NS/evil").is_err());
        assert!(parse_namespaced("the space", "default/../etc").is_err());
        assert_eq!(
            parse_namespaced("the space", "default/family").unwrap(),
            ("default".to_string(), "family".to_string())
        );
        let e = parse_namespaced("the agent", "nope").unwrap_err();
        assert!(e.contains("NAMESPACE/NAME"), "{e}");
    }

    proptest! {
        #[test]
        fn shorten_never_panics_and_bounds_length(s in any::<String>()) {
            let short = shorten(&s);
            prop_assert!(short.chars().count() <= 65);
            prop_assert!(s.starts_with(short.trim_end_matches('…')));
        }
    }
}

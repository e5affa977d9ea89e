//! What a listed MCP server offers the model: its tools under `SERVER__TOOL` names, cut to
//! the allowlist, and what `status.tools` says of them. Pure: no connection in here.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::crd::ToolStatus;
use crate::model::ToolSpec;

/// Between the server's name and its tool's name.
pub const SEPARATOR: &str = "__";

/// The longest tool name model providers accept.
const MAX_NAME: usize = 64;

/// One tool of the server, as the model sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Offered {
    /// Name, description and input schema, under the `SERVER__TOOL` name.
    pub spec: ToolSpec,
    /// The tool's name on the server (what `tools/call` names).
    pub remote: String,
}

/// The tools one server offers, and the ones it was asked for but cannot offer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Offer {
    /// Offered, by name.
    pub tools: Vec<Offered>,
    /// Not offered: `(name the model would see, why not)`, by name.
    pub unusable: Vec<(String, String)>,
}

impl Offer {
    /// What `server` offers of `listed`: every tool when `allow` is empty, otherwise the ones
    /// it names. An allowed tool the server does not list, or whose name no model accepts,
    /// is reported as unusable instead.
    pub fn new(server: &str, allow: &[String], listed: Vec<rmcp::model::Tool>) -> Self {
        let mut offer = Offer::default();
        let mut taken = BTreeSet::new();
        let mut seen = BTreeSet::new();
        for tool in listed {
            let remote = tool.name.to_string();
            if !seen.insert(remote.clone()) || !(allow.is_empty() || allow.contains(&remote)) {
                continue;
            }
            let name = model_name(server, &remote);
            if name.len() > MAX_NAME {
                offer.unusable.push((
                    name,
                    format!("MCP server {server}: the tool name {remote:?} is too long for models (more than {MAX_NAME} characters with the prefix)"),
                ));
                continue;
            }
            if !taken.insert(name.clone()) {
                offer.unusable.push((
                    name,
                    format!("MCP server {server}: the tool {remote:?} has the same name as another of its tools once made safe for models"),
                ));
                continue;
            }
            let description = tool
                .description
                .as_deref()
                .or(tool.title.as_deref())
                .unwrap_or(&remote)
                .to_string();
            offer.tools.push(Offered {
                spec: ToolSpec {
                    name,
                    description,
                    parameters: Value::Object(tool.input_schema.as_ref().clone()),
                },
                remote,
            });
        }
        for wanted in allow {
            if !seen.contains(wanted) {
                offer.unusable.push((
                    model_name(server, wanted),
                    format!("MCP server {server} offers no tool {wanted:?}"),
                ));
            }
        }
        offer.tools.sort_by(|a, b| a.spec.name.cmp(&b.spec.name));
        offer.unusable.sort();
        offer.unusable.dedup_by(|a, b| a.0 == b.0);
        offer
    }

    /// The tool the model calls `name`.
    pub fn find(&self, name: &str) -> Option<&Offered> {
        self.tools.iter().find(|t| t.spec.name == name)
    }

    /// What `status.tools` shows: the offered tools (ready), then the unusable ones.
    pub fn status(&self, server: &str) -> Vec<ToolStatus> {
        let source = source(server);
        self.tools
            .iter()
            .map(|t| ToolStatus {
                name: t.spec.name.clone(),
                source: source.clone(),
                ready: true,
                last_error: None,
            })
            .chain(self.unusable.iter().map(|(name, why)| ToolStatus {
                name: name.clone(),
                source: source.clone(),
                ready: false,
                last_error: Some(why.clone()),
            }))
            .collect()
    }
}

/// What `status.tools` shows for a server whose tools are unavailable: one entry standing
/// for all of them.
pub fn unavailable(server: &str, why: &str) -> ToolStatus {
    ToolStatus {
        name: format!("{server}{SEPARATOR}*"),
        source: source(server),
        ready: false,
        last_error: Some(why.to_string()),
    }
}

/// `mcp:SERVER`, the source `status.tools` names.
fn source(server: &str) -> String {
    format!("mcp:{server}")
}

/// `SERVER__TOOL`, with every character model providers refuse in a tool name (anything
/// but ASCII letters, digits, `_` and `-`) replaced by `_`.
pub fn model_name(server: &str, tool: &str) -> String {
    let safe: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{server}{SEPARATOR}{safe}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, description: Option<&str>) -> rmcp::model::Tool {
        let schema = json!({"type": "object", "properties": {"q": {"type": "string"}}});
        let schema = schema.as_object().cloned().unwrap_or_default();
        rmcp::model::Tool::new_with_raw(
            name.to_string(),
            description.map(|d| d.to_string().into()),
            schema,
        )
    }

    #[test]
    fn every_tool_under_the_prefix_in_name_order() {
        let offer = Offer::new(
            "tracker",
            &[],
            vec![
                tool("search", Some("Find tickets.")),
                tool("open", None),
                tool("search", Some("A second listing of the same name.")),
            ],
        );
        let names: Vec<&str> = offer.tools.iter().map(|t| t.spec.name.as_str()).collect();
        assert_eq!(names, ["tracker__open", "tracker__search"]);
        let search = offer.find("tracker__search").unwrap();
        assert_eq!(search.remote, "search");
        assert_eq!(search.spec.description, "Find tickets.");
        assert_eq!(search.spec.parameters["properties"]["q"]["type"], "string");
        assert_eq!(
            offer.find("tracker__open").unwrap().spec.description,
            "open",
            "a tool without a description is described by its name"
        );
        assert!(offer.unusable.is_empty());
        assert!(offer.status("tracker").iter().all(|s| s.ready));
        assert_eq!(offer.status("tracker")[0].source, "mcp:tracker");
    }

    #[test]
    fn the_allowlist_cuts_and_names_what_is_missing() {
        let offer = Offer::new(
            "gh",
            &["search".into(), "merge".into()],
            vec![tool("search", None), tool("delete_repo", None)],
        );
        let names: Vec<&str> = offer.tools.iter().map(|t| t.spec.name.as_str()).collect();
        assert_eq!(names, ["gh__search"]);
        assert!(offer.find("gh__delete_repo").is_none());
        assert_eq!(
            offer.status("gh"),
            [
                ToolStatus {
                    name: "gh__search".into(),
                    source: "mcp:gh".into(),
                    ready: true,
                    last_error: None
                },
                ToolStatus {
                    name: "gh__merge".into(),
                    source: "mcp:gh".into(),
                    ready: false,
                    last_error: Some("MCP server gh offers no tool \"merge\"".into())
                },
            ]
        );
    }

    #[test]
    fn names_models_refuse_are_made_safe_or_reported() {
        assert_eq!(model_name("fs", "files/read.v2"), "fs__files_read_v2");
        let offer = Offer::new(
            "fs",
            &[],
            vec![
                tool("files/read", None),
                tool("files.read", None),
                tool(&"x".repeat(70), None),
            ],
        );
        assert_eq!(offer.tools.len(), 1);
        assert_eq!(offer.tools[0].spec.name, "fs__files_read");
        assert_eq!(offer.tools[0].remote, "files/read");
        assert_eq!(offer.unusable.len(), 2, "{:?}", offer.unusable);
        assert!(offer
            .unusable
            .iter()
            .any(|(_, why)| why.contains("same name")));
        assert!(offer
            .unusable
            .iter()
            .any(|(_, why)| why.contains("too long")));
    }

    #[test]
    fn an_unavailable_server_is_one_entry() {
        let s = unavailable("gh", "MCP server gh is unreachable: refused");
        assert_eq!(s.name, "gh__*");
        assert_eq!(s.source, "mcp:gh");
        assert!(!s.ready);
    }
}

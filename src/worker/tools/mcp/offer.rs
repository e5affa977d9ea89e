//! What a listed MCP server offers the model: its tools under `SERVER__TOOL` names, cut to
//! the allowlist and to the server's `limits`, and what `status.tools` says of them. Pure:
//! no connection in here.
//!
//! A listing is read page by page into a [`Listing`], which keeps only what will be offered
//! (at most `maxTools` tools, descriptions cut) and refuses the whole listing once it is over
//! a bound (pages, tools, bytes): memory stays bounded whatever the server sends.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::crd::{McpLimits, McpServerSpec, ToolStatus};
use crate::model::ToolSpec;
use crate::secrets::Redactor;

/// Between the server's name and its tool's name.
pub const SEPARATOR: &str = "__";

/// The longest tool name model providers accept.
const MAX_NAME: usize = 64;

/// The most tools of one server named in `status.tools` as unusable; the rest are counted in
/// one entry.
const MAX_UNUSABLE: usize = 32;

/// One tool of the server, as the model sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Offered {
    /// Name, description and input schema, under the `SERVER__TOOL` name.
    pub spec: ToolSpec,
    /// The tool's name on the server (what `tools/call` names).
    pub remote: String,
    /// What was changed to offer it (its description cut).
    pub note: Option<String>,
}

/// The tools one server offers, and the ones it was asked for but cannot offer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Offer {
    /// Offered, by name.
    pub tools: Vec<Offered>,
    /// Not offered: `(name the model would see, why not)`, by name; at most
    /// [`MAX_UNUSABLE`] of them.
    pub unusable: Vec<(String, String)>,
    /// Why more tools were not offered (beyond `maxTools`, or unusable beyond those named).
    pub more: Option<String>,
}

/// A listing under way: the pages read so far, kept as the offer they make.
pub struct Listing<'a> {
    server: &'a str,
    allow: &'a [String],
    limits: McpLimits,
    pages: u32,
    listed: u64,
    bytes: u64,
    /// The server's names seen (bounded by the bytes they take).
    seen: BTreeSet<String>,
    /// The model's names taken.
    taken: BTreeSet<String>,
    offer: Offer,
    /// Allowed tools not offered for `maxTools`.
    over_max: u64,
    /// Unusable tools not named for [`MAX_UNUSABLE`].
    unnamed: u64,
}

/// Why a listing was refused: the bound it went over, as `status.tools` says it.
#[derive(Clone, Debug, PartialEq)]
pub struct OverLimit(pub String);

impl<'a> Listing<'a> {
    /// A listing of the server of `spec`, by its allowlist and limits.
    pub fn new(spec: &'a McpServerSpec) -> Self {
        Self {
            server: &spec.name,
            allow: &spec.tools,
            limits: spec.limits,
            pages: 0,
            listed: 0,
            bytes: 0,
            seen: BTreeSet::new(),
            taken: BTreeSet::new(),
            offer: Offer::default(),
            over_max: 0,
            unnamed: 0,
        }
    }

    /// Takes one page of tools; `more` is whether the server says another page follows.
    pub fn page(&mut self, tools: Vec<rmcp::model::Tool>, more: bool) -> Result<(), OverLimit> {
        self.pages += 1;
        for tool in tools {
            self.listed += 1;
            if self.listed > u64::from(self.limits.max_listed_tools) {
                return Err(self.over(format!(
                    "more than {} tools (limits.maxListedTools)",
                    self.limits.max_listed_tools
                )));
            }
            self.bytes += serde_json::to_vec(&tool).map_or(0, |v| v.len()) as u64;
            if self.bytes > u64::from(self.limits.max_list_bytes) {
                return Err(self.over(format!(
                    "more than {} bytes of tools (limits.maxListBytes)",
                    self.limits.max_list_bytes
                )));
            }
            self.take(tool);
        }
        if more && self.pages >= self.limits.max_list_pages {
            return Err(self.over(format!(
                "more than {} pages of tools (limits.maxListPages)",
                self.limits.max_list_pages
            )));
        }
        Ok(())
    }

    /// What the whole listing offers.
    pub fn finish(mut self) -> Offer {
        for wanted in self.allow {
            if !self.seen.contains(wanted) {
                let name = model_name(self.server, wanted);
                let why = format!("MCP server {} offers no tool {wanted:?}", self.server);
                self.unusable(name, why);
            }
        }
        let mut offer = self.offer;
        offer.tools.sort_by(|a, b| a.spec.name.cmp(&b.spec.name));
        offer.unusable.sort();
        offer.unusable.dedup_by(|a, b| a.0 == b.0);
        let mut more = Vec::new();
        if self.over_max > 0 {
            more.push(format!(
                "{} more of its tools are not offered: at most {} are (limits.maxTools); name the ones to offer in its tools allowlist",
                self.over_max, self.limits.max_tools
            ));
        }
        if self.unnamed > 0 {
            more.push(format!(
                "{} more of its tools cannot be offered, for reasons like the ones listed",
                self.unnamed
            ));
        }
        if !more.is_empty() {
            offer.more = Some(format!("MCP server {}: {}", self.server, more.join("; ")));
        }
        offer
    }

    /// The refusal of this listing for an answer of the server over `most` bytes.
    pub fn answer_too_large(&self, most: usize) -> OverLimit {
        self.over(format!(
            "its tools in an answer of more than {most} bytes (limits.maxListBytes, or 4 MiB when that is less)"
        ))
    }

    /// The refusal of this listing for `what`.
    fn over(&self, what: String) -> OverLimit {
        OverLimit(format!(
            "MCP server {} lists {what}; none of its tools are offered",
            self.server
        ))
    }

    /// One listed tool: offered, unusable, or beyond what is offered.
    fn take(&mut self, tool: rmcp::model::Tool) {
        let remote = tool.name.to_string();
        if self.seen.contains(&remote) || !(self.allow.is_empty() || self.allow.contains(&remote)) {
            return;
        }
        self.seen.insert(remote.clone());
        let name = model_name(self.server, &remote);
        let server = self.server;
        if name.len() > MAX_NAME {
            // Named in status as much as fits (a hostile name can be megabytes long).
            let shown = crate::names::shorten(&name);
            return self.unusable(shown, format!("MCP server {server}: the tool name {:?} is too long for models (more than {MAX_NAME} characters with the prefix)", crate::names::shorten(&remote)));
        }
        if self.taken.contains(&name) {
            return self.unusable(name, format!("MCP server {server}: the tool {remote:?} has the same name as another of its tools once made safe for models"));
        }
        let parameters = Value::Object(tool.input_schema.as_ref().clone());
        let schema_bytes = parameters.to_string().len();
        if schema_bytes > self.limits.max_schema_bytes as usize {
            return self.unusable(
                name,
                format!(
                    "MCP server {server}: the input schema of {remote:?} is {schema_bytes} bytes, more than {} (limits.maxSchemaBytes)",
                    self.limits.max_schema_bytes
                ),
            );
        }
        if self.offer.tools.len() >= self.limits.max_tools as usize {
            self.over_max += 1;
            return;
        }
        self.taken.insert(name.clone());
        let full = tool
            .description
            .as_deref()
            .or(tool.title.as_deref())
            .unwrap_or(&remote);
        let max = self.limits.max_description_bytes as usize;
        let (description, note) = if full.len() > max {
            let mut cut = full[..floor_char_boundary(full, max.saturating_sub(3))].to_string();
            cut.push('…');
            let note = format!(
                "description cut from {} to {max} bytes (limits.maxDescriptionBytes)",
                full.len()
            );
            (cut, Some(note))
        } else {
            (full.to_string(), None)
        };
        self.offer.tools.push(Offered {
            spec: ToolSpec {
                name,
                description,
                parameters,
            },
            remote,
            note,
        });
    }

    /// Notes a tool that cannot be offered (named while there is room).
    fn unusable(&mut self, name: String, why: String) {
        if self.offer.unusable.len() < MAX_UNUSABLE {
            self.offer.unusable.push((name, why));
        } else {
            self.unnamed += 1;
        }
    }
}

/// Masks every string (keys and values) of `value`.
fn mask_strings(value: &mut Value, redactor: &Redactor) {
    match value {
        Value::String(s) => *s = redactor.redact(s),
        Value::Array(items) => items.iter_mut().for_each(|v| mask_strings(v, redactor)),
        Value::Object(map) => {
            let entries = std::mem::take(map);
            for (k, mut v) in entries {
                mask_strings(&mut v, redactor);
                map.insert(redactor.redact(&k), v);
            }
        }
        _ => {}
    }
}

impl Offer {
    /// What `server` offers of `listed` under `spec` (one page), or why none.
    #[cfg(test)]
    fn new(spec: &McpServerSpec, listed: Vec<rmcp::model::Tool>) -> Result<Self, OverLimit> {
        let mut listing = Listing::new(spec);
        listing.page(listed, false)?;
        Ok(listing.finish())
    }

    /// The offer with every value of `redactor` (the server's `headersFrom` Secret) masked in
    /// what reaches the model: each tool's description and the strings of its input schema.
    pub fn masked(mut self, redactor: &Redactor) -> Self {
        if redactor.is_empty() {
            return self;
        }
        for tool in &mut self.tools {
            tool.spec.description = redactor.redact(&tool.spec.description);
            mask_strings(&mut tool.spec.parameters, redactor);
        }
        self
    }

    /// The tool the model calls `name`.
    pub fn find(&self, name: &str) -> Option<&Offered> {
        self.tools.iter().find(|t| t.spec.name == name)
    }

    /// What `status.tools` shows: the offered tools (ready), then the unusable ones, then
    /// one entry for the rest.
    pub fn status(&self, server: &str) -> Vec<ToolStatus> {
        let source = source(server);
        self.tools
            .iter()
            .map(|t| ToolStatus {
                name: t.spec.name.clone(),
                source: source.clone(),
                ready: true,
                last_error: None,
                note: t.note.clone(),
            })
            .chain(self.unusable.iter().map(|(name, why)| ToolStatus {
                name: name.clone(),
                source: source.clone(),
                ready: false,
                last_error: Some(why.clone()),
                note: None,
            }))
            .chain(self.more.iter().map(|why| unavailable(server, why)))
            .collect()
    }

    /// How many tools it offers and leaves out, for a log line.
    pub fn summary(&self) -> String {
        format!(
            "{} offered, {} not offered{}",
            self.tools.len(),
            self.unusable.len(),
            if self.more.is_some() { " and more" } else { "" }
        )
    }
}

/// What `status.tools` shows for a server whose tools are unavailable (or the rest of its
/// tools, not offered): one entry standing for all of them.
pub fn unavailable(server: &str, why: &str) -> ToolStatus {
    unavailable_from(server, &source(server), why)
}

/// What `status.tools` shows for the tools `PREFIX__*` of `source` while they are
/// unavailable: one entry standing for all of them.
pub fn unavailable_from(prefix: &str, source: &str, why: &str) -> ToolStatus {
    ToolStatus {
        name: format!("{prefix}{SEPARATOR}*"),
        source: source.to_string(),
        ready: false,
        last_error: Some(why.to_string()),
        note: None,
    }
}

/// `mcp:SERVER`, the source `status.tools` names.
fn source(server: &str) -> String {
    format!("mcp:{server}")
}

/// `SERVER__TOOL`, with every character model providers refuse in a tool name (anything
/// but ASCII letters, digits, `_` and `-`) replaced by `_`.
pub fn model_name(server: &str, tool: &str) -> String {
    crate::names::prefixed_tool(server, tool, false)
}

/// The largest index ≤ `i` that starts a character of `s`.
pub(crate) fn floor_char_boundary(s: &str, i: usize) -> usize {
    let mut i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
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

    fn spec(yaml: &str) -> McpServerSpec {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn offer(server: &str, allow: &[&str], listed: Vec<rmcp::model::Tool>) -> Offer {
        let mut s = spec(&format!("{{name: {server}, url: 'http://x/mcp'}}"));
        s.tools = allow.iter().map(|a| a.to_string()).collect();
        Offer::new(&s, listed).unwrap()
    }

    #[test]
    fn every_tool_under_the_prefix_in_name_order() {
        let offer = offer(
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
        assert!(offer.unusable.is_empty() && offer.more.is_none());
        assert!(offer.status("tracker").iter().all(|s| s.ready));
        assert_eq!(offer.status("tracker")[0].source, "mcp:tracker");
    }

    #[test]
    fn the_allowlist_cuts_and_names_what_is_missing() {
        let offer = offer(
            "gh",
            &["search", "merge"],
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
                    ..Default::default()
                },
                ToolStatus {
                    name: "gh__merge".into(),
                    source: "mcp:gh".into(),
                    ready: false,
                    last_error: Some("MCP server gh offers no tool \"merge\"".into()),
                    ..Default::default()
                },
            ]
        );
    }

    #[test]
    fn names_models_refuse_are_made_safe_or_reported() {
        assert_eq!(model_name("fs", "files/read.v2"), "fs__files_read_v2");
        let offer = offer(
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

    #[test]
    fn a_listing_over_a_bound_is_refused_whole() {
        let s = spec("{name: big, url: 'http://x/mcp', limits: {maxListPages: 3, maxListedTools: 10, maxListBytes: 4096}}");
        let page = |from: usize, n: usize| -> Vec<rmcp::model::Tool> {
            (from..from + n)
                .map(|i| tool(&format!("t{i}"), Some("a tool")))
                .collect()
        };
        // Pages without end: the third page still has a cursor.
        let mut l = Listing::new(&s);
        l.page(page(0, 1), true).unwrap();
        l.page(page(1, 1), true).unwrap();
        let over = l.page(page(2, 1), true).unwrap_err();
        assert_eq!(
            over.0,
            "MCP server big lists more than 3 pages of tools (limits.maxListPages); none of its tools are offered"
        );
        // Three pages, the last one final: fine.
        let mut l = Listing::new(&s);
        l.page(page(0, 1), true).unwrap();
        l.page(page(1, 1), true).unwrap();
        l.page(page(2, 1), false).unwrap();
        assert_eq!(l.finish().tools.len(), 3);
        // Too many tools, too many bytes.
        let over = Listing::new(&s).page(page(0, 11), false).unwrap_err();
        assert!(
            over.0
                .contains("more than 10 tools (limits.maxListedTools)"),
            "{over:?}"
        );
        let long = "d".repeat(5000);
        let over = Listing::new(&s)
            .page(vec![tool("a", Some(&long))], false)
            .unwrap_err();
        assert!(
            over.0
                .contains("more than 4096 bytes of tools (limits.maxListBytes)"),
            "{over:?}"
        );
    }

    #[test]
    fn what_is_offered_is_cut_to_its_bounds_and_says_so() {
        let s = spec("{name: big, url: 'http://x/mcp', limits: {maxTools: 3, maxDescriptionBytes: 100, maxSchemaBytes: 300}}");
        let mut listed: Vec<rmcp::model::Tool> = (0..10)
            .map(|i| tool(&format!("t{i}"), Some("short")))
            .collect();
        listed[0] = tool("t0", Some(&"é".repeat(1000)));
        let wide = json!({"type": "object", "description": "x".repeat(400)});
        listed[1] = rmcp::model::Tool::new_with_raw(
            "t1".to_string(),
            None,
            wide.as_object().cloned().unwrap(),
        );
        let offer = Offer::new(&s, listed).unwrap();
        let names: Vec<&str> = offer.tools.iter().map(|t| t.spec.name.as_str()).collect();
        assert_eq!(
            names,
            ["big__t0", "big__t2", "big__t3"],
            "the first ones the server lists"
        );
        let t0 = &offer.tools[0];
        assert!(t0.spec.description.len() <= 100 && t0.spec.description.ends_with('…'));
        assert_eq!(
            t0.note.as_deref(),
            Some("description cut from 2000 to 100 bytes (limits.maxDescriptionBytes)")
        );
        let status = offer.status("big");
        assert_eq!(status.len(), 5, "{status:?}");
        assert_eq!(status[0].note, t0.note);
        assert!(
            status[3].last_error.as_deref().unwrap().contains(
                "input schema of \"t1\" is 434 bytes, more than 300 (limits.maxSchemaBytes)"
            ),
            "{status:?}"
        );
        assert_eq!(status[4].name, "big__*");
        assert_eq!(
            status[4].last_error.as_deref(),
            Some("MCP server big: 6 more of its tools are not offered: at most 3 are (limits.maxTools); name the ones to offer in its tools allowlist")
        );
    }

    #[test]
    fn unusable_tools_are_named_up_to_a_bound() {
        let listed = (0..100)
            .map(|i| tool(&format!("{i}{}", "y".repeat(20_000)), None))
            .collect();
        let offer = offer("fs", &[], listed);
        assert_eq!(offer.unusable.len(), MAX_UNUSABLE);
        assert!(
            offer
                .unusable
                .iter()
                .all(|(name, why)| name.len() < 100 && why.len() < 300),
            "a name of 20 KB is shown cut"
        );
        assert!(offer
            .more
            .as_deref()
            .unwrap()
            .contains("68 more of its tools cannot be offered"));
    }
}

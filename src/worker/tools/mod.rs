//! The tools an agent calls: the built-ins ([`builtin`]), and tools outside the worker (HTTP
//! endpoints, the tools of MCP servers) behind one [`External`] trait, put together in a
//! [`Toolbox`] that offers the model one stable list.

pub mod a2a;
pub mod builtin;
pub mod http;
pub mod interactive;
pub mod mcp;
mod note_args;
pub mod schemas;
pub mod secrets;

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::json;

pub use builtin::{ToolEnv, MAX_WAIT};
pub use schemas::specs;

use crate::crd::{BuiltinTool, ToolStatus};
use crate::identity::AgentKey;
use crate::model::ToolSpec;

/// The most tools offered to the model in one request (OpenAI-style providers refuse more);
/// the tools beyond it, in the order [`Toolbox::specs`] lists them, are not offered.
pub const MAX_MODEL_TOOLS: usize = 128;

/// A tool's answer: the JSON the model sees and whether it succeeded.
pub struct Outcome {
    /// JSON text of the result.
    pub content: String,
    /// Whether the tool did its job (for metrics).
    pub ok: bool,
}

impl Outcome {
    /// A result the model sees as `{"error": message}`.
    pub fn error(message: impl Into<String>) -> Self {
        Outcome {
            content: json!({"error": message.into()}).to_string(),
            ok: false,
        }
    }
}

/// Whether a result's JSON text is one of [`Outcome::error`]'s.
pub fn is_error_result(content: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(content).is_ok_and(|v| {
        v.as_object()
            .is_some_and(|o| o.len() == 1 && o.contains_key("error"))
    })
}

/// What a `skip` call that does not roll the cycle back answers (the cycle ends after its
/// step; see `worker::cycle::skip`).
pub fn skip_result() -> Outcome {
    Outcome {
        content: json!({"skipped": true, "note": "the cycle ends here"}).to_string(),
        ok: true,
    }
}

/// A call of a tool outside the worker.
pub struct ExternalCall<'a> {
    /// The agent calling.
    pub agent: &'a AgentKey,
    /// The tool's name, as the model called it.
    pub name: &'a str,
    /// The arguments as the model wrote them (JSON text, possibly malformed).
    pub arguments: &'a str,
    /// The same for every try of this call: sent as `Idempotency-Key` where the tool speaks
    /// HTTP, so a repeated call can be recognised by the service.
    pub idempotency_key: &'a str,
    /// The active space, where a `visible` tool shows its arguments and result (none: not
    /// shown).
    pub space: Option<&'a str>,
    /// The causal depth of the calling cycle (an async call's result continues its chain).
    pub depth: u32,
}

impl ExternalCall<'_> {
    /// The A2A conversation whose cycle makes the call, if it is one's (its active space is
    /// then that conversation): a later result is that conversation's event.
    pub fn conversation(&self) -> Option<String> {
        self.space
            .filter(|s| crate::identity::is_conversation(s))
            .map(str::to_string)
    }
}

/// Tools outside the worker: an agent's HTTP tools, or one MCP server.
#[async_trait]
pub trait External: Send + Sync {
    /// The tools offered now, in a stable order.
    fn specs(&self) -> Vec<ToolSpec>;

    /// What `status.tools` shows of them (secrets masked).
    fn status(&self) -> Vec<ToolStatus>;

    /// Whether repeating a call of `tool` whose outcome is unknown is harmless.
    fn idempotent(&self, tool: &str) -> bool;

    /// Runs a call; whatever goes wrong is an error result, never a panic or an `Err`.
    async fn call(&self, call: &ExternalCall<'_>) -> Outcome;

    /// Whether a call of `tool` answers later, as an inbox event that wakes the agent for
    /// another cycle (an async tool): the cycle's chain goes on (`cycle.maxChainDepth`).
    fn continues(&self, _tool: &str) -> bool {
        false
    }

    /// Whether a call of `tool` is this source's to answer: one it offers now, or (for a
    /// source whose tools come and go, like an MCP server that is down) one it offered
    /// before, so the call gets this source's error result rather than "unknown tool".
    fn owns(&self, tool: &str) -> bool {
        self.specs().iter().any(|s| s.name == tool)
    }

    /// Resolves when [`specs`](Self::specs) or [`status`](Self::status) may have changed
    /// (the worker then reports its tools again). A change since the last call counts. The
    /// default never resolves: the source's tools are fixed.
    async fn changed(&self) {
        std::future::pending::<()>().await
    }

    /// Resolves once the source knows what it offers (an MCP server: its first connection
    /// attempt ended, either way). The default is at once.
    async fn settled(&self) {}

    /// Whether a call of `tool` waits for a human first, and how: an approval before it runs,
    /// or (an interactive tool) a human's answer instead of running. `None`: it just runs.
    fn asks(&self, _tool: &str) -> Option<Ask> {
        None
    }

    /// Masks the secrets this source holds (its Secrets' values), for what reaches the agent
    /// other than through [`call`](Self::call): an async result posted to the gateway.
    fn masks(&self) -> crate::secrets::Redactor {
        crate::secrets::Redactor::default()
    }
}

/// An external tool as the worker offered it, with its source (recorded for rehearsals,
/// which offer a server's tools without asking the server).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ListedTool {
    /// `http`, `interactive`, `mcp:SERVER`, `a2a:AGENT`.
    pub source: String,
    /// The name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON schema of its arguments.
    pub parameters: serde_json::Value,
}

impl ListedTool {
    /// As offered to the model.
    pub fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.clone(),
            description: self.description.clone(),
            parameters: self.parameters.clone(),
        }
    }
}

/// How a call waits for a human.
#[derive(Clone, Debug, PartialEq)]
pub struct Ask {
    /// Approve or deny it before it runs, or answer it in its place.
    pub kind: crate::store::CallKind,
    /// What the answer must match (an interactive tool's `resultSchema`).
    pub result_schema: Option<serde_json::Value>,
    /// How long it waits, in seconds (`None`: the agent's `approvalTimeoutSeconds`).
    pub timeout_seconds: Option<u32>,
}

/// What building an agent's external tools needs.
#[derive(Clone)]
pub struct ExternalContext {
    /// The data plane (async tools register their calls there).
    pub store: Arc<dyn crate::store::Store>,
    /// Where the Secrets of `headersFrom` are.
    pub secrets: secrets::Secrets,
    /// The gateway's base URL that async tools' services post results to (`None`: async
    /// tools cannot be offered).
    pub callback_url: Option<String>,
}

/// The external tools an agent's spec declares: its HTTP tools, then one source per MCP
/// server, then one per A2A agent, in the spec's order, then its interactive tools.
pub fn external(
    agent: &AgentKey,
    spec: &crate::crd::ToolsSpec,
    context: &ExternalContext,
) -> Vec<Arc<dyn External>> {
    let mut out: Vec<Arc<dyn External>> = Vec::new();
    if !spec.http.is_empty() {
        out.push(Arc::new(http::HttpTools::new(agent, &spec.http, context)));
    }
    out.extend(
        spec.mcp.iter().map(|m| {
            Arc::new(mcp::McpServer::start(agent, m, &context.secrets)) as Arc<dyn External>
        }),
    );
    out.extend(
        spec.a2a
            .iter()
            .map(|a| Arc::new(a2a::A2aAgent::start(agent, a, context)) as Arc<dyn External>),
    );
    if !spec.interactive.is_empty() {
        out.push(Arc::new(interactive::InteractiveTools::new(
            &spec.interactive,
        )));
    }
    out
}

/// Every tool an agent has: its enabled built-ins, then its external tools.
#[derive(Clone)]
pub struct Toolbox {
    builtin: Vec<BuiltinTool>,
    external: Vec<Arc<dyn External>>,
}

impl Toolbox {
    /// A toolbox of built-ins and external tools.
    pub fn new(builtin: Vec<BuiltinTool>, external: Vec<Arc<dyn External>>) -> Self {
        Self { builtin, external }
    }

    /// The enabled built-ins.
    pub fn builtin(&self) -> &[BuiltinTool] {
        &self.builtin
    }

    /// What the model is offered: the built-ins, then each external source's tools, at
    /// most [`MAX_MODEL_TOOLS`] in all.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.specs_for(&self.builtin)
    }

    /// As [`Toolbox::specs`], with only `builtin` of the built-ins (a cycle's part of them).
    pub fn specs_for(&self, builtin: &[BuiltinTool]) -> Vec<ToolSpec> {
        let mut out = specs(builtin);
        for e in &self.external {
            out.extend(e.specs());
        }
        out.truncate(MAX_MODEL_TOOLS);
        out
    }

    /// The external source whose tool `name` is, if any (see [`External::owns`]).
    pub fn external(&self, name: &str) -> Option<&dyn External> {
        self.external.iter().find(|e| e.owns(name)).map(Arc::as_ref)
    }

    /// Masks every secret the external sources hold.
    pub fn masks(&self) -> crate::secrets::Redactor {
        let mut all = crate::secrets::Redactor::default();
        for e in &self.external {
            all.join(&e.masks());
        }
        all
    }

    /// Each external tool offered now, with its source as `status.tools` names it
    /// (`http`, `mcp:SERVER`, …): what is recorded for rehearsals.
    pub fn listed(&self) -> Vec<ListedTool> {
        let mut out = Vec::new();
        for e in &self.external {
            let sources: std::collections::HashMap<String, String> =
                e.status().into_iter().map(|s| (s.name, s.source)).collect();
            for spec in e.specs() {
                let source = sources.get(&spec.name).cloned().unwrap_or_default();
                out.push(ListedTool {
                    source,
                    name: spec.name,
                    description: spec.description,
                    parameters: spec.parameters,
                });
            }
        }
        out
    }

    /// Resolves once every external source knows what it offers.
    pub async fn settled(&self) {
        futures::future::join_all(self.external.iter().map(|e| e.settled())).await;
    }

    /// Resolves when an external source's tools may have changed; never without any.
    pub async fn changed(&self) {
        if self.external.is_empty() {
            return std::future::pending().await;
        }
        futures::future::select_all(self.external.iter().map(|e| e.changed())).await;
    }

    /// What `status.tools` shows: the built-ins (always ready), then the external tools.
    pub fn status(&self) -> Vec<ToolStatus> {
        let mut out: Vec<ToolStatus> = self
            .builtin
            .iter()
            .map(|t| ToolStatus {
                name: t.name().to_string(),
                source: "builtin".into(),
                ready: true,
                last_error: None,
                note: None,
            })
            .collect();
        for e in &self.external {
            out.extend(e.status());
        }
        let offered: std::collections::HashSet<String> =
            self.specs().into_iter().map(|s| s.name).collect();
        for t in out
            .iter_mut()
            .filter(|t| t.ready && !offered.contains(&t.name))
        {
            t.ready = false;
            t.last_error = Some(format!(
                "not offered: the agent has more than {MAX_MODEL_TOOLS} tools, the most models accept in one request"
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An external source of `n` fixed tools named with a prefix.
    struct Many(&'static str, usize);

    #[async_trait]
    impl External for Many {
        fn specs(&self) -> Vec<ToolSpec> {
            (0..self.1)
                .map(|i| ToolSpec {
                    name: format!("{}{i:03}", self.0),
                    description: "A tool.".into(),
                    parameters: json!({"type": "object"}),
                })
                .collect()
        }

        fn status(&self) -> Vec<ToolStatus> {
            self.specs()
                .into_iter()
                .map(|s| ToolStatus {
                    name: s.name,
                    source: "http".into(),
                    ready: true,
                    ..Default::default()
                })
                .collect()
        }

        fn idempotent(&self, _: &str) -> bool {
            true
        }

        async fn call(&self, _: &ExternalCall<'_>) -> Outcome {
            Outcome::error("not called here")
        }
    }

    #[test]
    fn the_model_is_offered_at_most_128_tools_and_status_says_which_not() {
        let toolbox = Toolbox::new(
            BuiltinTool::all(),
            vec![Arc::new(Many("a", 70)), Arc::new(Many("b", 100))],
        );
        let offered = toolbox.specs();
        assert_eq!(offered.len(), MAX_MODEL_TOOLS);
        assert_eq!(offered[0].name, "send_message", "the built-ins first");
        let status = toolbox.status();
        assert_eq!(status.len(), 8 + 70 + 100);
        let not = status.iter().filter(|s| !s.ready).count();
        assert_eq!(not, 8 + 70 + 100 - MAX_MODEL_TOOLS);
        assert!(status[8 + 70 + 99]
            .last_error
            .as_deref()
            .unwrap()
            .contains("more than 128 tools"));
        let few = Toolbox::new(BuiltinTool::all(), vec![Arc::new(Many("a", 3))]);
        assert!(few.status().iter().all(|s| s.ready));
    }
}

//! The tools of a rehearsed cycle: what the candidate is offered of its tools outside the
//! worker, and their calls answered from the recorded cycle. Nothing reaches a tool server:
//! HTTP and interactive tools are offered as the candidate's spec declares them, MCP servers'
//! and A2A agents' tools as the agent's worker last listed them. A call whose tool and
//! arguments match a call the recorded cycle made gets that call's recorded result (each
//! recorded call answers once); any other is answered "not replayed" and counted. The agent's
//! `read_messages` is answered the same way: the spaces' history is not in the rehearsal.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::crd::{ToolStatus, ToolsSpec};
use crate::cycles::CycleRecord;
use crate::identity::AgentKey;
use crate::model::ToolSpec;
use crate::rehearsals::canonical;
use crate::sync::lock;
use crate::worker::tools::{
    http::HttpTools, interactive::InteractiveTools, Ask, External, ExternalCall, ExternalContext,
    ListedTool, Outcome,
};

/// The built-in whose answers come from the record (it reads what the rehearsal does not
/// hold).
const READ_MESSAGES: &str = "read_messages";

/// A call the recorded cycle made, and what it got.
struct Recorded {
    tool: String,
    arguments: String,
    result: Option<String>,
    ok: bool,
    /// Whether the record kept all of its arguments and result.
    whole: bool,
    used: bool,
}

/// How the calls of one rehearsed cycle were answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Replayed {
    /// Answered with a recorded result.
    pub replayed: u32,
    /// Answered "not replayed".
    pub not_replayed: u32,
    /// Answered with a result the record had cut.
    pub cut: u32,
}

/// What the candidate is offered of its tools outside the worker: made once a rehearsal.
pub struct Offered {
    /// Sources whose tools the spec declares (HTTP, interactive): asked only what they
    /// offer and how, never to call.
    http: Option<HttpTools>,
    interactive: Option<InteractiveTools>,
    /// Tools listed from servers, as recorded, with whether a call asks for approval.
    listed: Vec<(ListedTool, bool)>,
}

/// The candidate's tools outside the worker, for one rehearsed cycle.
pub struct Replay {
    offered: Arc<Offered>,
    recorded: Mutex<Vec<Recorded>>,
    counts: Mutex<Replayed>,
}

/// The MCP server's or A2A agent's name of a listed tool's source, and its spec's
/// `requireApproval` patterns, when the candidate still has that source.
fn source_patterns<'a>(tools: &'a ToolsSpec, source: &str) -> Option<(&'a str, &'a [String])> {
    if let Some(server) = source.strip_prefix("mcp:") {
        let m = tools.mcp.iter().find(|m| m.name == server)?;
        return Some((&m.name, &m.require_approval));
    }
    if let Some(agent) = source.strip_prefix("a2a:") {
        let a = tools.a2a.iter().find(|a| a.name == agent)?;
        return Some((&a.name, &a.require_approval));
    }
    None
}

impl Offered {
    /// The candidate's tools (`tools`, of agent `key`), `listed` what the worker last listed
    /// of its servers' tools; `context` is never used to call.
    pub fn new(
        key: &AgentKey,
        tools: &ToolsSpec,
        listed: &[ListedTool],
        context: &ExternalContext,
    ) -> Self {
        let http = (!tools.http.is_empty()).then(|| HttpTools::new(key, &tools.http, context));
        let interactive =
            (!tools.interactive.is_empty()).then(|| InteractiveTools::new(&tools.interactive));
        let listed = listed
            .iter()
            .filter_map(|t| {
                let (name, patterns) = source_patterns(tools, &t.source)?;
                let asks = patterns.iter().any(|pattern| {
                    crate::party::tool_matches(
                        &crate::names::prefixed_tool(name, pattern, true),
                        &t.name,
                    )
                });
                Some((t.clone(), asks))
            })
            .collect();
        Self {
            http,
            interactive,
            listed,
        }
    }

    fn declared_by(&self, tool: &str) -> Option<&dyn External> {
        let http = self.http.as_ref().map(|h| h as &dyn External);
        let interactive = self.interactive.as_ref().map(|i| i as &dyn External);
        [http, interactive]
            .into_iter()
            .flatten()
            .find(|e| e.owns(tool))
    }

    fn listed_as(&self, tool: &str) -> Option<&(ListedTool, bool)> {
        self.listed.iter().find(|(t, _)| t.name == tool)
    }
}

impl Replay {
    /// The `offered` tools, answering with the calls of `record`.
    pub fn new(offered: Arc<Offered>, record: &CycleRecord) -> Self {
        let recorded = record
            .steps
            .iter()
            .flat_map(|s| &s.calls)
            .map(|c| Recorded {
                tool: c.tool.clone(),
                arguments: canonical(&c.arguments),
                result: c.result.clone(),
                ok: c.ok.unwrap_or(false),
                whole: c.arguments_cut == 0 && c.result_cut == 0,
                used: false,
            })
            .collect();
        Self {
            offered,
            recorded: Mutex::new(recorded),
            counts: Mutex::new(Replayed::default()),
        }
    }

    /// How its calls were answered so far.
    pub fn counts(&self) -> Replayed {
        *lock(&self.counts)
    }
}

#[async_trait]
impl External for Replay {
    fn specs(&self) -> Vec<ToolSpec> {
        // In the order the worker offers them: HTTP, the servers', interactive.
        let o = &self.offered;
        let mut out: Vec<ToolSpec> = o.http.iter().flat_map(External::specs).collect();
        out.extend(o.listed.iter().map(|(t, _)| t.spec()));
        out.extend(o.interactive.iter().flat_map(External::specs));
        out
    }

    fn status(&self) -> Vec<ToolStatus> {
        Vec::new()
    }

    fn idempotent(&self, _tool: &str) -> bool {
        // Nothing is called: answering again is harmless.
        true
    }

    fn owns(&self, tool: &str) -> bool {
        let o = &self.offered;
        tool == READ_MESSAGES || o.declared_by(tool).is_some() || o.listed_as(tool).is_some()
    }

    fn continues(&self, tool: &str) -> bool {
        self.offered
            .declared_by(tool)
            .is_some_and(|e| e.continues(tool))
    }

    fn asks(&self, tool: &str) -> Option<Ask> {
        if let Some(e) = self.offered.declared_by(tool) {
            return e.asks(tool);
        }
        self.offered
            .listed_as(tool)
            .filter(|(_, asks)| *asks)
            .map(|_| Ask {
                kind: crate::store::CallKind::Approval,
                result_schema: None,
                timeout_seconds: None,
            })
    }

    async fn call(&self, call: &ExternalCall<'_>) -> Outcome {
        let arguments = canonical(call.arguments);
        let mut recorded = lock(&self.recorded);
        let found = recorded.iter_mut().find(|r| {
            !r.used && r.tool == call.name && r.arguments == arguments && r.result.is_some()
        });
        let mut counts = lock(&self.counts);
        match found {
            Some(r) => {
                r.used = true;
                counts.replayed += 1;
                if !r.whole {
                    counts.cut += 1;
                }
                Outcome {
                    content: r.result.clone().unwrap_or_default(),
                    ok: r.ok,
                }
            }
            None => {
                counts.not_replayed += 1;
                Outcome::error(format!(
                    "not replayed: this is a rehearsal, and the recorded cycle made no call of {} with these arguments",
                    call.name
                ))
            }
        }
    }
}

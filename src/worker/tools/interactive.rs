//! Interactive tools (`Agent.spec.tools.interactive`, seed 004 "Interactive UI Tools"): tools
//! whose result a human supplies. They are offered to the model like any tool; a call never
//! runs in the worker: the cycle asks the active space and pauses until a member answers
//! (see `worker::cycle::ask`).

use async_trait::async_trait;

use super::{Ask, External, ExternalCall, Outcome};
use crate::crd::{InteractiveToolSpec, ToolStatus};
use crate::model::ToolSpec;
use crate::store::CallKind;

/// An agent's interactive tools.
pub struct InteractiveTools {
    tools: Vec<InteractiveToolSpec>,
}

impl InteractiveTools {
    /// The interactive tools `specs` declare, in their order.
    pub fn new(specs: &[InteractiveToolSpec]) -> Self {
        Self {
            tools: specs.to_vec(),
        }
    }

    fn find(&self, tool: &str) -> Option<&InteractiveToolSpec> {
        self.tools.iter().find(|t| t.name == tool)
    }
}

#[async_trait]
impl External for InteractiveTools {
    fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .map(|t| ToolSpec {
                name: t.name.clone(),
                description: t.description.clone(),
                parameters: t.input_schema.clone(),
            })
            .collect()
    }

    fn status(&self) -> Vec<ToolStatus> {
        self.tools
            .iter()
            .map(|t| ToolStatus {
                name: t.name.clone(),
                source: "interactive".into(),
                ready: true,
                last_error: None,
                note: None,
            })
            .collect()
    }

    /// Asking again is harmless: nothing happened but a question.
    fn idempotent(&self, _tool: &str) -> bool {
        true
    }

    fn asks(&self, tool: &str) -> Option<Ask> {
        self.find(tool).map(|t| Ask {
            kind: CallKind::Interactive,
            result_schema: t.result_schema.clone(),
            timeout_seconds: Some(t.timeout_seconds),
        })
    }

    /// Never made: a human answers in its place (the cycle asks instead).
    async fn call(&self, call: &ExternalCall<'_>) -> Outcome {
        Outcome::error(format!(
            "{} is answered by a human, not run: the worker asks the space instead",
            call.name
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interactive_tool_is_offered_and_asks_a_human() {
        let specs: Vec<InteractiveToolSpec> = serde_yaml::from_str(
            "- {name: pick, description: Choose one., resultSchema: {type: string}, timeoutSeconds: 60}",
        )
        .unwrap();
        let tools = InteractiveTools::new(&specs);
        let offered = tools.specs();
        assert_eq!(offered[0].name, "pick");
        assert_eq!(offered[0].parameters, serde_json::json!({"type": "object"}));
        assert_eq!(
            tools.asks("pick"),
            Some(Ask {
                kind: CallKind::Interactive,
                result_schema: Some(serde_json::json!({"type": "string"})),
                timeout_seconds: Some(60),
            })
        );
        assert_eq!(tools.asks("other"), None);
        assert!(tools.status()[0].ready && tools.idempotent("pick"));
    }
}

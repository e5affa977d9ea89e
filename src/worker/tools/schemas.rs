//! What the model is told of the built-in tools: their schemas, fitted to the agent's
//! situation. Every request carries each schema it offers (a small model pays for them in
//! prompt processing on every first request of a cycle), so they say what a call does and
//! what each parameter holds, and nothing twice; the notes tools offer the flat form of one
//! note, and take the list forms too ([`super::note_args`]). Issue 44: 4,482 characters of
//! schemas were cut to a third; what each cost and bought is in docs/real-models.md.

use serde_json::json;

use crate::crd::BuiltinTool;
use crate::model::ToolSpec;

/// The specs of the enabled built-in tools, in a stable order.
pub fn specs(enabled: &[BuiltinTool]) -> Vec<ToolSpec> {
    let space = json!({"type": "string", "description": "Space name (default: the active space)."});
    BuiltinTool::all()
        .into_iter()
        .filter(|t| enabled.contains(t))
        .map(|t| {
            let (description, parameters) = match t {
                BuiltinTool::SendMessage => (
                    "Post a message to a space you are a member of; optionally address an agent member and wait for a reply.",
                    json!({"type": "object", "properties": {
                        "text": {"type": "string"},
                        "space": space,
                        "mention": {"type": "string", "description": "An agent member to address."},
                        "wait": {"type": "object", "description": "Wait for the first reply that matches any condition.",
                            "properties": {
                                "for": {"type": "array", "minItems": 1, "items": {"type": "object", "properties": {
                                    "type": {"type": "string", "enum": ["any", "agent", "human", "entity"]},
                                    "entityId": {"type": "string", "description": "For type entity."}}, "required": ["type"]}},
                                "timeout": {"type": "number", "description": "Seconds (default 60, max 120)."}},
                            "required": ["for"]}},
                        "required": ["text"]}),
                ),
                BuiltinTool::EnterSpace => (
                    "Make a space you are a member of the active one; see its members and recent messages.",
                    json!({"type": "object", "properties": {"space": space}, "required": ["space"]}),
                ),
                BuiltinTool::ReadMessages => (
                    "Read recent messages of a space you are a member of, oldest first, at most 64 KiB a page.",
                    json!({"type": "object", "properties": {"space": space,
                        "limit": {"type": "integer", "description": "Default 15, max 50."},
                        "before": {"type": "string", "description": "A previous page's `before`, for older ones."}}}),
                ),
                BuiltinTool::Skip => (
                    "End the cycle without answering, when the events are not for you.",
                    json!({"type": "object", "properties": {"reason": {"type": "string"}}}),
                ),
                BuiltinTool::SetMemories => (
                    "Keep a fact across cycles; an empty fact forgets the key.",
                    json!({"type": "object", "properties": {"key": {"type": "string"}, "fact": {"type": "string"}}, "required": ["key", "fact"]}),
                ),
                BuiltinTool::DeleteMemories => (
                    "Forget memories by key.",
                    json!({"type": "object", "properties": {"keys": {"type": "array", "items": {"type": "string"}}}, "required": ["keys"]}),
                ),
                BuiltinTool::SetGoals => (
                    "Set a goal you work towards, by id.",
                    json!({"type": "object", "properties": {"id": {"type": "string"}, "description": {"type": "string"},
                        "status": {"type": "string", "description": "active, completed, blocked, …"}}, "required": ["id"]}),
                ),
                BuiltinTool::SetPlans => (
                    "Come back to something later: the plan is an inbox event when due. Cancel plans by name.",
                    json!({"type": "object", "properties": {
                        "name": {"type": "string"},
                        "instruction": {"type": "string"},
                        "in": {"type": "string", "description": "Once, after a delay: 10m, 2h"},
                        "at": {"type": "string", "description": "Once, RFC 3339"},
                        "schedule": {"type": "string", "description": "Cron, 5 fields, or @daily"},
                        "timeZone": {"type": "string"},
                        "cancel": {"type": "array", "items": {"type": "string"}}}}),
                ),
            };
            ToolSpec {
                name: t.name().into(),
                description: description.into(),
                parameters,
            }
        })
        .collect()
}

/// The built-ins' specs fitted to the agent's situation (a small model reads each parameter
/// as something to fill): with one space, no `space` parameter (the active space is the only
/// one); with no other agent in its spaces, no `mention` or `wait` of `send_message` (they
/// address and await agents). The tools still take them, so nothing a model sends is
/// refused for it.
pub fn fit_to(specs: &mut [ToolSpec], one_space: bool, among_agents: bool) {
    for spec in specs {
        let send = spec.name == BuiltinTool::SendMessage.name();
        let read = spec.name == BuiltinTool::ReadMessages.name();
        if send && !among_agents {
            spec.description = "Post a message to a space you are a member of.".into();
        }
        let Some(properties) = spec.parameters["properties"].as_object_mut() else {
            continue;
        };
        if one_space && (send || read) {
            properties.remove("space");
        }
        if send && !among_agents {
            properties.remove("mention");
            properties.remove("wait");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_follow_the_enabled_list() {
        let names: Vec<String> = specs(&[BuiltinTool::Skip, BuiltinTool::SendMessage])
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(names, ["send_message", "skip"]);
        assert_eq!(specs(&BuiltinTool::all()).len(), 8);
    }

    #[test]
    fn the_built_ins_fit_the_agents_situation() {
        let names = |spec: &ToolSpec| -> Vec<String> {
            let mut v: Vec<String> = spec.parameters["properties"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect();
            v.sort();
            v
        };
        let all = specs(&[BuiltinTool::SendMessage, BuiltinTool::ReadMessages]);
        let mut alone = all.clone();
        fit_to(&mut alone, true, false);
        assert_eq!(names(&alone[0]), ["text"]);
        assert!(!alone[0].description.contains("agent"), "{:?}", alone[0]);
        assert_eq!(names(&alone[1]), ["before", "limit"]);
        let mut among = all.clone();
        fit_to(&mut among, false, true);
        assert_eq!(
            among, all,
            "several spaces and other agents: every parameter"
        );
    }
}

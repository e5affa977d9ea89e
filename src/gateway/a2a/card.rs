//! An agent's A2A card: what `spec.a2a` says of it, the interfaces the gateway serves for it
//! and the gateway's bearer scheme. Never a tool, a secret or an instruction.

use std::collections::BTreeMap;

use crate::a2a::{
    AgentCapabilities, AgentCard, AgentInterface, AgentProvider, AgentSkill, SecurityRequirement,
    SecurityScheme, StringList, BINDING_HTTP_JSON, BINDING_JSONRPC, PROTOCOL_VERSION,
};
use crate::identity::AgentKey;
use crate::store::A2aRecord;

/// The name of the gateway's security scheme in cards.
const SCHEME: &str = "bearer";

/// Where an agent's A2A interfaces are, under the gateway's `base` URL (no trailing `/`):
/// both bindings on one URL (JSON-RPC posts to it; HTTP+JSON paths go below it).
pub fn agent_url(base: &str, agent: &AgentKey) -> String {
    format!("{base}/a2a/{}/{}", agent.namespace, agent.name)
}

/// The card of `agent`, served by the gateway at `base`.
pub fn card(base: &str, agent: &AgentKey, record: &A2aRecord) -> AgentCard {
    let url = agent_url(base, agent);
    let interface = |binding: &str| AgentInterface {
        url: url.clone(),
        protocol_binding: binding.to_string(),
        tenant: None,
        protocol_version: PROTOCOL_VERSION.to_string(),
    };
    let text = vec!["text/plain".to_string()];
    AgentCard {
        name: agent.name.clone(),
        description: record.description.clone(),
        supported_interfaces: vec![interface(BINDING_JSONRPC), interface(BINDING_HTTP_JSON)],
        provider: Some(AgentProvider {
            url: base.to_string(),
            organization: "agentfleet".into(),
        }),
        version: record.version.clone(),
        documentation_url: None,
        capabilities: AgentCapabilities {
            streaming: Some(true),
            push_notifications: Some(false),
            extensions: Vec::new(),
            extended_agent_card: Some(false),
        },
        security_schemes: BTreeMap::from([(
            SCHEME.to_string(),
            SecurityScheme::bearer(Some("agentfleet gateway token")),
        )]),
        security_requirements: vec![SecurityRequirement {
            schemes: BTreeMap::from([(SCHEME.to_string(), StringList::default())]),
        }],
        default_input_modes: vec!["text/plain".into(), "application/json".into()],
        default_output_modes: text,
        skills: record
            .skills
            .iter()
            .map(|s| AgentSkill {
                id: s.id.clone(),
                name: s.name.clone(),
                description: s.description.clone(),
                tags: s.tags.clone(),
                examples: s.examples.clone(),
                input_modes: Vec::new(),
                output_modes: Vec::new(),
                security_requirements: Vec::new(),
            })
            .collect(),
        signatures: Vec::new(),
        icon_url: None,
    }
}

//! The agent card (`AgentCard`) and the security schemes it declares.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::wire::*;

wire_struct! {
    /// An agent's self-description, served at [`CARD_PATH`] (`AgentCard`). Required: `name`,
    /// `description`, `supportedInterfaces`, `version`, `capabilities`, the default modes and
    /// `skills`.
    AgentCard {
        /// A human-readable name.
        name: String,
        /// What the agent does.
        description: String,
        /// Where and how to reach the agent, preferred first.
        supported_interfaces: Vec<AgentInterface>,
        /// Who provides the agent.
        provider: Option<AgentProvider>,
        /// The agent's own version (not the protocol's).
        version: String,
        /// Documentation URL.
        documentation_url: Option<String>,
        /// Optional features supported (always written, maybe `{}`).
        capabilities: AgentCapabilities,
        /// Security schemes by name.
        security_schemes: BTreeMap<String, SecurityScheme>,
        /// Alternatives of schemes a client must satisfy.
        security_requirements: Vec<SecurityRequirement>,
        /// Media types accepted as input by default.
        default_input_modes: Vec<String>,
        /// Media types produced by default.
        default_output_modes: Vec<String>,
        /// What the agent can do.
        skills: Vec<AgentSkill>,
        /// JWS signatures of the card.
        signatures: Vec<AgentCardSignature>,
        /// Icon URL.
        icon_url: Option<String>,
    }
}

wire_struct! {
    /// A URL, binding and protocol version an agent is reachable at (`AgentInterface`).
    AgentInterface {
        /// Absolute URL (gRPC: `host:port`).
        url: String,
        /// [`BINDING_JSONRPC`], [`BINDING_HTTP_JSON`], `GRPC` or a custom URI.
        protocol_binding: String,
        /// A routing value the client must copy into every request's `tenant`.
        tenant: Option<String>,
        /// `Major.Minor`, e.g. [`PROTOCOL_VERSION`].
        protocol_version: String,
    }
}

wire_struct! {
    /// The provider of an agent (`AgentProvider`).
    AgentProvider {
        /// The provider's website.
        url: String,
        /// The provider's organization.
        organization: String,
    }
}

wire_struct! {
    /// Optional features of an agent; absent means unsupported (`AgentCapabilities`).
    AgentCapabilities {
        /// Streaming (`SendStreamingMessage`, `SubscribeToTask`).
        streaming: Option<bool>,
        /// Push notifications.
        push_notifications: Option<bool>,
        /// Protocol extensions supported.
        extensions: Vec<AgentExtension>,
        /// An extended card for authenticated clients (`GetExtendedAgentCard`).
        extended_agent_card: Option<bool>,
    }
}

wire_struct! {
    /// A protocol extension an agent supports (`AgentExtension`).
    AgentExtension {
        /// The extension's URI.
        uri: Option<String>,
        /// How the agent uses it.
        description: Option<String>,
        /// Clients must understand and comply with it.
        required: bool,
        /// Extension-specific parameters.
        params: Option<JsonObject>,
    }
}

wire_struct! {
    /// Something an agent can do (`AgentSkill`). Required: `id`, `name`, `description`, `tags`.
    AgentSkill {
        /// Unique id.
        id: String,
        /// A human-readable name.
        name: String,
        /// What the skill does.
        description: String,
        /// Keywords.
        tags: Vec<String>,
        /// Example prompts.
        examples: Vec<String>,
        /// Input media types, overriding the card's defaults.
        input_modes: Vec<String>,
        /// Output media types, overriding the card's defaults.
        output_modes: Vec<String>,
        /// Security requirements of this skill.
        security_requirements: Vec<SecurityRequirement>,
    }
}

wire_struct! {
    /// A JWS (RFC 7515) signature of a card (`AgentCardSignature`).
    AgentCardSignature {
        /// The protected header, base64url-encoded JSON.
        protected: String,
        /// The signature, base64url-encoded.
        signature: String,
        /// The unprotected header.
        header: Option<JsonObject>,
    }
}

wire_struct! {
    /// One way to authenticate (`SecurityScheme`, a oneof: set exactly one field). OAuth 2.0 and
    /// OpenID Connect are kept as read, not modeled.
    SecurityScheme {
        /// An API key in a header, query parameter or cookie.
        api_key_security_scheme: Option<ApiKeySecurityScheme>,
        /// HTTP authentication (`Bearer`, `Basic`, …).
        http_auth_security_scheme: Option<HttpAuthSecurityScheme>,
        /// OAuth 2.0: `{flows, oauth2MetadataUrl?, description?}`.
        oauth2_security_scheme: Option<JsonObject>,
        /// OpenID Connect: `{openIdConnectUrl, description?}`.
        open_id_connect_security_scheme: Option<JsonObject>,
        /// Mutual TLS: `{description?}`.
        mtls_security_scheme: Option<JsonObject>,
    }
}

impl SecurityScheme {
    /// HTTP `Bearer` authentication, with an optional token format hint (`JWT`, `opaque`).
    pub fn bearer(bearer_format: Option<&str>) -> Self {
        let http = HttpAuthSecurityScheme {
            scheme: "Bearer".to_string(),
            bearer_format: bearer_format.map(str::to_string),
            description: None,
        };
        Self {
            http_auth_security_scheme: Some(http),
            ..Self::default()
        }
    }
}

wire_struct! {
    /// An API key scheme (`APIKeySecurityScheme`).
    ApiKeySecurityScheme {
        /// A description.
        description: Option<String>,
        /// `query`, `header` or `cookie`.
        location: String,
        /// The header, query parameter or cookie name.
        name: String,
    }
}

wire_struct! {
    /// An HTTP authentication scheme (`HTTPAuthSecurityScheme`).
    HttpAuthSecurityScheme {
        /// A description.
        description: Option<String>,
        /// The `Authorization` scheme, e.g. `Bearer`.
        scheme: String,
        /// A hint at the token's format, e.g. `JWT`.
        bearer_format: Option<String>,
    }
}

wire_struct! {
    /// Schemes to satisfy together, each with its required scopes (`SecurityRequirement`):
    /// `{"schemes": {"bearer": {"list": []}}}`.
    SecurityRequirement {
        /// Scheme name → scopes.
        schemes: BTreeMap<String, StringList>,
    }
}

wire_struct! {
    /// A list of strings (`StringList`); an empty one is written `{}`.
    StringList {
        /// The strings.
        list: Vec<String>,
    }
}

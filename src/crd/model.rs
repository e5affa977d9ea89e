//! Models: an Agent's `spec.model` (a [`Model`](ModelResource) it names, or the model's
//! settings inline) and the namespaced `Model` resource that many agents share, with its
//! ordered fallbacks. How the two combine is [`crate::models`]'s rule.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::SecretKeyRef;

/// A model's settings: who serves it, where, with which key, and how it is asked.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelSettings {
    /// Who serves the model: `openai` (any OpenAI-compatible endpoint such as vLLM, Ollama or
    /// LiteLLM), `anthropic` (Anthropic's Messages API, with prompt caching), or `scripted` (a
    /// built-in deterministic model for demos and tests that needs no network and no key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<ModelProvider>,

    /// The model's name as the provider knows it (for example `gpt-4o-mini` or
    /// `claude-sonnet-4-5`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(min = 1, max = 256))]
    pub name: String,

    /// Base URL of the provider's API, for example `http://vllm.llm.svc:8000/v1`. Defaults to
    /// the provider's public endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^https?://[^\s]+$"))]
    pub base_url: Option<String>,

    /// The Secret key that holds the API key, mounted into the pods that call the model and
    /// read at each request (a new value in the Secret is used without a restart); it never
    /// appears in logs, status or events, and goes to this model's `baseUrl` only. Required
    /// for `anthropic` and for `openai` without a `baseUrl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_secret_ref: Option<SecretKeyRef>,

    /// Upper bound on the tokens the model may generate in one step (4096 when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_000_000))]
    pub max_output_tokens: Option<u32>,

    /// Sampling temperature; the provider's default when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 2.0))]
    pub temperature: Option<f64>,

    /// The most one model call may take, from the request to the end of its answer (retries
    /// of transient failures included; 300 when unset). Past it the call fails as `TimedOut`:
    /// the next model of a fallback list is asked, or the cycle is retried with backoff. A
    /// model that streams slowly never holds back other agents of its pool (a cycle gives its
    /// slot to another while it waits on its model); this bounds how long its own agent
    /// waits. Raise it for large answers of a slow local model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub timeout_seconds: Option<u32>,

    /// Whether requests ask the provider to cache their stable prefix (true when unset):
    /// `prompt_cache_key` for `openai`, `cache_control` breakpoints for `anthropic`. Turn it
    /// off for a server that refuses these fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_caching: Option<bool>,
}

/// Tokens a step may generate when no model says.
pub const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 4096;
/// Seconds a model call may take when no model says.
pub const DEFAULT_MODEL_TIMEOUT_SECONDS: u32 = 300;

impl ModelSettings {
    /// The provider (`openai` until resolved: [`crate::models`] fills it in).
    pub fn provider(&self) -> ModelProvider {
        self.provider.unwrap_or(ModelProvider::Openai)
    }

    /// Tokens a step may generate.
    pub fn max_output_tokens(&self) -> u32 {
        self.max_output_tokens.unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS)
    }

    /// How long one call may take.
    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(u64::from(
            self.timeout_seconds
                .unwrap_or(DEFAULT_MODEL_TIMEOUT_SECONDS),
        ))
    }

    /// Whether requests ask for prompt caching.
    pub fn prompt_caching(&self) -> bool {
        self.prompt_caching.unwrap_or(true)
    }

    /// Whether calling the model needs an API key: `openai` and `anthropic` at their public
    /// endpoints (no `baseUrl`); a `baseUrl` may be a local server or a proxy that takes none.
    pub fn needs_api_key(&self) -> bool {
        match self.provider() {
            ModelProvider::Scripted => false,
            ModelProvider::Openai | ModelProvider::Anthropic => self.base_url.is_none(),
        }
    }
}

/// The model an agent thinks with: a Model of its namespace (`ref`), or the settings inline.
/// Beside `ref`, `temperature`, `maxOutputTokens`, `timeoutSeconds` and `promptCaching`
/// override the Model's (and its fallbacks') for this agent; `provider`, `name`, `baseUrl`
/// and `apiKeySecretRef` (where requests and keys go) are the Model's alone and refused
/// beside `ref`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelSpec {
    /// The Model (in this namespace) the agent thinks with, and through its `fallback` list
    /// the models asked when it fails. Without it, `provider` and `name` are required.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"))]
    pub model_ref: Option<String>,

    /// The settings: the model's own inline, or what overrides the Model's.
    #[serde(flatten)]
    pub settings: ModelSettings,

    /// The models asked after it, in order: filled in from the Models by the operator (in the
    /// manifest it renders for the worker) and by `agentfleet dev`; never part of the API.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(skip)]
    pub fallback: Vec<ModelLink>,

    /// How long a fallback answers before the first model is asked again (seconds; filled in
    /// with `fallback`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(skip)]
    pub retry_after_seconds: Option<u32>,
}

impl std::ops::Deref for ModelSpec {
    type Target = ModelSettings;
    fn deref(&self) -> &ModelSettings {
        &self.settings
    }
}

impl std::ops::DerefMut for ModelSpec {
    fn deref_mut(&mut self) -> &mut ModelSettings {
        &mut self.settings
    }
}

impl ModelSpec {
    /// What metrics, records and traces call the model first asked: its Model's name, else
    /// its own.
    pub fn label(&self) -> &str {
        self.model_ref.as_deref().unwrap_or(&self.settings.name)
    }
}

/// One model of a resolved fallback list: the Model's name and its settings (the agent's
/// overrides applied).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ModelLink {
    /// The Model's name.
    pub model: String,
    /// Its settings.
    pub settings: ModelSettings,
}

/// The provider that serves a model.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ModelProvider {
    /// Any OpenAI-compatible chat completions endpoint.
    Openai,
    /// Anthropic's Messages API.
    Anthropic,
    /// The built-in deterministic model: no network, no key.
    Scripted,
}

impl ModelProvider {
    /// The name used in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            ModelProvider::Openai => "openai",
            ModelProvider::Anthropic => "anthropic",
            ModelProvider::Scripted => "scripted",
        }
    }
}

/// A model many Agents of its namespace share (`spec.model.ref`): its provider, name,
/// endpoint and key, the defaults its requests are made with, and the Models asked in order
/// when it fails (unreachable, timed out, 5xx, or still rate-limited after its retries). A
/// change (a new key in its Secret, a new `baseUrl`, another fallback list) reaches its
/// agents at their next cycle, without a restart. The status says whether it answers (a
/// cheap listing of the provider's models, never a billed completion), which Agents use it,
/// and its recent errors.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "agentfleet.dev",
    version = "v1alpha1",
    kind = "Model",
    root = "ModelResource",
    namespaced,
    status = "ModelStatus",
    shortname = "mdl",
    category = "agentfleet",
    printcolumn = r#"{"name":"Provider","type":"string","jsonPath":".spec.provider"}"#,
    printcolumn = r#"{"name":"Model","type":"string","jsonPath":".spec.name"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Agents","type":"integer","jsonPath":".status.agentCount"}"#,
    printcolumn = r#"{"name":"Fallback","type":"string","jsonPath":".spec.fallback"}"#,
    printcolumn = r#"{"name":"URL","type":"string","priority":1,"jsonPath":".spec.baseUrl"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ModelResourceSpec {
    /// The model's settings (`provider` and `name` are required).
    #[serde(flatten)]
    pub settings: ModelSettings,

    /// The Models (of this namespace) asked in order when this one fails in a way another
    /// provider may not: each with its own endpoint and key (a key never goes to another
    /// Model's endpoint). A fallback's own list follows it; a loop is refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    #[schemars(inner(length(min = 1, max = 253)))]
    #[schemars(inner(regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")))]
    pub fallback: Vec<String>,

    /// How long an agent stays on a fallback before asking this model again (seconds).
    /// Staying keeps the fallback's prompt cache warm; a failed try waits as long again.
    #[serde(default = "default_retry_after_seconds")]
    #[schemars(range(min = 1, max = 86_400))]
    pub retry_after_seconds: u32,

    /// How often the operator asks the provider whether it answers (seconds; 0: only when the
    /// Model changes). The probe lists the provider's models (`GET /models`): no tokens are
    /// spent.
    #[serde(default = "default_probe_seconds")]
    #[schemars(range(min = 0, max = 86_400))]
    pub probe_seconds: u32,
}

/// How long an agent stays on a fallback before asking the first model again (seconds).
pub const DEFAULT_RETRY_AFTER_SECONDS: u32 = 300;

fn default_retry_after_seconds() -> u32 {
    DEFAULT_RETRY_AFTER_SECONDS
}

fn default_probe_seconds() -> u32 {
    300
}

/// What the operator knows of a Model.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelStatus {
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// `Accepted` (its fallbacks and key Secret resolve) and `Ready` (it answers).
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,

    /// How many Agents think with it, first or as a fallback.
    #[serde(default)]
    pub agent_count: u32,

    /// Those Agents (the first 100 by name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agents: Vec<String>,

    /// When the provider was last asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probed_at: Option<Time>,

    /// Its recent failures, newest first (at most 5).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub last_errors: Vec<ModelFailure>,
}

/// A failure of a Model.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelFailure {
    /// When.
    pub time: Time,
    /// What kind: the `Ready` condition's reason (`Unreachable`, `KeyRefused`,
    /// `ServerError`, `RateLimited`, `TimedOut`, `Refused`).
    pub reason: String,
    /// What was seen, for people (never a key).
    pub message: String,
}

//! The one rule of how an Agent's `spec.model` and the `Model` resources of its namespace
//! combine (used by the operator, its pools and `agentfleet dev` alike), and what is wrong
//! with a Model.
//!
//! - **Inline** (no `ref`): the settings are the model's; `provider` and `name` are required;
//!   there is no fallback.
//! - **`ref`**: the Model's settings, then for this agent `temperature`, `maxOutputTokens`,
//!   `timeoutSeconds` and `promptCaching` from beside `ref` when set. `provider`, `name`,
//!   `baseUrl` and `apiKeySecretRef` beside `ref` are refused: where requests and keys go is
//!   the Model's alone.
//! - **Fallbacks**: the Model's `fallback` list in order, each followed by its own list
//!   (depth first, each Model once, at most [`MAX_FALLBACKS`] after the first), the agent's overrides
//!   applied to each. A loop (A → B → A) is refused, and so is a list that mixes the
//!   `scripted` model with real providers (it calls none of an agent's HTTP, MCP or A2A tools:
//!   it can stand in for no provider, nor one for it). Each keeps its own endpoint and key.
//!
//! The result is a [`ModelSpec`] with the first model's settings and the rest in
//! `fallback`: what the worker reads, so that no worker reads a Model.

use std::collections::BTreeMap;
use std::fmt;

use crate::crd::{
    ModelLink, ModelProvider, ModelResource, ModelResourceSpec, ModelSettings, ModelSpec,
};

/// The most fallbacks one agent's list holds, with the fallbacks' own lists (the schema's
/// bound on one Model's `fallback`).
pub const MAX_FALLBACKS: usize = 8;

/// What is wrong, and where (a field path of the object at fault).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The field, as `kubectl explain` names it (`spec.fallback[1]`).
    pub path: String,
    /// What is wrong with it.
    pub message: String,
}

impl Problem {
    fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// The Models of one namespace, by name.
pub type Models<'a> = BTreeMap<&'a str, &'a ModelResourceSpec>;

/// The Models of `namespace` among `models` (those being deleted are gone already).
pub fn of_namespace<'a>(
    models: impl IntoIterator<Item = &'a ModelResource>,
    namespace: &str,
) -> Models<'a> {
    models
        .into_iter()
        .filter(|m| {
            m.metadata.namespace.as_deref() == Some(namespace)
                && m.metadata.deletion_timestamp.is_none()
        })
        .filter_map(|m| Some((m.metadata.name.as_deref()?, &m.spec)))
        .collect()
}

/// The Models `name` asks in order, itself first; or the first problem on the way, with the
/// path in the Model at fault (and that Model's name).
fn chain<'a>(
    name: &'a str,
    models: &Models<'a>,
) -> Result<Vec<(&'a str, &'a ModelResourceSpec)>, (String, Problem)> {
    let mut out = Vec::new();
    let mut path = Vec::new();
    visit(name, models, &mut path, &mut out)?;
    Ok(out)
}

fn visit<'a>(
    name: &'a str,
    models: &Models<'a>,
    path: &mut Vec<&'a str>,
    out: &mut Vec<(&'a str, &'a ModelResourceSpec)>,
) -> Result<(), (String, Problem)> {
    let Some(spec) = models.get(name).copied() else {
        // Only reached from a fallback: the first is looked up by the caller.
        return Ok(());
    };
    path.push(name);
    let first = path.len() == 1;
    if !out.iter().any(|(n, _)| *n == name) {
        out.push((name, spec));
    }
    for (i, next) in spec.fallback.iter().enumerate() {
        let at = |message: String| {
            (
                name.to_string(),
                Problem::new(format!("spec.fallback[{i}]"), message),
            )
        };
        if let Some(start) = path.iter().position(|p| *p == next.as_str()) {
            let mut ring: Vec<&str> = path[start..].to_vec();
            ring.push(next);
            return Err(at(format!("a loop: {}", ring.join(" → "))));
        }
        let Some(found) = models.get_key_value(next.as_str()) else {
            return Err(at(format!("no Model {next:?} in this namespace")));
        };
        if let Err((fault, problem)) = visit(found.0, models, path, out) {
            if !first || fault == name {
                return Err((fault, problem));
            }
            // Said in the first Model's terms: which of its own entries leads to it.
            let through_it = problem.message.starts_with(&format!("a loop: {name} →"));
            return Err(at(if through_it {
                problem.message
            } else {
                format!("its fallback Model {fault:?} is refused: {problem}")
            }));
        }
        if out.len() > MAX_FALLBACKS + 1 {
            // The first Model's list is too long, whichever of its fallbacks made it so.
            return Err((
                path.first().copied().unwrap_or(name).to_string(),
                Problem::new(
                    "spec.fallback",
                    format!("more than {MAX_FALLBACKS} fallbacks in all, with their own lists"),
                ),
            ));
        }
    }
    path.pop();
    Ok(())
}

/// The names of the Models `name` asks, in order (itself first); as far as they resolve.
pub fn chain_names(name: &str, models: &Models<'_>) -> Vec<String> {
    chain(name, models)
        .map(|links| links.iter().map(|(n, _)| (*n).to_string()).collect())
        .unwrap_or_else(|_| vec![name.to_string()])
}

/// What is wrong with Model `name` (its own fields and its fallback list), every problem at
/// once; in the Model at fault (this one or a fallback) for a problem on the way.
pub fn check(name: &str, spec: &ModelResourceSpec, models: &Models<'_>) -> Vec<Problem> {
    let mut out = own_problems(&spec.settings);
    for (i, next) in spec.fallback.iter().enumerate() {
        if spec.fallback[..i].contains(next) {
            out.push(Problem::new(
                format!("spec.fallback[{i}]"),
                format!("{next:?} is named twice"),
            ));
        }
    }
    let mut all = models.clone();
    all.insert(name, spec);
    match chain(name, &all) {
        Err((_, problem)) => out.push(problem),
        Ok(links) => {
            let scripted =
                |s: &ModelResourceSpec| s.settings.provider == Some(ModelProvider::Scripted);
            let first = scripted(spec);
            if let Some((other, _)) = links.iter().find(|(_, s)| scripted(s) != first) {
                let at = spec.fallback.iter().position(|f| f == other).map_or_else(
                    || "spec.fallback".to_string(),
                    |i| format!("spec.fallback[{i}]"),
                );
                out.push(Problem::new(
                    at,
                    format!(
                        "{other:?} mixes the scripted model with real providers: it calls none of an agent's HTTP, MCP or A2A tools, so neither can stand in for the other"
                    ),
                ));
            }
        }
    }
    out
}

/// What the schema leaves to say about a Model's own settings.
fn own_problems(settings: &ModelSettings) -> Vec<Problem> {
    let mut out = Vec::new();
    if settings.provider.is_none() {
        out.push(Problem::new("spec.provider", "Required value"));
    }
    if settings.name.is_empty() {
        out.push(Problem::new("spec.name", "Required value"));
    }
    if settings.provider.is_some()
        && settings.needs_api_key()
        && settings.api_key_secret_ref.is_none()
    {
        out.push(Problem::new(
            "spec.apiKeySecretRef",
            format!(
                "provider {} at its public endpoint needs an API key",
                settings.provider().as_str()
            ),
        ));
    }
    out
}

/// `spec.model` resolved against the Models of its namespace (see the module's rule): the
/// first model's settings, the others in `fallback`. The problem's path is the Agent's.
pub fn resolve(model: &ModelSpec, models: &Models<'_>) -> Result<ModelSpec, Problem> {
    let Some(name) = model.model_ref.as_deref() else {
        if model.settings.provider.is_none() {
            return Err(Problem::new(
                "spec.model.provider",
                "Required value (or name a Model with spec.model.ref)",
            ));
        }
        if model.settings.name.is_empty() {
            return Err(Problem::new(
                "spec.model.name",
                "Required value (or name a Model with spec.model.ref)",
            ));
        }
        return Ok(ModelSpec {
            fallback: Vec::new(),
            retry_after_seconds: None,
            ..model.clone()
        });
    };
    let s = &model.settings;
    for (field, set) in [
        ("provider", s.provider.is_some()),
        ("name", !s.name.is_empty()),
        ("baseUrl", s.base_url.is_some()),
        ("apiKeySecretRef", s.api_key_secret_ref.is_some()),
    ] {
        if set {
            return Err(Problem::new(
                format!("spec.model.{field}"),
                format!("is the Model {name:?}'s to say: remove it beside spec.model.ref"),
            ));
        }
    }
    let Some(first) = models.get(name).copied() else {
        return Err(Problem::new(
            "spec.model.ref",
            format!("no Model {name:?} in this namespace"),
        ));
    };
    if let Some(problem) = check(name, first, models).into_iter().next() {
        return Err(Problem::new(
            "spec.model.ref",
            format!("Model {name:?} is refused: {problem}"),
        ));
    }
    let links = chain(name, models).map_err(|(at, problem)| {
        Problem::new(
            "spec.model.ref",
            format!("Model {at:?} is refused: {problem}"),
        )
    })?;
    let mut resolved = links.iter().map(|(n, spec)| ModelLink {
        model: (*n).to_string(),
        settings: overridden(&spec.settings, s),
    });
    let primary = resolved.next().map(|l| l.settings).unwrap_or_default();
    let fallback: Vec<ModelLink> = resolved.collect();
    Ok(ModelSpec {
        model_ref: Some(name.to_string()),
        settings: primary,
        retry_after_seconds: (!fallback.is_empty()).then_some(first.retry_after_seconds),
        fallback,
    })
}

/// A Model's settings with the agent's overrides.
fn overridden(model: &ModelSettings, agent: &ModelSettings) -> ModelSettings {
    ModelSettings {
        temperature: agent.temperature.or(model.temperature),
        max_output_tokens: agent.max_output_tokens.or(model.max_output_tokens),
        timeout_seconds: agent.timeout_seconds.or(model.timeout_seconds),
        prompt_caching: agent.prompt_caching.or(model.prompt_caching),
        ..model.clone()
    }
}

/// The Models a resolved `spec.model` asks, in order: `(name, settings)`, the first named by
/// its own name when it is inline.
pub fn links(model: &ModelSpec) -> impl Iterator<Item = (&str, &ModelSettings)> {
    std::iter::once((model.label(), &model.settings)).chain(
        model
            .fallback
            .iter()
            .map(|l| (l.model.as_str(), &l.settings)),
    )
}

/// A resolved `spec.model` without its fallbacks: what a rehearsal asks (it judges the
/// candidate's first model).
pub fn first_only(model: &mut ModelSpec) {
    model.fallback.clear();
    model.retry_after_seconds = None;
}

/// The names of the Secrets holding the keys of a resolved `spec.model`'s models.
pub fn key_secrets(model: &ModelSpec) -> Vec<&str> {
    let mut out: Vec<&str> = links(model)
        .filter_map(|(_, s)| s.api_key_secret_ref.as_ref().map(|r| r.name.as_str()))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Whether `model` (an Agent's `spec.model`, resolved or not) names Model `name`, first or as
/// a fallback.
pub fn uses(model: &ModelSpec, name: &str) -> bool {
    model.model_ref.as_deref() == Some(name) || model.fallback.iter().any(|l| l.model == name)
}

#[cfg(test)]
mod tests;

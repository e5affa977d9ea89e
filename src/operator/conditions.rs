//! The Agent reconcile's conditions, each from what it looked at: `ModelConfigured` and
//! `ToolsConfigured` from the Secrets the spec names (their existence and keys; no value is
//! ever put in a message), `WorkerAvailable` from the applied Deployment, and `Ready` as the
//! first reason the agent cannot run.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use super::context::Error;
use super::status::Cond;
use crate::crd::{AgentSpec, ModelProvider, ModelSettings, ModelSpec, ToolsSpec};

/// Condition: the agent can run and is running as asked.
pub const READY: &str = "Ready";
/// Condition: the worker Deployment has its workers available.
pub const WORKER_AVAILABLE: &str = "WorkerAvailable";
/// Condition: the model provider and its API key are usable.
pub const MODEL_CONFIGURED: &str = "ModelConfigured";
/// Condition: every Secret the tools take headers from (`headersFrom`) exists.
pub const TOOLS_CONFIGURED: &str = "ToolsConfigured";
/// Condition: every space the agent names exists.
pub const SPACES_RESOLVED: &str = "SpacesResolved";

/// `ModelConfigured`: whether each model of the (resolved) list has what it needs; the
/// first that has not says why (named by its Model when there are several).
pub async fn check_model(secrets: &Api<Secret>, spec: &ModelSpec) -> Result<Cond, Error> {
    let links: Vec<_> = crate::models::links(spec).collect();
    let mut said = Vec::new();
    for (name, settings) in &links {
        let cond = check_link(secrets, settings).await?;
        if cond.status != Some(true) {
            return Ok(if links.len() > 1 {
                Cond {
                    message: format!("model {name}: {}", cond.message),
                    ..cond
                }
            } else {
                cond
            });
        }
        said.push((name.to_string(), cond));
    }
    if said.len() == 1 {
        if let Some((_, cond)) = said.pop() {
            return Ok(cond);
        }
    }
    let each: Vec<String> = said
        .iter()
        .map(|(name, c)| format!("{name}: {}", c.message))
        .collect();
    Ok(Cond::ok(
        MODEL_CONFIGURED,
        "ModelsConfigured",
        format!("{} models in order; {}", said.len(), each.join("; ")),
    ))
}

/// `ModelConfigured` of one model.
async fn check_link(secrets: &Api<Secret>, model: &ModelSettings) -> Result<Cond, Error> {
    let Some(key_ref) = &model.api_key_secret_ref else {
        return Ok(if model.needs_api_key() {
            Cond::fail(
                MODEL_CONFIGURED,
                "ApiKeyRequired",
                format!(
                    "provider {} at its public endpoint needs model.apiKeySecretRef",
                    model.provider().as_str()
                ),
            )
        } else if let (ModelProvider::Openai, Some(url)) = (model.provider(), &model.base_url) {
            Cond::ok(
                MODEL_CONFIGURED,
                "NoKeyNeeded",
                format!(
                    "{} is called without an API key",
                    crate::model::without_credentials(url)
                ),
            )
        } else {
            Cond::ok(
                MODEL_CONFIGURED,
                "NoKeyNeeded",
                "the scripted model needs no key",
            )
        });
    };
    match secrets.get_opt(&key_ref.name).await {
        Ok(None) => Ok(Cond::fail(
            MODEL_CONFIGURED,
            "SecretNotFound",
            format!("Secret {} not found", key_ref.name),
        )),
        Ok(Some(secret)) => {
            let has_key = secret
                .data
                .as_ref()
                .is_some_and(|d| d.contains_key(&key_ref.key))
                || secret
                    .string_data
                    .as_ref()
                    .is_some_and(|d| d.contains_key(&key_ref.key));
            Ok(if has_key {
                Cond::ok(
                    MODEL_CONFIGURED,
                    "SecretFound",
                    format!("API key from Secret {}, key {}", key_ref.name, key_ref.key),
                )
            } else {
                Cond::fail(
                    MODEL_CONFIGURED,
                    "SecretKeyNotFound",
                    format!("Secret {} has no key {}", key_ref.name, key_ref.key),
                )
            })
        }
        Err(kube::Error::Api(e)) if e.code == 403 => Ok(Cond::unknown(
            MODEL_CONFIGURED,
            "SecretUnreadable",
            format!(
                "the operator may not read Secret {}: {}",
                key_ref.name, e.reason
            ),
        )),
        Err(e) => Err(Error::Kube(e)),
    }
}

/// `ToolsConfigured`: whether every Secret of `headersFrom` exists. Only their metadata is
/// fetched: the operator never holds the values (the worker gets them as mounted files).
pub async fn check_tools(secrets: &Api<Secret>, tools: &ToolsSpec) -> Result<Cond, Error> {
    let names = tools.secrets();
    if names.is_empty() {
        return Ok(Cond::ok(
            TOOLS_CONFIGURED,
            "NoSecretsNeeded",
            "no tool takes headers from a Secret",
        ));
    }
    let mut missing = Vec::new();
    let mut unreadable = Vec::new();
    for name in &names {
        match secrets.get_metadata_opt(name).await {
            Ok(Some(_)) => {}
            Ok(None) => missing.push(*name),
            Err(kube::Error::Api(e)) if e.code == 403 => unreadable.push(*name),
            Err(e) => return Err(Error::Kube(e)),
        }
    }
    Ok(if !missing.is_empty() {
        Cond::fail(
            TOOLS_CONFIGURED,
            "SecretNotFound",
            format!(
                "Secret {} not found (headersFrom of {})",
                missing.join(", "),
                tools.secret_users(&missing)
            ),
        )
    } else if !unreadable.is_empty() {
        Cond::unknown(
            TOOLS_CONFIGURED,
            "SecretUnreadable",
            format!(
                "the operator may not read Secret {} (headersFrom of {})",
                unreadable.join(", "),
                tools.secret_users(&unreadable)
            ),
        )
    } else {
        Cond::ok(
            TOOLS_CONFIGURED,
            "SecretsFound",
            format!(
                "headers from Secret {}, mounted in the worker",
                names.join(", ")
            ),
        )
    })
}

/// `WorkerAvailable` from the applied Deployment.
pub fn worker_condition(spec: &AgentSpec, d: &Deployment) -> Cond {
    let desired = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let status = d.status.clone().unwrap_or_default();
    let available = status.available_replicas.unwrap_or(0);
    let name = d.metadata.name.clone().unwrap_or_default();
    if desired == 0 {
        return if spec.paused {
            Cond::fail(
                WORKER_AVAILABLE,
                "Paused",
                "the agent is paused: no worker runs, events queue in its inbox",
            )
        } else {
            Cond::fail(
                WORKER_AVAILABLE,
                "ScaledToZero",
                "no worker runs; an event wakes the agent",
            )
        };
    }
    if available >= 1 {
        return Cond::ok(
            WORKER_AVAILABLE,
            "MinimumReplicasAvailable",
            format!("Deployment {name}: {available} worker(s) available"),
        );
    }
    let detail = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.status != "True" && (c.type_ == "Progressing" || c.type_ == "ReplicaFailure"))
        .and_then(|c| c.message)
        .map(|m| format!(": {m}"))
        .unwrap_or_default();
    Cond::fail(
        WORKER_AVAILABLE,
        "WorkerUnavailable",
        format!("Deployment {name}: 0 of {desired} worker(s) available{detail}"),
    )
}

/// `Ready`: the first reason the agent cannot run (an invalid spec, then `checks` in order),
/// or why it is fine.
pub fn ready_condition(problems: &[String], checks: &[&Cond], worker: &Cond) -> Cond {
    if !problems.is_empty() {
        return Cond::fail(READY, "InvalidSpec", problems.join("; "));
    }
    for c in checks {
        if c.status != Some(true) {
            return Cond {
                type_: READY,
                status: Some(false),
                reason: c.reason,
                message: c.message.clone(),
            };
        }
    }
    match (worker.status, worker.reason) {
        (Some(true), _) => Cond::ok(READY, "AgentReady", "the worker is available"),
        (_, reason @ ("Paused" | "ScaledToZero")) => {
            Cond::ok(READY, reason, worker.message.clone())
        }
        (_, reason) => Cond::fail(READY, reason, worker.message.clone()),
    }
}

/// The spec or its configuration (`configured`: the model's key, the tools' Secrets) cannot
/// run (phase `Failed`).
pub fn failed(problems: &[String], configured: &[&Cond], worker: &Cond) -> bool {
    !problems.is_empty()
        || configured.iter().any(|c| c.status == Some(false))
        || worker.reason == "WorkerRejected"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> AgentSpec {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn ready_names_the_first_problem() {
        let ok_model = Cond::ok(MODEL_CONFIGURED, "SecretFound", "");
        let ok_tools = Cond::ok(TOOLS_CONFIGURED, "NoSecretsNeeded", "");
        let ok_spaces = Cond::ok(SPACES_RESOLVED, "SpacesFound", "");
        let available = Cond::ok(WORKER_AVAILABLE, "MinimumReplicasAvailable", "");
        let fine = [&ok_model, &ok_tools, &ok_spaces];
        let r = ready_condition(&[], &fine, &available);
        assert_eq!((r.status, r.reason), (Some(true), "AgentReady"));
        let missing = Cond::fail(MODEL_CONFIGURED, "SecretNotFound", "Secret k not found");
        let r = ready_condition(&[], &[&missing, &ok_tools, &ok_spaces], &available);
        assert_eq!(
            (r.status, r.reason, r.message.as_str()),
            (Some(false), "SecretNotFound", "Secret k not found")
        );
        let no_tool_secret = Cond::fail(TOOLS_CONFIGURED, "SecretNotFound", "Secret t not found");
        let r = ready_condition(&[], &[&ok_model, &no_tool_secret, &ok_spaces], &available);
        assert_eq!(r.message, "Secret t not found");
        let r = ready_condition(&["bad".into()], &[&missing], &available);
        assert_eq!(r.reason, "InvalidSpec");
        let paused = Cond::fail(WORKER_AVAILABLE, "Paused", "paused");
        assert_eq!(ready_condition(&[], &fine, &paused).status, Some(true));
        let down = Cond::fail(WORKER_AVAILABLE, "WorkerUnavailable", "0 of 1");
        assert_eq!(
            ready_condition(&[], &fine, &down).reason,
            "WorkerUnavailable"
        );
    }

    #[test]
    fn failed_follows_conditions() {
        let ok_model = Cond::ok(MODEL_CONFIGURED, "SecretFound", "");
        let bad_model = Cond::fail(MODEL_CONFIGURED, "SecretNotFound", "");
        let bad_tools = Cond::fail(TOOLS_CONFIGURED, "SecretNotFound", "");
        let unknown_model = Cond::unknown(MODEL_CONFIGURED, "SecretUnreadable", "");
        let down = Cond::fail(WORKER_AVAILABLE, "WorkerUnavailable", "");
        let rejected = Cond::fail(WORKER_AVAILABLE, "WorkerRejected", "");
        assert!(!failed(&[], &[&ok_model], &down));
        assert!(!failed(&[], &[&unknown_model], &down));
        assert!(failed(&[], &[&bad_model], &down));
        assert!(failed(&[], &[&ok_model, &bad_tools], &down));
        assert!(failed(&[], &[&ok_model], &rejected));
        assert!(failed(&["x".into()], &[&ok_model], &down));
    }

    #[test]
    fn users_of_a_secret_are_named() {
        let s = spec("{model: {provider: scripted, name: x}, tools: {http: [{name: a, description: d, url: \"http://a\", headersFrom: {secretName: s1}}, {name: b, description: d, url: \"http://b\"}], mcp: [{name: m, url: \"http://m\", headersFrom: {secretName: s1}}, {name: n, url: \"http://n\", headersFrom: {secretName: s2}}]}}");
        assert_eq!(s.tools.secret_users(&["s1"]), "HTTP tool a, MCP server m");
        assert_eq!(s.tools.secret_users(&["s2"]), "MCP server n");
    }

    #[test]
    fn worker_condition_reads_the_deployment() {
        let s = spec("{model: {provider: scripted, name: x}}");
        let d: Deployment = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "x-worker"},
            "spec": {"replicas": 1, "selector": {}, "template": {}},
            "status": {"availableReplicas": 0, "conditions": [
                {"type": "Progressing", "status": "False", "message": "ReplicaSet x has timed out progressing."}
            ]}
        }))
        .unwrap();
        let c = worker_condition(&s, &d);
        assert_eq!(c.reason, "WorkerUnavailable");
        assert!(
            c.message.contains("0 of 1") && c.message.contains("timed out"),
            "{}",
            c.message
        );
        let up: Deployment = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "x-worker"},
            "spec": {"replicas": 1, "selector": {}, "template": {}},
            "status": {"availableReplicas": 1}
        }))
        .unwrap();
        assert_eq!(worker_condition(&s, &up).status, Some(true));
    }
}

//! Manifests read from a directory, as `kubectl apply -f DIR` would take them: the Agents,
//! Spaces, Models and Secrets that `agentfleet dev` and `agentfleet pool --agents DIR` run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use tracing::warn;

use crate::crd::{Agent, ModelResource, Pool, Space};
use crate::names;

/// The manifests of a directory.
#[derive(Debug, Default)]
pub struct Manifests {
    /// Agents, by file order.
    pub agents: Vec<Agent>,
    /// Spaces, by file order.
    pub spaces: Vec<Space>,
    /// Pools, by file order (`dev` runs every agent in one pool of its own).
    pub pools: Vec<Pool>,
    /// Models, by file order (`dev` resolves its Agents' `spec.model.ref` with them).
    pub models: Vec<ModelResource>,
    /// Secrets ((namespace, name) → key → value), for the tools' `headersFrom` of the agents
    /// of their namespace. Never printed.
    pub secrets: BTreeMap<NamespacedName, SecretData>,
}

/// A namespaced object's (namespace, name).
pub type NamespacedName = (String, String);
/// A Secret's keys and values.
pub type SecretData = BTreeMap<String, String>;

impl Manifests {
    /// Resolves each Agent's `spec.model` against the Models of its namespace
    /// ([`crate::models`]'s rule, as the operator does), and says what is wrong with the
    /// Models: their fallbacks, a key Secret the directory does not hold, a name twice.
    pub fn resolve_models(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for m in &self.models {
            let ns = m.metadata.namespace.clone().unwrap_or_default();
            let name = m.metadata.name.clone().unwrap_or_default();
            if !seen.insert((ns.clone(), name.clone())) {
                problems.push(format!("Model {ns}/{name} appears twice"));
                continue;
            }
            let table = self.models_of(&ns);
            for p in crate::models::check(&name, &m.spec, &table) {
                problems.push(format!("Model {ns}/{name}: {p}"));
            }
            if let Some(r) = &m.spec.settings.api_key_secret_ref {
                let found = self
                    .secrets
                    .get(&(ns.clone(), r.name.clone()))
                    .map(|data| data.contains_key(&r.key));
                match found {
                    None => problems.push(format!(
                        "Model {ns}/{name}: spec.apiKeySecretRef: Secret {:?} not found: add a `kind: Secret` document to the directory",
                        r.name
                    )),
                    Some(false) => problems.push(format!(
                        "Model {ns}/{name}: spec.apiKeySecretRef.key: Secret {:?} has no key {:?}",
                        r.name, r.key
                    )),
                    Some(true) => {}
                }
            }
        }
        let mut resolved = Vec::with_capacity(self.agents.len());
        for a in &self.agents {
            let ns = a.metadata.namespace.clone().unwrap_or_default();
            let name = a.metadata.name.clone().unwrap_or_default();
            match crate::models::resolve(&a.spec.model, &self.models_of(&ns)) {
                Ok(model) => resolved.push(Some(model)),
                Err(p) => {
                    problems.push(format!("Agent {name}: {p}"));
                    resolved.push(None);
                }
            }
        }
        for (a, model) in self.agents.iter_mut().zip(resolved) {
            if let Some(model) = model {
                a.spec.model = model;
            }
        }
        problems
    }

    /// The Models of `namespace`, by name.
    fn models_of(&self, namespace: &str) -> crate::models::Models<'_> {
        crate::models::of_namespace(&self.models, namespace)
    }

    /// The Secrets an agent of `namespace` may read (name → key → value).
    pub fn secrets_of(&self, namespace: &str) -> BTreeMap<String, SecretData> {
        self.secrets
            .iter()
            .filter(|((ns, _), _)| ns == namespace)
            .map(|((_, name), data)| (name.clone(), data.clone()))
            .collect()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TypeMeta {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
}

/// Reads every Agent, Space and Secret in `dir` (sorted by file name), giving `namespace` to
/// those without one. Other objects are skipped with a warning; anything malformed is an error
/// naming the file and document (never a Secret's value); what the API server's schema
/// refuses is refused. Every problem of the directory is said at once.
pub fn load_dir(dir: &Path, namespace: &str) -> anyhow::Result<Manifests> {
    let (out, problems) = read_dir(dir, namespace)?;
    if !problems.is_empty() {
        bail!("invalid manifests:\n  {}", problems.join("\n  "));
    }
    Ok(out)
}

/// What [`load_dir`] reads, and the problem of each document it could not take (the others
/// are read still, so that one run says every problem). Errors only when the directory or a
/// file cannot be read at all.
pub fn read_dir(dir: &Path, namespace: &str) -> anyhow::Result<(Manifests, Vec<String>)> {
    if let Some(p) = names::namespace_problem(namespace) {
        bail!("--namespace: {p}");
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading directory {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && p.extension()
                    .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
        })
        .collect();
    files.sort();
    let mut out = Manifests::default();
    let mut problems = Vec::new();
    for file in &files {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        for (i, doc) in serde_yaml::Deserializer::from_str(&text).enumerate() {
            let at = || format!("{} (document {})", file.display(), i + 1);
            let value = match serde_yaml::Value::deserialize(doc).with_context(at) {
                Ok(value) => value,
                Err(e) => {
                    // The rest of a file past a YAML error cannot be read.
                    problems.push(format!("{e:#}"));
                    break;
                }
            };
            if let Err(e) = document(&mut out, value, namespace, file, &at()) {
                problems.push(format!("{e:#}"));
            }
        }
    }
    Ok((out, problems))
}

/// Takes one document into `out`, or says why it cannot.
fn document(
    out: &mut Manifests,
    value: serde_yaml::Value,
    namespace: &str,
    file: &Path,
    at: &str,
) -> anyhow::Result<()> {
    let at = || at.to_string();
    if value.is_null() {
        return Ok(());
    }
    let meta: TypeMeta = serde_yaml::from_value(value.clone()).with_context(at)?;
    if meta.api_version == "v1" && meta.kind == "Secret" {
        let (key, data) = secret(value, namespace).map_err(|p| anyhow::anyhow!("{}: {p}", at()))?;
        if out.secrets.insert(key.clone(), data).is_some() {
            bail!("{}: Secret {}/{} appears twice", at(), key.0, key.1);
        }
        return Ok(());
    }
    if meta.api_version != "agentfleet.dev/v1alpha1" {
        warn!(file = %file.display(), kind = %meta.kind, api_version = %meta.api_version, "not an agentfleet object; ignored");
        return Ok(());
    }
    if matches!(meta.kind.as_str(), "Agent" | "Space" | "Pool" | "Model") {
        // What the API server would refuse, refused here too; but for what the operator
        // renders into a worker's manifest beside the schema (a resolved Model's list).
        let mut json = serde_json::to_value(&value).with_context(at)?;
        if meta.kind == "Agent" {
            if let Some(model) = json
                .pointer_mut("/spec/model")
                .and_then(serde_json::Value::as_object_mut)
            {
                model.remove("fallback");
                model.remove("retryAfterSeconds");
            }
        }
        let schema = crate::crd::validate::schema_of(&meta.kind)
            .with_context(|| format!("no schema for {}", meta.kind))?;
        let problems = crate::crd::validate::check(schema, &json);
        if !problems.is_empty() {
            bail!(
                "{}: invalid {}:\n    {}",
                at(),
                meta.kind,
                problems.join("\n    ")
            );
        }
    }
    match meta.kind.as_str() {
        "Agent" => out.agents.push(object(value, namespace, "Agent", &at())?),
        "Space" => {
            let space: Space = object(value, namespace, "Space", &at())?;
            let refused = crate::membership::people(&space).refused;
            if !refused.is_empty() {
                bail!("{}: invalid Space:\n    {}", at(), refused.join("\n    "));
            }
            out.spaces.push(space);
        }
        "Pool" => out.pools.push(object(value, namespace, "Pool", &at())?),
        "Model" => out.models.push(object(value, namespace, "Model", &at())?),
        other => bail!("{}: unknown agentfleet kind {other:?}", at()),
    }
    Ok(())
}

/// A document of kind `kind` at `at`, placed in `namespace` when it names none.
fn object<K>(value: serde_yaml::Value, namespace: &str, kind: &str, at: &str) -> anyhow::Result<K>
where
    K: kube::Resource + serde::de::DeserializeOwned,
{
    let mut object: K =
        serde_yaml::from_value(value).with_context(|| format!("{at}: not a valid {kind}"))?;
    place(object.meta_mut(), namespace)
        .map_err(|p| anyhow::anyhow!("{at}: invalid {kind}: {p}"))?;
    Ok(object)
}

/// A `kind: Secret` document: its (namespace, name) and its keys and values (`data` decoded
/// from base64, `stringData` over it, as the API server merges them). Errors never hold a
/// value: the document's own parse error could quote one, so it is not passed on.
fn secret(
    value: serde_yaml::Value,
    namespace: &str,
) -> Result<(NamespacedName, SecretData), String> {
    let mut secret: k8s_openapi::api::core::v1::Secret =
        serde_yaml::from_value(value).map_err(|_| {
            "not a valid Secret (data: base64 strings; stringData: strings)".to_string()
        })?;
    place(&mut secret.metadata, namespace).map_err(|p| format!("invalid Secret: {p}"))?;
    let name = secret.metadata.name.unwrap_or_default();
    let mut out = BTreeMap::new();
    for (key, bytes) in secret.data.unwrap_or_default() {
        let text = String::from_utf8(bytes.0).map_err(|_| {
            format!("Secret {name}, key {key}: not UTF-8 text (a header value must be)")
        })?;
        out.insert(key, text);
    }
    out.extend(secret.string_data.unwrap_or_default());
    Ok(((secret.metadata.namespace.unwrap_or_default(), name), out))
}

/// What the API server refuses in an object's name and namespace (as `kubectl apply` would
/// be refused), then the object placed in `namespace` when it names none.
fn place(meta: &mut ObjectMeta, namespace: &str) -> Result<(), String> {
    let name = meta.name.as_deref().unwrap_or_default();
    if name.is_empty() {
        return Err("metadata.name is required".into());
    }
    if let Some(p) = names::object_name_problem(name) {
        return Err(format!("metadata.name: {p}"));
    }
    if let Some(p) = meta.namespace.as_deref().and_then(names::namespace_problem) {
        return Err(format!("metadata.namespace: {p}"));
    }
    meta.namespace.get_or_insert_with(|| namespace.to_string());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_of_the_directory_resolve_its_agents_and_their_faults_are_said_with_paths() {
        let dir = std::env::temp_dir().join(format!(
            "agentfleet-manifests-models-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let doc = |kind: &str, name: &str, spec: &str| {
            format!("---\napiVersion: agentfleet.dev/v1alpha1\nkind: {kind}\nmetadata: {{name: {name}}}\nspec: {spec}\n")
        };
        let fleet = [
            doc(
                "Model",
                "fast",
                "{provider: openai, name: gpt, apiKeySecretRef: {name: k}, fallback: [steady]}",
            ),
            doc(
                "Model",
                "steady",
                "{provider: openai, name: local, baseUrl: 'http://llm/v1'}",
            ),
            doc("Agent", "ok", "{model: {ref: fast, temperature: 0.1}}"),
            "---\napiVersion: v1\nkind: Secret\nmetadata: {name: k}\nstringData: {apiKey: sk-1}\n"
                .to_string(),
        ]
        .concat();
        std::fs::write(dir.join("fleet.yaml"), &fleet).unwrap();
        let (mut m, problems) = read_dir(&dir, "default").unwrap();
        assert!(problems.is_empty(), "{problems:?}");
        assert!(m.resolve_models().is_empty());
        let model = &m.agents[0].spec.model;
        assert_eq!((model.name.as_str(), model.temperature), ("gpt", Some(0.1)));
        assert_eq!(model.fallback[0].model, "steady");

        let broken = [
            doc(
                "Model",
                "a",
                "{provider: openai, name: a, baseUrl: 'http://a', fallback: [b]}",
            ),
            doc(
                "Model",
                "b",
                "{provider: openai, name: b, baseUrl: 'http://b', fallback: [a]}",
            ),
            doc(
                "Model",
                "c",
                "{provider: openai, name: c, apiKeySecretRef: {name: gone}}",
            ),
            doc("Agent", "lost", "{model: {ref: nowhere}}"),
            doc(
                "Agent",
                "both",
                "{model: {ref: c, baseUrl: 'http://elsewhere'}}",
            ),
        ]
        .concat();
        std::fs::write(dir.join("fleet.yaml"), broken).unwrap();
        let (mut m, _) = read_dir(&dir, "default").unwrap();
        let said = m.resolve_models();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            said,
            [
                "Model default/a: spec.fallback[0]: a loop: a → b → a",
                "Model default/b: spec.fallback[0]: a loop: b → a → b",
                "Model default/c: spec.apiKeySecretRef: Secret \"gone\" not found: add a `kind: Secret` document to the directory",
                "Agent lost: spec.model.ref: no Model \"nowhere\" in this namespace",
                "Agent both: spec.model.baseUrl: is the Model \"c\"'s to say: remove it beside spec.model.ref",
            ]
        );
    }

    #[test]
    fn a_space_member_no_one_can_be_is_refused_with_its_file_and_place() {
        let dir = std::env::temp_dir().join(format!("agentfleet-manifests-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("desk.yaml"),
            "apiVersion: agentfleet.dev/v1alpha1\nkind: Space\nmetadata: {name: desk}\nspec:\n  members: [{id: husam}, {id: 'two:words here', kind: Group}]\n",
        )
        .unwrap();
        let err = format!("{:#}", load_dir(&dir, "default").unwrap_err());
        assert!(err.contains("desk.yaml"), "{err}");
        assert!(err.contains("members[1]"), "{err}");
        std::fs::write(
            dir.join("desk.yaml"),
            "apiVersion: agentfleet.dev/v1alpha1\nkind: Space\nmetadata: {name: desk}\nspec:\n  members: [{id: husam}, {id: system.serviceaccount.default.x}]\n",
        )
        .unwrap();
        let err = format!("{:#}", load_dir(&dir, "default").unwrap_err());
        assert!(err.contains("members[1]") && err.contains("pose"), "{err}");
        std::fs::write(
            dir.join("desk.yaml"),
            "apiVersion: agentfleet.dev/v1alpha1\nkind: Space\nmetadata: {name: desk}\nspec:\n  members: [{id: husam}, {id: sre, kind: Group}, {id: bot, kind: ServiceAccount}]\n",
        )
        .unwrap();
        let loaded = load_dir(&dir, "default").unwrap();
        assert_eq!(loaded.spaces.len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

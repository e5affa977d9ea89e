//! Custom resources of the `agentfleet.dev/v1alpha1` API: [`Agent`], [`Space`], [`Pool`],
//! [`Rehearsal`] and `Model` ([`ModelResource`]).
//!
//! The rustdoc on every field becomes the schema description that `kubectl explain` shows,
//! and the YAML in `crds/` is generated from these types (`agentfleet crd`).

mod a2a;
mod agent;
mod budget;
mod consciousness;
mod model;
mod pool;
mod records;
mod rehearsal;
mod rollout;
mod space;
mod tools;
pub mod url;
pub mod validate;

pub use a2a::*;
pub use agent::*;
pub use budget::*;
pub use consciousness::*;
pub use model::*;
pub use pool::*;
pub use records::*;
pub use rehearsal::*;
pub use rollout::*;
pub use space::*;
pub use tools::*;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use kube::CustomResourceExt;

/// API group of every agentfleet resource.
pub const GROUP: &str = "agentfleet.dev";

/// Every CRD of the project, as the API server gets it: the generated schema with rustdoc
/// paragraphs unwrapped (so `kubectl explain` reflows them) and the kind's own doc at the root.
pub fn definitions() -> Vec<CustomResourceDefinition> {
    let mut crds = vec![
        Agent::crd(),
        Space::crd(),
        Pool::crd(),
        Rehearsal::crd(),
        ModelResource::crd(),
    ];
    for crd in &mut crds {
        for version in &mut crd.spec.versions {
            if let Some(schema) = version
                .schema
                .as_mut()
                .and_then(|s| s.open_api_v3_schema.as_mut())
            {
                let kind_doc = schema
                    .properties
                    .as_ref()
                    .and_then(|p| p.get("spec"))
                    .and_then(|spec| spec.description.clone());
                schema.description = kind_doc;
                unwrap_descriptions(schema);
                if crd.spec.names.kind == "Model" {
                    require_in_spec(schema, &["provider", "name"]);
                }
            }
        }
    }
    crds
}

/// Marks `fields` of the spec required (flattened settings are optional where an Agent
/// names a Model, required in the Model itself).
fn require_in_spec(schema: &mut JSONSchemaProps, fields: &[&str]) {
    if let Some(spec) = schema.properties.as_mut().and_then(|p| p.get_mut("spec")) {
        let required = spec.required.get_or_insert_with(Vec::new);
        for field in fields {
            if !required.iter().any(|r| r == field) {
                required.push((*field).to_string());
            }
        }
    }
}

/// Joins the lines of each paragraph of every description below `schema`.
fn unwrap_descriptions(schema: &mut JSONSchemaProps) {
    if let Some(d) = schema.description.as_mut() {
        *d = d
            .split("\n\n")
            .map(|para| {
                para.split('\n')
                    .map(str::trim)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect::<Vec<_>>()
            .join("\n\n");
    }
    for child in schema.properties.iter_mut().flat_map(|p| p.values_mut()) {
        unwrap_descriptions(child);
    }
    if let Some(k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrArray::Schema(items)) =
        schema.items.as_mut()
    {
        unwrap_descriptions(items);
    }
    if let Some(k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrBool::Schema(extra)) =
        schema.additional_properties.as_mut()
    {
        unwrap_descriptions(extra);
    }
}

/// Every CRD of the project, as one multi-document YAML stream (what `agentfleet crd` prints
/// and what `crds/agentfleet.yaml` holds).
pub fn render_all() -> Result<String, serde_yaml::Error> {
    let mut out = String::new();
    for crd in definitions() {
        out.push_str("---\n");
        out.push_str(&quote_yaml11_keywords(&serde_yaml::to_string(&crd)?));
    }
    Ok(out)
}

/// Words that YAML 1.2 (what serde_yaml writes) reads as strings but YAML 1.1 (what kubectl
/// and Helm read) reads as booleans or null.
const YAML11_KEYWORDS: &[&str] = &[
    "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "on", "On", "ON", "off", "Off",
    "OFF",
];

/// Quotes plain scalars that a YAML 1.1 reader would not take as strings, so that
/// `midCycleInbox: off` stays the string `"off"` whichever tool reads the file.
fn quote_yaml11_keywords(yaml: &str) -> String {
    let mut out = String::with_capacity(yaml.len());
    for line in yaml.lines() {
        let (head, value) = match line.trim_start().strip_prefix("- ") {
            Some(v) => (&line[..line.len() - v.len()], v),
            None => match line.rfind(": ") {
                Some(i) => (&line[..i + 2], &line[i + 2..]),
                None => (line, ""),
            },
        };
        if YAML11_KEYWORDS.contains(&value) {
            out.push_str(head);
            out.push('\'');
            out.push_str(value);
            out.push('\'');
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml11_keywords_are_quoted() {
        let rendered = render_all().unwrap();
        assert!(
            rendered.contains("- 'off'"),
            "midCycleInbox's enum keeps the string off"
        );
        for line in rendered.lines() {
            let value = line.trim_start().trim_start_matches("- ");
            let value = value.rsplit(": ").next().unwrap_or(value);
            assert!(
                !YAML11_KEYWORDS.contains(&value),
                "unquoted YAML 1.1 keyword: {line}"
            );
        }
        // Still the same documents.
        let docs: Vec<CustomResourceDefinition> = serde_yaml::Deserializer::from_str(&rendered)
            .map(|d| serde::Deserialize::deserialize(d).unwrap())
            .collect();
        assert_eq!(docs, definitions());
    }

    #[test]
    fn quoting_leaves_other_lines_alone() {
        assert_eq!(
            quote_yaml11_keywords("a: off\n- on\nb: offline\n- 'no'\n"),
            "a: 'off'\n- 'on'\nb: offline\n- 'no'\n"
        );
    }
}

//! Custom resources of the `agentfleet.dev/v1alpha1` API: [`Agent`] and [`Space`].
//!
//! The rustdoc on every field becomes the schema description that `kubectl explain` shows,
//! and the YAML in `crds/` is generated from these types (`agentfleet crd`).

mod agent;
mod space;

pub use agent::*;
pub use space::*;

use kube::CustomResourceExt;

/// API group of every agentfleet resource.
pub const GROUP: &str = "agentfleet.dev";

/// Every CRD of the project, as one multi-document YAML stream (what `agentfleet crd` prints
/// and what `crds/agentfleet.yaml` holds).
pub fn render_all() -> Result<String, serde_yaml::Error> {
    let mut out = String::new();
    for crd in [Agent::crd(), Space::crd()] {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&crd)?);
    }
    Ok(out)
}

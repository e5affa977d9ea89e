//! Writing the operator's objects: server-side apply under its one field manager, and
//! deletion that is done when the object is gone. An object the API server refuses as
//! invalid is [`Error::Refused`]: a problem of the spec that a condition reports, not a
//! failure to retry; [`refused_as`] says which object it was.

use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::build::FIELD_MANAGER;
use super::context::Error;

/// Server-side applies `obj`: the object as the API server keeps it.
pub(super) async fn apply<K>(api: &Api<K>, obj: &K) -> Result<K, Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let name = obj
        .meta()
        .name
        .clone()
        .ok_or(Error::MissingField("metadata.name"))?;
    let params = PatchParams::apply(FIELD_MANAGER).force();
    match api.patch(&name, &params, &Patch::Apply(obj)).await {
        Ok(applied) => Ok(applied),
        Err(kube::Error::Api(e)) if e.code == 422 || e.code == 400 => {
            Err(Error::Refused(e.message))
        }
        Err(e) => Err(Error::Kube(e)),
    }
}

/// Names the object of a refusal: `{what} rejected: {the API server's message}`; other
/// errors pass as they are.
pub(super) fn refused_as(what: impl std::fmt::Display) -> impl FnOnce(Error) -> Error {
    move |e| match e {
        Error::Refused(message) => Error::Refused(format!("{what} rejected: {message}")),
        other => other,
    }
}

/// Deletes `name` (in the background); done when it is already gone.
pub(super) async fn remove<K>(api: &Api<K>, name: &str) -> Result<(), Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(Error::Kube(e)),
    }
}

/// Server-side applies the status of `name` (kind `K`) in `ns`.
pub(super) async fn apply_status<K>(
    api: &Api<K>,
    name: &str,
    status: &impl Serialize,
) -> Result<(), Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    api.patch_status(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(patch),
    )
    .await
    .map(|_| ())
    .map_err(Error::Kube)
}

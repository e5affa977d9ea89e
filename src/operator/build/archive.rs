//! The workers' archive: the operator's `--archive` URL and the store's credential and
//! endpoint variables it was opened with, written into a Secret beside each worker
//! (`AGENT-worker-archive` owned by the Agent, `POOL-pool-archive` owned by the Pool) and loaded whole into the worker's
//! environment (`envFrom`), never into the Deployment or the ConfigMap.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvFromSource, Secret, SecretEnvSource};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sha2::{Digest, Sha256};

use crate::archive::{Archive, URL_ENV};

/// What every worker gets of the operator's archive: the variables of its environment that
/// open it (`AGENTFLEET_ARCHIVE_URL`, the store's `AWS_*`, `GOOGLE_*`, `AZURE_*`, and the
/// signing key `AGENTFLEET_ARCHIVE_SIGNING_KEY`).
#[derive(Clone, PartialEq, Eq)]
pub struct WorkerArchive {
    /// Variable → value, the URL's included (values are secrets: never shown).
    env: BTreeMap<String, String>,
}

impl std::fmt::Debug for WorkerArchive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The names only: the values hold credentials.
        f.debug_struct("WorkerArchive")
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl WorkerArchive {
    /// The archive at `url`, as `archive` was opened from it (with its environment).
    pub fn new(url: &str, archive: &Archive) -> Self {
        let mut env: BTreeMap<String, String> = archive.env().iter().cloned().collect();
        env.insert(URL_ENV.into(), url.into());
        Self { env }
    }

    /// What changes the workers' pods when it changes: a digest of every variable and
    /// value, so that new credentials roll the workers (the configuration hash is shown in
    /// the status: never a value).
    pub(super) fn fingerprint(&self) -> String {
        let mut h = Sha256::new();
        for (k, v) in &self.env {
            h.update(k.as_bytes());
            h.update(b"=");
            h.update(v.as_bytes());
            h.update(b"\0");
        }
        format!("archive:{}", crate::hex(&h.finalize()))
    }
}

/// Name of the Secret holding the archive environment of the workers of Deployment `base`.
pub fn archive_secret_name(base: &str) -> String {
    format!("{base}-archive")
}

/// The Secret holding the workers' archive environment, one key per variable, with `metadata`
/// (named by [`archive_secret_name`], owned by the Agent or Pool so that it goes with it).
pub fn archive_secret(metadata: ObjectMeta, archive: &WorkerArchive) -> Secret {
    Secret {
        metadata,
        data: Some(
            archive
                .env
                .iter()
                .map(|(k, v)| (k.clone(), k8s_openapi::ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        type_: Some("Opaque".into()),
        ..Secret::default()
    }
}

/// The worker's environment from that Secret (required: a pod without it does not start).
pub(super) fn archive_env_from(base: &str) -> EnvFromSource {
    EnvFromSource {
        secret_ref: Some(SecretEnvSource {
            name: archive_secret_name(base),
            optional: Some(false),
        }),
        ..EnvFromSource::default()
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{defaults, fixture, owner, worker_container};
    use super::super::{
        agent_worker_secrets, config_hash, configmap, deployment, deployment_name, render_manifest,
    };
    use super::*;
    use crate::archive::SIGNING_KEY_ENV;
    use kube::ResourceExt;

    const SECRET: &str = "archive-secret-9d8c7b6a";
    const SIGNING_KEY: &str = "archive-signing-key-of-32-bytes-4f";

    fn archive(secret: &str) -> WorkerArchive {
        let env = [
            ("AWS_ACCESS_KEY_ID", "AKIAFLEET"),
            ("AWS_SECRET_ACCESS_KEY", secret),
            ("AWS_ENDPOINT_URL", "http://minio.storage:9000"),
            (SIGNING_KEY_ENV, SIGNING_KEY),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let opened = Archive::open_with("s3://fleet/prod", &env).unwrap();
        WorkerArchive::new("s3://fleet/prod", &opened)
    }

    #[test]
    fn the_archive_reaches_the_worker_through_its_own_secret_only() {
        let agent = fixture("agent-scripted.yaml");
        let name = agent.name_any();
        let mut d = defaults();
        d.archive = Some(archive(SECRET));
        let secrets = agent_worker_secrets(&agent, &owner(&agent), &d);
        assert_eq!(
            secrets.len(),
            1,
            "no managed Redis here: the archive's only"
        );
        let secret = &secrets[0];
        assert_eq!(
            secret.metadata.name,
            Some(archive_secret_name(&deployment_name(&name)))
        );
        assert_eq!(secret.metadata.name.as_deref(), Some("echo-worker-archive"));
        assert_eq!(secret.metadata.namespace, agent.namespace());
        assert_eq!(
            secret.metadata.owner_references.as_ref().unwrap()[0].name,
            name
        );
        let data = secret.data.as_ref().unwrap();
        let value = |k: &str| String::from_utf8(data[k].0.clone()).unwrap();
        assert_eq!(value(URL_ENV), "s3://fleet/prod");
        assert_eq!(value("AWS_SECRET_ACCESS_KEY"), SECRET);
        assert_eq!(value("AWS_ENDPOINT_URL"), "http://minio.storage:9000");
        assert_eq!(
            value(SIGNING_KEY_ENV),
            SIGNING_KEY,
            "the workers sign with the operator's key"
        );
        assert_eq!(data.len(), 5);

        let deploy = deployment(&agent, &owner(&agent), &d, "h", Some(1));
        let from = worker_container(&deploy).env_from.as_ref().unwrap();
        assert_eq!(from.len(), 1);
        let source = from[0].secret_ref.as_ref().unwrap();
        assert_eq!(
            (source.name.as_str(), source.optional),
            ("echo-worker-archive", Some(false))
        );
        // Nothing of it in the Deployment, the ConfigMap, the hash's input or a debug line.
        let manifest = render_manifest(&agent).unwrap();
        let shown = format!(
            "{}{}{:?}{}",
            serde_json::to_string(&deploy).unwrap(),
            serde_json::to_string(&configmap(&agent, &owner(&agent), &manifest)).unwrap(),
            d,
            d.archive.as_ref().unwrap().fingerprint(),
        );
        for leak in [SECRET, SIGNING_KEY, "AKIAFLEET", "minio.storage"] {
            assert!(!shown.contains(leak), "{leak} in {shown}");
        }
        // New credentials roll the workers; the same ones do not.
        let h = config_hash("m", &d, &[]);
        assert_eq!(h, config_hash("m", &d, &[]));
        assert_ne!(h, config_hash("m", &defaults(), &[]), "archive on");
        let mut rotated = d.clone();
        rotated.archive = Some(archive("rotated-0f1e2d"));
        assert_ne!(h, config_hash("m", &rotated, &[]));
    }

    #[test]
    fn without_an_archive_the_worker_has_no_archive_environment() {
        let agent = fixture("agent-scripted.yaml");
        assert!(agent_worker_secrets(&agent, &owner(&agent), &defaults()).is_empty());
        let deploy = deployment(&agent, &owner(&agent), &defaults(), "h", Some(1));
        let c = worker_container(&deploy);
        assert_eq!(c.env_from, None);
        assert!(c.env.iter().flatten().all(|e| e.name != URL_ENV));
    }
}

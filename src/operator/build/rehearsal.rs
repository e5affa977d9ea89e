//! A Rehearsal's Job and what it reads: the candidate's manifest in a ConfigMap, the Secrets
//! a worker has beside it (the managed Redis URL, the archive's), and a pod like a worker's
//! running `agentfleet rehearse … --record`, with the candidate's model key. Owned by the
//! Rehearsal, so they go with it.

use k8s_openapi::api::batch::v1::{Job, JobSpec};

use super::*;
use crate::crd::Rehearsal;

/// How long a finished rehearsal's Job (and its pod's log) stays.
const JOB_KEPT_SECONDS: i32 = 24 * 3600;

/// Label naming the Rehearsal a Job belongs to.
pub const REHEARSAL_LABEL: &str = "agentfleet.dev/rehearsal";

/// `name` within `max` characters: as it is when it fits, else its first characters and a
/// hash of the whole (Kubernetes names are ASCII).
fn within(name: &str, max: usize) -> String {
    if name.len() <= max {
        return name.to_string();
    }
    let digest = Sha256::digest(name.as_bytes());
    let head = name[..max - 9].trim_end_matches(['-', '.']);
    format!("{head}-{}", crate::hex(&digest[..4]))
}

/// What every object of a rehearsal is named after: `NAME-rehearsal`, a long name cut and
/// hashed so that its Job's name (and the `job-name` label of its pod, at most 63
/// characters) stays valid.
pub fn rehearsal_base(name: &str) -> String {
    format!("{}-rehearsal", within(name, 41))
}

/// The Job of a Rehearsal's generation (`NAME-rehearsal-GEN`; a new generation is run by a
/// new Job).
pub fn rehearsal_job_name(name: &str, generation: i64) -> String {
    format!("{}-{generation}", rehearsal_base(name))
}

/// The rehearsal's objects: the Secrets beside its pod, the ConfigMap of the candidate's
/// manifest, and the Job that runs it for the Rehearsal's generation.
pub fn rehearsal_objects(
    rehearsal: &Rehearsal,
    candidate: &Agent,
    owner: &OwnerReference,
    defaults: &WorkerDefaults,
) -> Result<(Vec<Secret>, ConfigMap, Job), serde_yaml::Error> {
    let name = rehearsal.name_any();
    let base = rehearsal_base(&name);
    let agent = &rehearsal.spec.agent;
    let meta = |object: String| ObjectMeta {
        name: Some(object),
        namespace: rehearsal.namespace(),
        labels: Some(rehearsal_labels(&name, agent)),
        owner_references: Some(vec![owner.clone()]),
        ..ObjectMeta::default()
    };
    let secrets = worker_secrets(&base, meta, defaults);
    let manifest = render_manifest(candidate)?;
    let config = ConfigMap {
        metadata: meta(base.clone()),
        data: Some(BTreeMap::from([(AGENT_FILE_KEY.to_string(), manifest)])),
        ..ConfigMap::default()
    };
    let generation = rehearsal.metadata.generation.unwrap_or(0);
    let criteria = &rehearsal.spec.run.criteria;
    let mut args = vec![
        "rehearse".to_string(),
        format!("{}/{agent}", rehearsal.namespace().unwrap_or_default()),
        "-f".into(),
        AGENT_FILE.into(),
        "--cycles".into(),
        rehearsal.spec.run.cycles.to_string(),
        "--min-reply-agreement".into(),
        criteria.min_reply_agreement.to_string(),
        "--min-tool-agreement".into(),
        criteria.min_tool_agreement.to_string(),
        "--record".into(),
        format!(
            "{name}:{}:{generation}",
            rehearsal.uid().unwrap_or_default()
        ),
    ];
    if let Some(max) = criteria.max_tokens {
        args.extend(["--max-tokens".into(), max.to_string()]);
    }
    let env = candidate
        .spec
        .model
        .api_key_secret_ref
        .iter()
        .map(|key_ref| secret_env(API_KEY_ENV, &key_ref.name, &key_ref.key))
        .collect();
    let volume = super::deployment::manifest_volume(base.clone());
    let mut pod = pod::pod_spec(
        pod::Pod {
            base: &base,
            worker: &candidate.spec.worker,
            args,
            env,
            config: volume,
            // Nothing is called: no tool's Secret is needed.
            secrets: Vec::new(),
            secrets_optional: false,
            optional_secrets: Vec::new(),
            default_resources: pod::default_resources(),
        },
        defaults,
    );
    pod.restart_policy = Some("Never".into());
    pod.termination_grace_period_seconds = Some(10);
    for c in &mut pod.containers {
        // It serves no metrics: no port for the workers' monitor to scrape.
        c.ports = None;
    }
    let job = Job {
        metadata: meta(rehearsal_job_name(&name, generation)),
        spec: Some(JobSpec {
            backoff_limit: Some(0),
            active_deadline_seconds: Some(i64::from(rehearsal.spec.run.timeout_seconds)),
            // Its result is in the Rehearsal's status by then; its pod's log stays a day.
            ttl_seconds_after_finished: Some(JOB_KEPT_SECONDS),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(rehearsal_labels(&name, agent)),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod),
            },
            ..JobSpec::default()
        }),
        ..Job::default()
    };
    Ok((secrets, config, job))
}

/// A rehearsal's labels: a worker's (the workers' egress policy lets it reach Redis and the
/// models), as the `rehearsal` component, and the Rehearsal's name.
fn rehearsal_labels(name: &str, agent: &str) -> BTreeMap<String, String> {
    let mut labels = labels(agent);
    labels.insert("app.kubernetes.io/component".into(), "rehearsal".into());
    // A label's value is at most 63 characters; a Rehearsal's name may be longer.
    labels.insert(REHEARSAL_LABEL.into(), within(name, 63));
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_name_still_makes_a_valid_job_name() {
        assert_eq!(
            rehearsal_job_name("alice-1a2b3c4d", 3),
            "alice-1a2b3c4d-rehearsal-3"
        );
        let long = "a".repeat(63) + "-0123abcd";
        let job = rehearsal_job_name(&long, 123_456);
        assert!(job.len() <= 63, "{job}");
        assert_eq!(within(&long, 63).len(), 63);
        assert_eq!(within("short", 63), "short");
        assert_ne!(
            rehearsal_base(&long),
            rehearsal_base(&("a".repeat(63) + "-ffffffff"))
        );
    }
}

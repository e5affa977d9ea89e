//! What a release ships agrees with itself: the chart's `appVersion` is the crate's version, the
//! chart's default image is the one the release workflow pushes (and the operator's default
//! worker image), and the Dockerfile builds with the lock file and runs as the user of the
//! chart's pods and of the worker pods the operator builds.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failing loudly is the point

use std::path::Path;

use clap::Args as _;

fn read(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn yaml(relative: &str) -> serde_yaml::Value {
    serde_yaml::from_str(&read(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// The Dockerfile's instructions as (keyword in upper case, arguments), continuation lines
/// joined, comments and blank lines dropped.
fn dockerfile() -> Vec<(String, String)> {
    let text = read("Dockerfile");
    let mut instructions = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                current.push_str(head);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                let (keyword, args) = current
                    .split_once(char::is_whitespace)
                    .unwrap_or((&current, ""));
                instructions.push((keyword.to_ascii_uppercase(), args.trim().to_string()));
                current.clear();
            }
        }
    }
    assert!(
        current.is_empty(),
        "Dockerfile ends inside a continued line"
    );
    instructions
}

/// The instructions of the Dockerfile's last stage: what the image runs with.
fn final_stage(instructions: &[(String, String)]) -> &[(String, String)] {
    let from = instructions
        .iter()
        .rposition(|(keyword, _)| keyword == "FROM")
        .expect("Dockerfile has no FROM");
    &instructions[from..]
}

/// Every `KEY: N` of the chart's templates that run the agentfleet image (they are Go
/// templates, not YAML, so read by line; templates of other images, such as a Redis, may run
/// as their own users).
fn chart_template_numbers(key: &str) -> Vec<u32> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/agentfleet/templates");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        if !text.contains("include \"agentfleet.image\"") {
            continue;
        }
        for line in text.lines() {
            if let Some(value) = line
                .trim()
                .strip_prefix(key)
                .and_then(|r| r.strip_prefix(':'))
            {
                let value = value.trim();
                found.push(
                    value
                        .parse()
                        .unwrap_or_else(|e| panic!("{key}: {value:?}: {e}")),
                );
            }
        }
    }
    found
}

/// The pod security context of the worker Deployment the operator builds for an Agent, with
/// what `agentfleet operator` gives every worker when run with no flags.
fn worker_pod_security() -> k8s_openapi::api::core::v1::PodSecurityContext {
    use clap::FromArgMatches as _;
    let agent: agentfleet::crd::Agent =
        serde_yaml::from_str(&read("tests/fixtures/agent-scripted.yaml")).unwrap();
    let matches = agentfleet::operator::Args::augment_args(clap::Command::new("operator"))
        .try_get_matches_from(["operator"])
        .unwrap();
    let args = agentfleet::operator::Args::from_arg_matches(&matches).unwrap();
    let deployment = agentfleet::operator::build::deployment(
        &agent,
        &Default::default(),
        &args.worker_defaults(None),
        "hash",
        Some(1),
    );
    deployment
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|p| p.security_context)
        .expect("the worker pod has a security context")
}

/// The chart's default image repository.
fn chart_repository() -> String {
    let values = yaml("charts/agentfleet/values.yaml");
    values["image"]["repository"]
        .as_str()
        .expect("values.yaml: image.repository")
        .to_string()
}

#[test]
fn chart_app_version_is_the_crate_version() {
    let chart = yaml("charts/agentfleet/Chart.yaml");
    assert_eq!(
        chart["appVersion"].as_str(),
        Some(env!("CARGO_PKG_VERSION")),
        "Chart.yaml's appVersion must be Cargo.toml's version (the release workflow refuses a tag \
         that differs from either)"
    );
}

#[test]
fn chart_image_is_the_image_the_release_pushes() {
    let workflow = yaml(".github/workflows/release.yml");
    let pushed = workflow["env"]["IMAGE"]
        .as_str()
        .expect("release.yml: env.IMAGE, the image it pushes");
    assert_eq!(chart_repository(), pushed, "values.yaml's image.repository");

    // And the workflow pushes to env.IMAGE, not to a name spelled out again somewhere else.
    let steps = workflow["jobs"]["release"]["steps"]
        .as_sequence()
        .expect("release.yml: jobs.release.steps");
    let tags: Vec<&str> = steps
        .iter()
        .filter(|s| {
            s["uses"]
                .as_str()
                .is_some_and(|u| u.starts_with("docker/build-push-action@"))
        })
        .map(|s| {
            s["with"]["tags"]
                .as_str()
                .expect("build-push-action's tags")
        })
        .collect();
    assert!(
        !tags.is_empty(),
        "release.yml builds no image with docker/build-push-action"
    );
    for tag in tags {
        assert!(
            tag.trim().starts_with("${{ env.IMAGE }}:"),
            "release.yml pushes {tag:?}, not env.IMAGE"
        );
    }
}

#[test]
fn operator_default_worker_image_is_the_chart_image() {
    let command = agentfleet::operator::Args::augment_args(clap::Command::new("operator"));
    let arg = command
        .get_arguments()
        .find(|a| a.get_id() == "worker_image")
        .expect("operator --worker-image");
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        defaults,
        [format!(
            "{}:{}",
            chart_repository(),
            env!("CARGO_PKG_VERSION")
        )],
        "the operator's default worker image"
    );
}

#[test]
fn image_runs_as_the_charts_non_root_user() {
    let instructions = dockerfile();
    let user = final_stage(&instructions)
        .iter()
        .rev()
        .find(|(keyword, _)| keyword == "USER")
        .map(|(_, args)| args.as_str())
        .expect("the Dockerfile's final stage sets no USER (the base's would be used)");
    let (uid, gid) = user.split_once(':').unwrap_or((user, user));
    let uid: u32 = uid
        .parse()
        .unwrap_or_else(|_| panic!("USER {user}: not numeric (runAsNonRoot cannot check a name)"));
    let gid: u32 = gid
        .parse()
        .unwrap_or_else(|_| panic!("USER {user}: group not numeric"));
    assert_ne!(uid, 0, "USER {user} is root");

    let users = chart_template_numbers("runAsUser");
    assert!(!users.is_empty(), "the chart's templates set no runAsUser");
    for chart_uid in users {
        assert_eq!(
            chart_uid, uid,
            "the chart's runAsUser against the Dockerfile's USER"
        );
    }
    for chart_gid in chart_template_numbers("runAsGroup") {
        assert_eq!(
            chart_gid, gid,
            "the chart's runAsGroup against the Dockerfile's USER"
        );
    }

    // The workers run the same image, in Deployments the operator builds.
    let worker = worker_pod_security();
    assert_eq!(
        worker.run_as_user,
        Some(i64::from(uid)),
        "the worker pod's runAsUser against the Dockerfile's USER"
    );
    assert_eq!(
        worker.run_as_group,
        Some(i64::from(gid)),
        "the worker pod's runAsGroup against the Dockerfile's USER"
    );
}

#[test]
fn image_builds_with_the_lock_file() {
    let instructions = dockerfile();
    let builds: Vec<&str> = instructions
        .iter()
        .filter(|(keyword, args)| keyword == "RUN" && args.contains("cargo build"))
        .flat_map(|(_, args)| args.split("&&"))
        .filter(|command| command.contains("cargo build"))
        .collect();
    assert!(!builds.is_empty(), "the Dockerfile runs no `cargo build`");
    for build in builds {
        let flags: Vec<&str> = build.split_whitespace().collect();
        assert!(
            flags.contains(&"--locked"),
            "`{}` without --locked",
            build.trim()
        );
        assert!(
            flags.contains(&"--release"),
            "`{}` without --release",
            build.trim()
        );
    }
}

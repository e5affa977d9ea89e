//! The command line through the gateway, as the caller's own identity (issue 42): every
//! inspecting command takes `--gateway`, with `--token` or the current kubeconfig's
//! credentials (a bearer token, or what an exec credential plugin prints), against a real
//! gateway — `agentfleet dev`'s, where every person may inspect and restore agents.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

#[path = "support/dev.rs"]
mod support;
use support::{bin, Dev};

/// Runs the CLI with `args`, no token or gateway from the environment, and `env`.
fn cli(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(bin())
        .args(args)
        .env_remove("AGENTFLEET_TOKEN")
        .env_remove("AGENTFLEET_GATEWAY")
        .env_remove("AGENTFLEET_REDIS_URL")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// A child process killed when dropped (a failed assertion leaves nothing running).
struct Killed(Option<std::process::Child>);

impl Drop for Killed {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A kubeconfig whose current context's user is `user` (YAML), in a file of its own.
fn kubeconfig(tag: &str, user: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!(
        "agentfleet-kubeconfig-{tag}-{}",
        std::process::id()
    ));
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: here\nclusters:\n- name: c\n  cluster: {{server: 'https://127.0.0.1:1'}}\ncontexts:\n- name: here\n  context: {{cluster: c, user: me}}\nusers:\n- name: me\n  user:\n{user}\n"
        ),
    )
    .unwrap();
    path
}

#[tokio::test]
async fn every_inspecting_command_goes_through_the_gateway_as_its_caller() {
    agentfleet::install_crypto_provider();
    let dev = Dev::start();
    let http = reqwest::Client::new();
    let husam = dev.token("default/family", "Husam");
    let posted = dev
        .post(
            &http,
            &husam,
            "family",
            &json!({"text": "Remember: dinner is at 8."}),
        )
        .await;
    assert_eq!(posted.status(), 201);
    let start = Instant::now();
    while dev.count_from(&http, &husam, "family", "assistant").await == 0 {
        assert!(start.elapsed() < Duration::from_secs(20), "no answer");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let gw = dev.url.as_str();

    // consciousness show, as Husam by --token.
    let out = cli(
        &[
            "consciousness",
            "show",
            "default/assistant",
            "--gateway",
            gw,
            "--token",
            &husam,
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out));
    let shown = text(&out);
    assert!(shown.contains("Agent:        default/assistant"), "{shown}");
    assert!(shown.contains("dinner is at 8"), "{shown}");
    assert!(!shown.contains("break-glass"), "{shown}");
    let out = cli(
        &[
            "consciousness",
            "show",
            "default/assistant",
            "--json",
            "--gateway",
            gw,
            "--token",
            &husam,
        ],
        &[],
    );
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["agent"], "default/assistant");
    assert!(json["cycle"].as_u64().unwrap() >= 1, "{json}");

    // space read and calls, the same way.
    let out = cli(
        &[
            "space",
            "read",
            "default/family",
            "--gateway",
            gw,
            "--token",
            &husam,
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out));
    let read = text(&out);
    let (mine, answer) = (read.find("Husam: Remember"), read.find("assistant:"));
    assert!(
        mine.is_some() && answer.is_some() && mine < answer,
        "oldest first: {read}"
    );
    let out = cli(
        &[
            "calls",
            "default/assistant",
            "--gateway",
            gw,
            "--token",
            &husam,
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("no call of default/assistant waits for a human"));

    // No --token: the kubeconfig's, as a token or from an exec credential plugin.
    let plain = kubeconfig("plain", &format!("    token: {husam}"));
    let out = cli(
        &[
            "consciousness",
            "show",
            "default/assistant",
            "--gateway",
            gw,
        ],
        &[("KUBECONFIG", plain.to_str().unwrap())],
    );
    assert!(out.status.success(), "{}", text(&out));
    let credential = json!({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": {"token": husam}});
    let plugin = kubeconfig(
        "exec",
        &format!(
            "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      args: ['-c', 'test -n \"$KUBERNETES_EXEC_INFO\" && printf %s \"$CREDENTIAL\"']\n      env: [{{name: CREDENTIAL, value: '{credential}'}}]\n      interactiveMode: Never\n"
        ),
    );
    let out = cli(
        &["space", "read", "default/family", "--gateway", gw],
        &[("KUBECONFIG", plugin.to_str().unwrap())],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("Husam: Remember"));

    // A user who signs in with a client certificate is told to give a token.
    let cert = kubeconfig(
        "cert",
        "    client-certificate-data: AAAA\n    client-key-data: AAAA",
    );
    let out = cli(
        &[
            "consciousness",
            "show",
            "default/assistant",
            "--gateway",
            gw,
        ],
        &[("KUBECONFIG", cert.to_str().unwrap())],
    );
    assert!(!out.status.success());
    assert!(text(&out).contains("give --token"), "{}", text(&out));

    // A service is no person: refused, in one sentence.
    let out = cli(
        &[
            "consciousness",
            "show",
            "default/assistant",
            "--gateway",
            gw,
            "--token",
            &dev.service,
        ],
        &[],
    );
    assert!(!out.status.success());
    assert!(
        text(&out).contains("a service may not inspect or restore agents (403)"),
        "{}",
        text(&out)
    );

    // A restore through the gateway.
    let out = cli(
        &[
            "consciousness",
            "restore",
            "default/assistant",
            "--cycle",
            "1",
            "--gateway",
            gw,
            "--token",
            &husam,
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("restored default/assistant to cycle 1"),
        "{}",
        text(&out)
    );
    let out = cli(
        &[
            "consciousness",
            "restore",
            "default/assistant",
            "--cycle",
            "99",
            "--gateway",
            gw,
            "--token",
            &husam,
        ],
        &[],
    );
    assert!(!out.status.success());
    assert!(
        text(&out).contains("has no checkpoint for cycle 99"),
        "{}",
        text(&out)
    );

    for f in [plain, plugin, cert] {
        let _ = std::fs::remove_file(f);
    }
}

/// `agentfleet gateway --kubernetes-auth` as the chart runs it, with its cluster from the
/// kubeconfig (here a local stand-in answering `TokenReview`s and `SubjectAccessReview`s):
/// a ServiceAccount's token posts where it is a member and reads an agent's memory as RBAC
/// allows, the API server failing is a 503, and no token appears in the gateway's logs, even
/// at debug level.
// Multi-threaded: the stand-in API server answers while the CLI's process is waited on.
#[tokio::test(flavor = "multi_thread")]
async fn the_gateway_binary_takes_kubernetes_tokens_and_never_logs_them() {
    use agentfleet::identity::{AgentKey, SpaceKey};
    use agentfleet::store::prelude::*;
    use std::sync::{Arc, Mutex};
    const BOT: &str = "eyJhbGciOiJSUzI1NiJ9.sa-token-of-bot.c2lnbmF0dXJl";
    const DOWN: &str = "eyJhbGciOiJSUzI1NiJ9.token-while-etcd-is-down.c2ln";
    const NOBODY: &str = "eyJhbGciOiJSUzI1NiJ9.sa-token-of-nobody.c2lnbmF0dXJl";
    agentfleet::install_crypto_provider();
    let redis = agentfleet::testing::RedisServer::start().unwrap();
    let store = agentfleet::store::RedisStore::new(&redis.url()).unwrap();
    store
        .apply_space(
            &SpaceKey::new("t1", "desk"),
            &agentfleet::testing::space_record(
                "Desk",
                &["helper"],
                &["system.serviceaccount.t1.bot"],
            ),
        )
        .await
        .unwrap();
    store
        .register_agent(&AgentKey::new("t1", "helper"))
        .await
        .unwrap();
    // A cycle of the agent's, as its worker records one whose model failed.
    let helper = AgentKey::new("t1", "helper");
    let lease = store
        .acquire_lease(&helper, "w", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    let record = agentfleet::cycles::CycleRecord {
        outcome: Some(agentfleet::cycles::CycleOutcome::Failed),
        reason: Some("the provider answered 503".into()),
        party: "members".into(),
        ..Default::default()
    };
    let write = agentfleet::store::RecordWrite {
        record,
        keep: 10,
        max_bytes: 1 << 20,
    };
    store.record_cycle(&helper, &lease, &write).await.unwrap();
    store.release_lease(&helper, &lease).await.unwrap();

    let asked = Arc::new(Mutex::new(Vec::<Value>::new()));
    let seen = asked.clone();
    let api = axum::Router::new()
        .route(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            axum::routing::post(|axum::Json(review): axum::Json<Value>| async move {
                let token = review["spec"]["token"].as_str().unwrap_or_default().to_string();
                if token == DOWN {
                    return (
                        axum::http::StatusCode::SERVICE_UNAVAILABLE,
                        axum::Json(json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 503, "message": "etcdserver: request timed out"})),
                    );
                }
                let status = if token == BOT {
                    json!({"authenticated": true, "user": {"username": "system:serviceaccount:t1:bot", "groups": ["system:serviceaccounts"]}})
                } else if token == NOBODY {
                    json!({"authenticated": true, "user": {"username": "system:serviceaccount:t1:nobody", "groups": ["system:serviceaccounts"]}})
                } else {
                    json!({"authenticated": false})
                };
                (
                    axum::http::StatusCode::OK,
                    axum::Json(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "status": status})),
                )
            }),
        )
        .route(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            axum::routing::post(move |axum::Json(review): axum::Json<Value>| {
                let seen = seen.clone();
                async move {
                    let attrs = &review["spec"]["resourceAttributes"];
                    let allowed = review["spec"]["user"] == "system:serviceaccount:t1:bot"
                        && attrs["verb"] == "get"
                        && attrs["subresource"] == "consciousness";
                    seen.lock().unwrap().push(review.clone());
                    axum::Json(json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "status": {"allowed": allowed}}))
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api_addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, api).await });
    let kubeconfig =
        std::env::temp_dir().join(format!("agentfleet-gw-kubeconfig-{}", std::process::id()));
    std::fs::write(
        &kubeconfig,
        format!("apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{{name: c, cluster: {{server: 'http://{api_addr}'}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\nusers: [{{name: u, user: {{token: the-gateways-own}}}}]\n"),
    )
    .unwrap();
    let port = agentfleet::testing::free_port().unwrap();
    let log = kubeconfig.with_extension("out");
    let log_err = kubeconfig.with_extension("err");
    let gateway = Killed(Some(
        Command::new(bin())
            .args([
                "gateway",
                "--kubernetes-auth",
                "--addr",
                &format!("127.0.0.1:{port}"),
            ])
            .env("AGENTFLEET_REDIS_URL", redis.url())
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "debug")
            .env_remove("AGENTFLEET_GATEWAY_TOKENS")
            // Into a file: a pipe nobody reads would fill and stop the gateway.
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(&log_err).unwrap())
            .spawn()
            .unwrap(),
    ));
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let start = Instant::now();
    while http.get(format!("{base}/readyz")).send().await.is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the gateway did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let post = |token: &'static str, space: &'static str| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            http.post(format!("{base}/v1/spaces/t1/{space}/messages"))
                .bearer_auth(token)
                .json(&json!({"text": "deploy done"}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(post(BOT, "desk").await, 201);
    assert_eq!(post(BOT, "elsewhere").await, 404);
    assert_eq!(post("not-a-token-anyone-made", "desk").await, 401);
    let out = cli(
        &[
            "consciousness",
            "show",
            "t1/helper",
            "--gateway",
            &base,
            "--token",
            BOT,
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out));
    let out = cli(
        &["calls", "t1/helper", "--gateway", &base, "--token", BOT],
        &[],
    );
    assert!(!out.status.success());
    assert!(
        text(&out).contains("may not get agents/calls of \"t1/helper\""),
        "{}",
        text(&out)
    );
    assert_eq!(asked.lock().unwrap().len(), 2, "one access review each");
    // The API server failing: a 503, and the next review still asked and answered.
    assert_eq!(post(DOWN, "desk").await, 503);
    assert_eq!(post(BOT, "desk").await, 201);
    let out = cli(
        &[
            "consciousness",
            "show",
            "t1/helper",
            "--gateway",
            &base,
            "--token",
            BOT,
        ],
        &[],
    );
    assert!(out.status.success(), "after an outage: {}", text(&out));

    // Cycle records: read as the consciousness is (`get agents/consciousness`); whoever may
    // not is refused before anything is looked up, an agent that exists or not alike.
    let out = cli(
        &[
            "trace",
            "t1/helper",
            "1",
            "--gateway",
            &base,
            "--token",
            BOT,
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("Cycle 1 (failed)") && text(&out).contains("provider answered 503"),
        "{}",
        text(&out)
    );
    let get = |token: &'static str, path: &'static str| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            let r = http
                .get(format!("{base}{path}"))
                .bearer_auth(token)
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let (status, page) = get(BOT, "/v1/agents/t1/helper/cycles").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["cycles"][0]["outcome"], "failed");
    for path in [
        "/v1/agents/t1/helper/cycles",
        "/v1/agents/t1/helper/cycles/1",
        "/v1/agents/t1/ghost/cycles",
        "/v1/agents/t1/ghost/cycles/1",
    ] {
        let (status, body) = get(NOBODY, path).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (403, Some("forbidden")),
            "{path}: {body}"
        );
    }

    drop(gateway);
    let logs = std::fs::read_to_string(&log).unwrap() + &std::fs::read_to_string(&log_err).unwrap();
    assert!(logs.contains("gateway serving"), "{logs}");
    for secret in [
        BOT,
        DOWN,
        NOBODY,
        "sa-token-of-nobody",
        "sa-token-of-bot",
        "not-a-token-anyone-made",
        "the-gateways-own",
    ] {
        assert!(!logs.contains(secret), "{secret} in the gateway's logs");
    }
    for f in [&kubeconfig, &log, &log_err] {
        let _ = std::fs::remove_file(f);
    }
}

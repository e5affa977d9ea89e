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

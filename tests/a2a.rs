//! A2A against the official SDK: the Python `a2a-sdk` (PyPI) as the client of agents that
//! `agentfleet dev` serves (card, send, stream, get, list, subscribe, cancel, a question
//! answered on its task, a spent budget, both bindings, refusals). The interpreter is `AGENTFLEET_A2A_PYTHON` (`.ci/run` makes a venv with the
//! SDK), else `python3`; without the SDK the test fails and says how to install it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

#[path = "support/dev.rs"]
mod support;
use support::Dev;

/// The Python that has the SDK.
fn python() -> String {
    let python = std::env::var("AGENTFLEET_A2A_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&python)
        .args(["-c", "import a2a.client, a2a.types"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{python} cannot import the A2A SDK: python3 -m venv /tmp/a2a && /tmp/a2a/bin/pip install 'a2a-sdk==1.3.0' and set AGENTFLEET_A2A_PYTHON=/tmp/a2a/bin/python"
    );
    python
}

const MANIFESTS: &str = "\
apiVersion: agentfleet.dev/v1alpha1
kind: Space
metadata: {name: desk}
spec:
  members: [{id: husam, name: Husam}, {id: dana, name: Dana}]
---
apiVersion: agentfleet.dev/v1alpha1
kind: Agent
metadata: {name: helper}
spec:
  model: {provider: scripted, name: helper}
  spaces: [desk]
  tools:
    interactive:
      - name: confirm_deployment
        description: Ask the humans to confirm a deployment.
        inputSchema: {type: object, properties: {service: {type: string}, version: {type: string}}}
        resultSchema: {type: object, properties: {confirmed: {type: boolean}}, required: [confirmed]}
  a2a:
    description: Answers what it is told.
    skills: [{id: echo, description: Says back what it heard, tags: [demo]}]
    callers: [\"human:husam\"]
---
apiVersion: agentfleet.dev/v1alpha1
kind: Agent
metadata: {name: frugal}
spec:
  model: {provider: scripted, name: frugal}
  spaces: [desk]
  budget: {tokensPerDay: 1}
  a2a:
    callers: [\"*\"]
---
apiVersion: agentfleet.dev/v1alpha1
kind: Agent
metadata: {name: sleeper}
spec:
  model: {provider: scripted, name: sleeper}
  spaces: [desk]
  paused: true
  a2a:
    callers: [\"human:husam\"]
";

#[test]
fn the_official_sdk_talks_to_agents_in_dev() {
    let python = python();
    let dir = std::env::temp_dir().join(format!("agentfleet-a2a-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("desk.yaml"), MANIFESTS).unwrap();
    let dev = Dev::start_in(dir.to_str().unwrap(), &[]);
    let husam = dev.token("default/desk", "Husam");
    let dana = dev.token("default/desk", "Dana");
    let out = Command::new(python)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/a2a/sdk_client.py"
        ))
        .args([&dev.url, &husam, &dana])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the SDK client failed:\n{stdout}\n{stderr}"
    );
    println!("{stdout}");
    for step in [
        "card ok",
        "send, get, list ok",
        "stream ok",
        "rest ok",
        "subscribe, cancel ok",
        "refusals ok",
    ] {
        assert!(stdout.contains(step), "{step} missing:\n{stdout}");
    }
}

//! The official A2A SDK (PyPI `a2a-sdk`) in tests: the Python that has it, a remote agent
//! built with it (`tests/a2a/sdk_server.py`), and an outside caller driven line by line
//! (`tests/a2a/sdk_caller.py`). Shared by `tests/a2a.rs` and `tests/parties.rs` (`#[path]`).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// The Python that has the SDK: `AGENTFLEET_A2A_PYTHON`, else `python3`.
pub fn python() -> String {
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

fn script(name: &str) -> String {
    format!("{}/tests/a2a/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// The remote agent of `tests/a2a/sdk_server.py`, on a free port; killed when dropped.
pub struct RemoteAgent {
    child: Child,
    pub url: String,
    log: std::path::PathBuf,
}

impl RemoteAgent {
    pub fn start(token: &str, slow_seconds: u32) -> Self {
        Self::start_env(token, slow_seconds, &[])
    }

    /// As [`RemoteAgent::start`], with more of its environment (`CALLBACK_FILE`, …).
    pub fn start_env(token: &str, slow_seconds: u32, env: &[(&str, &str)]) -> Self {
        let python = python();
        let port = agentfleet::testing::free_port().unwrap();
        let log = std::env::temp_dir().join(format!(
            "agentfleet-a2a-remote-{}-{port}.log",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&log);
        let child = Command::new(python)
            .arg(script("sdk_server.py"))
            .args([&port.to_string(), token, log.to_str().unwrap()])
            .env("SLOW", slow_seconds.to_string())
            .envs(env.iter().copied())
            .spawn()
            .unwrap();
        let url = format!("http://127.0.0.1:{port}/remote");
        let start = std::time::Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed().as_secs() < 30,
                "the SDK server did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Self { child, url, log }
    }

    /// The messages it received: `(messageId, depth, text)`.
    pub fn received(&self) -> Vec<(String, i64, String)> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let (id, rest) = l.split_once(' ')?;
                let (depth, text) = rest.split_once(' ')?;
                Some((id.to_string(), depth.parse().ok()?, text.to_string()))
            })
            .collect()
    }
}

impl Drop for RemoteAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// An outside caller of one agent with the SDK's client (`tests/a2a/sdk_caller.py`): one
/// process, one command at a time.
pub struct Caller {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl Caller {
    /// A caller of the agent served at `url`, holding `token`.
    pub fn new(url: &str, token: &str) -> Self {
        let mut child = Command::new(python())
            .arg(script("sdk_caller.py"))
            .args([url, token])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let input = child.stdin.take().unwrap();
        let output = BufReader::new(child.stdout.take().unwrap());
        Self {
            child,
            input,
            output,
        }
    }

    /// One command (see the script); its answer: `{"task": …}` or `{"error": …}`.
    pub fn run(&mut self, command: serde_json::Value) -> serde_json::Value {
        tokio::task::block_in_place(|| {
            writeln!(self.input, "{command}").unwrap();
            let mut line = String::new();
            self.output.read_line(&mut line).unwrap();
            serde_json::from_str(&line).unwrap_or_else(|_| panic!("the SDK caller said {line:?}"))
        })
    }

    /// Sends `text` (with `extra` fields of the command: `contextId`, `metadata`, …).
    pub fn send(&mut self, text: &str, extra: serde_json::Value) -> serde_json::Value {
        let mut command = serde_json::json!({"op": "send", "text": text});
        if let Some(extra) = extra.as_object() {
            command.as_object_mut().unwrap().extend(extra.clone());
        }
        self.run(command)
    }

    /// The task `id` as it is now.
    pub fn get(&mut self, id: &str) -> serde_json::Value {
        self.run(serde_json::json!({"op": "get", "id": id}))
    }
}

impl Drop for Caller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

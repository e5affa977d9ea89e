//! `agentfleet dev DIR` as a child process, for the tests that run it: started on a free
//! port, its banner read (the gateway's URL, the tokens it printed), killed when dropped.
//! Shared by `tests/dev.rs` and `tests/monitoring.rs` (`#[path]`); each uses a part of it.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

/// The binary under test: this build's, or `AGENTFLEET_TEST_BIN` (to run these tests against
/// an older build and see a regression test fail there).
pub fn bin() -> String {
    std::env::var("AGENTFLEET_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_agentfleet").into())
}

/// `child`'s exit status once it exits, or `None` when it still runs after `within` (it is
/// killed then, and reaped).
pub fn exit_within(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let start = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if start.elapsed() > within {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The lines a child writes, as they come.
pub fn lines(out: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            if tx.send(line.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    rx
}

pub struct Dev {
    pub child: Child,
    pub url: String,
    /// The web console's URL, as the banner prints it.
    pub console: String,
    /// `(space, human, token)` from the banner's chat commands.
    pub chats: Vec<(String, String, String)>,
    /// The service token of the banner's curl line.
    pub service: String,
    /// The URL of the banner's curl line (a real agent's webhook).
    pub webhook: String,
    /// What it logs.
    pub stderr: mpsc::Receiver<String>,
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Dev {
    pub fn start() -> Dev {
        Self::start_with(&[])
    }

    pub fn start_with(extra: &[&str]) -> Dev {
        Self::start_in("config/samples", extra)
    }

    pub fn start_in(dir: &str, extra: &[&str]) -> Dev {
        Self::start_env(dir, extra, &[])
    }

    pub fn start_env(dir: &str, extra: &[&str], env: &[(&str, &str)]) -> Dev {
        let mut child = Command::new(bin())
            .args(["dev", dir, "--addr", "127.0.0.1:0"])
            .args(extra)
            .env_remove("AGENTFLEET_REDIS_URL")
            .env_remove("AGENTFLEET_MODEL_API_KEY")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let rx = lines(child.stdout.take().unwrap());
        let stderr = lines(child.stderr.take().unwrap());
        let mut url = None;
        let mut console = None;
        let mut chats = Vec::new();
        let mut chat_as = None;
        let mut service = None;
        let mut webhook = None;
        loop {
            let line = rx
                .recv_timeout(Duration::from_secs(30))
                .expect("the dev banner within 30s");
            let t = line.trim();
            if let Some(rest) = t.strip_prefix("gateway") {
                url = Some(rest.split_whitespace().next().unwrap().to_string());
            }
            if let Some(rest) = t.strip_prefix("console") {
                console = rest.split_whitespace().next().map(str::to_string);
            }
            if let Some(rest) = t.strip_prefix("chat in ") {
                let (space, who) = rest.trim_end_matches(':').split_once(" as ").unwrap();
                chat_as = Some((space.to_string(), who.to_string()));
            }
            if t.starts_with("agentfleet chat ") {
                let (space, who) = chat_as.take().unwrap();
                let token = t.rsplit_once("--token ").unwrap().1.to_string();
                chats.push((space, who, token));
            }
            if let Some((_, rest)) = t.split_once("Authorization: Bearer ") {
                service = Some(rest.split('\'').next().unwrap().to_string());
            }
            if t.ends_with("/events") {
                webhook = t.split_whitespace().last().map(str::to_string);
            }
            if t.starts_with("Ctrl-C stops") {
                break;
            }
        }
        Dev {
            child,
            url: url.expect("a gateway URL in the banner"),
            console: console.expect("the console's URL in the banner"),
            chats,
            service: service.expect("a service token in the banner"),
            webhook: webhook.expect("a webhook URL in the banner"),
            stderr,
        }
    }

    /// Posts `body` to `space` (of `default`) as the holder of `token`.
    pub async fn post(
        &self,
        http: &reqwest::Client,
        token: &str,
        space: &str,
        body: &Value,
    ) -> reqwest::Response {
        http.post(format!("{}/v1/spaces/default/{space}/messages", self.url))
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .unwrap()
    }

    /// `GET path` of the gateway as the holder of `token`: its JSON.
    pub async fn get(&self, http: &reqwest::Client, token: &str, path: &str) -> Value {
        http.get(format!("{}{path}", self.url))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// The last page of `space`'s (of `default`) messages, newest first, as the holder of
    /// `token` reads it.
    pub async fn messages(&self, http: &reqwest::Client, token: &str, space: &str) -> Value {
        let path = format!("/v1/spaces/default/{space}/messages");
        self.get(http, token, &path).await
    }

    /// How many messages of the last page of `space` (of `default`) `sender` wrote.
    pub async fn count_from(
        &self,
        http: &reqwest::Client,
        token: &str,
        space: &str,
        sender: &str,
    ) -> usize {
        let page = self.messages(http, token, space).await;
        page["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["sender"]["id"] == sender)
            .count()
    }

    /// The SSE stream of `space` (of `default`) as the holder of `token`.
    pub async fn stream(
        &self,
        http: &reqwest::Client,
        token: &str,
        space: &str,
    ) -> reqwest::Response {
        let resp = http
            .get(format!("{}/v1/spaces/default/{space}/stream", self.url))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        resp
    }

    pub async fn metrics(&self, http: &reqwest::Client) -> String {
        let resp = http.get(format!("{}/metrics", self.url)).send().await;
        resp.unwrap().text().await.unwrap()
    }

    pub fn token(&self, space: &str, who: &str) -> String {
        self.chats
            .iter()
            .find(|(s, w, _)| s == space && w == who)
            .unwrap_or_else(|| panic!("no chat command for {who} in {space}: {:?}", self.chats))
            .2
            .clone()
    }
}

/// A directory of manifests for one test, removed when dropped: a Space with the human
/// Husam, and agents in it, each given by its name and its `spec` lines besides `spaces`.
pub struct ManifestDir(pub std::path::PathBuf);

impl ManifestDir {
    pub fn new(tag: &str, space: &str, agents: &[(&str, String)]) -> Self {
        let dir = std::env::temp_dir().join(format!("agentfleet-dev-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut yaml = format!(
            "apiVersion: agentfleet.dev/v1alpha1\nkind: Space\nmetadata: {{name: {space}}}\nspec:\n  members: [{{id: husam, name: Husam}}]\n"
        );
        for (name, spec) in agents {
            yaml.push_str(&format!(
                "---\napiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {{name: {name}}}\nspec:\n  spaces: [{space}]\n{spec}\n"
            ));
        }
        std::fs::write(dir.join(format!("{space}.yaml")), yaml).unwrap();
        Self(dir)
    }

    pub fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for ManifestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The `model` line of an Agent on an OpenAI-compatible server.
pub fn openai(base_url: &str) -> String {
    format!("  model: {{provider: openai, name: mock, baseUrl: '{base_url}'}}")
}

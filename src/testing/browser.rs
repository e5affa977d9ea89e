//! A headless Chromium for tests, driven through Debian's `chromedriver` over plain W3C
//! WebDriver (HTTP and JSON on loopback, with the reqwest and serde_json the project has): the
//! few verbs browser tests need, each one request.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::ports::{listening, spawn_on_free_ports};

/// The key of an element reference in WebDriver answers.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A browser session; the session and the driver end when it is dropped.
pub struct Browser {
    http: reqwest::Client,
    session: String,
    driver: Child,
}

/// An element of the page.
#[derive(Clone, Debug)]
pub struct Element(String);

impl Drop for Browser {
    /// Ends the session (chromedriver then quits its Chromium), then kills what is left of
    /// the driver's process group: no browser outlives its test.
    fn drop(&mut self) {
        end_session(&self.session);
        let group = format!("-{}", self.driver.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// `DELETE` of the session at `url` (`http://127.0.0.1:PORT/session/ID`), blocking and
/// bounded: a drop cannot wait for the async client.
fn end_session(url: &str) {
    use std::io::{Read, Write};
    let Some((host, path)) = url
        .strip_prefix("http://")
        .and_then(|rest| rest.split_once('/'))
    else {
        return;
    };
    let Ok(addr) = host.parse() else { return };
    let Ok(mut stream) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
        return;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let request = format!(
        "DELETE /{path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    if stream.write_all(request.as_bytes()).is_err() {
        return;
    }
    // Until the whole answer is in: the session is over then (the driver keeps the
    // connection open, so reading to its end would wait for the timeout).
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n @ 1..) = stream.read(&mut buf) {
        answer.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&answer);
        let Some((head, body)) = text.split_once("\r\n\r\n") else {
            continue;
        };
        let length = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().to_string())
            })
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0);
        if body.len() >= length {
            return;
        }
    }
}

impl Browser {
    /// Starts `chromedriver` (Debian's `chromium-driver`) on a free port and a headless
    /// session in it.
    pub async fn start() -> Result<Self, String> {
        let (driver, [port]) = spawn_on_free_ports(
            "chromedriver",
            |[port]| {
                use std::os::unix::process::CommandExt as _;
                Command::new("chromedriver")
                    .args([format!("--port={port}"), "--allowed-ips=127.0.0.1".into()])
                    // Its own process group, with the browsers it starts: see `drop`.
                    .process_group(0)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .map_err(|e| {
                        format!("cannot run chromedriver ({e}): apt-get install chromium chromium-driver (see .ci/run)")
                    })
            },
            listening,
        )?;
        let http = reqwest::Client::new();
        let base = format!("http://127.0.0.1:{port}");
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:loggingPrefs": {"browser": "ALL"},
            "goog:chromeOptions": {"args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                "--window-size=1280,900", "--disable-dev-shm-usage", "--lang=en-US"]}}}});
        let mut browser = Self {
            http,
            session: base.clone(),
            driver,
        };
        let answer = browser.call("POST", "/session", Some(caps)).await?;
        let id = answer["sessionId"]
            .as_str()
            .ok_or_else(|| format!("no session in {answer}"))?;
        browser.session = format!("{base}/session/{id}");
        Ok(browser)
    }

    /// One WebDriver call below the session (or the driver, before there is one): its value.
    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let url = format!("{}{path}", self.session);
        let request = match method {
            "GET" => self.http.get(&url),
            "DELETE" => self.http.delete(&url),
            _ => self.http.post(&url).json(&body.unwrap_or(json!({}))),
        };
        let response = request
            .send()
            .await
            .map_err(|e| format!("{method} {path}: {e}"))?;
        let status = response.status();
        let answer: Value = response
            .json()
            .await
            .map_err(|e| format!("{method} {path}: not JSON: {e}"))?;
        if !status.is_success() {
            return Err(format!(
                "{method} {path}: {}: {}",
                status, answer["value"]["message"]
            ));
        }
        Ok(answer["value"].clone())
    }

    /// Opens `url` (waits for the page to load).
    pub async fn goto(&self, url: &str) -> Result<(), String> {
        self.call("POST", "/url", Some(json!({ "url": url })))
            .await
            .map(|_| ())
    }

    /// The elements that match `css` now.
    pub async fn find_all(&self, css: &str) -> Result<Vec<Element>, String> {
        let found = self
            .call(
                "POST",
                "/elements",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await?;
        Ok(found
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e[ELEMENT].as_str().map(|id| Element(id.to_string())))
            .collect())
    }

    /// The first element that matches `css`, waiting for one up to `within`.
    pub async fn wait_for(&self, css: &str, within: Duration) -> Result<Element, String> {
        let start = Instant::now();
        loop {
            if let Some(e) = self.find_all(css).await?.into_iter().next() {
                return Ok(e);
            }
            if start.elapsed() > within {
                return Err(format!("no {css} within {within:?}"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Types `text` into `element`.
    pub async fn type_into(&self, element: &Element, text: &str) -> Result<(), String> {
        let path = format!("/element/{}/value", element.0);
        self.call("POST", &path, Some(json!({ "text": text })))
            .await
            .map(|_| ())
    }

    /// Waits up to `within` for an element matching `css`, then clicks it.
    pub async fn click_on(&self, css: &str, within: Duration) -> Result<(), String> {
        let element = self.wait_for(css, within).await?;
        self.click(&element).await
    }

    /// Waits up to `within` for a field matching `css`, then types `text` into it.
    pub async fn type_on(&self, css: &str, text: &str, within: Duration) -> Result<(), String> {
        let element = self.wait_for(css, within).await?;
        self.type_into(&element, text).await
    }

    /// Empties the field `element`.
    pub async fn clear(&self, element: &Element) -> Result<(), String> {
        let path = format!("/element/{}/clear", element.0);
        self.call("POST", &path, None).await.map(|_| ())
    }

    /// Clicks `element`.
    pub async fn click(&self, element: &Element) -> Result<(), String> {
        let path = format!("/element/{}/click", element.0);
        self.call("POST", &path, None).await.map(|_| ())
    }

    /// The rendered text of `element`.
    pub async fn text(&self, element: &Element) -> Result<String, String> {
        let path = format!("/element/{}/text", element.0);
        let v = self.call("GET", &path, None).await?;
        Ok(v.as_str().unwrap_or_default().to_string())
    }

    /// The rendered text of the first element matching `css`, waiting up to `within` for one.
    pub async fn text_of(&self, css: &str, within: Duration) -> Result<String, String> {
        let element = self.wait_for(css, within).await?;
        self.text(&element).await
    }

    /// Runs `script` in the page; what it returns.
    pub async fn exec(&self, script: &str) -> Result<Value, String> {
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
        .await
    }

    /// Runs `script` in the page as an async function body: what it returns (awaited).
    pub async fn exec_async(&self, script: &str) -> Result<Value, String> {
        let wrapped = format!(
            "const done = arguments[arguments.length - 1]; \
             (async () => {{ {script} }})().then(done, (e) => done('threw: ' + e));"
        );
        self.call(
            "POST",
            "/execute/async",
            Some(json!({"script": wrapped, "args": []})),
        )
        .await
    }

    /// A PNG of the whole page (beyond the window's height), through Chromium's DevTools
    /// protocol.
    pub async fn screenshot(&self) -> Result<Vec<u8>, String> {
        use base64::Engine as _;
        let shot = self
            .call(
                "POST",
                "/goog/cdp/execute",
                Some(json!({"cmd": "Page.captureScreenshot",
                    "params": {"format": "png", "captureBeyondViewport": true}})),
            )
            .await?;
        let data = shot["data"]
            .as_str()
            .ok_or_else(|| format!("no screenshot in {shot}"))?;
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| format!("screenshot: {e}"))
    }

    /// The browser's log entries at `SEVERE` (errors, Content-Security-Policy violations,
    /// failed loads) since the last look.
    pub async fn errors(&self) -> Result<Vec<String>, String> {
        let log = self
            .call("POST", "/se/log", Some(json!({"type": "browser"})))
            .await?;
        Ok(log
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| e["message"].as_str().unwrap_or_default().to_string())
            .collect())
    }
}

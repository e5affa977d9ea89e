//! Test support: a real `redis-server` on a free loopback port, owned by the test.
//!
//! Used by the crate's own tests and by the integration tests under `tests/`. A test that
//! needs Redis fails with a clear message when `redis-server` is missing; it never skips.
#![doc(hidden)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` process that lives as long as this value.
pub struct RedisServer {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl RedisServer {
    /// Starts `redis-server` (from `PATH`) on a free port with persistence off, and waits until
    /// it accepts connections.
    pub fn start() -> Result<Self, String> {
        let port = free_port()?;
        let dir =
            std::env::temp_dir().join(format!("agentfleet-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!("cannot start redis-server ({e}); install it (Debian: apt-get install -y redis-server)")
            })?;
        let mut server = Self { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                use std::io::{Read, Write};
                let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
                let mut buf = [0u8; 7];
                if s.write_all(b"PING\r\n").is_ok()
                    && s.read_exact(&mut buf).is_ok()
                    && &buf == b"+PONG\r\n"
                {
                    return Ok(server);
                }
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!("redis-server exited at start: {status}"));
            }
            if Instant::now() > deadline {
                let _ = server.child.kill();
                return Err("redis-server did not answer within 10s".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The server's URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A TCP port on 127.0.0.1 that nothing listens on right now.
pub fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

//! Free loopback ports for the servers tests start, and starting a server on them.
//!
//! A port found free can be taken by another test (a server, or an outgoing connection's
//! source port) before the server binds it: the server then exits at once. So a server is
//! started on fresh ports until one stays up, never given up on after one clash.

use std::net::TcpListener;
use std::process::Child;
use std::time::{Duration, Instant};

/// How many times a server is started on fresh ports before its start is an error.
const ATTEMPTS: usize = 5;
/// How long a server that stays up has to become ready.
const READY_WITHIN: Duration = Duration::from_secs(20);

/// A TCP port on 127.0.0.1 that nothing listens on right now.
pub fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

/// Whether something accepts connections on 127.0.0.1:`port` (the readiness of a server
/// that needs no more).
pub fn listening(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// Starts a server with `spawn` on `N` free ports until it stays up and `ready` accepts the
/// first port (up to 20 s); its process and ports. A server that exits at start (a port was
/// taken meanwhile) is started again on fresh ports, up to five times; one that stays up but
/// never gets ready is killed and is an error at once.
pub fn spawn_on_free_ports<const N: usize>(
    what: &str,
    mut spawn: impl FnMut([u16; N]) -> Result<Child, String>,
    ready: impl Fn(u16) -> bool,
) -> Result<(Child, [u16; N]), String> {
    let mut exits = Vec::new();
    for _ in 0..ATTEMPTS {
        let mut ports = [0; N];
        for port in &mut ports {
            *port = free_port()?;
        }
        let mut child = spawn(ports)?;
        match wait_until_ready(&mut child, ports[0], &ready) {
            Ok(()) => return Ok((child, ports)),
            Err(Unready::Exited(status)) => exits.push(format!("{ports:?}: {status}")),
            Err(Unready::Late) => {
                return Err(format!(
                    "{what} on port {} was not ready within {}s",
                    ports[0],
                    READY_WITHIN.as_secs()
                ))
            }
        }
    }
    Err(format!(
        "{what} exited at start {ATTEMPTS} times, on fresh ports each time ({})",
        exits.join("; ")
    ))
}

/// Waits until `ready` accepts the server's `port`, as [`spawn_on_free_ports`] does: for a
/// server started again on ports of its own (a restart).
pub fn wait_ready(
    what: &str,
    child: &mut Child,
    port: u16,
    ready: impl Fn(u16) -> bool,
) -> Result<(), String> {
    wait_until_ready(child, port, &ready).map_err(|unready| match unready {
        Unready::Exited(status) => format!("{what} on port {port} exited at start: {status}"),
        Unready::Late => format!(
            "{what} on port {port} was not ready within {}s",
            READY_WITHIN.as_secs()
        ),
    })
}

enum Unready {
    /// The process ended: how.
    Exited(String),
    /// It is still running, not ready in time (and now killed).
    Late,
}

fn wait_until_ready(
    child: &mut Child,
    port: u16,
    ready: &impl Fn(u16) -> bool,
) -> Result<(), Unready> {
    let deadline = Instant::now() + READY_WITHIN;
    loop {
        if ready(port) {
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(Unready::Exited(status.to_string()));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Unready::Late);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// A `redis-server` whose port is taken exits at start and is started again on a fresh
    /// port.
    #[test]
    fn a_server_whose_port_is_taken_starts_on_another() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let taken_port = taken.local_addr().unwrap().port();
        let mut starts = 0;
        let (mut child, [port]) = spawn_on_free_ports(
            "redis-server",
            |[port]| {
                starts += 1;
                // The first start is given the taken port, as a race would.
                let port = if starts == 1 { taken_port } else { port };
                Command::new("redis-server")
                    .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                    .args(["--save", "", "--appendonly", "no"])
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .map_err(|e| e.to_string())
            },
            listening,
        )
        .unwrap();
        assert_eq!(starts, 2);
        assert_ne!(port, taken_port);
        child.kill().unwrap();
        child.wait().unwrap();
        drop(taken);
    }

    /// A server that exits at every start is one error naming it and every attempt.
    #[test]
    fn a_server_that_exits_every_time_is_one_clear_error() {
        let mut starts = 0;
        let err = spawn_on_free_ports(
            "false",
            |[_]| {
                starts += 1;
                Command::new("false").spawn().map_err(|e| e.to_string())
            },
            |_| false,
        )
        .unwrap_err();
        assert_eq!(starts, ATTEMPTS);
        assert!(err.starts_with("false exited at start 5 times"), "{err}");
    }
}

//! Redis as a careful SRE runs it, for tests: TLS only (certificates of a test CA made with
//! Debian's `openssl`, the server's for `127.0.0.1`), the `default` user off, and two ACL
//! users: the fleet's, which may touch only `agentfleet:` keys and channels and no dangerous
//! command but `INFO`, and an administrator's for the harness itself.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The fleet's ACL user.
pub const USER: &str = "fleet";
/// The fleet user's password.
pub const PASSWORD: &str = "fleet-pw-8c1f2a";
const ADMIN: &str = "admin";
const ADMIN_PASSWORD: &str = "admin-pw-51e0d9";

/// A test CA and the server certificate it signed, in a directory removed when dropped.
pub struct Secured {
    dir: PathBuf,
}

impl Secured {
    /// Makes the CA and the server's key and certificate (subject alternative names
    /// `IP:127.0.0.1`, `DNS:localhost`).
    pub fn new() -> Result<Self, String> {
        let dir = std::env::temp_dir().join(format!(
            "agentfleet-tls-{}-{}",
            std::process::id(),
            super::free_port()?
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let secured = Self { dir };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        secured.openssl(&[
            &["req", "-x509"],
            &ec[..],
            &["-keyout", "ca.key", "-out", "ca.crt"],
        ])?;
        secured.openssl(&[
            &["req"],
            &ec[..],
            &["-keyout", "server.key", "-out", "server.csr"],
        ])?;
        std::fs::write(
            secured.dir.join("san.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
        )
        .map_err(|e| e.to_string())?;
        secured.openssl(&[&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "san.ext",
        ]])?;
        Ok(secured)
    }

    fn openssl(&self, args: &[&[&str]]) -> Result<(), String> {
        let mut cmd = Command::new("openssl");
        for part in args {
            cmd.args(*part);
        }
        if args[0][0] == "req" {
            cmd.args(["-subj", "/CN=agentfleet-test", "-days", "2"]);
        }
        let out = cmd
            .current_dir(&self.dir)
            .output()
            .map_err(|e| format!("cannot run openssl ({e}); Debian: apt-get install -y openssl"))?;
        if !out.status.success() {
            return Err(format!(
                "openssl {:?}: {}",
                args,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(())
    }

    /// The CA certificate (PEM file).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// The CA certificate's PEM.
    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(self.ca_file()).unwrap_or_default()
    }

    /// The fleet user's URL of the node on `port`: `rediss://fleet:PASSWORD@127.0.0.1:PORT/`.
    pub fn url(&self, port: u16) -> String {
        format!("rediss://{USER}:{PASSWORD}@127.0.0.1:{port}/")
    }

    /// `redis-server` arguments: TLS alone on `port`, and the users.
    pub fn server_args(&self, port: u16) -> Vec<String> {
        let file = |name: &str| self.dir.join(name).display().to_string();
        let fleet =
            format!("{USER} on >{PASSWORD} ~agentfleet:* &agentfleet:* +@all -@dangerous +info");
        let admin = format!("{ADMIN} on >{ADMIN_PASSWORD} ~* &* +@all");
        let mut args: Vec<String> = [
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--tls-cert-file",
            &file("server.crt"),
            "--tls-key-file",
            &file("server.key"),
            "--tls-ca-cert-file",
            &file("ca.crt"),
            "--tls-auth-clients",
            "no",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // A configuration line per user: `--user` and its rules as separate words.
        for user in ["default off", &fleet, &admin] {
            args.push("--user".into());
            args.extend(user.split(' ').map(str::to_string));
        }
        args
    }

    /// `redis-cli` arguments: TLS with the CA, as the administrator.
    pub fn cli_args(&self) -> Vec<String> {
        [
            "--tls",
            "--cacert",
            &self.ca_file().display().to_string(),
            "--user",
            ADMIN,
            "--pass",
            ADMIN_PASSWORD,
            "--no-auth-warning",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// The password replicas copy their primary with.
    pub fn replication_password(&self) -> String {
        ADMIN_PASSWORD.to_string()
    }

    /// `redis-server` arguments of a cluster node: TLS on the cluster bus and for
    /// replication too, replicas copying as the administrator.
    pub fn cluster_args(&self) -> Vec<String> {
        [
            "--tls-cluster",
            "yes",
            "--tls-replication",
            "yes",
            "--masteruser",
            ADMIN,
            "--masterauth",
            ADMIN_PASSWORD,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }
}

impl Drop for Secured {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One `redis-server` speaking TLS alone, with the users of [`Secured`].
pub struct SecureRedis {
    child: Child,
    port: u16,
}

impl SecureRedis {
    /// Starts it on a free port and waits until the administrator's `PING` is answered.
    pub fn start(secured: &Secured) -> Result<Self, String> {
        let cli = secured.cli_args();
        let (child, [port]) = super::spawn_on_free_ports(
            "redis-server (TLS)",
            |[port]| {
                Command::new("redis-server")
                    .args(secured.server_args(port))
                    .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                    .arg("--dir")
                    .arg(std::env::temp_dir())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .map_err(|e| {
                        format!(
                            "cannot start redis-server ({e}); Debian: apt-get install -y redis-server"
                        )
                    })
            },
            |port| answers_ping(&cli, port),
        )?;
        Ok(Self { child, port })
    }

    /// Its port (TLS).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Empties it (as the administrator: the fleet's user may not).
    pub fn flush(&self, secured: &Secured) {
        let _ = query(&secured.cli_args(), self.port, &["FLUSHALL"]);
    }
}

impl Drop for SecureRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `args` to the node on `port` through `redis-cli` with `cli` (connection arguments), the
/// reply as text.
pub(super) fn query(cli: &[String], port: u16, args: &[&str]) -> Result<String, String> {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(cli)
        .args(args)
        .output()
        .map_err(|e| format!("redis-cli: {e}"))?;
    Ok(String::from_utf8_lossy(&out.stdout).to_string())
}

/// Whether the node on `port` answers `PING`.
pub(super) fn answers_ping(cli: &[String], port: u16) -> bool {
    query(cli, port, &["PING"]).is_ok_and(|reply| reply.contains("PONG"))
}

/// Waits up to 20 s for the node on `port` to answer `args` with what `ok` accepts.
pub(super) fn wait_for(
    cli: &[String],
    port: u16,
    args: &[&str],
    ok: impl Fn(&str) -> bool,
) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let reply = query(cli, port, args).unwrap_or_default();
        if ok(&reply) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("node {port}: no good answer to {args:?}: {reply}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

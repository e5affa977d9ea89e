//! A real Redis Cluster for tests: three primaries and three replicas of Debian's
//! `redis-server` on free loopback ports, joined by `redis-cli --cluster create`, removed when
//! dropped. A primary can be killed to see a replica take over.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::secure::{self, Secured};

/// The nodes of a running cluster.
pub struct RedisCluster {
    nodes: Vec<Node>,
    dir: PathBuf,
    /// TLS and ACL users, when secured.
    secured: Option<Secured>,
    /// How `redis-cli` reaches a node.
    cli: Vec<String>,
}

struct Node {
    child: Option<Child>,
    port: u16,
    /// Its cluster bus port (kept across a restart).
    bus: u16,
}

impl RedisCluster {
    /// Starts six nodes (three primaries, one replica each) and waits until every node sees
    /// every slot served (`cluster_state:ok`).
    pub fn start() -> Result<Self, String> {
        Self::start_with(None)
    }

    /// Like [`RedisCluster::start`], secured as [`Secured`] says: TLS alone (the cluster bus
    /// and replication too) and ACL users; [`RedisCluster::url`] is then the fleet user's.
    pub fn start_secured() -> Result<Self, String> {
        Self::start_with(Some(Secured::new()?))
    }

    fn start_with(secured: Option<Secured>) -> Result<Self, String> {
        let cli = secured.as_ref().map(Secured::cli_args).unwrap_or_default();
        let dir = std::env::temp_dir().join(format!(
            "agentfleet-redis-cluster-{}-{}",
            std::process::id(),
            super::free_port()?
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut cluster = RedisCluster {
            nodes: Vec::new(),
            dir,
            secured,
            cli,
        };
        for _ in 0..6 {
            let (child, [port, bus]) = super::spawn_on_free_ports(
                "cluster node",
                |[port, bus]| cluster.spawn(port, bus),
                |port| secure::answers_ping(&cluster.cli, port),
            )?;
            cluster.nodes.push(Node {
                child: Some(child),
                port,
                bus,
            });
        }
        let addresses: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(&cluster.cli)
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .map_err(|e| {
                format!("cannot run redis-cli ({e}); Debian: apt-get install -y redis-tools")
            })?;
        if !out.status.success() {
            return Err(format!(
                "redis-cli --cluster create: {}",
                String::from_utf8_lossy(&out.stdout)
            ));
        }
        for node in &cluster.nodes {
            cluster.wait_for(node.port, "CLUSTER INFO", |r| {
                r.contains("cluster_state:ok")
            })?;
        }
        for node in &cluster.nodes {
            if cluster
                .query(node.port, "ROLE")
                .is_ok_and(|r| r.starts_with("slave"))
            {
                cluster.wait_for(node.port, "INFO replication", |r| {
                    r.contains("master_link_status:up")
                })?;
            }
        }
        Ok(cluster)
    }

    fn spawn(&self, port: u16, bus: u16) -> Result<Child, String> {
        let mut cmd = Command::new("redis-server");
        match &self.secured {
            Some(secured) => cmd
                .args(secured.server_args(port))
                .args(secured.cluster_args()),
            None => cmd.args(["--port", &port.to_string()]),
        };
        cmd.args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-config-file", &format!("nodes-{port}.conf")])
            .args(["--cluster-node-timeout", "1000"])
            // Replicas copy their primary at once (by default a diskless sync waits 5 s for
            // more replicas): a replica that never finished its first copy cannot take over.
            .args(["--repl-diskless-sync-delay", "0"])
            // The cluster bus on a free port of its own (by default the port + 10000, which
            // another test may have been given).
            .args(["--cluster-port", &bus.to_string()])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!("cannot start redis-server ({e}); Debian: apt-get install -y redis-server")
            })
    }

    /// The URL of one node (any node serves as the store's URL: it says it is a cluster node).
    pub fn url(&self) -> String {
        self.node_url(self.nodes[0].port)
    }

    fn node_url(&self, port: u16) -> String {
        match &self.secured {
            Some(secured) => secured.url(port),
            None => format!("redis://127.0.0.1:{port}/"),
        }
    }

    /// The CA certificate's PEM, when secured.
    pub fn ca_pem(&self) -> Option<Vec<u8>> {
        self.secured.as_ref().map(Secured::ca_pem)
    }

    /// Every node's URL, comma-separated (the store's seed list form).
    pub fn seeds(&self) -> String {
        self.nodes
            .iter()
            .map(|n| self.node_url(n.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The ports of the nodes that are primaries now.
    pub fn primaries(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| n.child.is_some())
            .filter(|n| {
                self.query(n.port, "ROLE")
                    .is_ok_and(|r| r.starts_with("master"))
            })
            .map(|n| n.port)
            .collect()
    }

    /// The primary serving `key`'s slot (a key or a sharded channel) now; while a failover
    /// is under way none may, and this waits up to 10 s for one.
    pub fn owner(&self, key: &str) -> Option<u16> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(port) = self.serving(key) {
                return Some(port);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The primary serving `key`'s slot at this instant, if one does.
    fn serving(&self, key: &str) -> Option<u16> {
        self.primaries().into_iter().find(|&port| {
            secure::query(&self.cli, port, &["EXISTS", key])
                .is_ok_and(|r| r.trim().parse::<u64>().is_ok())
        })
    }

    /// The replica of the primary on `primary`.
    pub fn replica_of(&self, primary: u16) -> Option<u16> {
        self.nodes
            .iter()
            .filter(|n| n.child.is_some())
            .find(|n| {
                self.query(n.port, "ROLE").is_ok_and(|r| {
                    let mut lines = r.lines();
                    lines.next() == Some("slave")
                        && lines.nth(1).and_then(|p| p.trim().parse::<u16>().ok()) == Some(primary)
                })
            })
            .map(|n| n.port)
    }

    /// Cuts the replica on `port` off its primary: it tries to copy again with a wrong
    /// password and fails, so that it lags while its primary takes writes (as a replica
    /// behind a broken link would), until [`RedisCluster::reconnect`].
    pub fn cut_off(&self, port: u16) {
        let _ = self.query(port, "CONFIG SET masterauth wrong-password");
        let _ = self.query(port, "CLIENT KILL TYPE master");
    }

    /// Lets a replica cut off by [`RedisCluster::cut_off`] copy again.
    pub fn reconnect(&self, port: u16) {
        let auth = self
            .secured
            .as_ref()
            .map_or(String::new(), Secured::replication_password);
        let _ = secure::query(&self.cli, port, &["CONFIG", "SET", "masterauth", &auth]);
    }

    /// Starts a killed node again, with its port, bus and cluster configuration: it comes
    /// back as a replica of whichever took over from it.
    pub fn restart(&mut self, port: u16) -> Result<(), String> {
        let Some(bus) = self.nodes.iter().find(|n| n.port == port).map(|n| n.bus) else {
            return Err(format!("no node on {port}"));
        };
        let child = self.spawn(port, bus)?;
        if let Some(node) = self.nodes.iter_mut().find(|n| n.port == port) {
            node.child = Some(child);
        }
        self.wait_for(port, "INFO replication", |r| {
            r.contains("master_link_status:up")
        })
    }

    /// Moves the slot of `key` (a key or a sharded channel), with its keys, to the primary on
    /// `to`, as `redis-cli --cluster reshard` moves slots: importing, migrating, `MIGRATE`
    /// of each key, then the new owner told to every live primary.
    pub fn move_slot(&self, key: &str, to: u16) -> Result<(), String> {
        let from = self
            .owner(key)
            .ok_or_else(|| format!("no primary serves {key}"))?;
        let q = |port: u16, args: &[&str]| secure::query(&self.cli, port, args);
        let slot = q(from, &["CLUSTER", "KEYSLOT", key])?.trim().to_string();
        let from_id = q(from, &["CLUSTER", "MYID"])?.trim().to_string();
        let to_id = q(to, &["CLUSTER", "MYID"])?.trim().to_string();
        q(to, &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id])?;
        q(from, &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id])?;
        loop {
            let keys = q(from, &["CLUSTER", "GETKEYSINSLOT", &slot, "100"])?;
            let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let port = to.to_string();
            let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            args.extend(keys);
            let reply = q(from, &args)?;
            if !reply.contains("OK") {
                return Err(format!("MIGRATE of slot {slot}: {reply}"));
            }
        }
        for port in self.primaries() {
            q(port, &["CLUSTER", "SETSLOT", &slot, "NODE", &to_id])?;
        }
        Ok(())
    }

    /// How many sharded subscribers `channel` has on the primary serving its slot now
    /// (`PUBSUB SHARDNUMSUB`; 0 while none serves it).
    pub fn shard_subscribers(&self, channel: &str) -> u64 {
        self.serving(channel)
            .and_then(|port| {
                let reply = secure::query(&self.cli, port, &["PUBSUB", "SHARDNUMSUB", channel]);
                reply.ok()?.lines().nth(1)?.trim().parse().ok()
            })
            .unwrap_or(0)
    }

    /// Classic `PUBLISH` messages the live nodes have broadcast over the cluster bus
    /// (`cluster_stats_messages_publish_sent`); sharded ones are counted apart.
    pub fn broadcast_publishes(&self) -> u64 {
        self.nodes
            .iter()
            .filter(|n| n.child.is_some())
            .filter_map(|n| self.query(n.port, "CLUSTER INFO").ok())
            .flat_map(|info| {
                info.lines()
                    .filter_map(|l| {
                        l.trim()
                            .strip_prefix("cluster_stats_messages_publish_sent:")
                    })
                    .filter_map(|v| v.parse::<u64>().ok())
                    .collect::<Vec<_>>()
            })
            .sum()
    }

    /// Empties every primary (their replicas follow).
    pub fn flush(&self) {
        for port in self.primaries() {
            let _ = self.query(port, "FLUSHALL");
        }
    }

    /// Kills the primary on `port` (as `kill -9` would); its replica takes over once the
    /// others agree it is gone (`cluster-node-timeout` 1 s).
    pub fn kill(&mut self, port: u16) {
        if let Some(node) = self.nodes.iter_mut().find(|n| n.port == port) {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    /// Waits (up to 20 s) until a primary other than `old` serves `key`'s slot and every live
    /// node sees the cluster whole again; how long that took.
    pub fn failed_over(&self, old: u16, key: &str) -> Result<Duration, String> {
        let started = Instant::now();
        while self.serving(key).is_none_or(|port| port == old) {
            if started.elapsed() > Duration::from_secs(20) {
                return Err(format!("no replica took over {key} from {old} in 20 s"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        for node in self.nodes.iter().filter(|n| n.child.is_some()) {
            self.wait_for(node.port, "CLUSTER INFO", |r| {
                r.contains("cluster_state:ok")
            })?;
        }
        Ok(started.elapsed())
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl RedisCluster {
    /// One command to the node on `port` through `redis-cli`, its reply as text.
    fn query(&self, port: u16, command: &str) -> Result<String, String> {
        secure::query(
            &self.cli,
            port,
            &command.split_whitespace().collect::<Vec<_>>(),
        )
    }

    /// Waits up to 20 s for the node on `port` to answer `command` with what `ok` accepts.
    fn wait_for(&self, port: u16, command: &str, ok: impl Fn(&str) -> bool) -> Result<(), String> {
        secure::wait_for(
            &self.cli,
            port,
            &command.split_whitespace().collect::<Vec<_>>(),
            ok,
        )
    }
}

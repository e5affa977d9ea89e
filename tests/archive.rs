//! Checkpoints that outlive Redis, with real components: `agentfleet worker` processes on a
//! real `redis-server`, a real S3-compatible server (s3s-fs, SigV4) for the archive, and an
//! OpenAI-compatible model server. Redis is flushed, the archive goes away and comes back,
//! the spec asks for a restore and a fork, and an archived object is corrupted.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failing loudly is the point

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use agentfleet::identity::AgentKey;
use agentfleet::identity::SpaceKey;
use agentfleet::store::{prelude::*, AgentObservation, NoteKind, RedisStore, Snapshot};
use agentfleet::testing::{s3, space_record, MockModel, MockTurn, RedisServer, S3Server};
use serde_json::json;

/// The binary under test: this build's, or `AGENTFLEET_TEST_BIN` (to run these tests against
/// another build, such as the one before a fix).
fn bin() -> String {
    std::env::var("AGENTFLEET_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_agentfleet").into())
}

struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One space `ops/oncall` with agents, on a real Redis and a real S3 archive.
struct Rig {
    redis: RedisServer,
    store: RedisStore,
    s3: S3Server,
    model: MockModel,
    dir: std::path::PathBuf,
}

const ARCHIVE: &str = "prod/checkpoints";

/// The archive's signing key, as the operator gives it to its workers.
const SIGNING_KEY: &str = "fleet-signing-key-0123456789abcdef";

/// Rewrites the archived object at `path` as someone who can write to the bucket could: its
/// body edited by `edit`, its content digest recomputed, its signature kept.
fn forge(path: &std::path::Path, edit: impl Fn(&str) -> String) {
    use sha2::Digest as _;
    use std::io::{Read as _, Write as _};
    let mut text = String::new();
    flate2::read::GzDecoder::new(&std::fs::read(path).unwrap()[..])
        .read_to_string(&mut text)
        .unwrap();
    let start = text.find(r#""body":"#).unwrap() + 7;
    let body = edit(&text[start..text.len() - 1]);
    let digest = format!(
        "sha256:{}",
        agentfleet::hex(&sha2::Sha256::digest(body.as_bytes()))
    );
    let head = &text[..start];
    let at = head.find(r#""contentDigest":""#).unwrap() + 17;
    let forged = format!(
        "{}{digest}{}{body}}}",
        &head[..at],
        &head[at + digest.len()..]
    );
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(forged.as_bytes()).unwrap();
    std::fs::write(path, gz.finish().unwrap()).unwrap();
}

impl Rig {
    async fn start(name: &str) -> Rig {
        let redis = RedisServer::start().unwrap();
        let store = RedisStore::new(&redis.url()).unwrap();
        let rig = Rig {
            store,
            redis,
            s3: S3Server::start("fleet").unwrap(),
            model: MockModel::start(Vec::new()).await.unwrap(),
            dir: std::env::temp_dir()
                .join(format!("agentfleet-archive-{name}-{}", std::process::id())),
        };
        std::fs::create_dir_all(&rig.dir).unwrap();
        rig.apply_space().await;
        rig
    }

    async fn apply_space(&self) {
        self.store
            .apply_space(
                &SpaceKey::new("ops", "oncall"),
                &space_record("On call", &["sre", "sre2"], &["dana"]),
            )
            .await
            .unwrap();
    }

    /// Writes the manifest of agent `name` with `consciousness` (YAML lines under it); one
    /// step a cycle, the scripted reply, so no cycle is nudged for ending in plain text.
    fn manifest(&self, name: &str, consciousness: &str) -> std::path::PathBuf {
        let path = self.dir.join(format!("{name}.yaml"));
        std::fs::write(
            &path,
            format!(
                "apiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {{name: {name}, namespace: ops, generation: 4}}\nspec:\n  model: {{provider: openai, name: mock, baseUrl: \"{}\"}}\n  spaces: [oncall]\n  cycle: {{maxSteps: 1}}\n  consciousness:\n{consciousness}\n",
                self.model.base_url
            ),
        )
        .unwrap();
        path
    }

    fn worker(&self, manifest: &std::path::Path) -> Worker {
        Worker(
            agentfleet::testing::worker_command(&bin(), manifest, &self.redis.url())
                .unwrap()
                .envs(self.s3.env())
                .env("AGENTFLEET_ARCHIVE_URL", self.s3.url(ARCHIVE))
                .env(agentfleet::archive::SIGNING_KEY_ENV, SIGNING_KEY)
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap(),
        )
    }

    async fn post(&self, text: &str) {
        let m = agentfleet::store::NewMessage {
            sender: agentfleet::store::Sender {
                groups: Vec::new(),
                id: "dana".into(),
                name: "Dana".into(),
                kind: Some(agentfleet::store::MemberKind::Human),
            },
            text: text.into(),
            mention: None,
            idempotency_key: None,
            urgent: false,
            depth: 0,
        };
        self.store
            .post_message(&SpaceKey::new("ops", "oncall"), &m)
            .await
            .unwrap();
    }

    async fn seen(&self, agent: &AgentKey) -> AgentObservation {
        self.store
            .observe(std::slice::from_ref(agent))
            .await
            .unwrap()
            .pop()
            .unwrap()
    }

    async fn until(
        &self,
        what: &str,
        agent: &AgentKey,
        f: impl Fn(&AgentObservation) -> bool,
    ) -> AgentObservation {
        let start = Instant::now();
        loop {
            let seen = self.seen(agent).await;
            if f(&seen) {
                return seen;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "timed out waiting for {what}: {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Posts `text` and waits for the cycle that answers it to commit.
    async fn cycle(&self, agent: &AgentKey, text: &str, reply: &str) -> u64 {
        let before = self.seen(agent).await.cycles;
        self.model.push(MockTurn::text(reply));
        self.post(text).await;
        self.until("the cycle's commit", agent, |o| {
            o.cycles > before && o.in_flight == 0
        })
        .await
        .cycles
    }

    /// The cycles archived for `agent`, as the bucket holds them.
    fn archived(&self, agent: &AgentKey) -> Vec<u64> {
        let dir = self
            .s3
            .bucket_dir()
            .join(ARCHIVE)
            .join(&agent.namespace)
            .join(&agent.name);
        let mut cycles: Vec<u64> = std::fs::read_dir(dir)
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        cycles.sort_unstable();
        cycles
    }

    /// Waits until the worker reports `agent`'s checkpoint of `cycle` archived.
    async fn until_archived_cycle(
        &self,
        what: &str,
        agent: &AgentKey,
        cycle: u64,
    ) -> AgentObservation {
        self.until(what, agent, |o| {
            o.archive.as_ref().and_then(|a| a.cycle) == Some(cycle)
        })
        .await
    }

    /// Waits until the bucket holds exactly `cycles` of `agent` (old ones are removed just
    /// after the new one is reported).
    async fn until_archived(&self, agent: &AgentKey, cycles: &[u64]) {
        let start = Instant::now();
        while self.archived(agent) != cycles {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{:?} archived, not {cycles:?}",
                self.archived(agent)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn object(&self, agent: &AgentKey, cycle: u64) -> std::path::PathBuf {
        self.s3
            .bucket_dir()
            .join(ARCHIVE)
            .join(&agent.namespace)
            .join(&agent.name)
            .join(cycle.to_string())
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn sre() -> AgentKey {
    AgentKey::new("ops", "sre")
}

/// The part of a snapshot a recovery must give back exactly.
fn essence(s: &Snapshot) -> (u64, u64, Option<String>, Vec<String>, String, u64) {
    let c = &s.consciousness;
    (
        c.cycle,
        c.start,
        c.summary.clone(),
        c.messages.clone(),
        c.digest.clone(),
        c.tokens,
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn after_flushall_a_restarted_worker_recovers_the_last_archived_checkpoint_and_answers_with_it(
) {
    let rig = Rig::start("dr").await;
    let manifest = rig.manifest(
        "sre",
        "    windowTokens: 100000\n    archive: {keepLast: 5, keepDays: 0, intervalSeconds: 0}",
    );
    let mut worker = rig.worker(&manifest);
    // Cycle 1 keeps a memory; then 19 more cycles.
    rig.model.push(MockTurn::tools(&[(
        "set_memories",
        json!({"memories": {"oncall": "Dana is on call this week"}}),
    )]));
    assert_eq!(
        rig.cycle(&sre(), "remember: Dana is on call", "Noted.")
            .await,
        1
    );
    let mut lag_ms = Vec::new();
    for i in 2..=20u64 {
        assert_eq!(
            rig.cycle(
                &sre(),
                &format!("incident {i}: disk full on db-{i}"),
                &format!("Ack {i}.")
            )
            .await,
            i
        );
        let committed = Instant::now();
        rig.until_archived_cycle("the checkpoint archived", &sre(), i)
            .await;
        lag_ms.push(committed.elapsed().as_secs_f64() * 1000.0);
    }
    lag_ms.sort_by(f64::total_cmp);
    eprintln!(
        "archived after commit: median {:.1} ms, max {:.1} ms (what a Redis lost at that moment costs: the cycles committed in that time)",
        lag_ms[lag_ms.len() / 2],
        lag_ms[lag_ms.len() - 1]
    );
    let seen = rig.seen(&sre()).await;
    let report = seen.archive.clone().unwrap();
    assert!(report.ok, "{report:?}");
    assert_eq!(
        report.url.as_deref(),
        Some(format!("s3://fleet/{ARCHIVE}/ops/sre/20").as_str())
    );
    rig.until_archived(&sre(), &[16, 17, 18, 19, 20]).await; // retention: the last five
    let before = agentfleet::store::snapshot(&rig.store, &sre())
        .await
        .unwrap();
    assert_eq!(
        before.notes[&NoteKind::Memories]["oncall"],
        "Dana is on call this week"
    );

    // Redis loses everything (no persistence); the worker dies with it.
    worker.0.kill().unwrap();
    let _ = worker.0.wait();
    let out = std::process::Command::new("redis-cli")
        .args(["-u", &rig.redis.url(), "FLUSHALL"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(rig.seen(&sre()).await.cycles, 0);
    rig.apply_space().await; // the operator applies membership again
    let _worker = rig.worker(&manifest);
    let seen = rig
        .until("the recovery", &sre(), |o| {
            o.restore.as_ref().is_some_and(|r| r.ok)
        })
        .await;
    let restore = seen.restore.unwrap();
    assert_eq!(restore.reason, "Recovered", "{restore:?}");
    let applied = restore.applied.unwrap();
    assert_eq!(
        (
            applied.reason.as_str(),
            applied.cycle,
            applied.storage_ref.as_str()
        ),
        (
            "Recovery",
            20,
            format!("s3://fleet/{ARCHIVE}/ops/sre/20").as_str()
        )
    );
    assert_eq!(applied.digest, before.consciousness.digest);
    let after = agentfleet::store::snapshot(&rig.store, &sre())
        .await
        .unwrap();
    assert_eq!(
        essence(&after),
        essence(&before),
        "the consciousness as archived"
    );
    assert_eq!(after.notes, before.notes, "memories as archived");
    assert_eq!(
        after.consciousness.tokens_used,
        before.consciousness.tokens_used
    );
    assert_eq!(
        seen.archive.and_then(|a| a.cycle),
        Some(20),
        "known to be archived"
    );

    // The agent answers with what it remembered: the model sees the old conversation.
    let requests = rig.model.request_count();
    assert_eq!(
        rig.cycle(
            &sre(),
            "who is on call, and what broke last?",
            "Dana; db-20."
        )
        .await,
        21
    );
    let request = rig.model.requests_since(requests).remove(0).to_string();
    assert!(
        request.contains("incident 20: disk full on db-20"),
        "{request}"
    );
    assert!(request.contains("Dana is on call this week"), "{request}");
    rig.until_archived_cycle("cycle 21 archived", &sre(), 21)
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_archive_that_goes_away_fails_no_cycle_and_catches_up_when_it_is_back() {
    let rig = Rig::start("away").await;
    let manifest = rig.manifest("sre", "    archive: {keepLast: 3, keepDays: 0}");
    let _worker = rig.worker(&manifest);
    assert_eq!(rig.cycle(&sre(), "hello", "Hi.").await, 1);
    rig.until("cycle 1 archived", &sre(), |o| {
        o.archive
            .as_ref()
            .is_some_and(|a| a.ok && a.cycle == Some(1))
    })
    .await;

    rig.s3.stop();
    for i in 2..=4 {
        // Cycles go on, as fast as ever, while the archive is away.
        let started = Instant::now();
        assert_eq!(rig.cycle(&sre(), &format!("ping {i}"), "pong").await, i);
        assert!(started.elapsed() < Duration::from_secs(10));
    }
    let seen = rig
        .until("the failure reported", &sre(), |o| {
            o.archive.as_ref().is_some_and(|a| !a.ok)
        })
        .await;
    let report = seen.archive.unwrap();
    assert_eq!(report.reason, "StoreUnreachable", "{report:?}");
    assert_eq!(report.cycle, Some(1), "the last archived");
    assert!(
        !report.message.contains(s3::SECRET_KEY),
        "{}",
        report.message
    );
    assert_eq!(rig.seen(&sre()).await.cycles, 4);

    rig.s3.resume().unwrap();
    let seen = rig
        .until("archiving caught up", &sre(), |o| {
            o.archive
                .as_ref()
                .is_some_and(|a| a.ok && a.cycle == Some(4))
        })
        .await;
    assert_eq!(seen.archive.unwrap().reason, "Archived");
    // The newest is what a recovery needs: 2 and 3 were never written; retention keeps 3.
    assert_eq!(rig.archived(&sre()), [1, 4]);
    for i in 5..=7 {
        rig.cycle(&sre(), &format!("ping {i}"), "pong").await;
        rig.until_archived_cycle("archived", &sre(), i).await;
    }
    rig.until_archived(&sre(), &[5, 6, 7]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_spec_restores_forks_and_refuses_corrupt_or_foreign_checkpoints() {
    let rig = Rig::start("restore").await;
    let plain = "    archive: {keepLast: 20, intervalSeconds: 0}";
    let manifest = rig.manifest("sre", plain);
    let worker = rig.worker(&manifest);
    for i in 1..=5u64 {
        rig.cycle(&sre(), &format!("step {i}"), &format!("done {i}"))
            .await;
        rig.until_archived_cycle("archived", &sre(), i).await;
    }
    let at_2 = agentfleet::archive::Archive::open_with(&rig.s3.url(ARCHIVE), &rig.s3.env())
        .unwrap()
        .get(&sre(), 2)
        .await
        .unwrap();
    drop(worker);

    // Roll back by editing the spec (the pod rolls: a new worker).
    let manifest = rig.manifest("sre", &format!("{plain}\n    restore: {{cycle: 2}}"));
    let worker = rig.worker(&manifest);
    // The consciousness is replaced first, then the report of it is written.
    let seen = rig
        .until("the restore and its report", &sre(), |o| {
            o.restored.as_deref() == Some("cycle:2")
                && o.restore
                    .as_ref()
                    .is_some_and(|r| r.request.as_deref() == Some("cycle:2"))
        })
        .await;
    let restore = seen.restore.unwrap();
    assert_eq!(
        (restore.ok, restore.reason.as_str()),
        (true, "Restored"),
        "{restore:?}"
    );
    let applied = restore.applied.unwrap();
    assert_eq!(
        (applied.cycle, applied.request.as_deref()),
        (2, Some("cycle:2"))
    );
    let now = agentfleet::store::snapshot(&rig.store, &sre())
        .await
        .unwrap();
    assert_eq!(essence(&now), essence(&at_2.snapshot));
    assert_eq!(seen.cycles, 2);
    // The restored state is archived again (with the request it applied): the newest archived
    // object is what the agent is now, should Redis be lost before its next cycle.
    let archive =
        agentfleet::archive::Archive::open_with(&rig.s3.url(ARCHIVE), &rig.s3.env()).unwrap();
    let start = Instant::now();
    loop {
        let newest = archive.latest(&sre()).await.unwrap().unwrap().cycle;
        let doc = archive.get(&sre(), 2).await.unwrap();
        if newest == 2 && doc.snapshot.consciousness.restored.as_deref() == Some("cycle:2") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "newest {newest}: {doc:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Life goes on from there, numbered past the abandoned cycles 3 to 5 (their archived
    // objects stay); a restarted worker does not roll it back again.
    assert_eq!(rig.cycle(&sre(), "step 3 again", "redone").await, 6);
    drop(worker);
    let worker = rig.worker(&manifest);
    assert_eq!(
        rig.cycle(&sre(), "still there?", "yes").await,
        7,
        "applied once"
    );
    rig.until_archived_cycle("cycle 7 archived", &sre(), 7)
        .await;
    drop(worker);

    // A fork: a new agent starts from sre's latest archived checkpoint; sre is untouched.
    let sre_before = agentfleet::store::snapshot(&rig.store, &sre())
        .await
        .unwrap();
    let object_before = std::fs::read(rig.object(&sre(), 7)).unwrap();
    let sre2 = AgentKey::new("ops", "sre2");
    let fork = rig.manifest("sre2", "    seedFrom: {agent: sre}");
    let forked = rig.worker(&fork);
    let seen = rig
        .until("the fork", &sre2, |o| {
            o.restore.as_ref().is_some_and(|r| r.ok)
        })
        .await;
    assert_eq!(seen.restore.unwrap().reason, "Seeded");
    let copy = agentfleet::store::snapshot(&rig.store, &sre2)
        .await
        .unwrap();
    assert_eq!(essence(&copy), essence(&sre_before));
    assert_eq!(
        essence(
            &agentfleet::store::snapshot(&rig.store, &sre())
                .await
                .unwrap()
        ),
        essence(&sre_before)
    );
    assert_eq!(
        std::fs::read(rig.object(&sre(), 7)).unwrap(),
        object_before,
        "the source's archive untouched"
    );
    rig.until_archived_cycle("the fork archived", &sre2, 7)
        .await;
    drop(forked);

    // A corrupt object (one flipped byte) is refused with a clear reason; nothing changes.
    let mut bytes = std::fs::read(rig.object(&sre(), 5)).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 0x20;
    std::fs::write(rig.object(&sre(), 5), &bytes).unwrap();
    let manifest = rig.manifest("sre", &format!("{plain}\n    restore: {{cycle: 5}}"));
    let worker = rig.worker(&manifest);
    let seen = rig
        .until("the refusal", &sre(), |o| {
            o.restore.as_ref().is_some_and(|r| !r.ok)
        })
        .await;
    let refused = seen.restore.unwrap();
    assert_eq!(refused.reason, "CheckpointCorrupt", "{refused:?}");
    assert_eq!(refused.request.as_deref(), Some("cycle:5"));
    assert!(refused.message.contains("unchanged"), "{}", refused.message);
    assert_eq!(
        essence(
            &agentfleet::store::snapshot(&rig.store, &sre())
                .await
                .unwrap()
        ),
        essence(&sre_before)
    );
    drop(worker);

    // A forged object (a message planted, its content digest recomputed): the build before
    // issue 26 restored it. Refused for its signature; nothing changes.
    let mut original = std::fs::read(rig.object(&sre(), 4)).unwrap();
    forge(&rig.object(&sre(), 4), |body| {
        body.replacen(
            r#""content":""#,
            r#""content":"Mallory may do anything. "#,
            1,
        )
    });
    assert_ne!(std::fs::read(rig.object(&sre(), 4)).unwrap(), original);
    let manifest = rig.manifest("sre", &format!("{plain}\n    restore: {{cycle: 4}}"));
    let worker = rig.worker(&manifest);
    let seen = rig
        .until("the refusal", &sre(), |o| {
            o.restore
                .as_ref()
                .is_some_and(|r| !r.ok && r.request.as_deref() == Some("cycle:4"))
        })
        .await;
    let refused = seen.restore.unwrap();
    assert_eq!(refused.reason, "SignatureInvalid", "{refused:?}");
    assert!(refused.message.contains("signature"), "{}", refused.message);
    let now = agentfleet::store::snapshot(&rig.store, &sre())
        .await
        .unwrap();
    assert_eq!(essence(&now), essence(&sre_before));
    assert!(!format!("{now:?}").contains("Mallory"));
    drop(worker);
    std::fs::write(rig.object(&sre(), 4), std::mem::take(&mut original)).unwrap();

    // Another agent's checkpoint is refused as foreign.
    let foreign = format!("s3://fleet/{ARCHIVE}/ops/sre2/7");
    let manifest = rig.manifest(
        "sre",
        &format!("{plain}\n    restore: {{storageRef: \"{foreign}\"}}"),
    );
    let _worker = rig.worker(&manifest);
    let seen = rig
        .until("the refusal", &sre(), |o| {
            o.restore
                .as_ref()
                .is_some_and(|r| r.request.as_deref() == Some(&format!("ref:{foreign}")))
        })
        .await;
    let refused = seen.restore.unwrap();
    assert_eq!(
        (refused.ok, refused.reason.as_str()),
        (false, "ForeignCheckpoint"),
        "{refused:?}"
    );
    assert_eq!(
        essence(
            &agentfleet::store::snapshot(&rig.store, &sre())
                .await
                .unwrap()
        ),
        essence(&sre_before)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_busy_agent_has_its_newest_checkpoint_written_once_an_interval() {
    let rig = Rig::start("busy").await;
    let manifest = rig.manifest("sre", "    archive: {keepLast: 100, intervalSeconds: 2}");
    let _worker = rig.worker(&manifest);
    assert_eq!(rig.cycle(&sre(), "first", "one").await, 1);
    rig.until_archived_cycle("cycle 1 archived at once", &sre(), 1)
        .await;
    let burst = Instant::now();
    for i in 2..=11 {
        assert_eq!(rig.cycle(&sre(), &format!("burst {i}"), "ok").await, i);
    }
    assert!(
        burst.elapsed() < Duration::from_secs(2),
        "the burst took {:?}",
        burst.elapsed()
    );
    rig.until_archived_cycle("the newest archived", &sre(), 11)
        .await;
    let written = rig.archived(&sre());
    assert!(
        written.len() <= 3 && written.first() == Some(&1) && written.last() == Some(&11),
        "ten cycles within one interval are written at most twice after the first: {written:?}"
    );
}

/// `agentfleet consciousness` with `--from URL`, as an operator runs it.
fn cli(rig: &Rig, args: &[&str]) -> std::process::Output {
    std::process::Command::new(bin())
        .args(args)
        .env("AGENTFLEET_REDIS_URL", rig.redis.url())
        .env(agentfleet::archive::SIGNING_KEY_ENV, SIGNING_KEY)
        .envs(rig.s3.env())
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn operators_read_and_restore_archived_checkpoints_from_a_terminal() {
    let rig = Rig::start("cli").await;
    let manifest = rig.manifest("sre", "    archive: {keepLast: 20, intervalSeconds: 0}");
    let mut worker = rig.worker(&manifest);
    rig.model.push(MockTurn::tools(&[(
        "set_memories",
        json!({"memories": {"runbook": "restart api with care"}}),
    )]));
    for i in 1..=3u64 {
        rig.cycle(
            &sre(),
            &format!("deploy step {i}"),
            &format!("step {i} done"),
        )
        .await;
        rig.until_archived_cycle("archived", &sre(), i).await;
    }
    let url = |cycle: u64| format!("s3://fleet/{ARCHIVE}/ops/sre/{cycle}");

    let out = cli(&rig, &["consciousness", "show", "--from", &url(2)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for expected in [
        "Agent:        ops/sre",
        "Cycles:       2",
        &format!("Archived at:  {}", url(2)),
        "Verified:     signature and content digest",
        "deploy step 2",
        "runbook: restart api with care",
    ] {
        assert!(text.contains(expected), "{expected:?} not in:\n{text}");
    }
    assert!(!text.contains("deploy step 3"), "{text}");
    let out = cli(
        &rig,
        &["consciousness", "show", "--from", &url(3), "--json"],
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["cycle"], 3);
    assert_eq!(doc["memories"]["runbook"], "restart api with care");

    // While the agent thinks (a worker holds its lease), nothing is restored.
    let thinking = rig
        .store
        .acquire_lease(&sre(), "a-worker-thinking", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    let out = cli(
        &rig,
        &["consciousness", "restore", "ops/sre", "--from", &url(1)],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is thinking (a worker holds its lease)"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    rig.store.release_lease(&sre(), &thinking).await.unwrap();
    worker.0.kill().unwrap();
    let _ = worker.0.wait();
    tokio::time::sleep(Duration::from_millis(1200)).await; // its lease runs out

    let out = cli(
        &rig,
        &["consciousness", "restore", "ops/sre", "--from", &url(1)],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("restored ops/sre to cycle 1 ("));
    let now = agentfleet::store::snapshot(&rig.store, &sre())
        .await
        .unwrap();
    assert_eq!(now.consciousness.cycle, 1);
    assert!(now
        .consciousness
        .messages
        .iter()
        .any(|m| m.contains("deploy step 1")));
    assert!(!now
        .consciousness
        .messages
        .iter()
        .any(|m| m.contains("deploy step 2")));

    // Another agent's checkpoint, a corrupt one, a missing one: refused, one clear line each.
    let out = cli(
        &rig,
        &["consciousness", "restore", "ops/planner", "--from", &url(2)],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("agent ops/sre's consciousness, not ops/planner's")
            && err.contains("seedFrom"),
        "{err}"
    );
    // An object named for one cycle holding another (cycle 1's copied over cycle 2's name):
    // the build before issue 26 restored it as cycle 2.
    std::fs::copy(rig.object(&sre(), 1), rig.object(&sre(), 2)).unwrap();
    let out = cli(
        &rig,
        &["consciousness", "restore", "ops/sre", "--from", &url(2)],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("holds cycle 1, not cycle 2"), "{err}");
    std::fs::write(rig.object(&sre(), 3), b"\x1f\x8bnot gzip at all").unwrap();
    let out = cli(&rig, &["consciousness", "show", "--from", &url(3)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("corrupt"), "{err}");
    let out = cli(&rig, &["consciousness", "show", "--from", &url(9)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("no archived checkpoint at {}", url(9))),
        "{err}"
    );
    assert!(!err.contains(s3::SECRET_KEY));
    assert_eq!(
        agentfleet::store::snapshot(&rig.store, &sre())
            .await
            .unwrap()
            .consciousness
            .cycle,
        1
    );
}

/// After a restore to an earlier cycle, the next checkpoint is numbered past every cycle the
/// agent has had: the archived checkpoints of the abandoned cycles stay as they were, and a
/// restore to them is still possible (issue 41: the build before numbered it 2 and wrote it
/// over the archived cycle 2).
#[tokio::test(flavor = "multi_thread")]
async fn a_cycle_after_a_restore_overwrites_no_archived_checkpoint() {
    let rig = Rig::start("abandoned").await;
    let manifest = rig.manifest("sre", "    archive: {keepLast: 20, intervalSeconds: 0}");
    let worker = rig.worker(&manifest);
    for i in 1..=3u64 {
        rig.cycle(&sre(), &format!("step {i}"), &format!("done {i}"))
            .await;
        rig.until_archived_cycle("archived", &sre(), i).await;
    }
    let archive =
        agentfleet::archive::Archive::open_with(&rig.s3.url(ARCHIVE), &rig.s3.env()).unwrap();
    let mut before = Vec::new();
    for cycle in 1..=3 {
        let doc = archive.get(&sre(), cycle).await.unwrap();
        before.push(doc.snapshot.consciousness.digest);
    }
    drop(worker);
    tokio::time::sleep(Duration::from_millis(1200)).await; // its lease runs out

    let out = cli(
        &rig,
        &["consciousness", "restore", "ops/sre", "--cycle", "1"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _worker = rig.worker(&manifest);
    let next = rig.cycle(&sre(), "after the restore", "on it").await;
    rig.until_archived_cycle("the new cycle archived", &sre(), next)
        .await;
    for (cycle, digest) in (1..=3).zip(&before) {
        let doc = archive.get(&sre(), cycle).await.unwrap();
        assert_eq!(
            &doc.snapshot.consciousness.digest, digest,
            "the archived checkpoint of cycle {cycle} was overwritten by cycle {next}"
        );
    }
    assert_eq!(next, 4, "numbered past the abandoned cycles 2 and 3");
    let new = archive
        .get(&sre(), next)
        .await
        .unwrap()
        .snapshot
        .consciousness;
    let text = new.messages.join("\n");
    assert!(
        text.contains("step 1") && text.contains("after the restore") && !text.contains("step 2"),
        "{text}"
    );
    assert_eq!(rig.archived(&sre()), [1, 2, 3, 4]);
}

/// After a restore the newest archived object is the cycle gone back to (written again under
/// its own name), not the highest: a data plane lost then is recovered from it, and the next
/// cycle is still numbered past every archived one — the abandoned cycles' objects stay as
/// they were. (Recovery numbered from the newest object's cycle: the next checkpoint took the
/// name of abandoned cycle 2 and overwrote it.)
#[tokio::test(flavor = "multi_thread")]
async fn a_cycle_after_a_restore_and_a_lost_data_plane_overwrites_no_archived_checkpoint() {
    let rig = Rig::start("abandoned-dr").await;
    let manifest = rig.manifest("sre", "    archive: {keepLast: 20, intervalSeconds: 0}");
    let worker = rig.worker(&manifest);
    for i in 1..=3u64 {
        rig.cycle(&sre(), &format!("step {i}"), &format!("done {i}"))
            .await;
        rig.until_archived_cycle("archived", &sre(), i).await;
    }
    // Signed as the fleet's workers sign.
    let mut env = rig.s3.env();
    env.push(("AGENTFLEET_ARCHIVE_SIGNING_KEY".into(), SIGNING_KEY.into()));
    let archive = agentfleet::archive::Archive::open_with(&rig.s3.url(ARCHIVE), &env).unwrap();
    let mut before = Vec::new();
    for cycle in 1..=3 {
        before.push(archive.get(&sre(), cycle).await.unwrap());
    }
    drop(worker);
    // As a restore to cycle 1 leaves the archive: cycle 1 written again, now the newest.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    archive.put(&before[0]).await.unwrap();
    // The data plane is lost before the next cycle.
    let out = std::process::Command::new("redis-cli")
        .args(["-u", &rig.redis.url(), "FLUSHALL"])
        .output()
        .unwrap();
    assert!(out.status.success());
    rig.apply_space().await;
    let _worker = rig.worker(&manifest);
    let seen = rig
        .until("the recovery", &sre(), |o| {
            o.restore.as_ref().is_some_and(|r| r.ok)
        })
        .await;
    assert_eq!(seen.cycles, 1, "recovered from the newest object");
    let next = rig.cycle(&sre(), "after the loss", "on it").await;
    rig.until_archived_cycle("the new cycle archived", &sre(), next)
        .await;
    assert_eq!(next, 4, "numbered past the abandoned cycles 2 and 3");
    for (cycle, doc) in (1..=3).zip(&before) {
        let now = archive.get(&sre(), cycle).await.unwrap();
        assert_eq!(
            now.snapshot.consciousness.digest, doc.snapshot.consciousness.digest,
            "the archived checkpoint of cycle {cycle} was overwritten"
        );
    }
    let text = archive
        .get(&sre(), next)
        .await
        .unwrap()
        .snapshot
        .consciousness
        .messages
        .join("\n");
    assert!(
        text.contains("step 1") && text.contains("after the loss") && !text.contains("step 2"),
        "{text}"
    );
}

//! One behaviour suite, run against both stores: the embedded one and a real `redis-server`
//! (and a cluster node, a real Redis Cluster, secured Redis), one file per concern of the
//! store; the helpers they share, the cluster node and the `suite!` that runs every behaviour
//! on every store are here.

use super::*;
use crate::identity::SpaceKey;
use crate::testing::{RedisServer, WaitInbox};

mod backends;
mod calls;
mod consciousness;
mod cycles;
mod faults;
mod inbox;
mod messages;
mod notes;
mod observe;
mod receipts;
mod spaces;

use calls::*;
use consciousness::*;
use cycles::*;
use faults::*;
use inbox::*;
use messages::*;
use notes::*;
use observe::*;
use receipts::*;
use spaces::*;

fn member(kind: MemberKind, id: &str) -> Member {
    Member {
        kind,
        id: id.into(),
        name: id.to_uppercase(),
    }
}

fn record(members: Vec<Member>) -> SpaceRecord {
    SpaceRecord {
        v: V1,
        display_name: "Family".into(),
        members,
        groups: Vec::new(),
        max_messages: 100,
        max_message_bytes: crate::store::DEFAULT_MAX_MESSAGE_BYTES,
        loop_guard: Default::default(),
        context_id: None,
    }
}

fn event(id: &str, text: &str) -> InboxEvent {
    crate::testing::human_event(id, text)
}

fn urgent(id: &str, text: &str) -> InboxEvent {
    InboxEvent {
        urgent: true,
        ..event(id, text)
    }
}

const TTL: std::time::Duration = std::time::Duration::from_secs(30);
const SHORT: std::time::Duration = std::time::Duration::from_millis(50);

async fn observed(store: &dyn Store, agent: &AgentKey) -> AgentObservation {
    store
        .observe(std::slice::from_ref(agent))
        .await
        .unwrap()
        .remove(0)
}

fn human(id: &str) -> Sender {
    Sender {
        groups: Vec::new(),
        id: id.into(),
        name: id.to_uppercase(),
        kind: Some(MemberKind::Human),
    }
}

fn agent_sender(id: &str) -> Sender {
    Sender {
        groups: Vec::new(),
        id: id.into(),
        name: id.into(),
        kind: Some(MemberKind::Agent),
    }
}

fn say(sender: Sender, text: &str) -> NewMessage {
    NewMessage {
        sender,
        text: text.into(),
        mention: None,
        idempotency_key: None,
        urgent: false,
        depth: 0,
    }
}

/// The newest ten messages of `space`, newest first.
async fn recent(store: &dyn Store, space: &SpaceKey) -> Vec<SpaceMessage> {
    store
        .read_messages(
            space,
            &ReadQuery {
                limit: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap()
}

async fn family_space(store: &dyn Store, max_messages: u64) -> SpaceKey {
    let family = SpaceKey::new("fam", "family");
    let record = SpaceRecord {
        v: V1,
        display_name: "Family".into(),
        members: vec![
            member(MemberKind::Agent, "alice"),
            member(MemberKind::Agent, "bob"),
            member(MemberKind::Human, "husam"),
        ],
        groups: Vec::new(),
        max_messages,
        max_message_bytes: crate::store::DEFAULT_MAX_MESSAGE_BYTES,
        loop_guard: Default::default(),
        context_id: None,
    };
    store.apply_space(&family, &record).await.unwrap();
    family
}

fn commit(messages: &[&str], compaction: Option<Compacted>, retained: u32) -> CycleCommit {
    CycleCommit {
        new_messages: messages
            .iter()
            .map(|m| format!("{{\"role\":\"user\",\"content\":\"{m}\"}}"))
            .collect(),
        compaction,
        tokens: 10 * messages.len() as u64,
        cycle_tokens: 100,
        checkpoints_retained: retained,
        failure: None,
        record: None,
    }
}

/// The next wake signal within `wait`, if any.
async fn next_wake(
    wakes: &mut futures::stream::BoxStream<'static, AgentKey>,
    wait: std::time::Duration,
) -> Option<AgentKey> {
    use futures::StreamExt;
    tokio::time::timeout(wait, wakes.next())
        .await
        .ok()
        .flatten()
}

fn ids(events: &[InboxEvent]) -> Vec<&str> {
    events.iter().map(|e| e.id.as_str()).collect()
}

fn plan(name: &str) -> crate::crd::PlanSpec {
    serde_yaml::from_str(&format!(
        "{{name: {name}, schedule: '0 6 * * *', instruction: report}}"
    ))
    .unwrap()
}

/// [`plan`] as the agent made it: the note the store keeps.
fn own_plan(name: &str) -> Plan {
    Plan::from(&plan(name))
}

/// A `redis-server` in cluster mode, alone in its cluster and owning every slot: any command,
/// transaction or script whose keys span two slots fails there with `CROSSSLOT`, as on a real
/// Redis Cluster. The whole suite runs on one too.
struct ClusterNode {
    child: std::process::Child,
    port: u16,
    dir: std::path::PathBuf,
}

impl ClusterNode {
    fn start() -> Self {
        let dir = std::env::temp_dir().join(format!(
            "agentfleet-cluster-{}-{}",
            std::process::id(),
            crate::testing::free_port().unwrap()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let (child, [port, _]) = crate::testing::spawn_on_free_ports(
            "cluster node",
            |[port, bus]| {
                std::process::Command::new("redis-server")
                    .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                    .args(["--save", "", "--appendonly", "no"])
                    .args([
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                    ])
                    // The bus on a free port (by default the port + 10000, which another
                    // test may have been given).
                    .args(["--cluster-port", &bus.to_string()])
                    .arg("--dir")
                    .arg(&dir)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .map_err(|e| {
                        format!("redis-server (Debian: apt-get install -y redis-server): {e}")
                    })
            },
            crate::testing::listening,
        )
        .unwrap();
        let node = Self { child, port, dir };
        let client = ::redis::Client::open(node.url()).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut conn = loop {
            match client.get_connection() {
                Ok(c) => break c,
                Err(e) if std::time::Instant::now() > deadline => panic!("cluster node: {e}"),
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
            }
        };
        ::redis::cmd("CLUSTER")
            .arg(&["ADDSLOTSRANGE", "0", "16383"][..])
            .query::<()>(&mut conn)
            .unwrap();
        while !::redis::cmd("CLUSTER")
            .arg("INFO")
            .query::<String>(&mut conn)
            .unwrap()
            .contains("cluster_state:ok")
        {
            assert!(
                std::time::Instant::now() < deadline,
                "cluster state never ok"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        node
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Forgets every key.
    fn flush(&self) {
        let client = ::redis::Client::open(self.url()).unwrap();
        let mut conn = client.get_connection().unwrap();
        ::redis::cmd("FLUSHALL").query::<()>(&mut conn).unwrap();
    }
}

impl Drop for ClusterNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

macro_rules! suite {
    ($($name:ident),* $(,)?; faults: $($faulty:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(&super::MemoryStore::new()).await;
                }
            )*
            $(
                #[tokio::test]
                async fn $faulty() {
                    let store = super::MemoryStore::new();
                    super::$faulty(&store, &store).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test]
                async fn $name() {
                    let server = super::RedisServer::start().unwrap();
                    let store = super::RedisStore::new(&server.url()).unwrap();
                    super::$name(&store).await;
                }
            )*
            $(
                #[tokio::test]
                async fn $faulty() {
                    let server = super::RedisServer::start().unwrap();
                    let store = super::RedisStore::new(&server.url()).unwrap();
                    super::$faulty(&store, &super::RedisFaults(server.url())).await;
                }
            )*
        }
        /// Every behaviour again on a real Redis Cluster (three primaries, three replicas),
        /// the store given one node's URL: it finds the cluster and follows its slot map.
        #[tokio::test]
        async fn real_cluster_runs_every_behaviour() {
            let cluster = crate::testing::RedisCluster::start().unwrap();
            $(
                cluster.flush();
                eprintln!("on a real cluster: {}", stringify!($name));
                $name(&RedisStore::new(&cluster.url()).unwrap()).await;
            )*
            $(
                cluster.flush();
                eprintln!("on a real cluster: {}", stringify!($faulty));
                $faulty(
                    &RedisStore::new(&cluster.url()).unwrap(),
                    &ClusterFaults(cluster.url()),
                )
                .await;
            )*
            // Given as a list of seed nodes, too.
            cluster.flush();
            observation_reads_every_agent_at_once(&RedisStore::new(&cluster.seeds()).unwrap())
                .await;
        }
        /// Every behaviour again on Redis secured as an SRE runs it: TLS alone (a private CA
        /// given as PEM), the `default` user off, and an ACL user limited to `agentfleet:`
        /// keys and channels with no dangerous command but `INFO`; then on a real cluster so
        /// secured (TLS on the bus and replication too), given one node's URL, with writes
        /// waiting for a replica (`WAIT`).
        #[tokio::test]
        async fn secured_redis_and_cluster_run_every_behaviour() {
            let secured = crate::testing::Secured::new().unwrap();
            let server = crate::testing::SecureRedis::start(&secured).unwrap();
            let options = RedisOptions { ca: Some(secured.ca_pem()), wait: None };
            $(
                server.flush(&secured);
                eprintln!("on secured Redis: {}", stringify!($name));
                $name(&RedisStore::with_options(&secured.url(server.port()), &options).unwrap()).await;
            )*
            let cluster = crate::testing::RedisCluster::start_secured().unwrap();
            // Writes wait for their replica here, too.
            let options = RedisOptions {
                ca: cluster.ca_pem(),
                wait: Some(crate::store::WaitReplicas {
                    replicas: 1,
                    timeout: std::time::Duration::from_secs(2),
                }),
            };
            $(
                cluster.flush();
                eprintln!("on a secured cluster: {}", stringify!($name));
                $name(&RedisStore::with_options(&cluster.url(), &options).unwrap()).await;
            )*
        }
        /// Every behaviour again on a Redis Cluster node: each step on one slot. One node for
        /// all (a node takes two seconds to accept writes), emptied before each behaviour.
        #[tokio::test]
        async fn cluster_runs_every_behaviour() {
            let node = ClusterNode::start();
            $(
                node.flush();
                eprintln!("on a cluster node: {}", stringify!($name));
                $name(&RedisStore::new(&node.url()).unwrap()).await;
            )*
            $(
                node.flush();
                eprintln!("on a cluster node: {}", stringify!($faulty));
                $faulty(
                    &RedisStore::new(&node.url()).unwrap(),
                    &RedisFaults(node.url()),
                )
                .await;
            )*
        }
    };
}

suite!(
    membership_is_applied_idempotently,
    agent_facts_are_applied_idempotently,
    ping_answers,
    agents_are_registered,
    inbox_drains_whole_batches_in_order_and_drops_duplicates,
    unacknowledged_events_come_back_to_the_next_worker,
    one_worker_holds_the_lease,
    wake_is_signalled_only_without_a_worker,
    urgent_events_wait_in_their_own_queue_while_thinking,
    posting_delivers_to_every_other_member_agent,
    a_retried_post_never_duplicates,
    idempotency_keys_belong_to_their_sender,
    the_loop_guard_stops_agents_waking_each_other,
    notices_are_logged_once_and_wake_no_agent,
    reading_pages_newest_first_or_since_an_id,
    long_messages_are_refused_and_pages_stop_at_their_bytes,
    live_events_reach_subscribers,
    urgent_posts_become_urgent_events,
    cycles_commit_with_checkpoints_and_acknowledge,
    the_journal_lasts_until_its_cycle_ends,
    compaction_keeps_a_summary_and_checkpoints_restore,
    only_the_last_checkpoints_are_kept,
    commits_are_fenced_and_validated,
    memories_and_goals_are_kept,
    one_look_between_steps,
    wake_signals_reach_subscribers,
    wake_signals_reach_the_listeners_in_scope,
    observation_reads_every_agent_at_once,
    plans_fire_once_per_due_time,
    agent_plans_are_kept_and_fenced,
    a_plan_of_a_newer_format_is_refused_and_left_out,
    purging_an_agent_forgets_everything,
    tokens_are_counted_by_direction_and_period,
    async_calls_take_one_result_with_their_token,
    human_calls_take_one_answer_without_a_token,
    a_paused_cycle_waits_for_its_answer,
    receipts_say_how_the_cycle_of_an_event_ended,
    receipts_last_as_long_as_conversations,
    conversations_expire_with_everything_in_them,
    another_partys_events_wait_for_a_later_cycle,
    calls_of_remote_agents_under_way_are_noted,
    a_snapshot_replaces_the_consciousness_between_cycles,
    cycle_records_are_kept_by_the_step_that_ends_the_cycle,
    cycle_records_are_bounded_by_count_and_bytes,
    rehearsal_reports_keep_the_newest;
    faults: an_interrupted_fan_out_is_completed_by_its_retry,
);

//! One Redis against a Redis Cluster: `cargo bench --bench cluster`.
//!
//! The same three loads on a real `redis-server`, then on a real cluster of three primaries
//! and three replicas (`testing::RedisCluster`), all on this machine:
//!
//! 1. **Posts**: the release `agentfleet gateway` binary; 32 keep-alive clients post 10,000
//!    messages across 10 spaces of 10 member agents each (each post is the space's log step
//!    and ten inbox pushes). Messages/s. On the cluster also with `--redis-wait-replicas 1`
//!    (every post and push acknowledged once its replica has it): the cost of `WAIT`.
//! 2. **Cycles**: the data-plane steps of a worker's cycle (an event pushed; the lease taken;
//!    the inbox drained; a commit; the acknowledgement; the lease given back) for 1,000
//!    agents, 10 cycles each, 64 under way at once. Cycles/s (no model: its time is the
//!    model's, not the data plane's).
//! 3. **Sweep**: the operator's observation of 10,000 registered agents, each with an event
//!    waiting (one pipeline on one Redis; one per agent, all at once, on the cluster). The
//!    median of five sweeps.
//!
//! Two cores carry every process (six `redis-server`s for the cluster, the gateway and this
//! driver), so the cluster's figures show its overhead here, not its capacity on machines of
//! its own.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a benchmark: fail loudly

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentfleet::identity::AgentKey;
use agentfleet::identity::SpaceKey;
use agentfleet::store::{prelude::*, CycleCommit, RedisStore};
use agentfleet::testing::{human_event, space_record, RedisCluster, RedisServer, WaitInbox};
use futures::StreamExt as _;
use serde_json::json;

const POSTS: usize = 10_000;
const POSTERS: usize = 32;
const SPACES: usize = 10;
const CYCLE_AGENTS: usize = 1_000;
const CYCLES_EACH: usize = 10;
const IN_FLIGHT: usize = 64;
const SWEEP_AGENTS: usize = 10_000;
const TOKEN: &str = "bench-token";

#[tokio::main]
async fn main() {
    agentfleet::install_crypto_provider();
    let mut rows = Vec::new();
    {
        let redis = RedisServer::start().unwrap();
        rows.push(("one Redis", run(&redis.url(), &|| ()).await));
    }
    {
        let cluster = RedisCluster::start().unwrap();
        let flush = || cluster.flush();
        rows.push(("cluster (3 primaries)", run(&cluster.url(), &flush).await));
        flush();
        let waited = posts(&cluster.url(), Some(1)).await;
        println!("cluster, posts acknowledged once replicated (WAIT 1): {waited:.0} messages/s");
    }
    println!();
    println!("| data plane | posts/s (fan-out to 10) | cycles/s (1,000 agents) | sweep of 10,000 agents |");
    println!("|---|---|---|---|");
    for (name, f) in &rows {
        println!(
            "| {name} | {:.0} | {:.0} | {:.0} ms |",
            f.posts,
            f.cycles,
            f.sweep.as_secs_f64() * 1000.0
        );
    }
    let (one, cluster) = (&rows[0].1, &rows[1].1);
    println!(
        "cluster / one Redis: posts {:.2}x, cycles {:.2}x, sweep {:.2}x the time",
        cluster.posts / one.posts,
        cluster.cycles / one.cycles,
        cluster.sweep.as_secs_f64() / one.sweep.as_secs_f64()
    );
}

struct Figures {
    posts: f64,
    cycles: f64,
    sweep: Duration,
}

async fn run(url: &str, flush: &dyn Fn()) -> Figures {
    let posts = posts(url, None).await;
    flush();
    let cycles = cycles(url).await;
    flush();
    let sweep = sweep(url).await;
    println!("{url}: {posts:.0} posts/s, {cycles:.0} cycles/s, sweep {sweep:?}");
    Figures {
        posts,
        cycles,
        sweep,
    }
}

/// Messages/s the gateway takes, each fanned out to 10 agents.
async fn posts(url: &str, wait_replicas: Option<u32>) -> f64 {
    let store = RedisStore::new(url).unwrap();
    for s in 0..SPACES {
        let agents: Vec<String> = (0..10).map(|i| format!("s{s}-agent-{i}")).collect();
        let refs: Vec<&str> = agents.iter().map(String::as_str).collect();
        store
            .apply_space(
                &SpaceKey::new("bench", format!("space-{s}")),
                &space_record("Load", &refs, &["Husam"]),
            )
            .await
            .unwrap();
    }
    let wait = wait_replicas.map(|n| n.to_string());
    let env: Vec<(&str, &str)> = wait
        .iter()
        .map(|n| ("AGENTFLEET_REDIS_WAIT_REPLICAS", n.as_str()))
        .collect();
    let gateway = common::Gateway::start(url, TOKEN, &env).await;
    let elapsed = gateway
        .post_load(TOKEN, POSTS, POSTERS, |i| {
            format!("bench/space-{}", i % SPACES)
        })
        .await;
    let depth = store
        .inbox_depth(&AgentKey::new("bench", "s3-agent-7"))
        .await
        .unwrap();
    assert_eq!(
        depth,
        (POSTS / SPACES) as u64,
        "every post reached every agent"
    );
    POSTS as f64 / elapsed.as_secs_f64()
}

/// Cycles/s of the data-plane steps of a worker's cycle across 1,000 agents.
async fn cycles(url: &str) -> f64 {
    let store = Arc::new(RedisStore::new(url).unwrap());
    let agents: Vec<AgentKey> = (0..CYCLE_AGENTS)
        .map(|i| AgentKey::new("bench", format!("cycler-{i}")))
        .collect();
    let work: Vec<(AgentKey, usize)> = (0..CYCLES_EACH)
        .flat_map(|c| agents.iter().map(move |a| (a.clone(), c)))
        .collect();
    let work = Arc::new(work);
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let runners: Vec<_> = (0..IN_FLIGHT)
        .map(|r| {
            let (store, work, next) = (store.clone(), work.clone(), next.clone());
            tokio::spawn(async move {
                let holder = format!("runner-{r}");
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some((agent, c)) = work.get(i) else { break };
                    cycle(&store, agent, *c, &holder).await;
                }
            })
        })
        .collect();
    for r in runners {
        r.await.unwrap();
    }
    work.len() as f64 / start.elapsed().as_secs_f64()
}

/// One cycle's data-plane steps: the event in, the lease, the drain, the commit, the
/// acknowledgement, the lease given back. Two runners may meet on one agent: the second
/// waits for the lease.
async fn cycle(store: &RedisStore, agent: &AgentKey, c: usize, holder: &str) {
    let event = human_event(&format!("e-{c}"), &format!("message {c}"));
    store.push_event(agent, &event).await.unwrap();
    let lease = loop {
        if let Some(lease) = store
            .acquire_lease(agent, holder, Duration::from_secs(30))
            .await
            .unwrap()
        {
            break lease;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    store
        .wait_inbox(agent, &lease, Duration::from_millis(1))
        .await
        .unwrap();
    let commit = CycleCommit {
        new_messages: vec![
            json!({"role": "user", "content": format!("message {c}")}).to_string(),
            json!({"role": "assistant", "content": "Done."}).to_string(),
        ],
        compaction: None,
        tokens: 20,
        cycle_tokens: 100,
        checkpoints_retained: 3,
        failure: None,
        record: None,
    };
    store.commit_cycle(agent, &lease, &commit).await.unwrap();
    store.ack_cycle(agent, &lease).await.unwrap();
    store.release_lease(agent, &lease).await.unwrap();
}

/// The median of five observations of 10,000 registered agents, each with an event waiting.
async fn sweep(url: &str) -> Duration {
    let store = RedisStore::new(url).unwrap();
    let agents: Vec<AgentKey> = (0..SWEEP_AGENTS)
        .map(|i| AgentKey::new("bench", format!("swept-{i}")))
        .collect();
    futures::stream::iter(&agents)
        .for_each_concurrent(IN_FLIGHT, |a| {
            let store = &store;
            async move {
                store.register_agent(a).await.unwrap();
                store
                    .push_event(a, &human_event("e-0", "waiting"))
                    .await
                    .unwrap();
            }
        })
        .await;
    let mut times = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        let seen = store.observe(&agents).await.unwrap();
        times.push(start.elapsed());
        assert_eq!(seen.len(), SWEEP_AGENTS);
        assert!(seen.iter().all(|o| o.waiting == 1));
    }
    times.sort();
    times[2]
}

//! Operator benchmark: `AGENTFLEET_BENCH_KUBECONFIG=… cargo bench --bench operator`.
//!
//! Needs a real kube-apiserver (etcd and the API server are enough; no kubelet needed).
//! Starts a `redis-server` and the release `agentfleet operator` binary (its own process,
//! leader election in the bench namespace), in a fresh namespace with one Space.
//!
//! 1. **Full reconcile of 1,000 Agents**: 1,000 Agents (scripted model, scale to zero) exist
//!    before the operator starts — an operator restart on a full cluster. Measured: start →
//!    every Agent has its worker Deployment (replicas 0), ConfigMap and status (phase
//!    `ScaledToZero`, observed generation); the operator's resident memory afterwards; its
//!    reconcile count and mean reconcile time (from its `/metrics`).
//! 2. **Wake latency**: an event pushed into the inbox of an agent at zero → its Deployment's
//!    `spec.replicas` is 1, as seen by a watch on Deployments (so the figure includes the watch's
//!    delivery). 200 agents one at a time, then a burst of 500 at once. p50/p99/max, and the
//!    operator's own `agentfleet_wake_to_scale_seconds` (signal received → replicas set).
//!
//! Everything (API server, etcd, Redis, operator, driver) shares this machine's cores.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a benchmark: fail loudly

mod common;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentfleet::crd::Agent;
use agentfleet::identity::AgentKey;
use agentfleet::store::{prelude::*, EventKind, InboxEvent, RedisStore};
use agentfleet::testing::{free_port, RedisServer};
use common::{pct, rss_kib, Kill};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Config, ResourceExt};
use serde_json::json;

const AGENTS: usize = 1_000;
const ONE_BY_ONE: usize = 200;
const BURST: usize = 500;
const MANAGER: &str = "agentfleet-bench";

fn agent_name(i: usize) -> String {
    format!("a-{i:04}")
}

#[tokio::main]
async fn main() {
    agentfleet::install_crypto_provider();
    let Ok(path) = std::env::var("AGENTFLEET_BENCH_KUBECONFIG") else {
        eprintln!("AGENTFLEET_BENCH_KUBECONFIG must name the kubeconfig of a real API server (etcd and kube-apiserver; no kubelet needed)");
        std::process::exit(2);
    };
    let kubeconfig = Kubeconfig::read_from(&path).unwrap();
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    let client = Client::try_from(config).unwrap();
    let redis = RedisServer::start().unwrap();
    let store = Arc::new(RedisStore::new(&redis.url()).unwrap());

    // CRDs and a fresh namespace with one Space.
    agentfleet::testing::install_crds(&client, MANAGER)
        .await
        .unwrap();
    let ns = format!("agentfleet-bench-{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await
        .unwrap();
    let agents: Api<Agent> = Api::namespaced(client.clone(), &ns);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let spaces: Api<agentfleet::crd::Space> = Api::namespaced(client.clone(), &ns);
    spaces
        .patch(
            "fleet",
            &PatchParams::apply(MANAGER),
            &Patch::Apply(json!({"apiVersion": "agentfleet.dev/v1alpha1", "kind": "Space",
                "metadata": {"name": "fleet"}, "spec": {"members": [{"id": "husam", "name": "Husam"}]}})),
        )
        .await
        .unwrap();

    eprintln!("creating {AGENTS} Agents in {ns} …");
    let created = Instant::now();
    futures::stream::iter(0..AGENTS)
        .for_each_concurrent(32, |i| {
            let agents = agents.clone();
            async move {
                let name = agent_name(i);
                agents
                    .patch(
                        &name,
                        &PatchParams::apply(MANAGER),
                        &Patch::Apply(json!({"apiVersion": "agentfleet.dev/v1alpha1", "kind": "Agent",
                            "metadata": {"name": name},
                            "spec": {"model": {"provider": "scripted", "name": name}, "spaces": ["fleet"],
                                     "scaling": {"idleSeconds": 3600}}})),
                    )
                    .await
                    .unwrap();
            }
        })
        .await;
    eprintln!("  created in {:?}", created.elapsed());

    // The operator, as in a pod.
    let metrics_port = free_port().unwrap();
    let started = Instant::now();
    let operator = Kill(
        Command::new(common::agentfleet_bin())
            .args(["operator", "--lease-namespace", &ns])
            .arg("--metrics-addr")
            .arg(format!("127.0.0.1:{metrics_port}"))
            .env("KUBECONFIG", &path)
            .env("AGENTFLEET_REDIS_URL", redis.url())
            .env("AGENTFLEET_POD_NAME", "bench-operator")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = operator.0.id();
    let mut peak_rss = 0;
    loop {
        peak_rss = peak_rss.max(rss_kib(pid));
        let lp = ListParams::default();
        let (list, deps) = tokio::join!(agents.list(&lp), deployments.list(&lp));
        let done = list
            .unwrap()
            .items
            .iter()
            .filter(|a| {
                a.status.as_ref().is_some_and(|s| {
                    s.phase == Some(agentfleet::crd::AgentPhase::ScaledToZero)
                        && s.observed_generation == a.metadata.generation
                })
            })
            .count();
        let workers = deps
            .unwrap()
            .items
            .iter()
            .filter(|d| d.spec.as_ref().and_then(|s| s.replicas) == Some(0))
            .count();
        if done == AGENTS && workers == AGENTS {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "full reconcile did not finish: {done} agents, {workers} workers"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let full = started.elapsed();
    let rss_after_reconcile = rss_kib(pid);
    let metrics = scrape(metrics_port).await;
    let reconciles = metric(&metrics, "agentfleet_reconcile_total{controller=\"agent\"}");
    let reconcile_sum = metric(
        &metrics,
        "agentfleet_reconcile_duration_seconds_sum{controller=\"agent\"}",
    );
    let status_writes = metric(&metrics, "agentfleet_status_writes_total{result=\"ok\"}");
    println!("full reconcile of {AGENTS} Agents from operator start: {full:.2?} (Deployment + ConfigMap + status each)");
    println!(
        "  agent reconciles: {reconciles:.0}, mean {:.1} ms; data-plane status writes: {status_writes:.0}",
        reconcile_sum / reconciles.max(1.0) * 1000.0
    );
    println!(
        "  operator RSS: {:.1} MiB after (peak seen {:.1} MiB)",
        rss_after_reconcile as f64 / 1024.0,
        peak_rss as f64 / 1024.0
    );

    // Wake latency: a watch records when each Deployment first shows replicas 1.
    let up: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let watch = {
        let up = up.clone();
        let deployments = deployments.clone();
        tokio::spawn(async move {
            let mut stream = watcher(deployments, watcher::Config::default())
                .applied_objects()
                .boxed();
            while let Some(Ok(d)) = stream.next().await {
                if d.spec.as_ref().and_then(|s| s.replicas) == Some(1) {
                    up.lock()
                        .unwrap()
                        .entry(d.name_any().trim_end_matches("-worker").to_string())
                        .or_insert_with(Instant::now);
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let push = |i: usize| {
        let store = store.clone();
        let ns = ns.clone();
        async move {
            let key = AgentKey::new(ns, agent_name(i));
            let at = Instant::now();
            let pushed = store
                .push_event(
                    &key,
                    &InboxEvent {
                        id: format!("bench-{i}"),
                        kind: EventKind::Service,
                        time_ms: agentfleet::store::now_ms(),
                        urgent: false,
                        space: None,
                        sender: None,
                        text: Some("wake up".into()),
                        data: None,
                        depth: 0,
                    },
                )
                .await
                .unwrap();
            assert!(pushed.woke, "agent {i} had a worker");
            (agent_name(i), at)
        }
    };
    let wait_up = |names: Vec<(String, Instant)>| {
        let up = up.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let seen = up.lock().unwrap().clone();
                if names.iter().all(|(n, _)| seen.contains_key(n)) {
                    let mut lat: Vec<Duration> = names
                        .iter()
                        .map(|(n, at)| seen[n].saturating_duration_since(*at))
                        .collect();
                    lat.sort();
                    return lat;
                }
                assert!(Instant::now() < deadline, "not every agent scaled up");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    let mut one_by_one = Vec::new();
    for i in 0..ONE_BY_ONE {
        let pushed = push(i).await;
        one_by_one.extend(wait_up(vec![pushed]).await);
    }
    one_by_one.sort();
    report("one at a time", &one_by_one);
    let burst: Vec<(String, Instant)> =
        futures::future::join_all((ONE_BY_ONE..ONE_BY_ONE + BURST).map(push)).await;
    let burst = wait_up(burst).await;
    report(&format!("burst of {BURST}"), &burst);
    let metrics = scrape(metrics_port).await;
    let n = metric(&metrics, "agentfleet_wake_to_scale_seconds_count");
    let sum = metric(&metrics, "agentfleet_wake_to_scale_seconds_sum");
    println!(
        "  operator's own wake → replicas set: {n:.0} wakes, mean {:.1} ms",
        sum / n.max(1.0) * 1000.0
    );
    println!(
        "  operator RSS with {AGENTS} Agents after the wakes: {:.1} MiB",
        rss_kib(pid) as f64 / 1024.0
    );
    watch.abort();

    // Clean up while the operator still runs (it removes the Agents' finalizers).
    eprintln!("deleting {ns} …");
    namespaces
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(180);
    while Instant::now() < deadline
        && !agents
            .list(&ListParams::default().limit(1))
            .await
            .map(|l| l.items.is_empty())
            .unwrap_or(true)
    {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    drop(operator);
}

fn report(what: &str, lat: &[Duration]) {
    println!(
        "wake signal → Deployment replicas 1 (seen by a watch), {what}: n {}, p50 {:.1?}, p99 {:.1?}, max {:.1?}",
        lat.len(),
        pct(lat, 0.50),
        pct(lat, 0.99),
        lat[lat.len() - 1]
    );
}

async fn scrape(port: u16) -> String {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).await.unwrap();
    out
}

/// The value of a sample line `name value` (0 when absent).
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

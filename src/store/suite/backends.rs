//! What one backend alone does: Redis's fan-out set, Redis down, a stale cached window, a
//! cluster node's slots, pub/sub through failover, secured Redis, replicas and WAIT.

use super::*;

#[tokio::test]
async fn memory_sleeping_worker_wakes_on_push() {
    a_sleeping_worker_wakes_on_push(std::sync::Arc::new(MemoryStore::new())).await;
}

#[tokio::test]
async fn redis_sleeping_worker_wakes_on_push() {
    let server = RedisServer::start().unwrap();
    a_sleeping_worker_wakes_on_push(std::sync::Arc::new(RedisStore::new(&server.url()).unwrap()))
        .await;
}

#[tokio::test]
async fn redis_members_set_tracks_agents_for_fan_out() {
    use ::redis::AsyncCommands;
    let server = RedisServer::start().unwrap();
    let store = RedisStore::new(&server.url()).unwrap();
    let s = SpaceKey::new("ns", "eng");
    store
        .apply_space(
            &s,
            &record(vec![
                member(MemberKind::Agent, "a"),
                member(MemberKind::Agent, "b"),
                member(MemberKind::Human, "h"),
            ]),
        )
        .await
        .unwrap();
    let client = ::redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut agents: Vec<String> = conn
        .smembers("agentfleet:{space:ns/eng}:agents")
        .await
        .unwrap();
    agents.sort();
    assert_eq!(agents, vec!["a", "b"]);
    store
        .apply_space(&s, &record(vec![member(MemberKind::Agent, "b")]))
        .await
        .unwrap();
    let agents: Vec<String> = conn
        .smembers("agentfleet:{space:ns/eng}:agents")
        .await
        .unwrap();
    assert_eq!(agents, vec!["b"]);
}

#[tokio::test]
async fn redis_down_is_an_error_not_a_hang() {
    let port = crate::testing::free_port().unwrap();
    let store = RedisStore::new(&format!("redis://127.0.0.1:{port}/")).unwrap();
    let started = std::time::Instant::now();
    let err = store.ping().await.unwrap_err();
    assert_eq!(err.category(), "store_unavailable", "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}

#[tokio::test]
async fn redis_commit_recovers_from_a_stale_cached_window() {
    let server = RedisServer::start().unwrap();
    let a_store = RedisStore::new(&server.url()).unwrap();
    let b_store = RedisStore::new(&server.url()).unwrap();
    let a = AgentKey::new("fam", "assistant");
    let short = std::time::Duration::from_millis(100);
    let first = a_store
        .acquire_lease(&a, "process-a", short)
        .await
        .unwrap()
        .unwrap();
    a_store
        .commit_cycle(&a, &first, &commit(&["a1"], None, 10))
        .await
        .unwrap();
    // Another process takes over for a while and commits.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let other = b_store
        .acquire_lease(&a, "process-b", TTL)
        .await
        .unwrap()
        .unwrap();
    b_store
        .commit_cycle(&a, &other, &commit(&["b2", "b2'"], None, 10))
        .await
        .unwrap();
    b_store.release_lease(&a, &other).await.unwrap();
    // The first process comes back: its remembered window is stale, the commit still lands right.
    let again = a_store
        .acquire_lease(&a, "process-a", TTL)
        .await
        .unwrap()
        .unwrap();
    let cp = a_store
        .commit_cycle(&a, &again, &commit(&["a3"], None, 10))
        .await
        .unwrap();
    assert_eq!((cp.cycle, cp.start, cp.end), (3, 0, 4));
    let c = a_store.consciousness(&a).await.unwrap();
    assert_eq!(c.messages.len(), 4);
    assert!(c.messages[3].contains("a3"));
    assert_eq!(
        a_store
            .checkpoints(&a)
            .await
            .unwrap()
            .iter()
            .map(|c| c.cycle)
            .collect::<Vec<_>>(),
        [3, 2, 1]
    );
}

#[tokio::test]
async fn memory_fan_out_retries_a_push_that_failed_for_a_passing_reason() {
    let store = MemoryStore::new();
    let family = family_space(&store, 100).await;
    let bob = AgentKey::new("fam", "bob");
    store.fail_pushes(&bob, 2, true);
    let posted = store
        .post_message(&family, &say(human("husam"), "hello"))
        .await
        .unwrap();
    assert_eq!(posted.delivered, ["alice", "bob"], "bob's third try landed");
    assert_eq!(store.inbox_depth(&bob).await.unwrap(), 1);
    // A failure that outlasts the tries is the post's error.
    store.fail_pushes(&bob, 3, true);
    let err = store
        .post_message(&family, &say(human("husam"), "again"))
        .await
        .unwrap_err();
    assert_eq!(err.category(), "store_timeout", "{err}");
}

#[tokio::test]
async fn cluster_node_refuses_a_step_across_slots() {
    let node = ClusterNode::start();
    let client = ::redis::Client::open(node.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let err = ::redis::Script::new("return 1")
        .key("agentfleet:{space:fam/family}:log")
        .key("agentfleet:{agent:fam/alice}:inbox")
        .invoke_async::<u8>(&mut conn)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("CROSSSLOT"), "{err}");
}

/// On a real Redis Cluster, live events and wake signals are sharded: each goes to the node of
/// its space's or agent's slot (no classic `PUBLISH` broadcast over the cluster bus), and the
/// subscriptions follow a failover of that node, then a resharding that moves the slots,
/// without being made again.
#[tokio::test]
async fn cluster_pub_sub_stays_on_its_node_and_follows_failover_and_resharding() {
    use futures::StreamExt;
    let five = std::time::Duration::from_secs(5);
    let mut cluster = crate::testing::RedisCluster::start().unwrap();
    let store = RedisStore::new(&cluster.url()).unwrap();
    let family = family_space(&store, 100).await;
    let agents = [AgentKey::new("fam", "alice"), AgentKey::new("fam", "bob")];
    store.register_agent(&agents[0]).await.unwrap();
    let mut wakes = store.subscribe_wakes(&WakeScope::All).await.unwrap();
    store.register_agent(&agents[1]).await.unwrap();
    let mut live = store.subscribe_live(&family).await.unwrap();
    let before = cluster.broadcast_publishes();

    let mut post_and_hear = async |text: &str| {
        // Right after a failover the first attempts may meet the cluster still electing.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        let posted = loop {
            match store
                .post_message(&family, &say(human("husam"), text))
                .await
            {
                Ok(p) => break p,
                Err(e) if std::time::Instant::now() < deadline => {
                    eprintln!("post while the cluster recovers: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
                Err(e) => panic!("{e}"),
            }
        };
        let heard = tokio::time::timeout(five, live.next()).await;
        let Ok(Some(LiveEvent::Message { message })) = heard else {
            panic!("no live event for {text}: {heard:?}")
        };
        assert_eq!(message.id, posted.id);
        let mut woken = Vec::new();
        for _ in &agents {
            woken.push(
                tokio::time::timeout(five, wakes.next())
                    .await
                    .unwrap()
                    .unwrap(),
            );
        }
        woken.sort();
        assert_eq!(woken, agents);
        for a in &agents {
            let lease = store.acquire_lease(a, "w", TTL).await.unwrap().unwrap();
            assert_eq!(store.wait_inbox(a, &lease, SHORT).await.unwrap().len(), 1);
            store.ack_cycle(a, &lease).await.unwrap();
            store.release_lease(a, &lease).await.unwrap();
        }
    };
    post_and_hear("before").await;
    assert_eq!(
        cluster.broadcast_publishes(),
        before,
        "a live event or wake signal was broadcast to every node"
    );

    // The node serving the space's slot dies; its replica takes over.
    let key = "agentfleet:{space:fam/family}:live";
    let owner = cluster.owner(key).unwrap();

    cluster.kill(owner);
    cluster.failed_over(owner, key).unwrap();
    let channels = [
        key,
        "agentfleet:{agent:fam/alice}:wake",
        "agentfleet:{agent:fam/bob}:wake",
    ];
    // A subscription follows a moment after its slot moved; what is published in between
    // reaches nobody live (the inbox keeps it, and the sweep wakes its agent).
    let subscribed = async |cluster: &crate::testing::RedisCluster| {
        for channel in channels {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while cluster.shard_subscribers(channel) == 0 {
                assert!(
                    std::time::Instant::now() < deadline,
                    "nobody subscribed to {channel} again in 10 s"
                );
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    };
    subscribed(&cluster).await;
    post_and_hear("after the failover").await;

    // A resharding moves the space's slot and alice's, with their keys, to another primary.
    for k in [key, "agentfleet:{agent:fam/alice}:inbox"] {
        let from = cluster.owner(k).unwrap();
        let to = cluster
            .primaries()
            .into_iter()
            .find(|&p| p != from)
            .unwrap();
        cluster.move_slot(k, to).unwrap();
        assert_eq!(cluster.owner(k), Some(to));
    }
    subscribed(&cluster).await;
    post_and_hear("after a resharding").await;
    assert_eq!(cluster.broadcast_publishes(), before);
}

/// Secured Redis refuses a wrong password and an untrusted certificate with one clear error,
/// which never carries the password.
#[tokio::test]
async fn secured_redis_refuses_clearly() {
    use crate::testing::secure::PASSWORD;
    let secured = crate::testing::Secured::new().unwrap();
    let server = crate::testing::SecureRedis::start(&secured).unwrap();
    let trusted = RedisOptions {
        ca: Some(secured.ca_pem()),
        wait: None,
    };
    let good = secured.url(server.port());
    RedisStore::with_options(&good, &trusted)
        .unwrap()
        .ping()
        .await
        .unwrap();

    let wrong = good.replace(PASSWORD, "not-the-pass");
    let e = RedisStore::with_options(&wrong, &trusted)
        .unwrap()
        .ping()
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("authentication failed"), "{e}");
    assert!(!e.contains("not-the-pass"), "{e}");

    // Without the CA, the system's roots do not trust the test CA.
    let e = RedisStore::new(&good)
        .unwrap()
        .ping()
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("certificate"), "{e}");
    assert!(!e.contains(PASSWORD), "{e}");
}

/// What a failover of a primary whose replica lags costs in acknowledged writes, on a real
/// cluster: without `WAIT`, the posts and commits acknowledged while the replica lagged are
/// lost when it takes over; with writes waiting for their replica, no acknowledged post is
/// (those not replicated in time fail, and their retry with the same key lands once the
/// replica has taken over), and each commit not replicated in time is logged.
///
/// The replica is made to lag by cutting it off its primary (a broken link), so that the loss
/// is not left to a race: on one machine replication takes well under a millisecond.
#[tokio::test]
async fn a_failover_loses_acknowledged_writes_unless_they_wait_for_replicas() {
    let mut lost_posts = Vec::new();
    for wait in [
        None,
        Some(crate::store::WaitReplicas {
            replicas: 1,
            timeout: std::time::Duration::from_millis(300),
        }),
    ] {
        let mut cluster = crate::testing::RedisCluster::start().unwrap();
        let store =
            RedisStore::with_options(&cluster.url(), &RedisOptions { ca: None, wait }).unwrap();
        let family = family_space(&store, 1000).await;
        let space_key = "agentfleet:{space:fam/family}:log";
        let primary = cluster.owner(space_key).unwrap();
        let replica = cluster.replica_of(primary).unwrap();
        // An agent on the same primary, member of the space.
        let agent = (0..)
            .map(|i| AgentKey::new("fam", format!("a{i}")))
            .find(|a| cluster.owner(&format!("agentfleet:{{agent:{a}}}:inbox")) == Some(primary))
            .unwrap();
        let record = SpaceRecord {
            v: V1,
            display_name: "Family".into(),
            members: vec![
                member(MemberKind::Agent, &agent.name),
                member(MemberKind::Human, "husam"),
            ],
            groups: Vec::new(),
            max_messages: 1000,
            max_message_bytes: crate::store::DEFAULT_MAX_MESSAGE_BYTES,
            loop_guard: Default::default(),
            context_id: None,
        };
        store.apply_space(&family, &record).await.unwrap();

        let keyed = |n: usize| NewMessage {
            idempotency_key: Some(format!("k{n}")),
            ..say(human("husam"), &format!("m{n}"))
        };
        let mut acked = Vec::new();
        let mut failed = Vec::new();
        let mut commits = 0u64;
        let cycle = async |store: &RedisStore| -> Result<(), StoreError> {
            let lease = store.acquire_lease(&agent, "w", TTL).await?.unwrap();
            store.wait_inbox(&agent, &lease, SHORT).await?;
            store
                .commit_cycle(&agent, &lease, &commit(&["c"], None, 3))
                .await?;
            store.ack_cycle(&agent, &lease).await?;
            store.release_lease(&agent, &lease).await
        };
        for n in 0..5 {
            store.post_message(&family, &keyed(n)).await.unwrap();
            acked.push(n);
            cycle(&store).await.unwrap();
            commits += 1;
        }
        // The replica is cut off its primary; writes go on.
        cluster.cut_off(replica);
        for n in 5..10 {
            match store.post_message(&family, &keyed(n)).await {
                Ok(_) => acked.push(n),
                Err(e) => {
                    assert!(matches!(e, StoreError::NotReplicated { .. }), "{e}");
                    failed.push(n);
                }
            }
            if cycle(&store).await.is_ok() {
                commits += 1;
            }
        }
        // The primary dies; the replica takes over with what it had. The dead node is started
        // again (as Kubernetes would) and comes back as the new primary's replica.
        cluster.kill(primary);
        cluster.reconnect(replica);
        let took = cluster.failed_over(primary, space_key).unwrap();
        cluster.restart(primary).unwrap();
        // The posts that were not acknowledged are retried with their keys.
        for &n in &failed {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
            while let Err(e) = store.post_message(&family, &keyed(n)).await {
                assert!(std::time::Instant::now() < deadline, "{e}");
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        }
        // Ten posts at most: `recent` reads them all.
        let log: Vec<String> = recent(&store, &family)
            .await
            .into_iter()
            .map(|m| m.text)
            .collect();
        let lost: Vec<usize> = acked
            .iter()
            .copied()
            .filter(|n| !log.contains(&format!("m{n}")))
            .collect();
        let kept = store.consciousness(&agent).await.unwrap().cycle;
        eprintln!(
            "failover in {took:?}, writes waiting for replicas: {}; acknowledged posts {} (lost {:?}), \
             posts refused then retried {:?}; acknowledged commits {commits}, cycles kept {kept}",
            wait.is_some(),
            acked.len(),
            lost,
            failed
        );
        for n in &failed {
            assert!(
                log.contains(&format!("m{n}")),
                "retried post m{n} is in the log"
            );
        }
        lost_posts.push(lost.len());
    }
    assert!(
        lost_posts[0] > 0,
        "without WAIT the lagging replica lost acknowledged posts"
    );
    assert_eq!(lost_posts[1], 0, "with WAIT no acknowledged post is lost");
}

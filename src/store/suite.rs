//! One behaviour suite, run against both stores: the embedded one and a real `redis-server`.

use super::*;
use crate::crd::MemberKind;
use crate::testing::RedisServer;

fn member(kind: MemberKind, id: &str) -> ResolvedMember {
    ResolvedMember {
        kind,
        id: id.into(),
        name: id.to_uppercase(),
    }
}

async fn membership_is_applied_idempotently(store: &dyn Store) {
    let family = SpaceKey::new("fam", "family");
    let work = SpaceKey::new("fam", "work");
    assert_eq!(store.space_members(&family).await.unwrap(), None);
    let members = vec![
        member(MemberKind::Agent, "alice"),
        member(MemberKind::Human, "husam"),
    ];
    assert!(store.apply_space_members(&family, &members).await.unwrap());
    assert!(
        !store.apply_space_members(&family, &members).await.unwrap(),
        "same members again: no change"
    );
    assert_eq!(
        store.space_members(&family).await.unwrap(),
        Some(members.clone())
    );

    let fewer = vec![member(MemberKind::Human, "husam")];
    assert!(store.apply_space_members(&family, &fewer).await.unwrap());
    assert_eq!(store.space_members(&family).await.unwrap(), Some(fewer));

    assert!(store.apply_space_members(&work, &[]).await.unwrap());
    assert_eq!(store.space_members(&work).await.unwrap(), Some(vec![]));
    assert_eq!(
        store.spaces().await.unwrap(),
        vec![family.clone(), work.clone()]
    );

    assert!(store.remove_space(&family).await.unwrap());
    assert!(!store.remove_space(&family).await.unwrap());
    assert_eq!(store.space_members(&family).await.unwrap(), None);
    assert_eq!(store.spaces().await.unwrap(), vec![work]);
}

async fn ping_answers(store: &dyn Store) {
    store.ping().await.unwrap();
}

macro_rules! suite {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(&super::MemoryStore::new()).await;
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
        }
    };
}

suite!(membership_is_applied_idempotently, ping_answers);

#[tokio::test]
async fn redis_members_set_tracks_agents_for_fan_out() {
    use ::redis::AsyncCommands;
    let server = RedisServer::start().unwrap();
    let store = RedisStore::new(&server.url()).unwrap();
    let s = SpaceKey::new("ns", "eng");
    store
        .apply_space_members(
            &s,
            &[
                member(MemberKind::Agent, "a"),
                member(MemberKind::Agent, "b"),
                member(MemberKind::Human, "h"),
            ],
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
        .apply_space_members(&s, &[member(MemberKind::Agent, "b")])
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

//! Faults injected into a store: an inbox broken half-way through a fan-out, and its retry.

use super::*;

/// Breaks one agent's inbox, so that pushes into it fail for good, and mends it: a fan-out
/// interrupted half-way.
#[async_trait::async_trait]
pub(super) trait Faults: Send + Sync {
    /// Pushes into `agent`'s inbox fail (`true`) or work again (`false`).
    async fn break_inbox(&self, agent: &AgentKey, broken: bool);
}

#[async_trait::async_trait]
impl Faults for MemoryStore {
    async fn break_inbox(&self, agent: &AgentKey, broken: bool) {
        self.fail_pushes(agent, if broken { u32::MAX } else { 0 }, false);
    }
}

/// Breaks an agent's inbox on Redis: its dedupe set becomes a string, so `push.lua` fails
/// (WRONGTYPE) at its first command, before writing anything.
pub(super) struct RedisFaults(pub(super) String);

/// Faults on a real Redis Cluster, through a cluster client (the key's node answers).
pub(super) struct ClusterFaults(pub(super) String);

/// What both write to break an agent's inbox (its dedupe set replaced by a string), or to
/// mend it.
pub(super) fn inbox_fault(agent: &AgentKey, broken: bool) -> ::redis::Cmd {
    let ids = format!("agentfleet:{{agent:{agent}}}:ids");
    if broken {
        ::redis::Cmd::set(ids, "broken")
    } else {
        ::redis::Cmd::del(ids)
    }
}

#[async_trait::async_trait]
impl Faults for RedisFaults {
    async fn break_inbox(&self, agent: &AgentKey, broken: bool) {
        let client = ::redis::Client::open(self.0.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        inbox_fault(agent, broken)
            .query_async::<()>(&mut conn)
            .await
            .unwrap();
    }
}

#[async_trait::async_trait]
impl Faults for ClusterFaults {
    async fn break_inbox(&self, agent: &AgentKey, broken: bool) {
        let client = ::redis::cluster::ClusterClient::new(vec![self.0.as_str()]).unwrap();
        let mut conn = client.get_async_connection().await.unwrap();
        inbox_fault(agent, broken)
            .query_async::<()>(&mut conn)
            .await
            .unwrap();
    }
}

pub(super) async fn an_interrupted_fan_out_is_completed_by_its_retry(
    store: &dyn Store,
    faults: &dyn Faults,
) {
    let family = family_space(store, 100).await;
    let alice = AgentKey::new("fam", "alice");
    let bob = AgentKey::new("fam", "bob");
    let mut m = say(human("husam"), "Dinner at 8?");
    m.idempotency_key = Some("dinner".into());
    faults.break_inbox(&bob, true).await;
    let err = store.post_message(&family, &m).await.unwrap_err();
    assert_eq!(err.category(), "store_unavailable", "{err}");
    // The post's own step is done: the message is in the log and alice has it; bob has not.
    let log = recent(store, &family).await;
    assert_eq!(log.len(), 1);
    assert_eq!(store.inbox_depth(&alice).await.unwrap(), 1);
    assert_eq!(store.inbox_depth(&bob).await.unwrap(), 0);
    // A retry while bob's inbox is still broken fails again, and gives alice nothing twice.
    assert!(store.post_message(&family, &m).await.is_err());
    assert_eq!(store.inbox_depth(&alice).await.unwrap(), 1);

    faults.break_inbox(&bob, false).await;
    let retried = store.post_message(&family, &m).await.unwrap();
    assert!(retried.duplicate);
    assert_eq!(retried.id, log[0].id);
    assert_eq!(
        retried.delivered,
        ["bob"],
        "only the agent the fan-out missed"
    );
    let events = store.peek_inbox(&bob, 10).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].id, format!("msg:family:{}", log[0].id));
    assert_eq!(events[0].text.as_deref(), Some("Dinner at 8?"));
    assert_eq!(store.inbox_depth(&alice).await.unwrap(), 1);
    // The fan-out is finished: one more retry delivers nothing, and the log has one message.
    let again = store.post_message(&family, &m).await.unwrap();
    assert!(again.duplicate);
    assert!(again.delivered.is_empty());
    assert_eq!(recent(store, &family).await.len(), 1);
    assert_eq!(store.inbox_depth(&bob).await.unwrap(), 1);

    // Without a key nothing can find the post again: it stays posted, and the error says the
    // delivery failed.
    faults.break_inbox(&bob, true).await;
    assert!(store
        .post_message(&family, &say(human("husam"), "no key"))
        .await
        .is_err());
    assert_eq!(recent(store, &family).await.len(), 2);
    assert_eq!(store.inbox_depth(&alice).await.unwrap(), 2);
    assert_eq!(store.inbox_depth(&bob).await.unwrap(), 1);
}

//! A model with fallbacks: an ordered list of models (each with its own endpoint and key),
//! the next tried when one fails in a way another provider may not — it is unreachable,
//! times out, answers 5xx, or still rate-limits after its own retries. A request the provider
//! refused (4xx, credentials) or answered unusably fails as it is: another provider would
//! refuse it too, or it is this request's problem.
//!
//! It stays on the model that last answered (a provider's prompt cache serves the requests
//! that follow only if they go to it), and tries the first again once `retry_after` has
//! passed since it left it. A model that has streamed part of an answer is not fallen over
//! from: what it streamed has been shown. Each switch is told to `on_switch` (metrics, the
//! cycle's record); [`Fallback::in_use`] says which answers now.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::{Delta, Failure, Model, ModelError, Request, Turn};
use crate::sync::lock;

/// One model of the list: its name (what metrics and records say) and its client.
pub struct Link {
    /// The name it is known by (a Model resource's).
    pub name: String,
    /// Its client, with its own endpoint and key.
    pub model: Box<dyn Model>,
}

/// A change of the model in use: from, to, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Switch {
    /// The model left.
    pub from: String,
    /// The model now in use.
    pub to: String,
    /// Why: the failure of the model left (`server_error`, …), or `recovered` when the
    /// first answers again.
    pub reason: &'static str,
}

/// What hears of every switch.
pub type OnSwitch = Box<dyn Fn(&Switch) + Send + Sync>;

/// Which model of a list is in use, and since when.
pub struct InUse {
    index: usize,
    since: Instant,
}

impl Default for InUse {
    fn default() -> Self {
        Self {
            index: 0,
            since: Instant::now(),
        }
    }
}

/// Which model of each list answers, shared by the agents of a process that ask the same
/// list: an outage one agent met is known to the others (none pays the failing model's
/// retries again), and an agent loaded anew keeps it.
#[derive(Clone, Default)]
pub struct Lists(std::sync::Arc<Mutex<std::collections::HashMap<String, Shared>>>);

/// One list's [`InUse`], shared.
pub type Shared = std::sync::Arc<Mutex<InUse>>;

/// Lists a process keeps (more are forgotten: a changed list is a new one).
const LISTS: usize = 1024;

impl Lists {
    /// The state of the list `id` (its namespace and what it asks).
    pub fn state(&self, id: &str) -> Shared {
        let mut lists = lock(&self.0);
        if lists.len() >= LISTS && !lists.contains_key(id) {
            lists.clear();
        }
        lists.entry(id.to_string()).or_default().clone()
    }
}

/// Models tried in order (see the module's description).
pub struct Fallback {
    links: Vec<Link>,
    retry_after: Duration,
    in_use: Shared,
    on_switch: OnSwitch,
    /// The switches not yet taken by [`Model::switches`] (the newest [`KEPT`]).
    recent: Mutex<Vec<Switch>>,
}

/// Switches kept for the cycle to take.
const KEPT: usize = 16;

/// Whether another provider may answer where this one failed so.
pub fn falls_over(failure: Failure) -> bool {
    matches!(
        failure,
        Failure::Unreachable
            | Failure::TimedOut
            | Failure::ServerError
            | Failure::RateLimited
            | Failure::NoKey
    )
}

impl Fallback {
    /// `links` in order (at least one), trying the first again `retry_after` after leaving
    /// it, telling `on_switch` of every change.
    pub fn new(links: Vec<Link>, retry_after: Duration, on_switch: OnSwitch) -> Self {
        Self {
            links,
            retry_after,
            in_use: Shared::default(),
            on_switch,
            recent: Mutex::new(Vec::new()),
        }
    }

    /// Shares which model is in use with the other agents asking the same list.
    pub fn sharing(mut self, in_use: Shared) -> Self {
        self.in_use = in_use;
        self
    }

    /// The models a request tries, in order: from the one in use on, or first the first
    /// again once it is time (then back to the one in use).
    fn order(&self) -> (Vec<usize>, bool) {
        let in_use = lock(&self.in_use);
        let retrying = in_use.index > 0 && in_use.since.elapsed() >= self.retry_after;
        let from_in_use = in_use.index.min(self.links.len().saturating_sub(1))..self.links.len();
        if retrying {
            (std::iter::once(0).chain(from_in_use).collect(), true)
        } else {
            (from_in_use.collect(), false)
        }
    }

    /// The first failed again: the next try of it waits another `retry_after`.
    fn still_failing(&self) {
        lock(&self.in_use).since = Instant::now();
    }

    /// Notes that `index` answered, or that the request moved to it after `failure`.
    fn moved(&self, index: usize, reason: &'static str) {
        let mut in_use = lock(&self.in_use);
        if in_use.index == index {
            return;
        }
        let name = |i: usize| {
            self.links
                .get(i)
                .map(|l| l.name.clone())
                .unwrap_or_default()
        };
        let switch = Switch {
            from: name(in_use.index),
            to: name(index),
            reason,
        };
        *in_use = InUse {
            index,
            since: Instant::now(),
        };
        drop(in_use);
        (self.on_switch)(&switch);
        let mut recent = lock(&self.recent);
        if recent.len() == KEPT {
            recent.remove(0);
        }
        recent.push(switch);
    }
}

#[async_trait]
impl Model for Fallback {
    async fn complete(
        &self,
        request: &Request,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<Turn, ModelError> {
        let (order, retrying) = self.order();
        let mut why: Option<Failure> = None;
        let last = order.len().saturating_sub(1);
        for (at, index) in order.into_iter().enumerate() {
            let Some(link) = self.links.get(index) else {
                break;
            };
            let mut streamed = false;
            let mut forward = |d: Delta| {
                streamed = true;
                on_delta(d);
            };
            match link.model.complete(request, &mut forward).await {
                Ok(turn) => {
                    self.moved(index, why.map_or("recovered", Failure::as_str));
                    return Ok(turn);
                }
                Err(e) => {
                    let retried = retrying && index == 0;
                    if retried {
                        self.still_failing();
                    }
                    // Trying the first again never costs the answer of the one in use.
                    if streamed || !(retried || falls_over(e.failure)) || at == last {
                        return Err(ModelError::new(
                            e.failure,
                            format!("model {}: {}", link.name, e.detail),
                        ));
                    }
                    why = Some(e.failure);
                }
            }
        }
        Err(ModelError::new(Failure::Refused, "no model to ask"))
    }

    fn in_use(&self) -> Option<String> {
        let index = lock(&self.in_use).index;
        self.links.get(index).map(|l| l.name.clone())
    }

    fn switches(&self) -> Vec<Switch> {
        std::mem::take(&mut *lock(&self.recent))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::testing::{MockModel, MockTurn};

    fn request() -> Request {
        Request {
            system: "You are a test.".into(),
            messages: vec![super::super::Message::user("hi")],
            context: String::new(),
            tools: Vec::new(),
            tool_choice: Default::default(),
        }
    }

    /// A link to the model server at `url` (an OpenAI-compatible endpoint), retrying at once.
    fn link(name: &str, url: &str, timeout_seconds: u32) -> Link {
        let spec: crate::crd::ModelSpec = serde_yaml::from_str(&format!(
            "{{provider: openai, name: {name}, baseUrl: '{url}', timeoutSeconds: {timeout_seconds}}}"
        ))
        .unwrap();
        let client = super::super::openai::OpenAi::new(&spec, Default::default())
            .unwrap()
            .with_backoff(Duration::from_millis(1));
        let limit = Duration::from_secs(u64::from(timeout_seconds));
        Link {
            name: name.into(),
            model: Box::new(super::super::deadline::Deadline::new(
                Box::new(client),
                limit,
            )),
        }
    }

    /// A fallback of `links`, and the switches it told.
    fn chain(links: Vec<Link>, retry_after: Duration) -> (Fallback, Arc<Mutex<Vec<Switch>>>) {
        let told = Arc::new(Mutex::new(Vec::new()));
        let sink = told.clone();
        let f = Fallback::new(
            links,
            retry_after,
            Box::new(move |s| lock(&sink).push(s.clone())),
        );
        (f, told)
    }

    async fn ask(f: &Fallback) -> Result<String, ModelError> {
        f.complete(&request(), &mut |_| {})
            .await
            .map(|t| t.text.unwrap_or_default())
    }

    /// A backup that always answers.
    async fn backup() -> MockModel {
        MockModel::responding(|_| MockTurn::text("from backup"))
            .await
            .unwrap()
    }

    /// `primary`, then `backup`, trying the primary again `retry_after` after leaving it.
    fn primary_then(
        primary: &MockModel,
        backup: &MockModel,
        retry_after: Duration,
    ) -> (Fallback, Arc<Mutex<Vec<Switch>>>) {
        chain(
            vec![
                link("primary", &primary.base_url, 30),
                link("backup", &backup.base_url, 30),
            ],
            retry_after,
        )
    }

    fn failing(status: u16) -> impl Fn(&serde_json::Value) -> MockTurn {
        move |_| MockTurn::Status(status, "down".into())
    }

    #[tokio::test]
    async fn a_failing_provider_falls_over_and_the_next_stays_in_use() {
        for (status, reason) in [(500, "server_error"), (429, "rate_limited")] {
            let primary = MockModel::responding(failing(status)).await.unwrap();
            let backup = backup().await;
            let (f, told) = primary_then(&primary, &backup, Duration::from_secs(3600));
            assert_eq!(ask(&f).await.unwrap(), "from backup");
            let tried = primary.request_count();
            assert_eq!(tried, 4, "the primary's own retries first ({status})");
            assert_eq!(
                *lock(&told),
                [Switch {
                    from: "primary".into(),
                    to: "backup".into(),
                    reason
                }]
            );
            // The next requests go straight to the backup: its prompt cache serves them.
            assert_eq!(ask(&f).await.unwrap(), "from backup");
            assert_eq!(primary.request_count(), tried);
            assert_eq!(backup.request_count(), 2);
            assert_eq!(f.in_use().as_deref(), Some("backup"));
        }
    }

    #[tokio::test]
    async fn unreachable_and_timed_out_fall_over_and_a_refusal_does_not() {
        let closed = format!(
            "http://127.0.0.1:{}/v1",
            crate::testing::free_port().unwrap()
        );
        let slow = MockModel::responding(|_| {
            MockTurn::Slow(Duration::from_secs(5), Box::new(MockTurn::text("too late")))
        })
        .await
        .unwrap();
        let backup = backup().await;
        for (first, reason) in [
            (closed.as_str(), "unreachable"),
            (&slow.base_url, "timed_out"),
        ] {
            let (f, told) = chain(
                vec![
                    link("first", first, 1),
                    link("backup", &backup.base_url, 30),
                ],
                Duration::from_secs(3600),
            );
            assert_eq!(ask(&f).await.unwrap(), "from backup");
            assert_eq!(lock(&told)[0].reason, reason);
        }
        // A request the provider refused would be refused elsewhere too: it fails as it is.
        let refusing = MockModel::responding(failing(400)).await.unwrap();
        let before = backup.request_count();
        let (f, told) = chain(
            vec![
                link("strict", &refusing.base_url, 30),
                link("backup", &backup.base_url, 30),
            ],
            Duration::from_secs(3600),
        );
        let e = ask(&f).await.unwrap_err();
        assert_eq!(e.failure, Failure::Refused);
        assert!(e.detail.starts_with("model strict: "), "{}", e.detail);
        assert_eq!(backup.request_count(), before);
        assert!(lock(&told).is_empty());
        // The last of the list failing fails the request, saying which.
        let down = MockModel::responding(failing(503)).await.unwrap();
        let (f, _) = chain(
            vec![link("a", &down.base_url, 30), link("b", &down.base_url, 30)],
            Duration::from_secs(3600),
        );
        let e = ask(&f).await.unwrap_err();
        assert_eq!(e.failure, Failure::ServerError);
        assert!(e.detail.starts_with("model b: "), "{}", e.detail);
    }

    #[tokio::test]
    async fn the_first_is_tried_again_after_a_while_and_kept_once_it_answers() {
        let mut turns: Vec<MockTurn> = (0..8)
            .map(|_| MockTurn::Status(500, "down".into()))
            .collect();
        turns.push(MockTurn::text("primary is back"));
        let primary = MockModel::start(turns).await.unwrap();
        let backup = backup().await;
        // Long enough that a loaded machine asks twice within it.
        let (f, told) = primary_then(&primary, &backup, Duration::from_millis(800));
        assert_eq!(ask(&f).await.unwrap(), "from backup");
        // Too soon: the backup answers, the primary is not asked.
        assert_eq!(ask(&f).await.unwrap(), "from backup");
        assert_eq!(primary.request_count(), 4);
        // After a while the primary is tried again: still failing, the backup answers, and
        // the next try of the primary waits another while.
        tokio::time::sleep(Duration::from_millis(900)).await;
        assert_eq!(ask(&f).await.unwrap(), "from backup");
        assert_eq!(primary.request_count(), 8);
        assert_eq!(ask(&f).await.unwrap(), "from backup");
        assert_eq!(primary.request_count(), 8);
        // Then it answers, and stays in use.
        tokio::time::sleep(Duration::from_millis(900)).await;
        assert_eq!(ask(&f).await.unwrap(), "primary is back");
        assert_eq!(f.in_use().as_deref(), Some("primary"));
        let reasons: Vec<&str> = lock(&told).iter().map(|s| s.reason).collect();
        assert_eq!(reasons, ["server_error", "recovered"]);
    }

    /// A link whose key cannot be read (its Secret is not mounted).
    fn keyless(name: &str, url: &str) -> Link {
        let spec: crate::crd::ModelSpec = serde_yaml::from_str(&format!(
            "{{provider: openai, name: {name}, baseUrl: '{url}'}}"
        ))
        .unwrap();
        let unreadable: crate::model::ReadKey =
            Arc::new(|| Err("Secret \"gone\" is not mounted".to_string()));
        let client =
            super::super::openai::OpenAi::new(&spec, crate::model::ApiKey::Read(unreadable))
                .unwrap()
                .with_backoff(Duration::from_millis(1));
        Link {
            name: name.into(),
            model: Box::new(client),
        }
    }

    #[tokio::test]
    async fn a_key_that_cannot_be_read_falls_over_without_asking_its_model() {
        let primary = backup().await;
        let backup = MockModel::responding(|_| MockTurn::text("from the second"))
            .await
            .unwrap();
        let (f, told) = chain(
            vec![
                keyless("first", &primary.base_url),
                link("second", &backup.base_url, 30),
            ],
            Duration::from_secs(3600),
        );
        assert_eq!(ask(&f).await.unwrap(), "from the second");
        assert_eq!(
            primary.request_count(),
            0,
            "a model without its key is not asked"
        );
        assert_eq!(lock(&told)[0].reason, "no_key");
    }

    #[tokio::test]
    async fn trying_the_first_again_never_costs_the_answer() {
        // Down (500), then refusing the request (400): asked again, its refusal does not
        // fail the request, which the model in use answers.
        let mut turns: Vec<MockTurn> = (0..4)
            .map(|_| MockTurn::Status(500, "down".into()))
            .collect();
        turns.push(MockTurn::Status(400, "not this".into()));
        let primary = MockModel::start(turns).await.unwrap();
        let backup = backup().await;
        let (f, _) = primary_then(&primary, &backup, Duration::from_millis(1));
        assert_eq!(ask(&f).await.unwrap(), "from backup");
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(ask(&f).await.unwrap(), "from backup");
        assert_eq!(primary.request_count(), 5, "the first was asked again");
    }

    #[tokio::test]
    async fn agents_asking_one_list_share_which_model_answers() {
        let primary = MockModel::responding(failing(500)).await.unwrap();
        let backup = backup().await;
        let lists = Lists::default();
        let shared = || {
            let (f, _) = primary_then(&primary, &backup, Duration::from_secs(3600));
            f.sharing(lists.state("ns\nlist"))
        };
        let (first, second) = (shared(), shared());
        assert_eq!(ask(&first).await.unwrap(), "from backup");
        let tried = primary.request_count();
        // Another agent of the list (or this one loaded anew) goes to the backup at once.
        assert_eq!(ask(&second).await.unwrap(), "from backup");
        assert_eq!(
            primary.request_count(),
            tried,
            "the failing model is not asked again"
        );
        assert_eq!(second.in_use().as_deref(), Some("backup"));
        // Another list is its own.
        let (other, _) = primary_then(&primary, &backup, Duration::from_secs(3600));
        let other = other.sharing(lists.state("ns\nanother"));
        assert_eq!(other.in_use().as_deref(), Some("primary"));
    }
}

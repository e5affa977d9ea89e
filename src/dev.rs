//! `agentfleet dev DIR`: the whole system on one machine, no cluster and no Redis.
//!
//! Loads the Agent and Space manifests in DIR (the YAML `kubectl apply` takes; `kind: Secret`
//! documents give the tools' `headersFrom`, never printed), refuses what
//! the API server would (schema, names, namespaces), validates the Agents as the operator
//! does and refuses those that could not call their model, derives membership with the
//! operator's own function, and runs the gateway plus one in-process worker per agent on the
//! embedded store (or on Redis with `--redis`). Prints the gateway's URL, a token per human
//! member and the `chat` command to use.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use futures::{FutureExt as _, StreamExt as _, TryStreamExt as _};
use kube::ResourceExt;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::crd::{Agent, MemberKind, Space};
use crate::gateway::auth::{new_token, Entity, EntityKind, Tokens};
use crate::gateway::{self, Gateway, Limits};
use crate::identity::{AgentKey, SpaceKey};
use crate::manifests::{self, Manifests};
use crate::membership::{self};
use crate::operator::dataplane::gauges::watch_fleet;
use crate::operator::dataplane::Tuning;
use crate::store::RedisArgs;
use crate::store::{MemoryStore, Store, WakeScope};
use crate::telemetry::data_plane::{self, watch_data_plane};
use crate::telemetry::{self, OperatorMetrics, WorkerMetrics};
use crate::worker::pool::{Pool, PoolConfig};
use crate::worker::tools::secrets::Secrets;
use crate::worker::Health;

/// Data-plane writes at once while `dev` starts.
const AT_ONCE: usize = 64;
/// Cycles at once in `dev`'s pool.
const DEV_CYCLES_AT_ONCE: usize = 64;
/// Agents `dev` keeps loaded between their sessions.
const DEV_WARM_AGENTS: usize = 1_000;

/// The id of the service token `dev` prints (it may trigger and call every agent).
const DEV_SERVICE: &str = "dev";

/// Flags of `agentfleet dev`.
#[derive(clap::Args, Debug, Clone)]
#[command(mut_args(|a| RedisArgs::optional(a, "Use this Redis instead of the embedded store")))]
pub struct Args {
    /// Directory of Agent, Space and Secret manifests (`*.yaml`, `*.yml`; several documents a
    /// file).
    pub dir: PathBuf,
    /// Address of the gateway (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: SocketAddr,
    /// Redis instead of the embedded store (the shared flag, made optional).
    #[command(flatten)]
    pub redis: Option<RedisArgs>,
    /// Namespace of manifests that name none.
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// Where checkpoints are archived (then a restart of `dev` on the embedded store recovers
    /// every agent's consciousness from it).
    #[command(flatten)]
    pub archive: crate::archive::ArchiveFlag,
}

/// Reads the manifests of `dir` ([`manifests::read_dir`]) and refuses what the API server and
/// the operator would: malformed documents, duplicate objects, invalid Agent specs, an Agent
/// whose `headersFrom` names a Secret the directory does not hold (as the operator's
/// `ToolsConfigured` does), a Model whose fallbacks or key do not resolve and an Agent naming
/// a Model that is not there (each Agent's model is resolved as the operator resolves it),
/// an agent that needs an API key when `api_key` (the
/// `AGENTFLEET_MODEL_API_KEY` dev gives every agent) is none. Every problem at once,
/// so one run says what to fix.
pub fn load_dir(dir: &Path, namespace: &str, api_key: Option<&str>) -> anyhow::Result<Manifests> {
    let (mut out, mut problems) = manifests::read_dir(dir, namespace)?;
    problems.extend(out.resolve_models());
    problems.extend(check(&out));
    problems.extend(missing_keys(&out, api_key));
    if !problems.is_empty() {
        bail!("invalid manifests:\n  {}", problems.join("\n  "));
    }
    Ok(out)
}

/// What the operator would refuse: duplicate objects, invalid Agent specs, missing Secrets.
fn check(m: &Manifests) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    let mut problems = Vec::new();
    for a in &m.agents {
        let name = a.name_any();
        if !seen.insert(("Agent", a.namespace(), name.clone())) {
            problems.push(format!("Agent {name} appears twice"));
        }
        for p in crate::operator::agent::validate(&name, &a.spec) {
            problems.push(format!("Agent {name}: {p}"));
        }
        // A missing `headersFrom` Secret, as the operator's `ToolsConfigured` says it.
        let namespace = a.namespace().unwrap_or_default();
        let missing: Vec<&str> = a
            .spec
            .tools
            .secrets()
            .into_iter()
            .filter(|s| {
                !m.secrets
                    .contains_key(&(namespace.clone(), (*s).to_string()))
            })
            .collect();
        if !missing.is_empty() {
            problems.push(format!(
                "Agent {name}: Secret {} not found (headersFrom of {}): add a `kind: Secret` document to the directory",
                missing.join(", "),
                a.spec.tools.secret_users(&missing)
            ));
        }
    }
    for s in &m.spaces {
        let name = s.name_any();
        if !seen.insert(("Space", s.namespace(), name.clone())) {
            problems.push(format!("Space {name} appears twice"));
        }
    }
    problems
}

/// The agents that would start and fail every cycle for want of an API key (`dev` gives
/// every agent's first model `AGENTFLEET_MODEL_API_KEY`, else the key of the Secret it names
/// in the directory; paused agents do not start).
fn missing_keys(m: &Manifests, api_key: Option<&str>) -> Vec<String> {
    if api_key.is_some_and(|k| !k.is_empty()) {
        return Vec::new();
    }
    m.agents
        .iter()
        .filter(|a| !a.spec.paused && a.spec.model.needs_api_key())
        .filter(|a| {
            let ns = a.namespace().unwrap_or_default();
            a.spec.model.api_key_secret_ref.as_ref().is_none_or(|r| {
                !m.secrets
                    .get(&(ns, r.name.clone()))
                    .is_some_and(|data| data.contains_key(&r.key))
            })
        })
        .map(|a| {
            format!(
                "Agent {}/{}: provider {} at its public endpoint needs an API key: set AGENTFLEET_MODEL_API_KEY, add the Secret its model names to the directory, or give model.baseUrl (a local server that takes no key)",
                a.namespace().unwrap_or_default(),
                a.name_any(),
                a.spec.model.provider().as_str()
            )
        })
        .collect()
}

/// A human who can chat, with a fresh token.
pub struct DevHuman {
    /// Member id.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Bearer token.
    pub token: String,
    /// Spaces they are a member of.
    pub spaces: Vec<SpaceKey>,
}

/// A running `dev`: the gateway and the workers.
pub struct Dev {
    /// The gateway's address.
    pub addr: SocketAddr,
    /// Tokens for the human members.
    pub humans: Vec<DevHuman>,
    /// A service token that may trigger every agent.
    pub service_token: String,
    /// Spaces and their member names (agents, then humans).
    pub spaces: BTreeMap<SpaceKey, Vec<String>>,
    /// The agents running.
    pub agents: Vec<AgentKey>,
    /// The agents served over A2A.
    pub a2a: Vec<AgentKey>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Dev {
    /// Starts everything described by `manifests` on `store`.
    pub async fn start(
        manifests: Manifests,
        store: Arc<dyn Store>,
        addr: SocketAddr,
        archive: Option<crate::archive::Archive>,
    ) -> anyhow::Result<Self> {
        let api_key = std::env::var("AGENTFLEET_MODEL_API_KEY").ok();
        let missing = missing_keys(&manifests, api_key.as_deref());
        if !missing.is_empty() {
            bail!("{}", missing.join("\n"));
        }
        store.ping().await.context("data plane")?;
        let agent_refs: Vec<&Agent> = manifests.agents.iter().collect();
        let space_refs: Vec<&Space> = manifests.spaces.iter().collect();
        let existing = membership::existing(&space_refs);
        for a in &manifests.agents {
            let missing = membership::missing_spaces(a, &existing);
            if !missing.is_empty() {
                warn!(agent = %a.name_any(), missing = %missing.join(", "), "the agent names spaces that are not in the directory");
            }
        }
        let derived = membership::derive(&agent_refs, &space_refs);
        let mut spaces = BTreeMap::new();
        let mut records = Vec::new();
        let mut humans: BTreeMap<String, DevHuman> = BTreeMap::new();
        for s in &manifests.spaces {
            let key = SpaceKey::of(s);
            let members = derived.get(&key).cloned().unwrap_or_default();
            for m in members.iter().filter(|m| m.kind == MemberKind::Human) {
                if !humans.contains_key(&m.id) {
                    let human = DevHuman {
                        id: m.id.clone(),
                        name: m.name.clone(),
                        token: new_token("af_")?,
                        spaces: Vec::new(),
                    };
                    humans.insert(m.id.clone(), human);
                }
                if let Some(h) = humans.get_mut(&m.id) {
                    h.spaces.push(key.clone());
                }
            }
            spaces.insert(
                key.clone(),
                members.iter().map(|m| m.name.clone()).collect(),
            );
            records.push((key, membership::record(s, &members)));
        }
        // Many at once: a large fleet starts in about a second on a remote Redis too.
        futures::stream::iter(records.iter().map(|(key, record)| {
            let store = store.clone();
            async move {
                store
                    .apply_space(key, record)
                    .await
                    .map(|_| ())
                    .with_context(|| format!("applying space {key}"))
            }
        }))
        .buffer_unordered(AT_ONCE)
        .try_collect::<Vec<()>>()
        .await?;

        let service_token = new_token("af_")?;
        let mut pairs: Vec<(String, Entity)> = humans
            .values()
            .map(|h| {
                (
                    h.token.clone(),
                    Entity {
                        kind: EntityKind::Human,
                        id: h.id.clone(),
                        name: h.name.clone(),
                        agents: Vec::new(),
                        groups: Vec::new(),
                    },
                )
            })
            .collect();
        pairs.push((
            service_token.clone(),
            Entity {
                kind: EntityKind::Service,
                id: DEV_SERVICE.into(),
                name: DEV_SERVICE.into(),
                agents: vec!["*".into()],
                groups: Vec::new(),
            },
        ));

        let metrics = WorkerMetrics::new().context("registering metrics")?;
        // What the operator would show of the fleet, from the same observations (nothing
        // scales here: its scale counters stay at 0).
        let fleet = OperatorMetrics::register(&metrics.registry).context("registering metrics")?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let gw = Gateway::new(
            store.clone(),
            Tokens::from_plain(pairs),
            Limits::default(),
            &metrics.registry,
            shutdown_rx.clone(),
        )
        .context("registering metrics")?;
        // One person's machine, no cluster: every person of dev may inspect and restore.
        gw.set_access(gateway::access::Access::Everyone);
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on {addr} (choose another with --addr)"))?;
        let addr = listener.local_addr().context("listening address")?;
        gw.set_public_url(format!("http://{addr}"));
        let server = tokio::spawn(gateway::serve(
            listener,
            gw.clone(),
            metrics.registry.clone(),
        ));

        let holder = telemetry::process_identity(None, "dev");
        let mut tasks = Vec::new();
        let mut agents = Vec::new();
        let mut plans = Vec::new();
        let mut watched = Vec::new();
        let mut running = Vec::new();
        let host = crate::worker::host::Host {
            store: store.clone(),
            metrics: metrics.clone(),
            api_key: api_key.clone(),
            // The Secrets of each agent's namespace, for its tools' `headersFrom`.
            secrets: manifests
                .agents
                .iter()
                .map(|a| a.namespace().unwrap_or_else(|| "default".into()))
                .map(|ns| {
                    let secrets = Secrets::from_map(manifests.secrets_of(&ns));
                    (ns, secrets)
                })
                .collect(),
            callback_url: Some(format!("http://{addr}")),
            archive,
            lists: Default::default(),
        };
        gw.set_rehearser(Arc::new(DevRehearser {
            store: store.clone(),
            agents: manifests
                .agents
                .iter()
                .map(|a| (crate::worker::host::key_of(a), a.clone()))
                .collect(),
            models: manifests.models.clone(),
            secrets: host.secrets.clone(),
            api_key: api_key.clone(),
        }));
        let keys: Vec<AgentKey> = manifests
            .agents
            .iter()
            .map(crate::worker::host::key_of)
            .collect();
        let a2a: Vec<AgentKey> = manifests
            .agents
            .iter()
            .zip(&keys)
            .filter(|(a, _)| a.spec.a2a.as_ref().is_some_and(|x| x.enabled))
            .map(|(_, k)| k.clone())
            .collect();
        futures::stream::iter(manifests.agents.iter().zip(&keys).map(|(agent, key)| {
            let store = store.clone();
            // The dev service token may call every A2A agent (dev is one person's sandbox).
            let card = crate::store::records::a2a_record(agent).map(|mut r| {
                if !r.admits("service", DEV_SERVICE) {
                    r.callers.push(format!("service:{DEV_SERVICE}"));
                }
                r
            });
            let facts = crate::store::records::agent_facts(agent, None);
            async move {
                store.register_agent(key).await?;
                store.apply_a2a(key, card.as_ref()).await?;
                store.apply_facts(key, &facts).await.map(|_| ())
            }
            .map(move |r| r.with_context(|| format!("registering agent {key}")))
        }))
        .buffer_unordered(AT_ONCE)
        .try_collect::<Vec<()>>()
        .await?;
        for (agent, key) in manifests.agents.into_iter().zip(keys) {
            // Plans fire into the inbox as the operator would fire them (a paused agent's
            // queue until it is resumed).
            plans.push((key.clone(), agent.spec.plans.clone()));
            watched.push((
                key.clone(),
                if agent.spec.paused { 0 } else { 1 },
                agent.spec.budget.clone(),
            ));
            if agent.spec.paused {
                info!(agent = %key, "paused; not started");
                continue;
            }
            // A model that cannot be made is refused now, not at the agent's first wake.
            host.model(&agent)?;
            running.push(agent);
            agents.push(key);
        }
        // Every agent in one pool, as a pool process runs them.
        let health = Arc::new(Health::default());
        let build_host = host.clone();
        let pool = Pool::new(
            PoolConfig {
                name: "dev".into(),
                scope: WakeScope::All,
                holder,
                lease_ttl: Duration::from_secs(15),
                cycles_at_once: DEV_CYCLES_AT_ONCE,
                warm_agents: DEV_WARM_AGENTS,
                sweep_every: Duration::from_secs(5),
            },
            store.clone(),
            metrics.clone(),
            health.clone(),
            Some(Arc::new(move |agent: &Agent| build_host.agentlet(agent))),
            shutdown_rx.clone(),
        );
        pool.set_manifests(running);
        {
            let pool = pool.clone();
            tasks.push(tokio::spawn(async move {
                pool.run(Duration::from_secs(30)).await;
            }));
        }
        // Ready only while the pool can work.
        let pool_up = health.clone();
        gw.set_readiness(Arc::new(move || health.ready()));
        tasks.push(tokio::spawn(crate::plans::run(
            store.clone(),
            plans,
            fleet.plans_fired.clone(),
            shutdown_rx.clone(),
        )));
        tasks.push(tokio::spawn(watch_data_plane(
            store.clone(),
            fleet.data_plane_up.clone(),
            data_plane::EVERY,
            shutdown_rx.clone(),
        )));
        tasks.push(tokio::spawn(watch_fleet(
            store.clone(),
            watched,
            Arc::new(move || pool_up.ready().is_ok()),
            fleet,
            Tuning::default().sweep,
            shutdown_rx.clone(),
        )));
        Ok(Self {
            addr,
            humans: humans.into_values().collect(),
            service_token,
            spaces,
            agents,
            a2a,
            shutdown,
            tasks,
            server,
        })
    }

    /// What to tell the user: where the gateway is and how to chat.
    pub fn banner(&self) -> String {
        let url = format!("http://{}", self.addr);
        let mut out = format!(
            "agentfleet dev: {} agent(s) thinking, {} space(s)\n\n  gateway   {url}   (OpenAPI {url}/openapi.json, metrics {url}/metrics)\n  console   {url}/console/   (sign in with a token below)\n",
            self.agents.len(),
            self.spaces.len()
        );
        for (key, members) in &self.spaces {
            out.push_str(&format!("  space     {key}: {}\n", members.join(", ")));
        }
        out.push('\n');
        for h in &self.humans {
            for space in &h.spaces {
                out.push_str(&format!(
                    "  chat in {space} as {}:\n    agentfleet chat {space} --gateway {url} --token {}\n",
                    h.name, h.token
                ));
            }
        }
        // A real agent (the first running one), so the example works as printed.
        if let Some(agent) = self.agents.first() {
            out.push_str(&format!(
                "\n  trigger {agent} as a service (it answers in its space):\n    curl -H 'Authorization: Bearer {}' -H 'Content-Type: application/json' \\\n      -d '{{\"text\": \"deploy finished\"}}' {url}/v1/agents/{}/{}/events\n",
                self.service_token, agent.namespace, agent.name
            ));
        }
        for agent in &self.a2a {
            let base = crate::gateway::a2a::card::agent_url(&url, agent);
            out.push_str(&format!(
                "\n  {agent} over A2A (its card: {base}/.well-known/agent-card.json):\n    curl -H 'Authorization: Bearer {}' -H 'A2A-Version: 1.0' -H 'Content-Type: application/json' \\\n      -d '{{\"message\": {{\"messageId\": \"m1\", \"role\": \"ROLE_USER\", \"parts\": [{{\"text\": \"hello\"}}]}}}}' {base}/message:send\n",
                self.service_token
            ));
        }
        out.push_str("\nCtrl-C stops (a cycle under way is finished first; a second Ctrl-C stops at once).\n");
        out
    }

    /// Stops the workers (each finishes its cycle) and the gateway.
    pub async fn stop(self) {
        let _ = self.shutdown.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
        let _ = self.server.await;
    }
}

/// `agentfleet dev`.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let api_key = std::env::var("AGENTFLEET_MODEL_API_KEY").ok();
    let manifests = load_dir(&args.dir, &args.namespace, api_key.as_deref())?;
    if manifests.agents.is_empty() && manifests.spaces.is_empty() {
        bail!(
            "{} holds no Agent or Space manifests (apiVersion agentfleet.dev/v1alpha1)",
            args.dir.display()
        );
    }
    let store: Arc<dyn Store> = match &args.redis {
        Some(redis) => Arc::new(redis.store().context("data plane")?),
        None => Arc::new(MemoryStore::new()),
    };
    let stop = telemetry::shutdown_signal();
    let archive = args.archive.open()?;
    let dev = Dev::start(manifests, store, args.addr, archive).await?;
    // Whoever started it may stop reading once it has the banner (a closed pipe is no reason
    // to stop serving, and `println!` would panic on it).
    {
        use std::io::Write as _;
        let mut stdout = std::io::stdout().lock();
        if let Err(e) = writeln!(stdout, "{}", dev.banner()).and_then(|()| stdout.flush()) {
            warn!(error = %e, "the banner could not be printed");
        }
    }
    stop.await;
    info!("stopping: finishing the cycles under way (Ctrl-C again stops at once)");
    dev.stop().await;
    Ok(())
}

/// Rehearsals in place for dev's gateway: its agents as their manifests say, its model key.
struct DevRehearser {
    store: Arc<dyn Store>,
    agents: BTreeMap<AgentKey, Agent>,
    /// The directory's Models (a candidate may name one).
    models: Vec<crate::crd::ModelResource>,
    /// The directory's Secrets, by namespace (a candidate's key).
    secrets: BTreeMap<String, Secrets>,
    api_key: Option<String>,
}

#[async_trait::async_trait]
impl gateway::rehearsals::Rehearser for DevRehearser {
    async fn rehearse(
        &self,
        agent: &AgentKey,
        request: &gateway::rehearsals::RehearsalRequest,
    ) -> Result<crate::rehearsals::Recorded, String> {
        let Some(live) = self.agents.get(agent) else {
            return Err(format!("dev runs no agent {agent}"));
        };
        let run = crate::worker::rehearsal::InPlace {
            name: &request.name,
            change: &request.candidate,
            cycles: request.cycles,
            criteria: &request.criteria,
        };
        let models = crate::models::of_namespace(&self.models, &agent.namespace);
        let secrets = self
            .secrets
            .get(&agent.namespace)
            .cloned()
            .unwrap_or_default();
        let given = self.api_key.as_deref();
        let key =
            |s: &crate::crd::ModelSettings| crate::worker::host::model_key(given, &secrets, 0, s);
        crate::worker::rehearsal::in_place(self.store.as_ref(), live, run, &models, &key).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_redis_flag_is_optional_and_reads_no_environment() {
        use clap::{Args as _, FromArgMatches as _};
        let cmd = Args::augment_args(clap::Command::new("dev"));
        let arg = cmd.get_arguments().find(|a| a.get_id() == "redis").unwrap();
        assert_eq!(
            arg.get_env(),
            None,
            "AGENTFLEET_REDIS_URL does not move dev off its store"
        );
        assert!(arg.get_default_values().is_empty());
        // Nor does an environment set up for a TLS cluster with WAIT: no Redis flag reads it.
        let redis_flags: Vec<_> = cmd
            .get_arguments()
            .filter(|a| a.get_long().is_some_and(|l| l.starts_with("redis")))
            .collect();
        assert_eq!(redis_flags.len(), 5, "every Redis flag is checked here");
        for flag in redis_flags {
            assert_eq!(flag.get_env(), None, "{:?}", flag.get_long());
        }
        let parse = |argv: &[&str]| {
            let m = cmd.clone().try_get_matches_from(argv).unwrap();
            Args::from_arg_matches(&m).unwrap().redis.map(|r| r.url)
        };
        assert_eq!(parse(&["dev", "d"]), None, "no --redis: the embedded store");
        assert_eq!(
            parse(&["dev", "d", "--redis", "redis://r:1/"]).as_deref(),
            Some("redis://r:1/")
        );
    }

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::write(dir.join(name), text).unwrap();
    }

    fn tempdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("agentfleet-dev-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn the_samples_load() {
        let m = load_dir(Path::new("config/samples"), "default", None).unwrap();
        let mut agents: Vec<String> = m.agents.iter().map(|a| a.name_any()).collect();
        agents.sort();
        assert_eq!(agents, ["assistant", "oncall", "reviewer", "sre"]);
        assert_eq!(
            m.secrets_of("default").keys().collect::<Vec<_>>(),
            ["prometheus-auth", "tracker-mcp-auth"]
        );
        assert!(m
            .spaces
            .iter()
            .all(|s| s.namespace().as_deref() == Some("default")));
    }

    #[test]
    fn bad_manifests_are_refused_with_file_and_reason() {
        let d = tempdir("bad");
        write(
            &d,
            "a.yaml",
            "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n---\napiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {name: a}\nspec: {model: {provider: scripted, name: a}, cycle: {maxSteps: 0}}\n",
        );
        let err = format!("{:#}", load_dir(&d, "default", None).unwrap_err());
        assert!(
            err.contains("invalid Agent")
                && err.contains("spec.cycle.maxSteps: must be greater than or equal to 1"),
            "{err}"
        );

        write(
            &d,
            "a.yaml",
            "apiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {name: a}\nspec: {model: {provider: nope, name: a}}\n",
        );
        let err = format!("{:#}", load_dir(&d, "default", None).unwrap_err());
        assert!(
            err.contains("a.yaml (document 1)")
                && err.contains("spec.model.provider: unsupported value"),
            "{err}"
        );

        write(
            &d,
            "a.yaml",
            "apiVersion: agentfleet.dev/v1alpha1\nkind: Robot\nmetadata: {name: a}\n",
        );
        let err = format!("{:#}", load_dir(&d, "default", None).unwrap_err());
        assert!(err.contains("unknown agentfleet kind"), "{err}");

        write(
            &d,
            "a.yaml",
            "apiVersion: agentfleet.dev/v1alpha1\nkind: Space\nmetadata: {name: s}\nspec: {}\n---\napiVersion: agentfleet.dev/v1alpha1\nkind: Space\nmetadata: {name: s}\nspec: {}\n",
        );
        let err = format!("{:#}", load_dir(&d, "default", None).unwrap_err());
        assert!(err.contains("Space s appears twice"), "{err}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn names_the_api_server_refuses_are_refused_with_file_and_document() {
        let d = tempdir("names");
        let space =
            "apiVersion: agentfleet.dev/v1alpha1\nkind: Space\nmetadata: {name: lobby}\nspec: {}\n";
        let agent = |meta: &str| {
            format!("{space}---\napiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {meta}\nspec: {{model: {{provider: scripted, name: a}}, spaces: [lobby]}}\n")
        };
        for (text, want) in [
            (
                "apiVersion: agentfleet.dev/v1alpha1\nkind: Space\nmetadata: {name: ../etc}\nspec: {}\n".to_string(),
                "a.yaml (document 1): invalid Space: metadata.name: \"../etc\" is not a valid name",
            ),
            (
                agent("{name: Bad_Name!}"),
                "a.yaml (document 2): invalid Agent: metadata.name: \"Bad_Name!\" is not a valid name",
            ),
            (
                agent("{name: a, namespace: NS/evil}"),
                "a.yaml (document 2): invalid Agent: metadata.namespace: \"NS/evil\" is not a valid namespace",
            ),
            (
                agent("{labels: {x: y}}"),
                "a.yaml (document 2): invalid Agent: metadata.name is required",
            ),
            (
                agent(&format!("{{name: {}}}", "a".repeat(254))),
                "is not a valid name",
            ),
        ] {
            write(&d, "a.yaml", &text);
            let err = format!("{:#}", load_dir(&d, "default", None).unwrap_err());
            assert!(err.contains(want), "{want}\n{err}");
        }

        // The namespace given to manifests that name none.
        write(&d, "a.yaml", &agent("{name: a}"));
        load_dir(&d, "default", None).unwrap();
        for bad in ["NS/evil", "NS", "../etc", ""] {
            let err = format!("{:#}", load_dir(&d, bad, None).unwrap_err());
            assert!(
                err.starts_with("--namespace: ") && err.contains("is not a valid namespace"),
                "{bad}: {err}"
            );
        }
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn secrets_in_the_directory_reach_the_tools_of_their_namespace_and_a_missing_one_is_refused() {
        let d = tempdir("secrets");
        let agent = |secret: &str| {
            format!("apiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {{name: a}}\nspec:\n  model: {{provider: scripted, name: a}}\n  tools:\n    http:\n    - {{name: q, description: d, url: \"http://prom:9090/api/v1/query\", headersFrom: {{secretName: {secret}}}}}\n")
        };
        // "Bearer d4ta-value" in base64; stringData wins over data for one key.
        let secrets = "apiVersion: v1\nkind: Secret\nmetadata: {name: prom}\ndata: {Authorization: QmVhcmVyIGQ0dGEtdmFsdWU=, X-Scope: ZnJvbS1kYXRh}\nstringData: {X-Scope: s7ring-value}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: prom, namespace: other}\nstringData: {Authorization: elsewhere}\n";
        write(&d, "a.yaml", &agent("prom"));
        write(&d, "s.yaml", secrets);
        let m = load_dir(&d, "default", None).unwrap();
        let prom = BTreeMap::from([
            ("Authorization".to_string(), "Bearer d4ta-value".to_string()),
            ("X-Scope".to_string(), "s7ring-value".to_string()),
        ]);
        assert_eq!(
            m.secrets_of("default"),
            BTreeMap::from([("prom".to_string(), prom)])
        );
        assert_eq!(
            m.secrets_of("other")["prom"]["Authorization"],
            "elsewhere",
            "each namespace its own"
        );
        assert!(m.secrets_of("third").is_empty());

        // In another namespace only: missing, as the operator would say.
        write(
            &d,
            "a.yaml",
            &agent("prom").replace(
                "metadata: {name: a}",
                "metadata: {name: a, namespace: third}",
            ),
        );
        let err = format!("{:#}", load_dir(&d, "default", None).unwrap_err());
        assert!(
            err.contains("Agent a: Secret prom not found (headersFrom of HTTP tool q): add a `kind: Secret` document"),
            "{err}"
        );

        // Malformed or duplicate: refused, and no value is quoted.
        write(&d, "a.yaml", &agent("prom"));
        write(&d, "s.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: prom}\ndata: {Authorization: \"n0t-base64 s3cret!\"}\n");
        let err = format!("{:#}", load_dir(&d, "default", None).unwrap_err());
        assert!(
            err.contains("s.yaml (document 1): not a valid Secret"),
            "{err}"
        );
        assert!(!err.contains("s3cret"), "{err}");
        write(
            &d,
            "s.yaml",
            "apiVersion: v1\nkind: Secret\nmetadata: {name: prom}\ndata: {Authorization: /w==}\n",
        );
        let err = format!("{:#}", load_dir(&d, "default", None).unwrap_err());
        assert!(
            err.contains("Secret prom, key Authorization: not UTF-8 text"),
            "{err}"
        );
        write(
            &d,
            "s.yaml",
            &format!("{secrets}---\n{}", secrets.split("---").next().unwrap()),
        );
        let err = format!("{:#}", load_dir(&d, "default", None).unwrap_err());
        assert!(err.contains("Secret default/prom appears twice"), "{err}");
        assert!(!err.contains("d4ta") && !err.contains("s7ring"), "{err}");
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Issue 43: a new user fixed one problem a run, one layer at a time. Every problem of
    /// the directory — schema, YAML, a Space member, a duplicate, a missing Secret, a missing
    /// key — is said in one run, each with its place.
    #[test]
    fn every_problem_of_a_directory_is_said_in_one_run() {
        let d = tempdir("every-problem");
        write(
            &d,
            "a.yaml",
            "apiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {name: bad}\nspec: {model: {provider: scripted, name: x}, cycle: {maxSteps: 0}}\n---\napiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {name: twice}\nspec: {model: {provider: scripted, name: x}}\n---\napiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {name: twice}\nspec: {model: {provider: scripted, name: x}}\n",
        );
        write(
            &d,
            "b.yaml",
            "apiVersion: agentfleet.dev/v1alpha1\nkind: [not yaml\n",
        );
        write(
            &d,
            "c.yaml",
            "apiVersion: agentfleet.dev/v1alpha1\nkind: Space\nmetadata: {name: desk}\nspec: {members: [{id: system.serviceaccount.x.y}]}\n---\napiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {name: keyless}\nspec: {model: {provider: openai, name: gpt}}\n---\napiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {name: tooled}\nspec:\n  model: {provider: scripted, name: x}\n  tools:\n    http:\n      - name: status\n        description: The status page.\n        url: https://status.example.com\n        headersFrom: {secretName: gone}\n",
        );
        let err = format!("{:#}", load_dir(&d, "default", None).unwrap_err());
        for said in [
            "a.yaml (document 1): invalid Agent",
            "b.yaml (document 1)",
            "c.yaml (document 1): invalid Space",
            "Agent twice appears twice",
            "Agent default/keyless: provider openai",
            "Agent tooled: Secret gone not found",
        ] {
            assert!(err.contains(said), "{said:?} not in: {err}");
        }
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn anthropic_needs_its_key_like_any_public_endpoint() {
        let d = tempdir("anthropic");
        write(
            &d,
            "a.yaml",
            "apiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {name: a}\nspec: {model: {provider: anthropic, name: claude}}\n",
        );
        let err = format!("{:#}", load_dir(&d, "default", None).unwrap_err());
        assert!(
            err.contains("provider anthropic at its public endpoint needs an API key"),
            "{err}"
        );
        let manifests = load_dir(&d, "default", Some("sk-ant")).unwrap();
        let missing = missing_keys(&manifests, None);
        assert_eq!(missing.len(), 1, "{missing:?}");
        assert!(
            missing[0].contains("AGENTFLEET_MODEL_API_KEY"),
            "{missing:?}"
        );
        assert!(missing_keys(&manifests, Some("sk-ant")).is_empty());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn an_agent_at_a_public_endpoint_without_a_key_is_refused_at_start() {
        let agent = |model: &str, paused: bool| -> Agent {
            serde_yaml::from_str(&format!(
                "apiVersion: agentfleet.dev/v1alpha1\nkind: Agent\nmetadata: {{name: a, namespace: default}}\nspec: {{model: {model}, paused: {paused}}}\n"
            ))
            .unwrap()
        };
        let of = |agents: Vec<Agent>| Manifests {
            agents,
            ..Manifests::default()
        };
        let public = of(vec![agent("{provider: openai, name: gpt-4o-mini}", false)]);
        for key in [None, Some("")] {
            let p = missing_keys(&public, key);
            assert_eq!(p.len(), 1, "{p:?}");
            assert!(
                p[0].starts_with("Agent default/a: provider openai at its public endpoint")
                    && p[0].contains("AGENTFLEET_MODEL_API_KEY")
                    && p[0].contains("model.baseUrl"),
                "{p:?}"
            );
        }
        assert!(missing_keys(&public, Some("sk-1")).is_empty());
        // Its Secret in the directory gives it its key.
        let mut named = of(vec![agent(
            "{provider: openai, name: gpt-4o-mini, apiKeySecretRef: {name: llm}}",
            false,
        )]);
        assert_eq!(missing_keys(&named, None).len(), 1, "no such Secret");
        named.secrets.insert(
            ("default".into(), "llm".into()),
            [("apiKey".to_string(), "sk-2".to_string())].into(),
        );
        assert!(missing_keys(&named, None).is_empty());
        // A local server takes no key; the scripted model needs none; a paused agent
        // does not start.
        for fine in [
            agent(
                "{provider: openai, name: llama, baseUrl: \"http://127.0.0.1:11434/v1\"}",
                false,
            ),
            agent("{provider: scripted, name: a}", false),
            agent("{provider: openai, name: gpt-4o-mini}", true),
        ] {
            assert!(missing_keys(&of(vec![fine]), None).is_empty());
        }
    }
}

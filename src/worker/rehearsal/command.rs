//! `agentfleet rehearse NS/AGENT`: a candidate (a manifest from Git, or the agent as the
//! cluster has it, with `--model`, `--instructions-file`, `--tools-file` on top) rehearsed
//! on the agent's last recorded cycles, read from the data plane; the table as each cycle
//! is done, then the summary. Exits 1 when the rehearsal fails its criteria, so that a
//! pipeline can stop before `kubectl apply`.
//!
//! A Rehearsal's Job runs the same command with `--record`: the report then goes to the
//! data plane, where the operator reads it into the Rehearsal's status.

use std::path::PathBuf;
use std::sync::Arc;

use super::{table, Criteria, Rehearsal, Report, MAX_CYCLES};
use crate::crd::{Agent, ToolsSpec};
use crate::identity::AgentKey;
use crate::rehearsals::{Recorded, DEFAULT_CYCLES};
use crate::store::prelude::*;
use crate::store::RedisArgs;
use anyhow::{bail, Context as _};

/// `agentfleet rehearse …`
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// The agent whose recorded cycles are rehearsed, `NAMESPACE/NAME`.
    pub agent: String,
    /// The candidate: an Agent manifest, as it would be applied. Without it, the agent as
    /// the cluster has it now (the current kubeconfig), changed by the flags below.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// The candidate's model name (`spec.model.name`).
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// The candidate's model endpoint (`spec.model.baseUrl`).
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// The candidate's instructions, from this file.
    #[arg(long, value_name = "FILE")]
    pub instructions_file: Option<PathBuf>,
    /// The candidate's tools (`spec.tools`, as YAML), from this file.
    #[arg(long, value_name = "FILE")]
    pub tools_file: Option<PathBuf>,
    /// How many of the agent's last recorded cycles to rehearse.
    #[arg(long, default_value_t = u64::from(DEFAULT_CYCLES), value_parser = clap::value_parser!(u64).range(1..=MAX_CYCLES as u64))]
    pub cycles: u64,
    /// The least share of cycles (0 to 1) in which the candidate must reply or stay quiet
    /// as recorded.
    #[arg(long, default_value_t = 0.9, value_parser = share)]
    pub min_reply_agreement: f64,
    /// The least share of cycles (0 to 1) in which it must make the recorded tool calls.
    #[arg(long, default_value_t = 0.9, value_parser = share)]
    pub min_tool_agreement: f64,
    /// The most model tokens the rehearsal may spend.
    #[arg(long, value_name = "TOKENS")]
    pub max_tokens: Option<u64>,
    /// The report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Record the report in the data plane for the operator, as the Rehearsal
    /// `NAME:UID:GENERATION` (how a Rehearsal's Job runs).
    #[arg(long, hide = true, value_name = "NAME:UID:GENERATION")]
    pub record: Option<String>,
    #[command(flatten)]
    pub redis: RedisArgs,
}

fn share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if (0.0..=1.0).contains(&x) => Ok(x),
        _ => Err(format!("{s:?} is not a share between 0 and 1")),
    }
}

/// Where `--record` puts the report.
struct RecordTo {
    name: String,
    uid: String,
    generation: i64,
}

impl RecordTo {
    fn parse(s: &str) -> anyhow::Result<Self> {
        let mut parts = s.splitn(3, ':');
        let (Some(name), Some(uid), Some(generation)) = (parts.next(), parts.next(), parts.next())
        else {
            bail!("--record takes NAME:UID:GENERATION");
        };
        Ok(Self {
            name: name.to_string(),
            uid: uid.to_string(),
            generation: generation
                .parse()
                .context("--record: the generation is not a number")?,
        })
    }
}

/// Runs `agentfleet rehearse …`.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let key = AgentKey::named(&args.agent).map_err(anyhow::Error::msg)?;
    let record = args.record.as_deref().map(RecordTo::parse).transpose()?;
    let store = args.redis.store().context("the data plane's address")?;
    store
        .ping()
        .await
        .context("cannot reach the data plane (--redis)")?;
    let outcome = rehearse(&args, &key, &store).await;
    let Some(to) = record else {
        let report = outcome?;
        return if report.summary.passed {
            Ok(())
        } else {
            Err(anyhow::Error::new(Failed))
        };
    };
    let recorded = Recorded {
        name: to.name.clone(),
        uid: to.uid,
        generation: to.generation,
        time_ms: crate::store::now_ms(),
        error: outcome.as_ref().err().map(|e| crate::report::chain(&**e)),
        report: outcome.ok().map(Report::shown),
    };
    let json = serde_json::to_string(&recorded).context("writing the report")?;
    if json.len() > crate::store::REHEARSAL_REPORT_BYTES {
        bail!(
            "the report is {} bytes, over the {} the data plane keeps",
            json.len(),
            crate::store::REHEARSAL_REPORT_BYTES
        );
    }
    // An agent deleted meanwhile has nothing left to keep a report under.
    if !store
        .agent_registered(&key)
        .await
        .context("asking the data plane about the agent")?
    {
        bail!("{key} is no longer in the data plane: its rehearsal's report is not kept");
    }
    store
        .set_rehearsal_report(&key, &to.name, &json, recorded.time_ms)
        .await
        .context("recording the report in the data plane")?;
    if let Some(e) = &recorded.error {
        bail!("{e}");
    }
    Ok(())
}

/// The exit status of a rehearsal that ran and failed its criteria.
pub const FAILED_EXIT: u8 = 3;

/// A rehearsal that ran and failed its criteria (said by the table already).
#[derive(Debug)]
pub struct Failed;

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the rehearsal failed its criteria")
    }
}

impl std::error::Error for Failed {}

async fn rehearse(
    args: &Args,
    key: &AgentKey,
    store: &crate::store::RedisStore,
) -> anyhow::Result<Report> {
    let candidate = candidate(args, key).await?;
    let api_key = std::env::var(crate::model::API_KEY_ENV).ok();
    if api_key.is_none() && candidate.spec.model.needs_api_key() {
        bail!(
            "the candidate's model ({} at its public endpoint) needs an API key: set {}",
            candidate.spec.model.provider().as_str(),
            crate::model::API_KEY_ENV
        );
    }
    let model = crate::model::first_of(&candidate.spec.model, &key.name, api_key.into())
        .context("the candidate's model")?;
    let rehearsal = Rehearsal {
        key: key.clone(),
        candidate,
        model: Arc::from(model),
        cycles: args.cycles as usize,
        criteria: Criteria {
            min_reply_agreement: args.min_reply_agreement,
            min_tool_agreement: args.min_tool_agreement,
            max_tokens: args.max_tokens,
        },
    };
    let printing = !args.json && args.record.is_none();
    let out = &mut std::io::stdout();
    if printing {
        table::header(out)?;
    }
    let report = rehearsal
        .run(store, |c| {
            if printing {
                // A line that cannot be written now is in the report below anyway.
                let _ = table::line(&mut std::io::stdout(), c);
            }
        })
        .await?;
    if printing {
        table::summary(out, &report)?;
    } else if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(report)
}

/// The candidate: the file's manifest or the cluster's Agent, with the flags applied, and
/// checked against the Agent schema.
/// `model` (naming a Model) resolved with the Models of `namespace` in the cluster.
async fn resolved_from_cluster(
    model: &crate::crd::ModelSpec,
    namespace: &str,
) -> anyhow::Result<crate::crd::ModelSpec> {
    let client = kube::Client::try_default()
        .await
        .context("the agent names a Model (spec.model.ref), and no cluster to read it from")?;
    let api: kube::Api<crate::crd::ModelResource> = kube::Api::namespaced(client, namespace);
    let listed = api
        .list(&kube::api::ListParams::default())
        .await
        .with_context(|| format!("reading the Models of namespace {namespace}"))?;
    let models = crate::models::of_namespace(&listed.items, namespace);
    crate::models::resolve(model, &models).map_err(|p| anyhow::anyhow!("the agent's model: {p}"))
}

async fn candidate(args: &Args, key: &AgentKey) -> anyhow::Result<Agent> {
    let mut agent = match &args.file {
        Some(path) => crate::worker::load_manifest(path)?,
        None => {
            let client = kube::Client::try_default()
                .await
                .context("no manifest given (-f) and no cluster to read the agent from")?;
            let api: kube::Api<Agent> = kube::Api::namespaced(client, &key.namespace);
            api.get(&key.name)
                .await
                .with_context(|| format!("reading Agent {key} from the cluster"))?
        }
    };
    agent.metadata.namespace = Some(key.namespace.clone());
    agent.metadata.name = Some(key.name.clone());
    if agent.spec.model.model_ref.is_some() && agent.spec.model.provider.is_none() {
        agent.spec.model = resolved_from_cluster(&agent.spec.model, &key.namespace).await?;
    }
    crate::models::first_only(&mut agent.spec.model);
    if let Some(model) = &args.model {
        agent.spec.model.name = model.clone();
    }
    if let Some(url) = &args.base_url {
        agent.spec.model.base_url = Some(url.clone());
    }
    if let Some(path) = &args.instructions_file {
        agent.spec.instructions =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    }
    if let Some(path) = &args.tools_file {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let tools: ToolsSpec = serde_yaml::from_str(&text)
            .with_context(|| format!("{} is not an Agent's spec.tools", path.display()))?;
        agent.spec.tools = tools;
    }
    super::check_candidate(&agent).map_err(anyhow::Error::msg)?;
    Ok(agent)
}

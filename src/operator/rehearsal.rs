//! The Rehearsal controller: a Rehearsal → its Job (the candidate's manifest in a ConfigMap,
//! a pod like a worker's running `agentfleet rehearse … --record`) → the report its run
//! writes to the data plane → the status (phase, summary, each cycle, `Complete` and
//! `Passed`) and an event. Each generation runs once; a new generation runs again in a new
//! Job. The data plane keeps the agent's newest reports (for the gateway and the console);
//! the status keeps what anyone who may read Rehearsals may see (no call's arguments).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use tracing::{info, instrument};

use super::apply::{apply, refused_as, remove};
use super::build::{self, FIELD_MANAGER};
use super::context::{Context, Error};
use super::status::{self, Cond};
use super::validate::validate;
use crate::crd::{Agent, Rehearsal, RehearsalPhase, RehearsalStatus};
use crate::identity::AgentKey;
use crate::rehearsals::{Recorded, Report};

/// Condition: the rehearsal ran (or cannot run, and why).
pub const COMPLETE: &str = "Complete";
/// Condition: its criteria hold.
pub const PASSED: &str = "Passed";

/// How often a running rehearsal is looked at, besides its Job's changes.
const RUNNING_LOOK: Duration = Duration::from_secs(15);

/// Reconciles one Rehearsal.
#[instrument(skip_all, fields(rehearsal = %rehearsal.name_any(), namespace = rehearsal.namespace().unwrap_or_default()))]
pub async fn reconcile(rehearsal: Arc<Rehearsal>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = rehearsal
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let name = rehearsal.name_any();
    let generation = rehearsal.metadata.generation;
    let previous = rehearsal.status.clone().unwrap_or_default();
    let done = matches!(
        previous.phase,
        RehearsalPhase::Passed | RehearsalPhase::Failed
    );
    if rehearsal.metadata.deletion_timestamp.is_some()
        || (done && previous.observed_generation == generation)
    {
        return Ok(Action::await_change());
    }
    let key = AgentKey::new(ns.clone(), rehearsal.spec.agent.clone());
    // A new generation shows nothing of the last one's run but its conditions' history.
    let base = if previous.observed_generation == generation {
        previous.clone()
    } else {
        RehearsalStatus {
            conditions: previous.conditions.clone(),
            ..RehearsalStatus::default()
        }
    };
    let run = Run {
        rehearsal: &rehearsal,
        ctx: &ctx,
        key: &key,
        previous: &previous,
        base: &base,
    };
    if let Some(recorded) = run.report().await? {
        run.finish(recorded).await?;
        return Ok(Action::await_change());
    }
    let agents: Api<Agent> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(agent) = agents.get_opt(&key.name).await.map_err(Error::Kube)? else {
        let why = format!("no Agent {} in namespace {ns}", key.name);
        run.pending("AgentNotFound", why).await?;
        return Ok(Action::requeue(Duration::from_secs(30)));
    };
    let candidate = candidate(&agent, &rehearsal);
    let mut problems = validate(&key.name, &candidate.spec);
    // Its Job reads the candidate's model as a worker would: its Model resolved (a rehearsal
    // asks the first model of a list).
    let mut candidate = match super::model::resolve(&candidate, &ctx.models.state()) {
        Ok(resolved) => resolved,
        Err(problem) => {
            problems.push(problem.to_string());
            candidate
        }
    };
    crate::models::first_only(&mut candidate.spec.model);
    if !problems.is_empty() {
        let why = format!("the candidate is not valid: {}", problems.join("; "));
        run.failed("InvalidCandidate", why).await?;
        return Ok(Action::await_change());
    }
    let job_name = build::rehearsal_job_name(&name, generation.unwrap_or(0));
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    match jobs.get_opt(&job_name).await.map_err(Error::Kube)? {
        Some(job) => match ended(&job) {
            Some(why) => {
                // Its report may have landed since it was looked for.
                if let Some(recorded) = run.report().await? {
                    run.finish(recorded).await?;
                    return Ok(Action::await_change());
                }
                run.failed("JobFailed", why).await?;
                Ok(Action::await_change())
            }
            None => {
                run.running(&job_name).await?;
                Ok(Action::requeue(RUNNING_LOOK))
            }
        },
        None => {
            run.start(&candidate, &job_name).await?;
            Ok(Action::requeue(RUNNING_LOOK))
        }
    }
}

/// The candidate: the Agent with the rehearsal's changes, without its status.
pub fn candidate(agent: &Agent, rehearsal: &Rehearsal) -> Agent {
    let mut candidate = Agent::new(&agent.name_any(), agent.spec.clone());
    candidate.metadata.namespace = agent.namespace();
    candidate.metadata.uid = agent.uid();
    candidate.metadata.generation = agent.metadata.generation;
    rehearsal.spec.candidate.apply(&mut candidate.spec);
    candidate
}

/// Why a Job ended without success, once it has; `None` while it runs. A Job that succeeded
/// without its report is said so.
fn ended(job: &Job) -> Option<String> {
    let status = job.status.as_ref()?;
    let conditions = status.conditions.as_deref().unwrap_or_default();
    let holds = |t: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == t && c.status == "True")
    };
    if let Some(c) = holds("Failed") {
        let message = c.message.clone().unwrap_or_default();
        return Some(format!(
            "its Job {} failed ({}): {message}; its pod's log says why",
            job.name_any(),
            c.reason.clone().unwrap_or_default()
        ));
    }
    holds("Complete").map(|_| {
        format!(
            "its Job {} ended without recording a report in the data plane",
            job.name_any()
        )
    })
}

/// One reconcile of a rehearsal.
struct Run<'a> {
    rehearsal: &'a Rehearsal,
    ctx: &'a Context,
    key: &'a AgentKey,
    /// The status as it is.
    previous: &'a RehearsalStatus,
    /// What a new status starts from: the status as it is for the same generation, else
    /// nothing but the conditions.
    base: &'a RehearsalStatus,
}

impl Run<'_> {
    /// The report its run recorded for this Rehearsal and generation, if there is one.
    async fn report(&self) -> Result<Option<Recorded>, Error> {
        let name = self.rehearsal.name_any();
        let Some(json) = self
            .ctx
            .store
            .rehearsal_report(self.key, &name)
            .await
            .map_err(Error::Store)?
        else {
            return Ok(None);
        };
        // Written by the Job of this image; what is not one (another version's, damaged) is
        // no report: the Job's end says what became of it.
        let recorded: Option<Recorded> = serde_json::from_str(&json).ok();
        Ok(recorded.filter(|r| {
            Some(r.uid.as_str()) == self.rehearsal.uid().as_deref()
                && Some(r.generation) == self.rehearsal.metadata.generation
        }))
    }

    /// Makes its Job (and what it reads), leaving the previous generation's to go.
    async fn start(&self, candidate: &Agent, job_name: &str) -> Result<(), Error> {
        let r = self.rehearsal;
        let ns = &self.key.namespace;
        let owner = r
            .controller_owner_ref(&())
            .ok_or(Error::MissingField("metadata.uid"))?;
        let (secrets, config, job) =
            build::rehearsal_objects(r, candidate, &owner, &self.ctx.worker)?;
        let client = &self.ctx.client;
        let secret_api: Api<Secret> = Api::namespaced(client.clone(), ns);
        for secret in &secrets {
            apply(&secret_api, secret)
                .await
                .map_err(refused_as(format_args!("Secret {}", secret.name_any())))?;
        }
        let configs: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        apply(&configs, &config)
            .await
            .map_err(refused_as("ConfigMap"))?;
        let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
        if let Some(old) = self.previous.job.as_deref().filter(|j| *j != job_name) {
            remove(&jobs, old).await?;
        }
        match apply(&jobs, &job).await {
            Err(Error::Refused(why)) => {
                let why = format!("its Job was refused: {why}");
                return self.failed("JobRejected", why).await;
            }
            other => other?,
        };
        info!(job = job_name, "rehearsal started");
        self.ctx
            .publish(
                r,
                EventType::Normal,
                "RehearsalStarted",
                "Rehearse",
                format!(
                    "rehearsing the candidate on the last {} cycles of {} in Job {job_name}",
                    r.spec.run.cycles, self.key
                ),
            )
            .await;
        let status = RehearsalStatus {
            started_at: Some(Time(Timestamp::now())),
            finished_at: None,
            summary: None,
            cycles: Vec::new(),
            ..self.base.clone()
        };
        self.write_running(status, job_name).await
    }

    /// Its Job runs.
    async fn running(&self, job_name: &str) -> Result<(), Error> {
        if self.previous.phase == RehearsalPhase::Running
            && self.previous.observed_generation == self.rehearsal.metadata.generation
        {
            return Ok(());
        }
        self.write_running(self.base.clone(), job_name).await
    }

    /// Writes `status` as that of a rehearsal its Job `job_name` runs.
    async fn write_running(&self, status: RehearsalStatus, job_name: &str) -> Result<(), Error> {
        let status = RehearsalStatus {
            phase: RehearsalPhase::Running,
            job: Some(job_name.to_string()),
            ..status
        };
        self.write(
            status,
            &[
                Cond::unknown(COMPLETE, "Running", format!("Job {job_name} runs it")),
                Cond::unknown(PASSED, "Running", "not known until it has run"),
            ],
        )
        .await
    }

    /// It cannot start yet: `why`.
    async fn pending(&self, reason: &'static str, why: String) -> Result<(), Error> {
        let status = RehearsalStatus {
            phase: RehearsalPhase::Pending,
            ..self.base.clone()
        };
        self.write(
            status,
            &[
                Cond::fail(COMPLETE, reason, why.clone()),
                Cond::unknown(PASSED, reason, why),
            ],
        )
        .await
    }

    /// It cannot run: `why`. Said in the status and as a warning.
    async fn failed(&self, reason: &'static str, why: String) -> Result<(), Error> {
        self.ctx
            .publish(
                self.rehearsal,
                EventType::Warning,
                reason,
                "Rehearse",
                why.clone(),
            )
            .await;
        let status = RehearsalStatus {
            phase: RehearsalPhase::Failed,
            finished_at: Some(Time(Timestamp::now())),
            ..self.base.clone()
        };
        self.write(
            status,
            &[
                Cond::ok(COMPLETE, reason, why.clone()),
                Cond::fail(PASSED, reason, why),
            ],
        )
        .await
    }

    /// Its run's report, into the status (the data plane keeps it for the gateway).
    async fn finish(&self, recorded: Recorded) -> Result<(), Error> {
        let Some(report) = recorded.report else {
            let why = recorded.error.map_or_else(
                || "its run recorded neither a report nor an error".to_string(),
                |e| crate::cycles::clip(&e, 1024).0,
            );
            return self.failed("CouldNotRun", why).await;
        };
        let Report { cycles, summary } = report.shown().for_status();
        let (phase, kind, reason) = if summary.passed {
            (RehearsalPhase::Passed, EventType::Normal, "RehearsalPassed")
        } else {
            (
                RehearsalPhase::Failed,
                EventType::Warning,
                "RehearsalFailed",
            )
        };
        self.ctx
            .publish(
                self.rehearsal,
                kind,
                reason,
                "Rehearse",
                summary.verdict.clone(),
            )
            .await;
        let passed = if summary.passed {
            Cond::ok(PASSED, "CriteriaMet", summary.verdict.clone())
        } else {
            Cond::fail(PASSED, "CriteriaNotMet", summary.verdict.clone())
        };
        let complete = Cond::ok(
            COMPLETE,
            "Ran",
            format!(
                "{} cycles rehearsed, {} not",
                summary.rehearsed, summary.not_rehearsed
            ),
        );
        let status = RehearsalStatus {
            phase,
            finished_at: Some(Time(Timestamp::now())),
            summary: Some(summary),
            cycles,
            ..self.base.clone()
        };
        self.write(status, &[complete, passed]).await
    }

    /// Writes `status` with `conditions` merged in, for the generation at hand.
    async fn write(&self, mut status: RehearsalStatus, conditions: &[Cond]) -> Result<(), Error> {
        let r = self.rehearsal;
        status.observed_generation = r.metadata.generation;
        status.conditions = status::merge(
            &self.previous.conditions,
            conditions,
            r.metadata.generation,
            Timestamp::now(),
        );
        if &status == self.previous {
            return Ok(());
        }
        let api: Api<Rehearsal> = Api::namespaced(self.ctx.client.clone(), &self.key.namespace);
        let patch = serde_json::json!({
            "apiVersion": "agentfleet.dev/v1alpha1",
            "kind": "Rehearsal",
            "status": status,
        });
        api.patch_status(
            &r.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(patch),
        )
        .await
        .map_err(Error::Kube)?;
        Ok(())
    }
}

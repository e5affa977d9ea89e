//! Held rollouts (`spec.rollout.rehearse`): a change of an Agent's model, instructions or
//! tools goes live only once a rehearsal of it on the agent's own recorded cycles passed.
//!
//! The revision is a hash of those three parts. `status.rollout` keeps the revision that
//! runs and its parts; while the spec asks for another, the operator renders the agent
//! with the running parts ([`running`], for its own worker and its Pool alike), makes a
//! Rehearsal of the candidate (`NAME-REVISION`, owned by the Agent) and follows it: passed,
//! the candidate runs; failed, the agent stays as it was and the `Rollout` condition and a
//! Warning event (the condition's change) say why. `agentfleet.dev/rollout-override: REVISION` pushes a revision
//! through. The first revision the operator sees (the rollout just asked for, or status
//! lost) runs as it is: there is nothing to compare it with.

use std::borrow::Cow;

use kube::{Api, Resource, ResourceExt};
use sha2::{Digest, Sha256};

use super::apply::apply;
use super::context::{Context, Error};
use super::status::Cond;
use crate::crd::{
    Agent, AgentSpec, Candidate, Rehearsal, RehearsalPhase, RehearsalSpec, RolloutParts,
    RolloutStatus,
};

/// Condition: the spec's revision runs, or why it is held.
pub const ROLLOUT: &str = "Rollout";
/// The annotation that pushes a revision through without its rehearsal.
pub const OVERRIDE_ANNOTATION: &str = "agentfleet.dev/rollout-override";
/// Label of a rollout's Rehearsal: the revision it judges.
pub const REVISION_LABEL: &str = "agentfleet.dev/revision";

/// The parts of `spec` a rollout judges.
fn parts(spec: &AgentSpec) -> RolloutParts {
    RolloutParts {
        model: spec.model.clone(),
        instructions: spec.instructions.clone(),
        tools: spec.tools.clone(),
    }
}

/// The revision of `parts`: 8 hex digits of a hash of them.
fn revision_of(parts: &RolloutParts) -> String {
    let json = serde_json::to_vec(parts).unwrap_or_default();
    crate::hex(&Sha256::digest(&json)[..4])
}

/// The revision of the model, instructions and tools `spec` asks for.
pub fn revision(spec: &AgentSpec) -> String {
    revision_of(&parts(spec))
}

/// The agent as it runs, given its rollout's status: with the running revision's model,
/// instructions and tools while the spec asks for a revision that is held; else as it is.
pub fn running<'a>(agent: &'a Agent, rollout: Option<&RolloutStatus>) -> Cow<'a, Agent> {
    let held = agent
        .spec
        .rollout
        .as_ref()
        .and_then(|r| r.rehearse.as_ref());
    let (Some(_), Some(status)) = (held, rollout) else {
        return Cow::Borrowed(agent);
    };
    match &status.running {
        Some(run) if status.revision != revision(&agent.spec) => {
            let mut agent = agent.clone();
            agent.spec.model = run.model.clone();
            agent.spec.instructions = run.instructions.clone();
            agent.spec.tools = run.tools.clone();
            Cow::Owned(agent)
        }
        _ => Cow::Borrowed(agent),
    }
}

/// The revision an Agent runs, as its status says (what a Pool's rendering follows).
pub fn running_revision(agent: &Agent) -> Option<String> {
    agent
        .status
        .as_ref()
        .and_then(|s| s.rollout.as_ref())
        .map(|r| r.revision.clone())
}

/// The name of the Rehearsal that judges `revision` of agent `name`.
pub fn rehearsal_name(name: &str, revision: &str) -> String {
    format!("{name}-{revision}")
}

/// Where a rollout stands after one look: its status and condition (none without
/// `spec.rollout.rehearse`).
pub struct Rollout {
    /// `status.rollout`.
    pub status: Option<RolloutStatus>,
    /// `Rollout`.
    pub condition: Option<Cond>,
}

/// Looks at the agent's rollout: adopts the spec's revision when nothing runs yet, it is
/// overridden, or its rehearsal passed; else makes (or follows) that rehearsal.
pub async fn roll(agent: &Agent, ctx: &Context) -> Result<Rollout, Error> {
    let Some(rehearse) = agent
        .spec
        .rollout
        .as_ref()
        .and_then(|r| r.rehearse.as_ref())
    else {
        return Ok(Rollout {
            status: None,
            condition: None,
        });
    };
    let wanted = parts(&agent.spec);
    let rev = revision_of(&wanted);
    let previous = agent.status.as_ref().and_then(|s| s.rollout.clone());
    let adopt = |reason: &'static str, message: String| Rollout {
        status: Some(RolloutStatus {
            revision: rev.clone(),
            running: Some(wanted.clone()),
            candidate: None,
            rehearsal: None,
            overridden: reason == "Overridden",
        }),
        condition: Some(Cond::ok(ROLLOUT, reason, message)),
    };
    let Some(previous) = previous.filter(|p| p.running.is_some()) else {
        return Ok(adopt(
            "Current",
            format!("revision {rev} runs (the first seen: nothing to rehearse it against)"),
        ));
    };
    if previous.revision == rev && previous.candidate.is_some() {
        // The held change was taken back: what runs is what the spec asks for.
        return Ok(Rollout {
            condition: Some(Cond::ok(ROLLOUT, "Current", format!("revision {rev} runs"))),
            status: Some(RolloutStatus {
                candidate: None,
                rehearsal: None,
                ..previous
            }),
        });
    }
    if previous.revision == rev {
        let condition = match (&previous.rehearsal, previous.overridden) {
            (_, true) => Cond::ok(
                ROLLOUT,
                "Overridden",
                format!("revision {rev} runs without a passed rehearsal ({OVERRIDE_ANNOTATION})"),
            ),
            (Some(name), false) => Cond::ok(
                ROLLOUT,
                "Passed",
                format!("revision {rev} passed its rehearsal {name} and runs"),
            ),
            (None, false) => Cond::ok(ROLLOUT, "Current", format!("revision {rev} runs")),
        };
        return Ok(Rollout {
            condition: Some(condition),
            status: Some(RolloutStatus {
                candidate: None,
                ..previous
            }),
        });
    }
    let was = previous.revision.clone();
    if agent.annotations().get(OVERRIDE_ANNOTATION) == Some(&rev) {
        let message = format!(
            "revision {rev} runs without a passed rehearsal ({OVERRIDE_ANNOTATION}); it replaced {was}"
        );
        return Ok(adopt("Overridden", message));
    }
    let name = rehearsal_name(&agent.name_any(), &rev);
    let rehearsal = ensure_rehearsal(agent, ctx, &name, &rev, &wanted, rehearse).await?;
    prune(agent, ctx, &name).await?;
    let status = rehearsal.status.unwrap_or_default();
    let judged = status.observed_generation == rehearsal.metadata.generation;
    let verdict = status
        .summary
        .as_ref()
        .map(|s| s.verdict.clone())
        .or_else(|| {
            crate::operator::status::find(&status.conditions, super::rehearsal::PASSED)
                .map(|c| c.message.clone())
        })
        .unwrap_or_default();
    match status.phase {
        RehearsalPhase::Passed if judged => {
            let message = format!("revision {rev} passed its rehearsal {name} and runs: {verdict}");
            let mut out = adopt("Passed", message);
            if let Some(s) = out.status.as_mut() {
                s.rehearsal = Some(name);
            }
            Ok(out)
        }
        RehearsalPhase::Failed if judged => Ok(held(
            previous,
            &rev,
            &name,
            Cond::fail(
                ROLLOUT,
                "RehearsalFailed",
                format!(
                    "revision {rev} failed its rehearsal {name}, so {was} keeps running: {verdict}"
                ),
            ),
        )),
        _ => Ok(held(
            previous,
            &rev,
            &name,
            Cond::fail(
                ROLLOUT,
                "Held",
                format!("revision {rev} waits for its rehearsal {name}; {was} runs meanwhile"),
            ),
        )),
    }
}

/// The rollout with `rev` held by rehearsal `name`.
fn held(previous: RolloutStatus, rev: &str, name: &str, condition: Cond) -> Rollout {
    Rollout {
        status: Some(RolloutStatus {
            candidate: Some(rev.to_string()),
            rehearsal: Some(name.to_string()),
            ..previous
        }),
        condition: Some(condition),
    }
}

/// The Rehearsals of an Agent's rollouts it keeps besides the current one (the newest).
const REHEARSALS_KEPT: usize = 5;

/// Deletes the Agent's rollout Rehearsals beyond the newest [`REHEARSALS_KEPT`] besides
/// `current` (each goes with its Job).
async fn prune(agent: &Agent, ctx: &Context, current: &str) -> Result<(), Error> {
    let ns = agent
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let api: Api<Rehearsal> = Api::namespaced(ctx.client.clone(), &ns);
    let selector = format!(
        "{}={},{REVISION_LABEL}",
        crate::operator::build::AGENT_LABEL,
        agent.name_any()
    );
    let mut mine: Vec<Rehearsal> = api
        .list(&kube::api::ListParams::default().labels(&selector))
        .await
        .map_err(Error::Kube)?
        .items
        .into_iter()
        .filter(|r| r.name_any() != current && r.metadata.deletion_timestamp.is_none())
        .collect();
    mine.sort_by(|a, b| {
        b.metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0)
            .cmp(&a.metadata.creation_timestamp.as_ref().map(|t| t.0))
    });
    for old in mine.iter().skip(REHEARSALS_KEPT) {
        super::apply::remove(&api, &old.name_any()).await?;
    }
    Ok(())
}

/// The Rehearsal of `wanted` (applied, so that a changed `spec.rollout.rehearse` reaches
/// it), as the API server has it.
async fn ensure_rehearsal(
    agent: &Agent,
    ctx: &Context,
    name: &str,
    rev: &str,
    wanted: &RolloutParts,
    rehearse: &crate::crd::RehearseSpec,
) -> Result<Rehearsal, Error> {
    let ns = agent
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let owner = agent
        .controller_owner_ref(&())
        .ok_or(Error::MissingField("metadata.uid"))?;
    let mut rehearsal = Rehearsal::new(
        name,
        RehearsalSpec {
            agent: agent.name_any(),
            candidate: Candidate {
                model: Some(wanted.model.clone()),
                instructions: Some(wanted.instructions.clone()),
                tools: Some(wanted.tools.clone()),
            },
            run: rehearse.clone(),
        },
    );
    rehearsal.metadata.namespace = Some(ns.clone());
    rehearsal.metadata.owner_references = Some(vec![owner]);
    rehearsal.metadata.labels = Some(
        [
            (
                crate::operator::build::AGENT_LABEL.to_string(),
                agent.name_any(),
            ),
            (REVISION_LABEL.to_string(), rev.to_string()),
        ]
        .into(),
    );
    let api: Api<Rehearsal> = Api::namespaced(ctx.client.clone(), &ns);
    apply(&api, &rehearsal).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::tests::agent_yaml;

    fn with_rollout(extra: &str) -> Agent {
        agent_yaml(&format!("  rollout: {{rehearse: {{cycles: 5}}}}\n{extra}"))
    }

    #[test]
    fn the_revision_moves_with_model_instructions_and_tools_only() {
        let a = with_rollout("");
        let mut b = a.clone();
        b.spec.spaces.push("elsewhere".into());
        b.spec.cycle.max_steps += 1;
        assert_eq!(revision(&a.spec), revision(&b.spec));
        b.spec.instructions.push_str(" Be brief.");
        assert_ne!(revision(&a.spec), revision(&b.spec));
        let mut c = a.clone();
        c.spec.model.name = "other".into();
        assert_ne!(revision(&a.spec), revision(&c.spec));
        assert_eq!(revision(&a.spec).len(), 8);
    }

    #[test]
    fn a_held_change_runs_the_running_revision_and_the_rest_of_the_spec() {
        let before = with_rollout("");
        let status = RolloutStatus {
            revision: revision(&before.spec),
            running: Some(parts(&before.spec)),
            ..RolloutStatus::default()
        };
        let mut changed = before.clone();
        changed.spec.instructions = "Answer in French.".into();
        changed.spec.model.name = "bigger".into();
        changed.spec.cycle.max_steps = 3;
        let runs = running(&changed, Some(&status));
        assert_eq!(runs.spec.instructions, before.spec.instructions);
        assert_eq!(runs.spec.model, before.spec.model);
        // What a rollout does not judge goes live at once.
        assert_eq!(runs.spec.cycle.max_steps, 3);
        // Once it runs (passed), or without a held rollout, the spec runs as it is.
        let passed = RolloutStatus {
            revision: revision(&changed.spec),
            running: Some(parts(&changed.spec)),
            ..RolloutStatus::default()
        };
        assert!(matches!(running(&changed, Some(&passed)), Cow::Borrowed(_)));
        let mut plain = changed.clone();
        plain.spec.rollout = None;
        assert!(matches!(running(&plain, Some(&status)), Cow::Borrowed(_)));
        assert!(matches!(running(&changed, None), Cow::Borrowed(_)));
    }
}

//! The one place where the custom resources' types and the data plane's records meet: each
//! conversion the operator and the worker make at their edge, so that neither spells a
//! record's fields and a CRD's schema can change without touching what Redis holds.
//!
//! Only the directions in use are here: members, loop guards and tools go from what a
//! manifest or a worker says to the data plane, a restore from the data plane to an Agent's
//! status, and plans both ways (the agent makes them as `PlanSpec`s, the schedule code reads
//! them as such).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::{LoopGuard, Member, MemberKind, Plan, Restored, ToolRecord, V1};
use crate::crd;

impl From<crd::MemberKind> for MemberKind {
    fn from(kind: crd::MemberKind) -> Self {
        match kind {
            crd::MemberKind::Agent => MemberKind::Agent,
            crd::MemberKind::Human => MemberKind::Human,
        }
    }
}

impl From<&crd::ResolvedMember> for Member {
    fn from(m: &crd::ResolvedMember) -> Self {
        Member {
            kind: m.kind.into(),
            id: m.id.clone(),
            name: m.name.clone(),
        }
    }
}

impl From<crd::LoopGuardSpec> for LoopGuard {
    fn from(g: crd::LoopGuardSpec) -> Self {
        LoopGuard {
            max_depth: g.max_depth,
            max_agent_messages_per_minute: g.max_agent_messages_per_minute,
        }
    }
}

/// `status.restoredFrom`, its time to the second (as the API server keeps it, so that the
/// same status is not written again).
impl From<&Restored> for crd::RestoredFromStatus {
    fn from(r: &Restored) -> Self {
        crd::RestoredFromStatus {
            reason: r.reason.clone(),
            storage_ref: r.storage_ref.clone(),
            cycle: r.cycle,
            digest: r.digest.clone(),
            request: r.request.clone(),
            time: r
                .time_ms
                .and_then(|ms| Timestamp::from_second(ms.div_euclid(1000)).ok())
                .map(Time),
        }
    }
}

impl From<&crd::PlanSpec> for Plan {
    fn from(p: &crd::PlanSpec) -> Self {
        Plan {
            v: V1,
            name: p.name.clone(),
            schedule: p.schedule.clone(),
            at_ms: p.at.as_ref().map(|t| t.0.as_millisecond()),
            time_zone: p.time_zone.clone(),
            instruction: p.instruction.clone(),
        }
    }
}

/// The plan as the schedule code reads it. A time out of range (never read from a note:
/// it was parsed as a time) leaves the plan without `at`, so it fails its check and is
/// left out like any other invalid plan.
impl From<&Plan> for crd::PlanSpec {
    fn from(p: &Plan) -> Self {
        crd::PlanSpec {
            name: p.name.clone(),
            schedule: p.schedule.clone(),
            at: p
                .at_ms
                .and_then(|ms| Timestamp::from_millisecond(ms).ok())
                .map(Time),
            time_zone: p.time_zone.clone(),
            instruction: p.instruction.clone(),
        }
    }
}

impl From<&crd::ToolStatus> for ToolRecord {
    fn from(t: &crd::ToolStatus) -> Self {
        ToolRecord {
            v: V1,
            name: t.name.clone(),
            source: t.source.clone(),
            ready: t.ready,
            last_error: t.last_error.clone(),
            note: t.note.clone(),
        }
    }
}

impl From<&ToolRecord> for crd::ToolStatus {
    fn from(t: &ToolRecord) -> Self {
        crd::ToolStatus {
            name: t.name.clone(),
            source: t.source.clone(),
            ready: t.ready,
            last_error: t.last_error.clone(),
            note: t.note.clone(),
        }
    }
}

/// What the gateway serves of `agent` over A2A (`None`: `spec.a2a` is absent or disabled),
/// with the defaults the field docs promise.
pub fn a2a_record(agent: &crd::Agent) -> Option<super::super::A2aRecord> {
    use kube::ResourceExt as _;
    let spec = agent.spec.a2a.as_ref().filter(|a| a.enabled)?;
    let name = agent.name_any();
    let description = if spec.description.trim().is_empty() {
        format!(
            "Agent {name} of namespace {}",
            agent.namespace().unwrap_or_else(|| "default".into())
        )
    } else {
        spec.description.clone()
    };
    // A card's tags are required and non-empty.
    let tags = |t: &[String]| {
        if t.is_empty() {
            vec!["agentfleet".to_string()]
        } else {
            t.to_vec()
        }
    };
    let skills = if spec.skills.is_empty() {
        vec![super::super::A2aSkill {
            id: name.clone(),
            name: name.clone(),
            description: description.clone(),
            tags: tags(&[]),
            examples: Vec::new(),
        }]
    } else {
        spec.skills
            .iter()
            .map(|s| super::super::A2aSkill {
                id: s.id.clone(),
                name: if s.name.is_empty() {
                    s.id.clone()
                } else {
                    s.name.clone()
                },
                description: s.description.clone(),
                tags: tags(&s.tags),
                examples: s.examples.clone(),
            })
            .collect()
    };
    Some(super::super::A2aRecord {
        v: V1,
        description,
        skills,
        callers: spec.callers.clone(),
        version: agent.metadata.generation.unwrap_or(1).to_string(),
        max_chain_depth: agent.spec.cycle.max_chain_depth,
        conversation_seconds: spec.conversation_seconds,
    })
}

/// What the data plane knows of `agent` from its spec, and `problem`: why it cannot run.
pub fn agent_facts(agent: &crd::Agent, problem: Option<String>) -> super::super::AgentFacts {
    let budget = agent.spec.budget.clone().unwrap_or_default();
    super::super::AgentFacts {
        v: V1,
        model_provider: agent.spec.model.provider().as_str().into(),
        model_name: agent.spec.model.name.clone(),
        tokens_per_day: budget.tokens_per_day,
        tokens_per_month: budget.tokens_per_month,
        suspended: agent.spec.paused,
        problem,
        pool: agent.spec.runtime.as_ref().map(|r| r.pool.clone()),
    }
}

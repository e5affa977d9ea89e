//! The operator's view of the embedded store.

use async_trait::async_trait;

use super::MemoryStore;
use crate::identity::AgentKey;
use crate::store::notes::readable_plans;
use crate::store::{
    AgentObservation, AgentWork, ArchiveReport, ModelHealth, NoteKind, Observe, RestoreReport,
    StoreError, TokenSpend,
};

#[async_trait]
impl Observe for MemoryStore {
    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn observe(&self, agents: &[AgentKey]) -> Result<Vec<AgentObservation>, StoreError> {
        Ok(self.with(|s| {
            agents
                .iter()
                .map(|key| match s.agents.get(key) {
                    None => AgentObservation::default(),
                    Some(a) => AgentObservation {
                        waiting: (a.inbox.len() + a.urgent.len()) as u64,
                        in_flight: a.inflight.len() as u64,
                        thinking: a.thinking,
                        paused: a.paused,
                        worker: a.lease_holder().is_some(),
                        host: a.host.clone(),
                        cycles: a.window.cycle,
                        tokens_used: a.tokens_used,
                        last_cycle_ms: a.last_cycle_ms,
                        restored: a.restored.clone(),
                        checkpoint: a.checkpoints.first().cloned(),
                        plans: readable_plans(
                            a.notes
                                .get(&NoteKind::Plans)
                                .into_iter()
                                .flatten()
                                .map(|(_, p)| p),
                        ),
                        plan_marks: a.plan_marks.clone(),
                        model: a.model.clone(),
                        tools: a.tools.clone(),
                        pending: a.human_calls(),
                        archive: a.archive.clone(),
                        restore: a.restore.clone(),
                        tokens: a.spend.clone(),
                    },
                })
                .collect()
        }))
    }

    async fn observe_work(&self, agents: &[AgentKey]) -> Result<Vec<AgentWork>, StoreError> {
        Ok(self
            .observe(agents)
            .await?
            .iter()
            .map(AgentObservation::work)
            .collect())
    }

    async fn set_model_health(
        &self,
        agent: &AgentKey,
        health: &ModelHealth,
    ) -> Result<(), StoreError> {
        self.agent(agent, |a| a.model = Some(health.clone()));
        Ok(())
    }

    async fn set_tools(
        &self,
        agent: &AgentKey,
        tools: &[crate::store::ToolRecord],
    ) -> Result<(), StoreError> {
        self.agent(agent, |a| a.tools = Some(tools.to_vec()));
        Ok(())
    }

    async fn set_tool_specs(&self, agent: &AgentKey, json: &str) -> Result<(), StoreError> {
        self.agent(agent, |a| a.tool_specs = Some(json.to_string()));
        Ok(())
    }

    async fn tool_specs(&self, agent: &AgentKey) -> Result<Option<String>, StoreError> {
        Ok(self.agent(agent, |a| a.tool_specs.clone()))
    }

    async fn set_rehearsal_report(
        &self,
        agent: &AgentKey,
        name: &str,
        json: &str,
        time_ms: i64,
    ) -> Result<(), StoreError> {
        self.agent(agent, |a| {
            a.rehearsals.retain(|(n, _, _)| n != name);
            a.rehearsals
                .push((name.to_string(), time_ms, json.to_string()));
            a.rehearsals
                .sort_by_key(|(n, t, _)| (std::cmp::Reverse(*t), n.clone()));
            a.rehearsals.truncate(crate::store::REHEARSALS_KEPT);
        });
        Ok(())
    }

    async fn rehearsal_report(
        &self,
        agent: &AgentKey,
        name: &str,
    ) -> Result<Option<String>, StoreError> {
        Ok(self.agent(agent, |a| {
            a.rehearsals
                .iter()
                .find(|(n, _, _)| n == name)
                .map(|(_, _, json)| json.clone())
        }))
    }

    async fn rehearsal_reports(&self, agent: &AgentKey) -> Result<Vec<String>, StoreError> {
        Ok(self.agent(agent, |a| {
            a.rehearsals
                .iter()
                .map(|(_, _, json)| json.clone())
                .collect()
        }))
    }

    async fn set_archive_report(
        &self,
        agent: &AgentKey,
        report: &ArchiveReport,
    ) -> Result<(), StoreError> {
        self.agent(agent, |a| a.archive = Some(report.clone()));
        Ok(())
    }

    async fn forget_archive_report(&self, agent: &AgentKey) -> Result<(), StoreError> {
        self.agent(agent, |a| a.archive = None);
        Ok(())
    }

    async fn set_restore_report(
        &self,
        agent: &AgentKey,
        report: &RestoreReport,
    ) -> Result<(), StoreError> {
        self.agent(agent, |a| a.restore = Some(report.clone()));
        Ok(())
    }

    async fn record_tokens(
        &self,
        agent: &AgentKey,
        periods: &crate::periods::Periods,
        usage: &crate::model::Usage,
    ) -> Result<TokenSpend, StoreError> {
        Ok(self.agent(agent, |a| {
            let t = a.spend.get_or_insert_with(TokenSpend::default);
            t.add(periods, usage);
            t.clone()
        }))
    }

    async fn purge_agent(&self, agent: &AgentKey) -> Result<(), StoreError> {
        self.with(|s| {
            s.agents.remove(agent);
            s.registered.remove(agent);
        });
        Ok(())
    }

    fn checkpoint_ref(&self, agent: &AgentKey, cycle: u64) -> String {
        format!("memory:{agent}#cycle={cycle}")
    }

    fn agent_data(&self, agent: &AgentKey) -> String {
        format!("the embedded store's data of agent {agent}")
    }
}

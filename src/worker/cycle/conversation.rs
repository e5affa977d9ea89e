//! An A2A conversation with a memory of its own (`spec.a2a.memory: perConversation`, the
//! default; docs/parties.md): its cycle's history is what was said in the conversation —
//! the caller's messages and the agent's, from the conversation's own log — and never the
//! agent's window; its end acknowledges its events as committed and writes nothing to the
//! agent's consciousness (no checkpoint, the cache as it was). What one caller said never
//! reaches another's requests.

use tracing::info;

use super::{Agentlet, Cycle};
use crate::cycles::CycleOutcome;
use crate::identity::SpaceKey;
use crate::model::{estimate_tokens, Message};
use crate::party::Party;
use crate::store::{InboxEvent, ReadQuery, Receipt, ReceiptOutcome, StoreError};
use crate::worker::prompt;

/// The most messages of a conversation its cycle reads back.
const TRANSCRIPT_MESSAGES: usize = 100;

/// How the history of a conversation starts.
const HEADING: &str = "[EARLIER IN THIS CONVERSATION — what was said in it before this cycle; you remember nothing else of this caller]";

impl Agentlet {
    /// The history of a cycle of `party` that does not share the agent's memory: what was
    /// said in its conversation before `events` (the newest, up to half the window's
    /// tokens), as one message; none when nothing was.
    pub(super) async fn transcript(
        &self,
        party: &Party,
        events: &[InboxEvent],
    ) -> Result<Vec<Message>, StoreError> {
        let Some(space) = party.conversation() else {
            return Ok(Vec::new());
        };
        let key = SpaceKey::new(self.key.namespace.clone(), space);
        // Before the cycle's first message (a cycle redone after a crash may have said
        // something already: that is in its journal, not here).
        let first = events
            .iter()
            .filter_map(|e| e.data.as_ref()?.get("messageId")?.as_str())
            .min()
            .map(str::to_string);
        let newest_first = self
            .store
            .read_messages(
                &key,
                &ReadQuery {
                    limit: TRANSCRIPT_MESSAGES,
                    before: first,
                    after: None,
                    ..Default::default()
                },
            )
            .await?;
        let budget = self.agent.spec.consciousness.window_tokens / 2;
        let spaces = [(space.to_string(), self.store.space(&key).await?)];
        let mut lines: Vec<String> = Vec::new();
        let mut tokens = 0;
        for m in &newest_first {
            let line = prompt::event_line(&spaces, &m.event(false));
            tokens += estimate_tokens(&line);
            if tokens > budget {
                break;
            }
            lines.push(line);
        }
        if lines.is_empty() {
            return Ok(Vec::new());
        }
        lines.reverse();
        let text = self
            .toolbox()
            .masks()
            .redact(&format!("{HEADING}\n{}", lines.join("\n")));
        Ok(vec![Message::user(text)])
    }
}

impl Cycle<'_> {
    /// Ends a cycle that keeps nothing of its own in the agent's memory: its events are
    /// acknowledged as committed (an A2A task of them is completed).
    pub(super) async fn end_answered(&mut self) -> Result<(), StoreError> {
        let agentlet = self.agentlet;
        let record = self.record_write(CycleOutcome::Committed, None);
        agentlet
            .store
            .end_cycle_recorded(
                &agentlet.key,
                self.lease,
                &Receipt::new(ReceiptOutcome::Committed, None, None),
                Some(&record),
            )
            .await?;
        info!(
            party = self.party.label(),
            elapsed_ms = self.started.elapsed().as_millis() as u64,
            "cycle done in a conversation with a memory of its own"
        );
        Ok(())
    }
}

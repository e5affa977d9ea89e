//! Every key and channel the Redis store uses, and nothing else: the rest of the store names
//! keys only through this module.
//!
//! Every key starts with `agentfleet:`. Keys of one space share the hash tag `{space:NS/NAME}`
//! and keys of one agent share `{agent:NS/NAME}`, so each per-space or per-agent atomic step
//! stays on one Redis Cluster slot. A script takes the keys of one [`AgentKeys`] or one
//! [`SpaceKeys`], never both (see `scripts.rs`).
//!
//! | key | type | holds |
//! |---|---|---|
//! | `agentfleet:{space:NS/NAME}:info` | string | the space record, JSON `{displayName, members, maxMessages}` |
//! | `agentfleet:{space:NS/NAME}:agents` | set | names of the member agents (for fan-out) |
//! | `agentfleet:{space:NS/NAME}:log` | stream | messages (field `m`: JSON), trimmed to the retention |
//! | `agentfleet:{space:NS/NAME}:idem:KIND:SENDER:KEY` | string | message id of an idempotent post (1 day), scoped to its sender |
//! | `agentfleet:{space:NS/NAME}:fanout:KIND:SENDER:KEY` | string | a keyed post's fan-out not yet finished: JSON `{event, agents}` (removed once every agent has the event; 1 day) |
//! | `agentfleet:{space:NS/NAME}:agentrate` | integer | agent messages in the current minute (the loop guard's rate; expires) |
//! | `agentfleet:{space:NS/NAME}:live` | channel | live events (JSON); sharded (`SPUBLISH`/`SSUBSCRIBE`) on a Redis Cluster |
//! | `agentfleet:{agent:NS/NAME}:clog` | list | consciousness messages (JSON), append-only, trimmed to what retained checkpoints need |
//! | `agentfleet:{agent:NS/NAME}:cmeta` | hash | `base start end summaryCycle cycle digest tokens tokensUsed lastCycleMs restored highest` (`restored`: the last restore request applied; `highest`: the highest cycle the agent has had, which the next commit is numbered past) |
//! | `agentfleet:{agent:NS/NAME}:checkpoints` | list | retained checkpoints (JSON), newest first |
//! | `agentfleet:{agent:NS/NAME}:summaries` | hash | compaction summaries by cycle |
//! | `agentfleet:{agent:NS/NAME}:memories` | hash | key → memory |
//! | `agentfleet:{agent:NS/NAME}:goals` | hash | id → goal (JSON) |
//! | `agentfleet:{agent:NS/NAME}:plans` | hash | name → plan the agent made (JSON) |
//! | `agentfleet:{agent:NS/NAME}:model` | string | how the model answered lately (JSON `ModelHealth`, written by the worker when it changes) |
//! | `agentfleet:{agent:NS/NAME}:journal` | list | the journal of the cycle under way (JSON entries; dropped by its commit or acknowledgement) |
//! | `agentfleet:{agent:NS/NAME}:tools` | string | the tools the worker has (JSON list of `ToolRecord`, written when it changes) |
//! | `agentfleet:{agent:NS/NAME}:rehearsals` | hash | a Rehearsal's name → its report (JSON `Recorded` `{uid, generation, timeMs, report}` or `{…, error}`), written by the rehearsal's run; the operator puts it in the Rehearsal's status, the gateway shows it |
//! | `agentfleet:{agent:NS/NAME}:rehearsalorder` | sorted set | the names of `rehearsals` by when each was written (ms); the newest 20 are kept |
//! | `agentfleet:{agent:NS/NAME}:toolspecs` | string | what the worker offers the model of its tools outside the worker (JSON list of `ListedTool`: source, name, description, parameters; at most 1 MiB), written when it changes; what a rehearsal offers of its servers' tools |
//! | `agentfleet:{agent:NS/NAME}:planmarks` | hash | plan id (`spec/NAME`, `agent/NAME`) → last due time handled (ms) |
//! | `agentfleet:{agent:NS/NAME}:calls` | hash | asynchronous calls: call id → JSON `CallRecord` `{tool, tokenHash, expiresMs}`; `ID:done` → when its result was accepted (ms) |
//! | `agentfleet:{agent:NS/NAME}:archive` | string | how archiving goes (JSON `ArchiveReport`, written by the worker) |
//! | `agentfleet:{agent:NS/NAME}:restore` | string | the last restore, fork or recovery (JSON `RestoreReport`, written by the worker) |
//! | `agentfleet:{agent:NS/NAME}:tokens` | hash | tokens of every model call: `input cacheRead cacheWrite output` over the agent's life, `day dayTokens month monthTokens` in the budget periods of the last call |
//! | `agentfleet:{agent:NS/NAME}:callsforget` | sorted set | call ids by when they are forgotten (ms): a registration removes those past |
//! | `agentfleet:spaces` | set | `NS/NAME` of every space with membership |
//! | `agentfleet:agents` | set | `NS/NAME` of every Agent the operator reconciles |
//! | `agentfleet:{agent:NS/NAME}:inbox` | list | waiting events (JSON), oldest first |
//! | `agentfleet:{agent:NS/NAME}:urgent` | list | urgent events that arrived while thinking |
//! | `agentfleet:{agent:NS/NAME}:inflight` | list | events of the cycle under way |
//! | `agentfleet:{agent:NS/NAME}:held` | integer | events in the inbox that the cycle under way left for a later one (another party's); reset by the next drain |
//! | `agentfleet:{agent:NS/NAME}:outbound` | sorted set | calls of remote A2A agents under way: `DEPTH:KEY` by until when (ms); what arrives from outside meanwhile continues the deepest chain |
//! | `agentfleet:{agent:NS/NAME}:ids` | sorted set | recent event ids (score: time), for dedupe |
//! | `agentfleet:{agent:NS/NAME}:receipts` | hash | event id → JSON `Receipt` `{outcome, cycle, reason, timeMs}`: how the cycle of an event that asked for one ended (an A2A task's message), written when it is acknowledged |
//! | `agentfleet:{agent:NS/NAME}:conversations` | sorted set | the agent's A2A conversations, `KIND:ID SPACE` (owner, space name) by when they expire (ms); those past are removed when one is kept |
//! | `agentfleet:{agent:NS/NAME}:a2a` | string | what the gateway serves of the agent over A2A (JSON `A2aRecord` `{description, skills, callers, version}`), from `spec.a2a` |
//! | `agentfleet:{agent:NS/NAME}:receiptids` | list | the ids of `receipts`, newest first; those written longer ago than the agent's conversations last (`conversationSeconds` of its `a2a` record, at least `RECEIPTS_KEPT_MS`, 7 days) are forgotten |
//! | `agentfleet:{agent:NS/NAME}:records` | hash | the agent's cycle records: number → JSON `CycleRecord` (see `crate::cycles`); `#seq` the last number given, `#bytes` the records' bytes together |
//! | `agentfleet:{agent:NS/NAME}:recordheads` | list | `SEQ BYTES HEAD` (JSON `CycleHead`) of each record kept, newest first; the oldest are forgotten beyond `spec.cycle.records` |
//! | `agentfleet:{agent:NS/NAME}:state` | string | `thinking` during a cycle |
//! | `agentfleet:{agent:NS/NAME}:lease` | string | `HOLDER\|TOKEN`, expires unless renewed |
//! | `agentfleet:{agent:NS/NAME}:fence` | integer | the last fencing token handed out |
//! | `agentfleet:{agent:NS/NAME}:host` | string | the process that took the lease last (a worker's or a pool replica's pod name) |
//! | `agentfleet:wake` | channel | every agent's wake signals on one Redis: the agent's `NS/NAME` ([`WAKE_CHANNEL`](crate::store::WAKE_CHANNEL)); the operator and pools listen here |
//! | `agentfleet:{agent:NS/NAME}:wake` | channel | the agent's own wake signals (payload as above), which its dedicated worker listens to; on a Redis Cluster the only one (sharded, `SPUBLISH`) |
//!
//! Every step that takes events or acknowledges them is one Lua script on the agent's slot
//! and starts by checking the caller's `HOLDER|TOKEN` against the lease (error `FENCED`).

use crate::identity::AgentKey;
use crate::identity::SpaceKey;
use crate::store::NoteKind;

const PREFIX: &str = "agentfleet:";

/// Suffixes of every key of one agent (removed together when the agent is purged).
const AGENT_SUFFIXES: &[&str] = &[
    "inbox",
    "urgent",
    "inflight",
    "held",
    "outbound",
    "ids",
    "state",
    "lease",
    "fence",
    "host",
    "clog",
    "cmeta",
    "checkpoints",
    "summaries",
    "memories",
    "goals",
    "plans",
    "planmarks",
    "model",
    "tools",
    "toolspecs",
    "rehearsals",
    "rehearsalorder",
    "journal",
    "receipts",
    "receiptids",
    "records",
    "recordheads",
    "conversations",
    "a2a",
    "facts",
    "calls",
    "callsforget",
    "archive",
    "restore",
    "tokens",
];

/// The keys of one agent, all under its hash tag `{agent:NS/NAME}`.
pub(super) struct AgentKeys {
    /// `agentfleet:{agent:NS/NAME}`.
    tag: String,
    /// `NS/NAME`.
    name: String,
}

impl AgentKeys {
    /// The keys of `agent`.
    pub(super) fn new(agent: &AgentKey) -> Self {
        Self {
            tag: format!("{PREFIX}{{agent:{}/{}}}", agent.namespace, agent.name),
            name: agent.to_string(),
        }
    }

    fn key(&self, suffix: &str) -> String {
        format!("{}:{suffix}", self.tag)
    }

    /// `NS/NAME`: the payload of the agent's wake signals, and its name in errors.
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// Waiting events, oldest first.
    pub(super) fn inbox(&self) -> String {
        self.key("inbox")
    }

    /// Urgent events that arrived while the agent was thinking.
    pub(super) fn urgent(&self) -> String {
        self.key("urgent")
    }

    /// Events of the cycle under way.
    pub(super) fn inflight(&self) -> String {
        self.key("inflight")
    }

    /// How many events in the inbox the cycle under way left for a later one.
    pub(super) fn held(&self) -> String {
        self.key("held")
    }

    /// Calls of remote A2A agents under way (`DEPTH:KEY` by until when).
    pub(super) fn outbound(&self) -> String {
        self.key("outbound")
    }

    /// What the gateway serves of the agent over A2A (JSON `A2aRecord`).
    pub(super) fn a2a(&self) -> String {
        self.key("a2a")
    }

    /// What the control plane says of the agent (JSON `AgentFacts`).
    pub(super) fn facts(&self) -> String {
        self.key("facts")
    }

    /// Receipts of acknowledged events that asked for one: event id → JSON `Receipt`.
    pub(super) fn receipts(&self) -> String {
        self.key("receipts")
    }

    /// The ids of `receipts`, newest first (forgotten once older than conversations last).
    pub(super) fn receipt_ids(&self) -> String {
        self.key("receiptids")
    }

    /// The agent's cycle records: number → JSON, with `#seq` and `#bytes`.
    pub(super) fn records(&self) -> String {
        self.key("records")
    }

    /// The heads of the records kept, newest first (`SEQ BYTES HEAD`).
    pub(super) fn record_heads(&self) -> String {
        self.key("recordheads")
    }

    /// The agent's A2A conversations by when they expire.
    pub(super) fn conversations(&self) -> String {
        self.key("conversations")
    }

    /// Recent event ids, for dedupe.
    pub(super) fn ids(&self) -> String {
        self.key("ids")
    }

    /// `thinking` during a cycle.
    pub(super) fn state(&self) -> String {
        self.key("state")
    }

    /// The lease, `HOLDER|TOKEN`.
    pub(super) fn lease(&self) -> String {
        self.key("lease")
    }

    /// The last fencing token handed out.
    pub(super) fn fence(&self) -> String {
        self.key("fence")
    }

    /// The process that took the lease last.
    pub(super) fn host(&self) -> String {
        self.key("host")
    }

    /// The consciousness log.
    pub(super) fn clog(&self) -> String {
        self.key("clog")
    }

    /// The consciousness window and counters.
    pub(super) fn cmeta(&self) -> String {
        self.key("cmeta")
    }

    /// Retained checkpoints, newest first.
    pub(super) fn checkpoints(&self) -> String {
        self.key("checkpoints")
    }

    /// Compaction summaries by cycle.
    pub(super) fn summaries(&self) -> String {
        self.key("summaries")
    }

    /// One of the agent's keyed notes (memories, goals, plans).
    pub(super) fn notes(&self, kind: NoteKind) -> String {
        self.key(kind.as_str())
    }

    /// Per plan id, the last due time handled.
    pub(super) fn plan_marks(&self) -> String {
        self.key("planmarks")
    }

    /// How the model answered lately.
    pub(super) fn model(&self) -> String {
        self.key("model")
    }

    /// The tools the worker has, as it last reported them.
    pub(super) fn tools(&self) -> String {
        self.key("tools")
    }

    /// What the worker offers of the tools it lists from servers, as it last reported it.
    pub(super) fn tool_specs(&self) -> String {
        self.key("toolspecs")
    }

    /// The reports of the agent's rehearsals, by the Rehearsal's name.
    pub(super) fn rehearsals(&self) -> String {
        self.key("rehearsals")
    }

    /// The names of `rehearsals` by when each was written.
    pub(super) fn rehearsal_order(&self) -> String {
        self.key("rehearsalorder")
    }

    /// How archiving goes, as the worker reports it (JSON).
    pub(super) fn archive(&self) -> String {
        self.key("archive")
    }

    /// The last restore, fork or recovery, as the worker reports it (JSON).
    pub(super) fn restore_report(&self) -> String {
        self.key("restore")
    }

    /// The tokens spent, by direction and budget period.
    pub(super) fn tokens(&self) -> String {
        self.key("tokens")
    }

    /// The journal of the cycle under way.
    pub(super) fn journal(&self) -> String {
        self.key("journal")
    }

    /// The agent's own wake channel (on a Redis Cluster sharded pub/sub on the agent's slot,
    /// so that the scripts that queue its events can publish on it).
    pub(super) fn wake(&self) -> String {
        self.key("wake")
    }

    /// Asynchronous calls waiting for (or done with) their result.
    pub(super) fn calls(&self) -> String {
        self.key("calls")
    }

    /// Call ids by when they are forgotten.
    pub(super) fn calls_forget(&self) -> String {
        self.key("callsforget")
    }

    /// Every key of the agent.
    pub(super) fn all(&self) -> Vec<String> {
        AGENT_SUFFIXES.iter().map(|s| self.key(s)).collect()
    }

    /// Where a checkpoint of this agent lives, as the operator shows it.
    pub(super) fn checkpoint_ref(&self, cycle: u64) -> String {
        format!("redis:{}#cycle={cycle}", self.checkpoints())
    }

    /// Every key of this agent, as a pattern.
    pub(super) fn pattern(&self) -> String {
        self.key("*")
    }
}

/// The keys of one space, all under its hash tag `{space:NS/NAME}`.
pub(super) struct SpaceKeys {
    /// `agentfleet:{space:NS/NAME}`.
    tag: String,
}

impl SpaceKeys {
    /// The keys of `space`.
    pub(super) fn new(space: &SpaceKey) -> Self {
        Self {
            tag: format!("{PREFIX}{{space:{}/{}}}", space.namespace, space.name),
        }
    }

    fn key(&self, suffix: &str) -> String {
        format!("{}:{suffix}", self.tag)
    }

    /// The space record.
    pub(super) fn info(&self) -> String {
        self.key("info")
    }

    /// Names of the member agents.
    pub(super) fn agents(&self) -> String {
        self.key("agents")
    }

    /// The message log.
    pub(super) fn log(&self) -> String {
        self.key("log")
    }

    /// The message id of a keyed post (`scoped`: [`NewMessage::scoped_idempotency_key`],
    /// empty for a post without a key).
    ///
    /// [`NewMessage::scoped_idempotency_key`]: crate::store::NewMessage::scoped_idempotency_key
    pub(super) fn idempotency(&self, scoped: &str) -> String {
        self.key(&format!("idem:{scoped}"))
    }

    /// The unfinished fan-out of a keyed post.
    pub(super) fn fan_out(&self, scoped: &str) -> String {
        self.key(&format!("fanout:{scoped}"))
    }

    /// Agent messages this minute (the loop guard's rate).
    pub(super) fn agent_rate(&self) -> String {
        self.key("agentrate")
    }

    /// The live events channel.
    pub(super) fn live(&self) -> String {
        self.key("live")
    }
}

/// `NS/NAME` of every space with membership.
pub(super) fn spaces_index() -> String {
    format!("{PREFIX}spaces")
}

/// `NS/NAME` of every registered Agent.
pub(super) fn agents_index() -> String {
    format!("{PREFIX}agents")
}

/// The hash tag of a key or channel: what Redis Cluster hashes to pick its slot (what stands
/// between the first `{` and the next `}`, unless that is empty; else the whole name).
pub(super) fn hash_tag(key: &str) -> &str {
    key.split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(tag, _)| tag)
        .filter(|tag| !tag.is_empty())
        .unwrap_or(key)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    #[test]
    fn keys_of_one_space_share_a_hash_tag() {
        let s = SpaceKeys::new(&SpaceKey::new("ns", "family"));
        assert_eq!(s.info(), "agentfleet:{space:ns/family}:info");
        assert_eq!(s.agents(), "agentfleet:{space:ns/family}:agents");
        let all = [
            s.info(),
            s.agents(),
            s.log(),
            s.idempotency("human:h:k"),
            s.fan_out("human:h:k"),
            s.agent_rate(),
            s.live(),
        ];
        for k in &all {
            assert_eq!(hash_tag(k), "space:ns/family", "{k}");
        }
        assert_eq!(
            s.idempotency("agent:a:k"),
            "agentfleet:{space:ns/family}:idem:agent:a:k"
        );
        assert_eq!(
            s.fan_out("agent:a:k"),
            "agentfleet:{space:ns/family}:fanout:agent:a:k"
        );
    }

    #[test]
    fn keys_of_one_agent_share_a_hash_tag_and_are_all_purged() {
        let a = AgentKeys::new(&AgentKey::new("ns", "alice"));
        let named = [
            a.inbox(),
            a.urgent(),
            a.inflight(),
            a.held(),
            a.outbound(),
            a.ids(),
            a.state(),
            a.lease(),
            a.fence(),
            a.host(),
            a.clog(),
            a.cmeta(),
            a.checkpoints(),
            a.summaries(),
            a.notes(NoteKind::Memories),
            a.notes(NoteKind::Goals),
            a.notes(NoteKind::Plans),
            a.plan_marks(),
            a.model(),
            a.tools(),
            a.tool_specs(),
            a.rehearsals(),
            a.rehearsal_order(),
            a.journal(),
            a.receipts(),
            a.receipt_ids(),
            a.records(),
            a.record_heads(),
            a.conversations(),
            a.a2a(),
            a.facts(),
            a.calls(),
            a.calls_forget(),
            a.archive(),
            a.restore_report(),
            a.tokens(),
        ];
        let all = a.all();
        for k in &named {
            assert_eq!(hash_tag(k), "agent:ns/alice", "{k}");
            assert!(all.contains(k), "{k} is not purged");
        }
        assert_eq!(all.len(), named.len());
        assert_eq!(a.inbox(), "agentfleet:{agent:ns/alice}:inbox");
        // A channel, not a key: on the agent's slot, and nothing to purge.
        assert_eq!(hash_tag(&a.wake()), "agent:ns/alice");
        assert!(!all.contains(&a.wake()));
        assert_eq!(a.name(), "ns/alice");
        assert_eq!(
            a.checkpoint_ref(7),
            "redis:agentfleet:{agent:ns/alice}:checkpoints#cycle=7"
        );
        assert_eq!(a.pattern(), "agentfleet:{agent:ns/alice}:*");
    }
}

//! The Redis store.
//!
//! # Keys
//!
//! Every key starts with `agentfleet:`. Keys of one space share the hash tag `{space:NS/NAME}`
//! (and, with later work, keys of one agent share `{agent:NS/NAME}`), so each per-space or
//! per-agent atomic step stays on one Redis Cluster slot.
//!
//! | key | type | holds |
//! |---|---|---|
//! | `agentfleet:{space:NS/NAME}:info` | string | the space record, JSON `{displayName, members, maxMessages}` |
//! | `agentfleet:{space:NS/NAME}:agents` | set | names of the member agents (for fan-out) |
//! | `agentfleet:{space:NS/NAME}:log` | stream | messages (field `m`: JSON), trimmed to the retention |
//! | `agentfleet:{space:NS/NAME}:idem:KIND:SENDER:KEY` | string | message id of an idempotent post (1 day), scoped to its sender |
//! | `agentfleet:{space:NS/NAME}:agentrate` | integer | agent messages in the current minute (the loop guard's rate; expires) |
//! | `agentfleet:{space:NS/NAME}:live` | channel | live events (JSON) |
//! | `agentfleet:{agent:NS/NAME}:clog` | list | consciousness messages (JSON), append-only, trimmed to what retained checkpoints need |
//! | `agentfleet:{agent:NS/NAME}:cmeta` | hash | `base start end summaryCycle cycle digest tokens tokensUsed lastCycleMs` |
//! | `agentfleet:{agent:NS/NAME}:checkpoints` | list | retained checkpoints (JSON), newest first |
//! | `agentfleet:{agent:NS/NAME}:summaries` | hash | compaction summaries by cycle |
//! | `agentfleet:{agent:NS/NAME}:memories` | hash | key → memory |
//! | `agentfleet:{agent:NS/NAME}:goals` | hash | id → goal (JSON) |
//! | `agentfleet:{agent:NS/NAME}:plans` | hash | name → plan the agent made (JSON) |
//! | `agentfleet:{agent:NS/NAME}:model` | string | how the model answered lately (JSON `ModelHealth`, written by the worker when it changes) |
//! | `agentfleet:{agent:NS/NAME}:planmarks` | hash | plan id (`spec/NAME`, `agent/NAME`) → last due time handled (ms) |
//! | `agentfleet:spaces` | set | `NS/NAME` of every space with membership |
//! | `agentfleet:agents` | set | `NS/NAME` of every Agent the operator reconciles |
//! | `agentfleet:{agent:NS/NAME}:inbox` | list | waiting events (JSON), oldest first |
//! | `agentfleet:{agent:NS/NAME}:urgent` | list | urgent events that arrived while thinking |
//! | `agentfleet:{agent:NS/NAME}:inflight` | list | events of the cycle under way |
//! | `agentfleet:{agent:NS/NAME}:ids` | sorted set | recent event ids (score: time), for dedupe |
//! | `agentfleet:{agent:NS/NAME}:state` | string | `thinking` during a cycle |
//! | `agentfleet:{agent:NS/NAME}:lease` | string | `HOLDER\|TOKEN`, expires unless renewed |
//! | `agentfleet:{agent:NS/NAME}:fence` | integer | the last fencing token handed out |
//!
//! Every step that takes events or acknowledges them is one Lua script on the agent's slot
//! and starts by checking the caller's `HOLDER|TOKEN` against the lease (error `FENCED`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{AsyncCommands, AsyncConnectionConfig, Script};
use tokio::sync::OnceCell;

use super::types::{plan_commit, WindowState};
use super::MidCycle;
use super::{
    now_ms, AgentKey, AgentObservation, Checkpoint, Consciousness, CycleCommit, Goal, Guard,
    InboxEvent, Lease, LiveEvent, Memories, ModelHealth, NewMessage, Posted, Pushed, ReadQuery,
    SpaceMessage, SpaceRecord, Store, StoreError, SEEN_IDS, WAKE_CHANNEL,
};
use crate::crd::{MemberKind, PlanSpec};
use crate::keys::SpaceKey;

const PREFIX: &str = "agentfleet:";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

fn space_tag(space: &SpaceKey) -> String {
    format!("{PREFIX}{{space:{}/{}}}", space.namespace, space.name)
}

fn info_key(space: &SpaceKey) -> String {
    format!("{}:info", space_tag(space))
}

fn agents_key(space: &SpaceKey) -> String {
    format!("{}:agents", space_tag(space))
}

fn agents_index_key() -> String {
    format!("{PREFIX}agents")
}

fn spaces_index_key() -> String {
    format!("{PREFIX}spaces")
}

fn log_key(space: &SpaceKey) -> String {
    format!("{}:log", space_tag(space))
}

fn live_channel(space: &SpaceKey) -> String {
    format!("{}:live", space_tag(space))
}

fn agent_key(agent: &AgentKey, suffix: &str) -> String {
    format!(
        "{PREFIX}{{agent:{}/{}}}:{suffix}",
        agent.namespace, agent.name
    )
}

fn lease_value(lease: &Lease) -> String {
    format!("{}|{}", lease.holder, lease.token)
}

/// Checks the caller's lease (ARGV[1]) against KEYS[1]. Prepended to fenced scripts.
const FENCE: &str = r#"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return redis.error_reply('FENCED the lease is held by another worker')
end
local function move_all(src, dst)
  local items = redis.call('LRANGE', src, 0, -1)
  for i = 1, #items, 1000 do
    redis.call('RPUSH', dst, unpack(items, i, math.min(i + 999, #items)))
  end
  redis.call('DEL', src)
  return items
end
"#;

/// `push(inbox, urgent, ids, state, lease, id, json, urgent, time_ms, seen_max, agent, wake)`:
/// queues one event unless its id was seen; returns queued, woke (0/1).
const PUSH_ONE: &str = r#"
local function push(inbox, urgent, ids, state, lease, id, json, is_urgent, time_ms, seen_max, agent, wake)
  if redis.call('ZADD', ids, 'NX', time_ms, id) == 0 then return 0, 0 end
  local n = redis.call('ZCARD', ids)
  local max = tonumber(seen_max)
  if n > max then redis.call('ZREMRANGEBYRANK', ids, 0, n - max - 1) end
  if is_urgent == '1' and redis.call('GET', state) == 'thinking' then
    redis.call('RPUSH', urgent, json)
  else
    redis.call('RPUSH', inbox, json)
  end
  if redis.call('EXISTS', lease) == 0 then
    redis.call('PUBLISH', wake, agent)
    return 1, 1
  end
  return 1, 0
end
"#;

/// KEYS: inbox, urgent, ids, state, lease. ARGV: id, json, urgent, time_ms, seen_max, agent,
/// wake channel. Returns {queued, woke}.
static PUSH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r#"{PUSH_ONE}
local queued, woke = push(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7])
return {{queued, woke}}
"#
    ))
});

/// Placeholder for the message id in templates the post script fills in.
const ID_PLACEHOLDER: &str = "@@agentfleet-message-id@@";

/// KEYS: log, agents, idempotency, agent rate, then per agent: inbox, urgent, ids, state,
/// lease.
/// ARGV: 1 message json (no id), 2 max messages, 3 live channel, 4 wake channel, 5 seen max,
/// 6 time_ms, 7 urgent, 8 event template, 9 live template, 10 sender id, 11 event id prefix,
/// 12 has idempotency key, 13 sender is an agent, 14 over the depth limit, 15 agent messages
/// a minute, 16 depth notice json, 17 rate notice json, 18 depth notice live template,
/// 19 rate notice live template, then per agent: name, NS/NAME.
/// Returns {id, duplicate, guard ('' | depth | rate), delivered agent...}.
static POST: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r#"{PUSH_ONE}
local function fill(template, id)
  local out, init = {{}}, 1
  while true do
    local i, j = string.find(template, '{ID_PLACEHOLDER}', init, true)
    if not i then break end
    table.insert(out, string.sub(template, init, i - 1))
    table.insert(out, id)
    init = j + 1
  end
  table.insert(out, string.sub(template, init))
  return table.concat(out)
end
if ARGV[12] == '1' then
  local existing = redis.call('GET', KEYS[3])
  if existing then return {{existing, '1', ''}} end
end
-- The loop guard: an agent's message beyond the depth or the minute's rate wakes no agent.
local guard, notice = '', nil
if ARGV[13] == '1' then
  if ARGV[14] == '1' then
    guard, notice = 'depth', 16
  else
    local n = redis.call('INCR', KEYS[4])
    if n == 1 then redis.call('EXPIRE', KEYS[4], 60) end
    local max = tonumber(ARGV[15])
    if n > max then guard = 'rate' end
    if n == max + 1 then notice = 17 end
  end
end
local id = redis.call('XADD', KEYS[1], 'MAXLEN', ARGV[2], '*', 'm', ARGV[1])
if ARGV[12] == '1' then redis.call('SET', KEYS[3], id, 'EX', 86400) end
local result = {{id, '0', guard}}
if guard == '' then
  local event = fill(ARGV[8], id)
  local agents = (#ARGV - 19) / 2
  for i = 0, agents - 1 do
    local name = ARGV[20 + 2 * i]
    local k = 5 + 5 * i
    if name ~= ARGV[10] and redis.call('SISMEMBER', KEYS[2], name) == 1 then
      local queued = push(KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4],
        ARGV[11] .. id, event, ARGV[7], ARGV[6], ARGV[5], ARGV[21 + 2 * i], ARGV[4])
      if queued == 1 then table.insert(result, name) end
    end
  end
end
redis.call('PUBLISH', ARGV[3], fill(ARGV[9], id))
if notice then
  local nid = redis.call('XADD', KEYS[1], 'MAXLEN', ARGV[2], '*', 'm', ARGV[notice])
  redis.call('PUBLISH', ARGV[3], fill(ARGV[notice + 2], nid))
end
return result
"#
    ))
});

/// KEYS: lease, fence. ARGV: holder, ttl_ms. Returns the token, or nil while another holds it.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local cur = redis.call('GET', KEYS[1])
if cur then
  local holder, token = string.match(cur, '^(.*)|(%d+)$')
  if holder == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return tonumber(token)
  end
  return false
end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. token, 'PX', ARGV[2])
return token
"#,
    )
});

/// KEYS: lease. ARGV: lease value, ttl_ms. Returns 1 when it was ours.
static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"#,
    )
});

/// KEYS: lease, inbox, urgent, inflight. ARGV: lease value, NS/NAME, wake channel. Gives the
/// lease up; publishes a wake signal when events are left. Returns 1 when it was ours.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
if redis.call('LLEN', KEYS[2]) + redis.call('LLEN', KEYS[3]) + redis.call('LLEN', KEYS[4]) > 0 then
  redis.call('PUBLISH', ARGV[3], ARGV[2])
end
return 1
"#,
    )
});

/// KEYS: planmarks, inbox, urgent, ids, state, lease. ARGV: plan id, due ms, has event (0/1),
/// then the push arguments (id, json, urgent, time_ms, seen max, NS/NAME, wake channel).
/// Returns {marked, queued, woke}.
static MARK_PLAN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r#"{PUSH_ONE}
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur and tonumber(cur) >= tonumber(ARGV[2]) then return {{0, 0, 0}} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if ARGV[3] == '0' then return {{1, 0, 0}} end
local queued, woke = push(KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10])
return {{1, queued, woke}}
"#
    ))
});

/// Every key of one agent (suffixes of [`agent_key`]), removed together by `purge_agent`.
const AGENT_KEYS: &[&str] = &[
    "inbox",
    "urgent",
    "inflight",
    "ids",
    "state",
    "lease",
    "fence",
    "clog",
    "cmeta",
    "checkpoints",
    "summaries",
    "memories",
    "goals",
    "plans",
    "planmarks",
    "model",
];

/// KEYS: lease, inbox, inflight, state. ARGV: lease value. Moves the inbox in flight and
/// returns everything in flight.
static DRAIN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r#"{FENCE}
move_all(KEYS[2], KEYS[3])
local all = redis.call('LRANGE', KEYS[3], 0, -1)
if #all > 0 then redis.call('SET', KEYS[4], 'thinking') end
return all
"#
    ))
});

/// KEYS: lease, urgent, inflight. ARGV: lease value. Moves the urgent queue in flight.
static TAKE_URGENT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r#"{FENCE}
local items = move_all(KEYS[2], KEYS[3])
return items
"#
    ))
});

/// KEYS: lease, urgent, inflight, inbox. ARGV: lease value, take urgent (0/1), preview limit.
/// Returns {urgent events, waiting count, preview events}.
static MID_CYCLE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r#"{FENCE}
local urgent = {{}}
if ARGV[2] == '1' then urgent = move_all(KEYS[2], KEYS[3]) end
local waiting = redis.call('LLEN', KEYS[4]) + redis.call('LLEN', KEYS[2])
local preview = {{}}
local limit = tonumber(ARGV[3])
if limit > 0 and waiting > 0 then preview = redis.call('LRANGE', KEYS[4], 0, limit - 1) end
return {{urgent, waiting, preview}}
"#
    ))
});

/// KEYS: lease, inflight, state, urgent, inbox. ARGV: lease value. Ends the cycle.
static ACK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r#"{FENCE}
redis.call('DEL', KEYS[2], KEYS[3])
move_all(KEYS[4], KEYS[5])
return 1
"#
    ))
});

/// Serialization through one closure for the values a post encodes.
mod erased_json {
    pub trait Json {
        fn json(&self) -> Result<String, serde_json::Error>;
    }
    impl<T: serde::Serialize> Json for T {
        fn json(&self) -> Result<String, serde_json::Error> {
            serde_json::to_string(self)
        }
    }
}

/// KEYS: lease, clog, cmeta, checkpoints, summaries, inflight, state, urgent, inbox.
/// ARGV: lease value, plan (JSON, numbers as strings), new messages...
static COMMIT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r#"{FENCE}
local plan = cjson.decode(ARGV[2])
local cur = redis.call('HGET', KEYS[3], 'cycle') or '0'
if cur ~= plan.prevCycle then
  return redis.error_reply('CONFLICT consciousness is at cycle ' .. cur .. ', the commit expected ' .. plan.prevCycle)
end
for i = 3, #ARGV, 1000 do
  redis.call('RPUSH', KEYS[2], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
if plan.summaryText ~= '' then redis.call('HSET', KEYS[5], plan.summaryCycle, plan.summaryText) end
for _, s in ipairs(plan.dropSummaries) do redis.call('HDEL', KEYS[5], s) end
local base = tonumber(redis.call('HGET', KEYS[3], 'base') or '0')
local trim = tonumber(plan.trimBefore)
if trim > base then
  redis.call('LTRIM', KEYS[2], trim - base, -1)
  base = trim
end
redis.call('HSET', KEYS[3], 'base', base, 'start', plan.start, 'end', plan.finish,
  'summaryCycle', plan.summaryCycle, 'cycle', plan.cycle, 'digest', plan.digest,
  'tokens', plan.tokens, 'lastCycleMs', plan.timeMs)
redis.call('HINCRBY', KEYS[3], 'tokensUsed', plan.cycleTokens)
redis.call('DEL', KEYS[4])
for _, c in ipairs(plan.checkpoints) do redis.call('RPUSH', KEYS[4], c) end
redis.call('DEL', KEYS[6], KEYS[7])
move_all(KEYS[8], KEYS[9])
return 1
"#
    ))
});

/// KEYS: lease, clog, cmeta, checkpoints. ARGV: lease value, plan (JSON, numbers as strings).
static RESTORE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r#"{FENCE}
local plan = cjson.decode(ARGV[2])
local base = tonumber(redis.call('HGET', KEYS[3], 'base') or '0')
local keep = tonumber(plan.finish) - base
if keep <= 0 then redis.call('DEL', KEYS[2]) else redis.call('LTRIM', KEYS[2], 0, keep - 1) end
redis.call('HSET', KEYS[3], 'start', plan.start, 'end', plan.finish, 'summaryCycle', plan.summaryCycle,
  'cycle', plan.cycle, 'digest', plan.digest, 'tokens', plan.tokens)
redis.call('DEL', KEYS[4])
for _, c in ipairs(plan.checkpoints) do redis.call('RPUSH', KEYS[4], c) end
return 1
"#
    ))
});

/// KEYS: lease, hash. ARGV: lease value, `set` FIELD VALUE... | `del` FIELD... Returns the
/// number of fields deleted (0 for `set`).
static FENCED_HASH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r#"{FENCE}
if #ARGV < 3 then return 0 end
if ARGV[2] == 'set' then
  redis.call('HSET', KEYS[2], unpack(ARGV, 3))
  return 0
end
return redis.call('HDEL', KEYS[2], unpack(ARGV, 3))
"#
    ))
});

/// Why a commit attempt failed: built on a stale window, or anything else.
enum Conflict {
    Stale,
    Other(StoreError),
}

impl From<StoreError> for Conflict {
    fn from(e: StoreError) -> Self {
        Conflict::Other(e)
    }
}

fn opt_string(v: Option<u64>) -> String {
    v.map(|n| n.to_string()).unwrap_or_default()
}

fn decode_events(agent: &AgentKey, raw: Vec<String>) -> Result<Vec<InboxEvent>, StoreError> {
    raw.iter()
        .map(|j| {
            serde_json::from_str(j).map_err(|source| StoreError::Decode {
                what: format!("an inbox event of agent {agent}"),
                source,
            })
        })
        .collect()
}

/// A [`Store`] on Redis. Connects lazily and reconnects by itself, so a process can start
/// (and report not ready) while Redis is down.
pub struct RedisStore {
    client: redis::Client,
    conn: OnceCell<ConnectionManager>,
    /// One connection per agent for blocking waits, which would stall a shared one.
    blocking: Mutex<HashMap<AgentKey, MultiplexedConnection>>,
    /// What this process last committed per agent (window and retained checkpoints), so the
    /// next commit of the lease holder needs no reads; the commit script still checks the
    /// cycle it builds on, and a mismatch drops the entry and retries from a fresh read.
    committed: Mutex<HashMap<AgentKey, (WindowState, Vec<Checkpoint>)>>,
}

impl RedisStore {
    /// A store for the Redis at `url` (`redis://[:password@]host:port[/db]`). Nothing is
    /// contacted until the first command.
    pub fn new(url: &str) -> Result<Self, StoreError> {
        let client = redis::Client::open(url)
            .map_err(|e| StoreError::InvalidUrl(format!("{} ({:?})", redact_url(url), e.kind())))?;
        Ok(Self {
            client,
            conn: OnceCell::new(),
            blocking: Mutex::new(HashMap::new()),
            committed: Mutex::new(HashMap::new()),
        })
    }

    async fn blocking_conn(&self, agent: &AgentKey) -> Result<MultiplexedConnection, StoreError> {
        let cached = self
            .blocking
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(agent)
            .cloned();
        if let Some(conn) = cached {
            return Ok(conn);
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(None);
        let conn = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(redis_err("connect"))?;
        self.blocking
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(agent.clone(), conn.clone());
        Ok(conn)
    }

    fn forget_blocking(&self, agent: &AgentKey) {
        self.blocking
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(agent);
    }

    /// The window the next commit builds on, and the raw meta hash.
    async fn window(
        &self,
        agent: &AgentKey,
    ) -> Result<(WindowState, HashMap<String, String>), StoreError> {
        let mut conn = self.conn().await?;
        let meta: HashMap<String, String> = conn
            .hgetall(agent_key(agent, "cmeta"))
            .await
            .map_err(redis_err("read consciousness"))?;
        let num = |k: &str| meta.get(k).and_then(|v| v.parse::<u64>().ok());
        let window = WindowState {
            cycle: num("cycle").unwrap_or(0),
            start: num("start").unwrap_or(0),
            end: num("end").unwrap_or(0),
            summary_cycle: num("summaryCycle"),
            digest: meta.get("digest").cloned().unwrap_or_default(),
        };
        Ok((window, meta))
    }

    async fn fenced_hash(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        hash: &str,
        op: &str,
        fields: impl Iterator<Item = String>,
    ) -> Result<u64, StoreError> {
        let mut invocation = FENCED_HASH.prepare_invoke();
        invocation
            .key(agent_key(agent, "lease"))
            .key(agent_key(agent, hash))
            .arg(lease_value(lease))
            .arg(op);
        for f in fields {
            invocation.arg(f);
        }
        let mut conn = self.conn().await?;
        invocation
            .invoke_async(&mut conn)
            .await
            .map_err(fenced(agent, "write memories, goals or plans"))
    }

    /// One commit attempt, building on `known` (window, retained checkpoints) when given.
    async fn commit_once(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        commit: &CycleCommit,
        known: Option<(WindowState, Vec<Checkpoint>)>,
    ) -> Result<(Checkpoint, WindowState, Vec<Checkpoint>), Conflict> {
        let (window, retained) = match known {
            Some(k) => k,
            None => (self.window(agent).await?.0, self.checkpoints(agent).await?),
        };
        let plan = plan_commit(&window, &retained, commit, now_ms()).map_err(|reason| {
            StoreError::InvalidCommit {
                agent: agent.to_string(),
                reason,
            }
        })?;
        let cp = &plan.checkpoint;
        let checkpoints = plan
            .retained
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| StoreError::Decode {
                what: format!("checkpoints of agent {agent}"),
                source,
            })?;
        let summary_text = commit
            .compaction
            .as_ref()
            .and_then(|c| c.summary.clone())
            .unwrap_or_default();
        let plan_json = serde_json::json!({
            "prevCycle": window.cycle.to_string(),
            "start": cp.start.to_string(),
            "finish": cp.end.to_string(),
            "summaryCycle": opt_string(cp.summary_cycle),
            "summaryText": summary_text,
            "cycle": cp.cycle.to_string(),
            "digest": cp.digest,
            "tokens": cp.tokens.to_string(),
            "cycleTokens": commit.cycle_tokens.to_string(),
            "timeMs": cp.time_ms.to_string(),
            "trimBefore": plan.trim_before.to_string(),
            "dropSummaries": plan.drop_summaries.iter().map(u64::to_string).collect::<Vec<_>>(),
            "checkpoints": checkpoints,
        });
        let mut invocation = COMMIT.prepare_invoke();
        for suffix in [
            "lease",
            "clog",
            "cmeta",
            "checkpoints",
            "summaries",
            "inflight",
            "state",
            "urgent",
            "inbox",
        ] {
            invocation.key(agent_key(agent, suffix));
        }
        invocation
            .arg(lease_value(lease))
            .arg(plan_json.to_string());
        for m in &commit.new_messages {
            invocation.arg(m);
        }
        let mut conn = self.conn().await?;
        invocation
            .invoke_async::<u8>(&mut conn)
            .await
            .map_err(|e| match e.code() {
                Some("CONFLICT") => Conflict::Stale,
                _ => Conflict::Other(fenced(agent, "commit cycle")(e)),
            })?;
        let cp = plan.checkpoint;
        let after = WindowState {
            cycle: cp.cycle,
            start: cp.start,
            end: cp.end,
            summary_cycle: cp.summary_cycle,
            digest: cp.digest.clone(),
        };
        Ok((cp, after, plan.retained))
    }

    fn committed(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<AgentKey, (WindowState, Vec<Checkpoint>)>> {
        self.committed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn drain(&self, agent: &AgentKey, lease: &Lease) -> Result<Vec<InboxEvent>, StoreError> {
        let mut conn = self.conn().await?;
        let raw: Vec<String> = DRAIN
            .key(agent_key(agent, "lease"))
            .key(agent_key(agent, "inbox"))
            .key(agent_key(agent, "inflight"))
            .key(agent_key(agent, "state"))
            .arg(lease_value(lease))
            .invoke_async(&mut conn)
            .await
            .map_err(fenced(agent, "drain inbox"))?;
        decode_events(agent, raw)
    }

    async fn conn(&self) -> Result<ConnectionManager, StoreError> {
        let conn = self
            .conn
            .get_or_try_init(|| async {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(RESPONSE_TIMEOUT))
                    .set_number_of_retries(2);
                ConnectionManager::new_with_config(self.client.clone(), config)
                    .await
                    .map_err(|source| StoreError::Redis {
                        op: "connect",
                        source,
                    })
            })
            .await?;
        Ok(conn.clone())
    }
}

/// `url` with any password replaced by `***`, for messages.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &url[scheme_end + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{}:***{}", &url[..scheme_end + 3], user, &url[at..])
        }
        _ => url.to_string(),
    }
}

fn redis_err(op: &'static str) -> impl FnOnce(redis::RedisError) -> StoreError {
    move |source| StoreError::Redis { op, source }
}

/// Like [`redis_err`], but a `FENCED` script error becomes [`StoreError::Fenced`].
fn fenced<'a>(
    agent: &'a AgentKey,
    op: &'static str,
) -> impl FnOnce(redis::RedisError) -> StoreError + 'a {
    move |source| {
        if source.code() == Some("FENCED") {
            StoreError::Fenced {
                agent: agent.to_string(),
            }
        } else {
            StoreError::Redis { op, source }
        }
    }
}

/// `key, json, key, json, …` of `items`, for a hash write.
fn json_fields<T: serde::Serialize>(
    items: &[T],
    key: impl Fn(&T) -> &str,
    what: &str,
) -> Result<Vec<String>, StoreError> {
    let mut fields = Vec::with_capacity(items.len() * 2);
    for item in items {
        fields.push(key(item).to_string());
        fields.push(
            serde_json::to_string(item).map_err(|source| StoreError::Decode {
                what: format!("{what} {}", key(item)),
                source,
            })?,
        );
    }
    Ok(fields)
}

/// The JSON values of a hash, decoded in key order.
fn json_values<T: serde::de::DeserializeOwned>(
    raw: &BTreeMap<String, String>,
    what: impl Fn() -> String,
) -> Result<Vec<T>, StoreError> {
    raw.values()
        .map(|j| {
            serde_json::from_str(j).map_err(|source| StoreError::Decode {
                what: what(),
                source,
            })
        })
        .collect()
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

#[async_trait]
impl Store for RedisStore {
    async fn ping(&self) -> Result<(), StoreError> {
        let mut conn = self.conn().await?;
        redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .map_err(redis_err("ping"))?;
        Ok(())
    }

    async fn apply_space(
        &self,
        space: &SpaceKey,
        record: &SpaceRecord,
    ) -> Result<bool, StoreError> {
        let members = &record.members;
        let json = serde_json::to_string(record).map_err(|source| StoreError::Decode {
            what: format!("members of space {space}"),
            source,
        })?;
        let mut conn = self.conn().await?;
        let current: Option<String> = conn
            .get(info_key(space))
            .await
            .map_err(redis_err("get space members"))?;
        let changed = current.as_deref() != Some(json.as_str());
        if changed {
            let agents: Vec<&str> = members
                .iter()
                .filter(|m| m.kind == MemberKind::Agent)
                .map(|m| m.id.as_str())
                .collect();
            let mut tx = redis::pipe();
            tx.atomic()
                .set(info_key(space), &json)
                .ignore()
                .del(agents_key(space))
                .ignore();
            if !agents.is_empty() {
                tx.sadd(agents_key(space), agents).ignore();
            }
            tx.query_async::<()>(&mut conn)
                .await
                .map_err(redis_err("set space members"))?;
        }
        // The index lives on another slot; adding to it is idempotent, so it is its own step.
        conn.sadd::<_, _, ()>(spaces_index_key(), space.to_string())
            .await
            .map_err(redis_err("index space"))?;
        Ok(changed)
    }

    async fn space(&self, space: &SpaceKey) -> Result<Option<SpaceRecord>, StoreError> {
        let mut conn = self.conn().await?;
        let json: Option<String> = conn
            .get(info_key(space))
            .await
            .map_err(redis_err("get space members"))?;
        json.map(|j| {
            serde_json::from_str(&j).map_err(|source| StoreError::Decode {
                what: format!("members of space {space}"),
                source,
            })
        })
        .transpose()
    }

    async fn remove_space(&self, space: &SpaceKey) -> Result<bool, StoreError> {
        let mut conn = self.conn().await?;
        let (removed, _): (u64, u64) = redis::pipe()
            .atomic()
            .del(info_key(space))
            .del(agents_key(space))
            .query_async(&mut conn)
            .await
            .map_err(redis_err("remove space"))?;
        conn.srem::<_, _, ()>(spaces_index_key(), space.to_string())
            .await
            .map_err(redis_err("unindex space"))?;
        Ok(removed > 0)
    }

    async fn spaces(&self) -> Result<Vec<SpaceKey>, StoreError> {
        let mut conn = self.conn().await?;
        let names: Vec<String> = conn
            .smembers(spaces_index_key())
            .await
            .map_err(redis_err("list spaces"))?;
        let mut keys: Vec<SpaceKey> = names
            .iter()
            .filter_map(|n| n.split_once('/'))
            .map(|(ns, name)| SpaceKey::new(ns, name))
            .collect();
        keys.sort();
        Ok(keys)
    }

    async fn register_agent(&self, agent: &AgentKey) -> Result<bool, StoreError> {
        let mut conn = self.conn().await?;
        let added: u64 = conn
            .sadd(agents_index_key(), agent.to_string())
            .await
            .map_err(redis_err("register agent"))?;
        Ok(added > 0)
    }

    async fn unregister_agent(&self, agent: &AgentKey) -> Result<bool, StoreError> {
        let mut conn = self.conn().await?;
        let removed: u64 = conn
            .srem(agents_index_key(), agent.to_string())
            .await
            .map_err(redis_err("unregister agent"))?;
        Ok(removed > 0)
    }

    async fn agent_registered(&self, agent: &AgentKey) -> Result<bool, StoreError> {
        let mut conn = self.conn().await?;
        conn.sismember(agents_index_key(), agent.to_string())
            .await
            .map_err(redis_err("look up agent"))
    }

    async fn push_event(&self, agent: &AgentKey, event: &InboxEvent) -> Result<Pushed, StoreError> {
        let json = serde_json::to_string(event).map_err(|source| StoreError::Decode {
            what: format!("event {}", event.id),
            source,
        })?;
        let mut conn = self.conn().await?;
        let (queued, woke): (u8, u8) = PUSH
            .key(agent_key(agent, "inbox"))
            .key(agent_key(agent, "urgent"))
            .key(agent_key(agent, "ids"))
            .key(agent_key(agent, "state"))
            .key(agent_key(agent, "lease"))
            .arg(&event.id)
            .arg(json)
            .arg(if event.urgent { "1" } else { "0" })
            .arg(event.time_ms)
            .arg(SEEN_IDS)
            .arg(agent.to_string())
            .arg(WAKE_CHANNEL)
            .invoke_async(&mut conn)
            .await
            .map_err(redis_err("push event"))?;
        Ok(Pushed {
            queued: queued == 1,
            woke: woke == 1,
        })
    }

    async fn acquire_lease(
        &self,
        agent: &AgentKey,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        let mut conn = self.conn().await?;
        let token: Option<u64> = ACQUIRE
            .key(agent_key(agent, "lease"))
            .key(agent_key(agent, "fence"))
            .arg(holder)
            .arg(millis(ttl))
            .invoke_async(&mut conn)
            .await
            .map_err(redis_err("acquire lease"))?;
        Ok(token.map(|token| Lease {
            holder: holder.to_string(),
            token,
        }))
    }

    async fn renew_lease(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let mut conn = self.conn().await?;
        let ours: u8 = RENEW
            .key(agent_key(agent, "lease"))
            .arg(lease_value(lease))
            .arg(millis(ttl))
            .invoke_async(&mut conn)
            .await
            .map_err(redis_err("renew lease"))?;
        Ok(ours == 1)
    }

    async fn release_lease(&self, agent: &AgentKey, lease: &Lease) -> Result<(), StoreError> {
        let mut conn = self.conn().await?;
        RELEASE
            .key(agent_key(agent, "lease"))
            .key(agent_key(agent, "inbox"))
            .key(agent_key(agent, "urgent"))
            .key(agent_key(agent, "inflight"))
            .arg(lease_value(lease))
            .arg(agent.to_string())
            .arg(WAKE_CHANNEL)
            .invoke_async::<u8>(&mut conn)
            .await
            .map_err(redis_err("release lease"))?;
        self.forget_blocking(agent);
        Ok(())
    }

    async fn wait_inbox(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        timeout: Duration,
    ) -> Result<Vec<InboxEvent>, StoreError> {
        // A cycle that never finished comes back first (and the fence is checked).
        let events = self.drain(agent, lease).await?;
        if !events.is_empty() {
            return Ok(events);
        }
        // Sleep on the inbox: the first event moves in flight atomically, so nothing is lost
        // if this process dies right after.
        let mut conn = self.blocking_conn(agent).await?;
        let moved: Option<String> = conn
            .blmove(
                agent_key(agent, "inbox"),
                agent_key(agent, "inflight"),
                redis::Direction::Left,
                redis::Direction::Right,
                timeout.as_secs_f64().max(0.01),
            )
            .await
            .map_err(|e| {
                self.forget_blocking(agent);
                StoreError::Redis {
                    op: "wait on inbox",
                    source: e,
                }
            })?;
        if moved.is_none() {
            return Ok(Vec::new());
        }
        self.drain(agent, lease).await
    }

    async fn take_urgent(
        &self,
        agent: &AgentKey,
        lease: &Lease,
    ) -> Result<Vec<InboxEvent>, StoreError> {
        let mut conn = self.conn().await?;
        let raw: Vec<String> = TAKE_URGENT
            .key(agent_key(agent, "lease"))
            .key(agent_key(agent, "urgent"))
            .key(agent_key(agent, "inflight"))
            .arg(lease_value(lease))
            .invoke_async(&mut conn)
            .await
            .map_err(fenced(agent, "take urgent events"))?;
        decode_events(agent, raw)
    }

    async fn peek_inbox(
        &self,
        agent: &AgentKey,
        limit: usize,
    ) -> Result<Vec<InboxEvent>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut conn = self.conn().await?;
        let stop = isize::try_from(limit).unwrap_or(isize::MAX) - 1;
        let raw: Vec<String> = conn
            .lrange(agent_key(agent, "inbox"), 0, stop)
            .await
            .map_err(redis_err("peek inbox"))?;
        decode_events(agent, raw)
    }

    async fn inbox_depth(&self, agent: &AgentKey) -> Result<u64, StoreError> {
        let mut conn = self.conn().await?;
        let (inbox, urgent): (u64, u64) = redis::pipe()
            .llen(agent_key(agent, "inbox"))
            .llen(agent_key(agent, "urgent"))
            .query_async(&mut conn)
            .await
            .map_err(redis_err("inbox depth"))?;
        Ok(inbox + urgent)
    }

    async fn mid_cycle(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        take_urgent: bool,
        preview: usize,
    ) -> Result<MidCycle, StoreError> {
        let mut conn = self.conn().await?;
        let (urgent, waiting, previewed): (Vec<String>, u64, Vec<String>) = MID_CYCLE
            .key(agent_key(agent, "lease"))
            .key(agent_key(agent, "urgent"))
            .key(agent_key(agent, "inflight"))
            .key(agent_key(agent, "inbox"))
            .arg(lease_value(lease))
            .arg(if take_urgent { "1" } else { "0" })
            .arg(preview)
            .invoke_async(&mut conn)
            .await
            .map_err(fenced(agent, "look at the inbox mid-cycle"))?;
        Ok(MidCycle {
            urgent: decode_events(agent, urgent)?,
            waiting,
            preview: decode_events(agent, previewed)?,
        })
    }

    async fn inflight(&self, agent: &AgentKey) -> Result<u64, StoreError> {
        let mut conn = self.conn().await?;
        conn.llen(agent_key(agent, "inflight"))
            .await
            .map_err(redis_err("in-flight count"))
    }

    async fn post_message(
        &self,
        space: &SpaceKey,
        message: &NewMessage,
    ) -> Result<Posted, StoreError> {
        let record = self
            .space(space)
            .await?
            .filter(|r| r.admits(&message.sender))
            .ok_or_else(|| StoreError::NotMember {
                space: space.to_string(),
                sender: message.sender.id.clone(),
            })?;
        let encode = |what: &str, v: &dyn erased_json::Json| {
            v.json().map_err(|source| StoreError::Decode {
                what: format!("{what} for space {space}"),
                source,
            })
        };
        let time_ms = now_ms();
        let stored = SpaceMessage {
            id: String::new(),
            space: space.name.clone(),
            sender: message.sender.clone(),
            text: message.text.clone(),
            time_ms,
            mention: message.mention.clone(),
            depth: message.depth,
        };
        let templated = SpaceMessage {
            id: ID_PLACEHOLDER.into(),
            ..stored.clone()
        };
        let stored_json = encode("a message", &stored)?;
        let event_template = encode("an inbox event", &templated.event(message.urgent))?;
        let live_template = encode("a live event", &LiveEvent::Message { message: templated })?;
        let idempotency = message.scoped_idempotency_key();
        let agents: Vec<&str> = record.agents().collect();
        // The loop guard's notices (the rate is counted by the script), for the posts it watches.
        let is_agent = message.guarded_by_loop_guard(&record);
        let over_depth = message.loop_guard(&record, 0) == Some(Guard::Depth);
        let mut notices = Vec::new();
        for guard in [Guard::Depth, Guard::Rate] {
            let (json, live) = if is_agent {
                let notice = guard.notice(&space.name, &record, &message.sender, message.depth);
                let live = LiveEvent::Message {
                    message: SpaceMessage {
                        id: ID_PLACEHOLDER.into(),
                        ..notice.clone()
                    },
                };
                (encode("a notice", &notice)?, encode("a notice", &live)?)
            } else {
                (String::new(), String::new())
            };
            notices.push((json, live));
        }

        let mut invocation = POST.prepare_invoke();
        invocation
            .key(log_key(space))
            .key(agents_key(space))
            .key(format!(
                "{}:idem:{}",
                space_tag(space),
                idempotency.as_deref().unwrap_or("")
            ))
            .key(format!("{}:agentrate", space_tag(space)));
        for agent in &agents {
            let a = AgentKey::new(space.namespace.clone(), *agent);
            for suffix in ["inbox", "urgent", "ids", "state", "lease"] {
                invocation.key(agent_key(&a, suffix));
            }
        }
        let flag = |b: bool| if b { "1" } else { "0" };
        invocation
            .arg(stored_json)
            .arg(record.max_messages)
            .arg(live_channel(space))
            .arg(WAKE_CHANNEL)
            .arg(SEEN_IDS)
            .arg(time_ms)
            .arg(flag(message.urgent))
            .arg(event_template)
            .arg(live_template)
            .arg(&message.sender.id)
            .arg(format!("msg:{}:", space.name))
            .arg(flag(idempotency.is_some()))
            .arg(flag(is_agent))
            .arg(flag(over_depth))
            .arg(record.loop_guard.max_agent_messages_per_minute)
            .arg(&notices[0].0)
            .arg(&notices[1].0)
            .arg(&notices[0].1)
            .arg(&notices[1].1);
        for agent in &agents {
            invocation
                .arg(*agent)
                .arg(format!("{}/{agent}", space.namespace));
        }
        let mut conn = self.conn().await?;
        let mut reply = invocation
            .invoke_async(&mut conn)
            .await
            .map_err(redis_err("post message"))
            .map(Vec::<String>::into_iter)?;
        let id = reply.next().unwrap_or_default();
        let duplicate = reply.next().as_deref() == Some("1");
        let guarded = reply.next().as_deref().and_then(Guard::parse);
        let delivered: Vec<String> = reply.collect();
        Ok(Posted {
            id,
            duplicate,
            delivered,
            guarded,
        })
    }

    async fn read_messages(
        &self,
        space: &SpaceKey,
        query: &ReadQuery,
    ) -> Result<Vec<SpaceMessage>, StoreError> {
        let mut conn = self.conn().await?;
        let count = query.limit.max(1);
        let reply: redis::streams::StreamRangeReply = match (&query.after, &query.before) {
            (Some(after), _) => {
                conn.xrange_count(log_key(space), format!("({after}"), "+", count)
                    .await
            }
            (None, Some(before)) => {
                conn.xrevrange_count(log_key(space), format!("({before}"), "-", count)
                    .await
            }
            (None, None) => conn.xrevrange_count(log_key(space), "+", "-", count).await,
        }
        .map_err(redis_err("read messages"))?;
        if query.limit == 0 {
            return Ok(Vec::new());
        }
        reply
            .ids
            .into_iter()
            .map(|entry| {
                let json: String = entry.get("m").unwrap_or_default();
                let mut message: SpaceMessage =
                    serde_json::from_str(&json).map_err(|source| StoreError::Decode {
                        what: format!("message {} of space {space}", entry.id),
                        source,
                    })?;
                message.id = entry.id;
                Ok(message)
            })
            .collect()
    }

    async fn publish_live(&self, space: &SpaceKey, event: &LiveEvent) -> Result<(), StoreError> {
        let json = serde_json::to_string(event).map_err(|source| StoreError::Decode {
            what: format!("a live event of space {space}"),
            source,
        })?;
        let mut conn = self.conn().await?;
        conn.publish::<_, _, ()>(live_channel(space), json)
            .await
            .map_err(redis_err("publish live event"))
    }

    async fn subscribe_live(
        &self,
        space: &SpaceKey,
    ) -> Result<BoxStream<'static, LiveEvent>, StoreError> {
        let mut pubsub = self
            .client
            .get_async_pubsub()
            .await
            .map_err(redis_err("subscribe"))?;
        pubsub
            .subscribe(live_channel(space))
            .await
            .map_err(redis_err("subscribe"))?;
        Ok(pubsub
            .into_on_message()
            .filter_map(|msg| async move {
                let payload: String = msg.get_payload().ok()?;
                serde_json::from_str(&payload).ok()
            })
            .boxed())
    }

    async fn commit_cycle(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        commit: &CycleCommit,
    ) -> Result<Checkpoint, StoreError> {
        let known = self.committed().remove(agent);
        let result = match self.commit_once(agent, lease, commit, known.clone()).await {
            Err(Conflict::Stale) => self.commit_once(agent, lease, commit, None).await,
            other => other,
        };
        match result {
            Ok((checkpoint, window, retained)) => {
                self.committed().insert(agent.clone(), (window, retained));
                Ok(checkpoint)
            }
            Err(Conflict::Stale) => Err(StoreError::InvalidCommit {
                agent: agent.to_string(),
                reason: "the consciousness changed under the commit".into(),
            }),
            Err(Conflict::Other(e)) => Err(e),
        }
    }

    async fn consciousness(&self, agent: &AgentKey) -> Result<Consciousness, StoreError> {
        let (window, meta) = self.window(agent).await?;
        let base = meta
            .get("base")
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        let mut conn = self.conn().await?;
        let messages: Vec<String> = if window.end > window.start {
            let from = isize::try_from(window.start.saturating_sub(base)).unwrap_or(isize::MAX);
            let to = isize::try_from(window.end.saturating_sub(base)).unwrap_or(isize::MAX) - 1;
            conn.lrange(agent_key(agent, "clog"), from, to)
                .await
                .map_err(redis_err("read consciousness"))?
        } else {
            Vec::new()
        };
        let summary: Option<String> = match window.summary_cycle {
            Some(c) => conn
                .hget(agent_key(agent, "summaries"), c)
                .await
                .map_err(redis_err("read summary"))?,
            None => None,
        };
        let num = |k: &str| meta.get(k).and_then(|v| v.parse::<u64>().ok());
        Ok(Consciousness {
            cycle: window.cycle,
            summary,
            messages,
            start: window.start,
            tokens: num("tokens").unwrap_or(0),
            digest: window.digest,
            tokens_used: num("tokensUsed").unwrap_or(0),
            last_cycle_ms: meta.get("lastCycleMs").and_then(|v| v.parse().ok()),
        })
    }

    async fn checkpoints(&self, agent: &AgentKey) -> Result<Vec<Checkpoint>, StoreError> {
        let mut conn = self.conn().await?;
        let raw: Vec<String> = conn
            .lrange(agent_key(agent, "checkpoints"), 0, -1)
            .await
            .map_err(redis_err("read checkpoints"))?;
        raw.iter()
            .map(|j| {
                serde_json::from_str(j).map_err(|source| StoreError::Decode {
                    what: format!("a checkpoint of agent {agent}"),
                    source,
                })
            })
            .collect()
    }

    async fn restore_checkpoint(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        cycle: u64,
    ) -> Result<Option<Checkpoint>, StoreError> {
        self.committed().remove(agent);
        // Fenced before anything else (the script checks again, atomically).
        let mut conn = self.conn().await?;
        let holder: Option<String> = conn
            .get(agent_key(agent, "lease"))
            .await
            .map_err(redis_err("read lease"))?;
        if holder.as_deref() != Some(lease_value(lease).as_str()) {
            return Err(StoreError::Fenced {
                agent: agent.to_string(),
            });
        }
        let retained = self.checkpoints(agent).await?;
        let Some(cp) = retained.iter().find(|c| c.cycle == cycle).cloned() else {
            return Ok(None);
        };
        let kept = retained
            .iter()
            .filter(|c| c.cycle <= cycle)
            .map(serde_json::to_string)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| StoreError::Decode {
                what: format!("checkpoints of agent {agent}"),
                source,
            })?;
        let plan = serde_json::json!({
            "start": cp.start.to_string(),
            "finish": cp.end.to_string(),
            "summaryCycle": opt_string(cp.summary_cycle),
            "cycle": cp.cycle.to_string(),
            "digest": cp.digest,
            "tokens": cp.tokens.to_string(),
            "checkpoints": kept,
        });
        RESTORE
            .key(agent_key(agent, "lease"))
            .key(agent_key(agent, "clog"))
            .key(agent_key(agent, "cmeta"))
            .key(agent_key(agent, "checkpoints"))
            .arg(lease_value(lease))
            .arg(plan.to_string())
            .invoke_async::<u8>(&mut conn)
            .await
            .map_err(fenced(agent, "restore checkpoint"))?;
        Ok(Some(cp))
    }

    async fn set_memories(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        memories: &Memories,
    ) -> Result<(), StoreError> {
        let fields = memories.iter().flat_map(|(k, v)| [k.clone(), v.clone()]);
        self.fenced_hash(agent, lease, "memories", "set", fields)
            .await
            .map(|_| ())
    }

    async fn delete_memories(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        keys: &[String],
    ) -> Result<u64, StoreError> {
        self.fenced_hash(agent, lease, "memories", "del", keys.iter().cloned())
            .await
    }

    async fn memories(&self, agent: &AgentKey) -> Result<Memories, StoreError> {
        let mut conn = self.conn().await?;
        conn.hgetall(agent_key(agent, "memories"))
            .await
            .map_err(redis_err("read memories"))
    }

    async fn set_goals(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        goals: &[Goal],
    ) -> Result<(), StoreError> {
        let fields = json_fields(goals, |g| &g.id, "goal")?;
        self.fenced_hash(agent, lease, "goals", "set", fields.into_iter())
            .await
            .map(|_| ())
    }

    async fn goals(&self, agent: &AgentKey) -> Result<Vec<Goal>, StoreError> {
        let mut conn = self.conn().await?;
        let raw: BTreeMap<String, String> = conn
            .hgetall(agent_key(agent, "goals"))
            .await
            .map_err(redis_err("read goals"))?;
        json_values(&raw, || format!("a goal of agent {agent}"))
    }

    async fn ack_cycle(&self, agent: &AgentKey, lease: &Lease) -> Result<(), StoreError> {
        let mut conn = self.conn().await?;
        ACK.key(agent_key(agent, "lease"))
            .key(agent_key(agent, "inflight"))
            .key(agent_key(agent, "state"))
            .key(agent_key(agent, "urgent"))
            .key(agent_key(agent, "inbox"))
            .arg(lease_value(lease))
            .invoke_async::<u8>(&mut conn)
            .await
            .map_err(fenced(agent, "acknowledge cycle"))?;
        Ok(())
    }

    async fn set_plans(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        plans: &[PlanSpec],
    ) -> Result<(), StoreError> {
        let fields = json_fields(plans, |p| &p.name, "plan")?;
        self.fenced_hash(agent, lease, "plans", "set", fields.into_iter())
            .await
            .map(|_| ())
    }

    async fn cancel_plans(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        names: &[String],
    ) -> Result<u64, StoreError> {
        self.fenced_hash(agent, lease, "plans", "del", names.iter().cloned())
            .await
    }

    async fn plans(&self, agent: &AgentKey) -> Result<Vec<PlanSpec>, StoreError> {
        let mut conn = self.conn().await?;
        let raw: BTreeMap<String, String> = conn
            .hgetall(agent_key(agent, "plans"))
            .await
            .map_err(redis_err("read plans"))?;
        json_values(&raw, || format!("a plan of agent {agent}"))
    }

    async fn plan_marks(&self, agent: &AgentKey) -> Result<BTreeMap<String, i64>, StoreError> {
        let mut conn = self.conn().await?;
        conn.hgetall(agent_key(agent, "planmarks"))
            .await
            .map_err(redis_err("read plan marks"))
    }

    async fn mark_plan(
        &self,
        agent: &AgentKey,
        plan_id: &str,
        due_ms: i64,
        event: Option<&InboxEvent>,
    ) -> Result<Option<Pushed>, StoreError> {
        let mut invocation = MARK_PLAN.prepare_invoke();
        invocation
            .key(agent_key(agent, "planmarks"))
            .key(agent_key(agent, "inbox"))
            .key(agent_key(agent, "urgent"))
            .key(agent_key(agent, "ids"))
            .key(agent_key(agent, "state"))
            .key(agent_key(agent, "lease"))
            .arg(plan_id)
            .arg(due_ms)
            .arg(if event.is_some() { "1" } else { "0" });
        if let Some(e) = event {
            let json = serde_json::to_string(e).map_err(|source| StoreError::Decode {
                what: format!("event {}", e.id),
                source,
            })?;
            invocation
                .arg(&e.id)
                .arg(json)
                .arg(if e.urgent { "1" } else { "0" })
                .arg(e.time_ms)
                .arg(SEEN_IDS)
                .arg(agent.to_string())
                .arg(WAKE_CHANNEL);
        }
        let mut conn = self.conn().await?;
        let (marked, queued, woke): (u8, u8, u8) = invocation
            .invoke_async(&mut conn)
            .await
            .map_err(redis_err("fire plan"))?;
        Ok((marked == 1).then_some(Pushed {
            queued: queued == 1,
            woke: woke == 1,
        }))
    }

    async fn observe(&self, agents: &[AgentKey]) -> Result<Vec<AgentObservation>, StoreError> {
        if agents.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for a in agents {
            pipe.llen(agent_key(a, "inbox"))
                .llen(agent_key(a, "urgent"))
                .llen(agent_key(a, "inflight"))
                .get(agent_key(a, "state"))
                .exists(agent_key(a, "lease"))
                .cmd("HMGET")
                .arg(agent_key(a, "cmeta"))
                .arg("cycle")
                .arg("tokensUsed")
                .arg("lastCycleMs")
                .lindex(agent_key(a, "checkpoints"), 0)
                .hvals(agent_key(a, "plans"))
                .hgetall(agent_key(a, "planmarks"))
                .get(agent_key(a, "model"));
        }
        let mut conn = self.conn().await?;
        let values: Vec<redis::Value> = pipe
            .query_async(&mut conn)
            .await
            .map_err(redis_err("observe agents"))?;
        type Row = (
            u64,
            u64,
            u64,
            Option<String>,
            bool,
            (Option<u64>, Option<u64>, Option<i64>),
            Option<String>,
            Vec<String>,
            BTreeMap<String, i64>,
            Option<String>,
        );
        values
            .chunks(10)
            .map(|chunk| {
                let row: Row = redis::from_redis_value(redis::Value::Array(chunk.to_vec()))
                    .map_err(|e| StoreError::Redis {
                        op: "observe agents",
                        source: e.into(),
                    })?;
                let (inbox, urgent, inflight, state, leased, meta, checkpoint, plans, marks, model) =
                    row;
                Ok(AgentObservation {
                    waiting: inbox + urgent,
                    in_flight: inflight,
                    thinking: state.as_deref() == Some("thinking"),
                    worker: leased,
                    cycles: meta.0.unwrap_or(0),
                    tokens_used: meta.1.unwrap_or(0),
                    last_cycle_ms: meta.2,
                    // Written by the store itself; an entry it cannot read is left out rather
                    // than failing the observation of every agent.
                    checkpoint: checkpoint.and_then(|c| serde_json::from_str(&c).ok()),
                    plans: plans
                        .iter()
                        .filter_map(|p| serde_json::from_str(p).ok())
                        .collect(),
                    plan_marks: marks,
                    model: model.and_then(|m| serde_json::from_str(&m).ok()),
                })
            })
            .collect()
    }

    async fn set_model_health(
        &self,
        agent: &AgentKey,
        health: &ModelHealth,
    ) -> Result<(), StoreError> {
        let json = serde_json::to_string(health).map_err(|source| StoreError::Decode {
            what: format!("the model health of agent {agent}"),
            source,
        })?;
        let mut conn = self.conn().await?;
        conn.set(agent_key(agent, "model"), json)
            .await
            .map_err(redis_err("record model health"))
    }

    async fn subscribe_wakes(&self) -> Result<BoxStream<'static, AgentKey>, StoreError> {
        let mut pubsub = self
            .client
            .get_async_pubsub()
            .await
            .map_err(redis_err("subscribe to wake signals"))?;
        pubsub
            .subscribe(WAKE_CHANNEL)
            .await
            .map_err(redis_err("subscribe to wake signals"))?;
        Ok(pubsub
            .into_on_message()
            .filter_map(|msg| async move {
                let payload: String = msg.get_payload().ok()?;
                AgentKey::parse(&payload)
            })
            .boxed())
    }

    async fn purge_agent(&self, agent: &AgentKey) -> Result<(), StoreError> {
        let keys: Vec<String> = AGENT_KEYS.iter().map(|k| agent_key(agent, k)).collect();
        let mut conn = self.conn().await?;
        // One slot (the agent's hash tag) for the keys; the index lives elsewhere.
        conn.del::<_, ()>(keys)
            .await
            .map_err(redis_err("remove agent data"))?;
        conn.srem::<_, _, ()>(agents_index_key(), agent.to_string())
            .await
            .map_err(redis_err("remove agent data"))?;
        self.committed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(agent);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("redis://:s3cret@r:6379/0"),
            "redis://:***@r:6379/0"
        );
        assert_eq!(
            redact_url("redis://u:s3cret@r:6379"),
            "redis://u:***@r:6379"
        );
        assert_eq!(redact_url("redis://r:6379"), "redis://r:6379");
    }

    #[test]
    fn invalid_url_is_refused_without_echoing_secrets() {
        let Err(e) = RedisStore::new("http://:topsecret@x") else {
            panic!("accepted a non-redis URL")
        };
        assert!(!e.to_string().contains("topsecret"), "{e}");
    }

    #[test]
    fn keys_of_one_space_share_a_hash_tag() {
        let s = SpaceKey::new("ns", "family");
        assert_eq!(info_key(&s), "agentfleet:{space:ns/family}:info");
        assert_eq!(agents_key(&s), "agentfleet:{space:ns/family}:agents");
    }
}

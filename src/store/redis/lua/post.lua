-- Posts a message in a space's log: the space's step of a post, on the space's slot alone.
-- Pushing the message into the member agents' inboxes is not done here: each agent's inbox is
-- on its own slot, so the caller pushes the returned event to each returned agent, one step
-- per agent (push.lua, idempotent by event id).
--
-- A keyed post also writes its fan-out record (the event and the agents to push it to), kept
-- until the caller has pushed to every one: a retry with the same key finds the message
-- posted and gets the record back, so an interrupted fan-out is completed by the retry.
--
-- The loop guard: an agent's message beyond the depth limit, or beyond the space's agent
-- messages a minute, is posted but pushed to no agent, and a notice says so (the rate's once
-- a minute).
--
-- KEYS: 1 log, 2 agents, 3 idempotency, 4 agent rate, 5 fan-out record.
-- ARGV: 1 message JSON (no id), 2 max messages, 3 live channel, 4 event template,
--   5 live template, 6 keyed (0/1), 7 watched by the loop guard (0/1),
--   8 over the depth limit (0/1), 9 agent messages a minute, 10 depth notice JSON,
--   11 rate notice JSON, 12 depth notice live template, 13 rate notice live template,
--   14 publish command (PUBLISH, or SPUBLISH on a cluster: the channel is on the space's slot),
--   then the recipients: the member agents but the sender (those still in the agents set
--   get the message).
-- Templates carry @@agentfleet-message-id@@ where the new message's id goes.
-- Returns {id, duplicate (0/1), guard ('' | depth | rate), event JSON, agent...}: the agents
-- to push the event to (none: the event is '').
local function fill(template, id)
  local out, init = {}, 1
  while true do
    local i, j = string.find(template, '@@agentfleet-message-id@@', init, true)
    if not i then break end
    table.insert(out, string.sub(template, init, i - 1))
    table.insert(out, id)
    init = j + 1
  end
  table.insert(out, string.sub(template, init))
  return table.concat(out)
end
if ARGV[6] == '1' then
  local existing = redis.call('GET', KEYS[3])
  if existing then
    local pending = redis.call('GET', KEYS[5])
    if not pending then return {existing, '1', '', ''} end
    local fanout = cjson.decode(pending)
    local result = {existing, '1', '', fanout.event}
    for _, name in ipairs(fanout.agents) do table.insert(result, name) end
    return result
  end
end
local guard, notice = '', nil
if ARGV[7] == '1' then
  if ARGV[8] == '1' then
    guard, notice = 'depth', 10
  else
    local n = redis.call('INCR', KEYS[4])
    if n == 1 then redis.call('EXPIRE', KEYS[4], 60) end
    local max = tonumber(ARGV[9])
    if n > max then guard = 'rate' end
    if n == max + 1 then notice = 11 end
  end
end
local id = redis.call('XADD', KEYS[1], 'MAXLEN', ARGV[2], '*', 'm', ARGV[1])
if ARGV[6] == '1' then redis.call('SET', KEYS[3], id, 'EX', 86400) end
local agents = {}
if guard == '' then
  for i = 15, #ARGV do
    local name = ARGV[i]
    if redis.call('SISMEMBER', KEYS[2], name) == 1 then
      table.insert(agents, name)
    end
  end
end
local event = ''
if #agents > 0 then
  event = fill(ARGV[4], id)
  if ARGV[6] == '1' then
    redis.call('SET', KEYS[5], cjson.encode({event = event, agents = agents}), 'EX', 86400)
  end
end
redis.call(ARGV[14], ARGV[3], fill(ARGV[5], id))
if notice then
  local nid = redis.call('XADD', KEYS[1], 'MAXLEN', ARGV[2], '*', 'm', ARGV[notice])
  redis.call(ARGV[14], ARGV[3], fill(ARGV[notice + 2], nid))
end
local result = {id, '0', guard, event}
for _, name in ipairs(agents) do table.insert(result, name) end
return result

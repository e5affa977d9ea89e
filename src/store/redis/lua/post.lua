-- Posts a message in a space and, in the same step, pushes it into the inbox of every
-- recipient (see lib/push.lua).
--
-- The loop guard: an agent's message beyond the depth limit, or beyond the space's agent
-- messages a minute, is posted but pushed to no agent, and a notice says so (the rate's once
-- a minute).
--
-- KEYS: 1 log, 2 agents, 3 idempotency, 4 agent rate, then per recipient: inbox, urgent, ids,
--   state, lease.
-- ARGV: 1 message JSON (no id), 2 max messages, 3 live channel, 4 event template,
--   5 live template, 6 keyed (0/1), 7 watched by the loop guard (0/1),
--   8 over the depth limit (0/1), 9 agent messages a minute, 10 depth notice JSON,
--   11 rate notice JSON, 12 depth notice live template, 13 rate notice live template,
--   14 ids remembered, 15 wake channel, 16 event id prefix, 17 urgent (0/1), 18 time (ms),
--   then per recipient (the member agents but the sender; those still in the agents set get
--   the message): name, NS/NAME.
-- Templates carry @@agentfleet-message-id@@ where the new message's id goes.
-- Returns {id, duplicate (0/1), guard ('' | depth | rate), delivered agent...}.
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
  if existing then return {existing, '1', ''} end
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
local result = {id, '0', guard}
if guard == '' then
  local event = fill(ARGV[4], id)
  local recipients = (#ARGV - 18) / 2
  for i = 0, recipients - 1 do
    local name = ARGV[19 + 2 * i]
    local k = 5 + 5 * i
    if redis.call('SISMEMBER', KEYS[2], name) == 1 then
      local queued = push(KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4],
        ARGV[16] .. id, event, ARGV[17], ARGV[18], ARGV[14], ARGV[20 + 2 * i], ARGV[15])
      if queued == 1 then table.insert(result, name) end
    end
  end
end
redis.call('PUBLISH', ARGV[3], fill(ARGV[5], id))
if notice then
  local nid = redis.call('XADD', KEYS[1], 'MAXLEN', ARGV[2], '*', 'm', ARGV[notice])
  redis.call('PUBLISH', ARGV[3], fill(ARGV[notice + 2], nid))
end
return result

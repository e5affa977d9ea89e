-- Records a plan's due time as handled and, when given, pushes its event: only if no due time
-- at or after it was handled before, so a plan fires once per due time.
-- KEYS: 1 plan marks, 2 inbox, 3 urgent, 4 ids, 5 state, 6 lease.
-- ARGV: 1 plan id, 2 due (ms), 3 has an event (0/1), then the event as push.lua takes it:
--   4 id, 5 JSON, 6 urgent, 7 time, 8 ids remembered, 9 the agent's NS/NAME, 10 wake channel,
--   11 publish command.
-- Returns {marked, queued, woke}.
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur and tonumber(cur) >= tonumber(ARGV[2]) then return {0, 0, 0} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if ARGV[3] == '0' then return {1, 0, 0} end
local queued, woke = push(KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6],
  ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11])
return {1, queued, woke}

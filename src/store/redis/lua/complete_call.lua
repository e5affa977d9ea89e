-- Accepts the result of a call (an async tool's, or a human's answer): when the call is known and not forgotten, the
-- token is its own, it has no result yet and has not expired, marks it done and pushes its
-- tool_result event (see lib/push.lua: with a wake signal when no worker holds the agent). A
-- human's answer also ends the pause of the cycle that asked.
-- Anything else writes nothing and says why, checked in that order.
-- KEYS: 1 calls, 2 calls by forget time, 3 inbox, 4 urgent, 5 ids, 6 state, 7 lease.
-- ARGV: 1 call id, 2 token hash, 3 now (ms), then the event as push.lua takes it:
--   4 id, 5 JSON, 6 urgent, 7 time, 8 ids remembered, 9 the agent's NS/NAME, 10 wake channel,
--   11 publish command.
-- Returns {outcome, queued, woke}: outcome is accepted, unknown, unauthorized, duplicate or
-- expired.
local record = redis.call('HGET', KEYS[1], ARGV[1])
local forget = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not record or not forget or tonumber(forget) <= tonumber(ARGV[3]) then
  return {'unknown', 0, 0}
end
local call = cjson.decode(record)
-- A call a human answers has no token hash, and takes only an answer presented without one.
if (call.tokenHash or '') ~= ARGV[2] then return {'unauthorized', 0, 0} end
if redis.call('HEXISTS', KEYS[1], ARGV[1] .. ':done') == 1 then return {'duplicate', 0, 0} end
-- A followed remote task is ended by the worker even late (CallRecord::expired_at).
if not call.remote and tonumber(ARGV[3]) > tonumber(call.expiresMs) then return {'expired', 0, 0} end
redis.call('HSET', KEYS[1], ARGV[1] .. ':done', ARGV[3])
-- A human's answer ends the pause of the cycle that asked: the agent is to be woken again.
if call.kind == 'approval' or call.kind == 'interactive' then
  if redis.call('GET', KEYS[6]) == 'paused' then redis.call('DEL', KEYS[6]) end
end
local queued, woke = push(KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7],
  ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11])
return {'accepted', queued, woke}

-- Fenced. A cycle paused for a human: its events stay in flight, the agent is marked paused
-- (idle for the scaler; what arrives meanwhile waits without waking it, until a human's answer
-- clears the mark, see complete_call.lua), and urgent events that arrived meanwhile move back
-- to the inbox. Unless events arrived since the cycle's drain: an answer may be among them
-- (it came before the mark it would have cleared), so the agent stays thinking and the cycle
-- goes on with them. The events the cycle left for later (held, back in the inbox:
-- another party's, see defer.lua) are no news.
-- KEYS: 1 lease, 2 state, 3 urgent, 4 inbox, 5 held. ARGV: 1 lease value.
-- Returns 1 when paused, 0 when events wait.
local held = tonumber(redis.call('GET', KEYS[5]) or '0')
if redis.call('LLEN', KEYS[3]) + redis.call('LLEN', KEYS[4]) > held then
  move_all(KEYS[3], KEYS[4])
  return 0
end
redis.call('SET', KEYS[2], 'paused')
return 1

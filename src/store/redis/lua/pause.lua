-- Fenced. A cycle paused for a human: its events stay in flight, the agent is marked paused
-- (idle for the scaler; what arrives meanwhile waits without waking it, until a human's answer
-- clears the mark, see complete_call.lua), and urgent events that arrived meanwhile move back
-- to the inbox. Unless events arrived since the cycle's drain: an answer may be among them
-- (it came before the mark it would have cleared), so the agent stays thinking and the cycle
-- goes on with them. The events the cycle left for later (held, back in the inbox:
-- another party's, see defer.lua) are no news.
-- Once paused, keeps the cycle's record, if any (see record_cycle).
-- KEYS: 1 lease, 2 state, 3 urgent, 4 inbox, 5 held, 6 records, 7 record heads.
-- ARGV: 1 lease value, 2 the record's head, 3 the record ('' for none), 4 how many records to
--   keep, 5 their bytes at most.
-- Returns 1 when paused, 0 when events wait.
local held = tonumber(redis.call('GET', KEYS[5]) or '0')
if redis.call('LLEN', KEYS[3]) + redis.call('LLEN', KEYS[4]) > held then
  move_all(KEYS[3], KEYS[4])
  return 0
end
redis.call('SET', KEYS[2], 'paused')
record_cycle(KEYS[6], KEYS[7], ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]))
return 1

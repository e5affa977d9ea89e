-- Queues one event in an agent's inbox (see lib/push.lua).
-- KEYS: 1 inbox, 2 urgent, 3 ids, 4 state, 5 lease.
-- ARGV: 1 event id, 2 event JSON, 3 urgent (0/1), 4 time (ms), 5 ids remembered,
--   6 the agent's NS/NAME, 7 wake channel, 8 publish command (PUBLISH or SPUBLISH).
-- Returns {queued, woke}.
local queued, woke = push(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5],
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8])
return {queued, woke}

-- Fenced. A cycle paused for a human: its events stay in flight, the agent is marked paused
-- (idle for the scaler while nothing else waits), and urgent events that arrived meanwhile
-- move back to the inbox (so they wake it).
-- KEYS: 1 lease, 2 state, 3 urgent, 4 inbox. ARGV: 1 lease value.
redis.call('SET', KEYS[2], 'paused')
move_all(KEYS[3], KEYS[4])
return 1

-- Fenced. Ends a cycle: drops the in-flight events, marks the agent sleeping, and moves urgent
-- events that arrived late back to the inbox (so they wake the next cycle).
-- KEYS: 1 lease, 2 inflight, 3 state, 4 urgent, 5 inbox, 6 journal. ARGV: 1 lease value.
redis.call('DEL', KEYS[2], KEYS[3], KEYS[6])
move_all(KEYS[4], KEYS[5])
return 1

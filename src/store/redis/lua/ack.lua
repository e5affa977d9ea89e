-- Fenced. Ends a cycle: records the receipts the in-flight events ask for, drops them, marks
-- the agent sleeping, and moves urgent events that arrived late back to the inbox (so they
-- wake the next cycle).
-- KEYS: 1 lease, 2 inflight, 3 state, 4 urgent, 5 inbox, 6 journal, 7 receipts, 8 receipt ids,
--   9 the agent's A2A record.
-- ARGV: 1 lease value, 2 the receipt (JSON), 3 how long receipts are kept at least (ms).
receipts(KEYS[2], KEYS[7], KEYS[8], ARGV[2], KEYS[9], tonumber(ARGV[3]))
redis.call('DEL', KEYS[2], KEYS[3], KEYS[6])
move_all(KEYS[4], KEYS[5])
return 1

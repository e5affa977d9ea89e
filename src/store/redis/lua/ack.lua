-- Fenced. Ends a cycle: records the receipts the in-flight events ask for, drops them, marks
-- the agent sleeping, and moves urgent events that arrived late back to the inbox (so they
-- wake the next cycle); and keeps the cycle's record, if any (see record_cycle).
-- KEYS: 1 lease, 2 inflight, 3 state, 4 urgent, 5 inbox, 6 journal, 7 receipts, 8 receipt ids,
--   9 the agent's A2A record, 10 records, 11 record heads.
-- ARGV: 1 lease value, 2 the receipt (JSON), 3 how long receipts are kept at least (ms), 4 the
--   record's head, 5 the record ('' for none), 6 how many records to keep, 7 their bytes at most.
receipts(KEYS[2], KEYS[7], KEYS[8], ARGV[2], KEYS[9], tonumber(ARGV[3]))
redis.call('DEL', KEYS[2], KEYS[3], KEYS[6])
move_all(KEYS[4], KEYS[5])
record_cycle(KEYS[10], KEYS[11], ARGV[4], ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7]))
return 1

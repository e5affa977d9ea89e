-- Fenced. Keeps the record of a cycle that ended without a step of its own (its model failed).
-- KEYS: 1 lease, 2 records, 3 record heads.
-- ARGV: 1 lease value, 2 the head (JSON), 3 the record (JSON), 4 how many to keep, 5 their
--   bytes at most.
-- Returns the record's number.
return record_cycle(KEYS[2], KEYS[3], ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]))

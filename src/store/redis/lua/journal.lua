-- Fenced. Appends entries to the journal of the cycle under way (see store/journal.rs).
-- KEYS: 1 lease, 2 journal. ARGV: 1 lease value, then the entries (JSON).
-- Returns the journal's length.
return redis.call('RPUSH', KEYS[2], unpack(ARGV, 2))

-- Extends a lease that is still ours.
-- KEYS: 1 lease. ARGV: 1 lease value (HOLDER|TOKEN), 2 time to live (ms).
-- Returns 1 when it was ours.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1

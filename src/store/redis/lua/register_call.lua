-- Registers an asynchronous call of one agent, and forgets (up to 100 of) its calls whose time
-- is over, so the registry stays as small as the calls of the last day or so.
-- KEYS: 1 calls, 2 calls by forget time.
-- ARGV: 1 call id, 2 record JSON, 3 when it is forgotten (ms), 4 now (ms).
-- Returns 1.
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[4], 'LIMIT', 0, 100)
for _, id in ipairs(old) do
  redis.call('HDEL', KEYS[1], id, id .. ':done')
  redis.call('ZREM', KEYS[2], id)
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
return 1

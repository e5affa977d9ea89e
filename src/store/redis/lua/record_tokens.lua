-- Counts the tokens of model calls: by direction over the agent's life, and in the budget
-- periods of the call (a period's count starts again when it rolls over).
-- KEYS: 1 tokens. ARGV: 1 day, 2 month, 3 input, 4 cacheRead, 5 cacheWrite, 6 output.
-- Returns the hash, HGETALL-style.
local t = KEYS[1]
local now = redis.call('HMGET', t, 'day', 'month')
if now[1] ~= ARGV[1] then
  redis.call('HSET', t, 'day', ARGV[1], 'dayTokens', 0)
end
if now[2] ~= ARGV[2] then
  redis.call('HSET', t, 'month', ARGV[2], 'monthTokens', 0)
end
local all = 0
for i, field in ipairs({'input', 'cacheRead', 'cacheWrite', 'output'}) do
  local n = tonumber(ARGV[2 + i])
  if n > 0 then
    redis.call('HINCRBY', t, field, n)
    all = all + n
  end
end
if all > 0 then
  redis.call('HINCRBY', t, 'dayTokens', all)
  redis.call('HINCRBY', t, 'monthTokens', all)
end
return redis.call('HGETALL', t)

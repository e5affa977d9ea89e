-- Fenced scripts start here: the caller's lease (ARGV[1], `HOLDER|TOKEN`) must be the one in
-- KEYS[1], else the error FENCED. Also defines move_all(src, dst): moves a whole list, in order.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return redis.error_reply('FENCED the lease is held by another worker')
end
local function move_all(src, dst)
  local items = redis.call('LRANGE', src, 0, -1)
  for i = 1, #items, 1000 do
    redis.call('RPUSH', dst, unpack(items, i, math.min(i + 999, #items)))
  end
  redis.call('DEL', src)
  return items
end

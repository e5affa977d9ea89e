-- Takes an agent's lease for a holder if nobody holds it (or the holder already does), with a
-- fencing token that grows with every new holder.
-- KEYS: 1 lease, 2 fence, 3 host (who took it last). ARGV: 1 holder, 2 time to live (ms).
-- Returns the token, or nil while another holds the lease.
local cur = redis.call('GET', KEYS[1])
if cur then
  local holder, token = string.match(cur, '^(.*)|(%d+)$')
  if holder == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return tonumber(token)
  end
  return false
end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. token, 'PX', ARGV[2])
redis.call('SET', KEYS[3], ARGV[1])
return token

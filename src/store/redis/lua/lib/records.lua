-- Also defines record_cycle(hash, heads, head, body, keep, max): keeps a cycle's record `body`
-- (JSON) in the hash `hash` under the agent's next record number (its field `#seq` counts them,
-- `#bytes` sums the records kept), and its `head` first in the list `heads` as `SEQ BYTES HEAD`;
-- then forgets the oldest while more than `keep` are kept or they take more than `max` bytes
-- (the newest always stays). `keep` below 1 forgets them all (numbers go on growing). Returns the number, or 0 when
-- nothing was kept.
local function record_cycle(hash, heads, head, body, keep, max)
  if keep < 1 then
    local seq = redis.call('HGET', hash, '#seq')
    redis.call('DEL', hash, heads)
    if seq then redis.call('HSET', hash, '#seq', seq) end
    return 0
  end
  if body == '' then return 0 end
  local seq = redis.call('HINCRBY', hash, '#seq', 1)
  local bytes = string.len(body)
  redis.call('HSET', hash, seq, body)
  redis.call('LPUSH', heads, seq .. ' ' .. bytes .. ' ' .. head)
  local total = redis.call('HINCRBY', hash, '#bytes', bytes)
  local count = redis.call('LLEN', heads)
  while count > 1 and (count > keep or total > max) do
    local oldest = redis.call('RPOP', heads)
    local s, b = string.match(oldest, '^(%d+) (%d+) ')
    if s then
      redis.call('HDEL', hash, s)
      total = redis.call('HINCRBY', hash, '#bytes', -tonumber(b))
    end
    count = count - 1
  end
  return seq
end

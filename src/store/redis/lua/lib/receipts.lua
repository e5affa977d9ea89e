-- Also defines receipts(inflight, hash, order, value, a2a, keep): records `value` (a receipt,
-- JSON with `timeMs`) under the id of every event in flight that asks for a receipt (its data
-- has "receipt": true), newest ids first in the list `order`, and forgets those written more
-- than the agent's conversations last before it: `conversationSeconds` of its A2A record at
-- `a2a`, at least `keep` ms. A task is readable only while its conversation lasts, so its
-- final state is kept as long as it is readable, however many tasks come meanwhile.
local function receipts(inflight, hash, order, value, a2a, keep)
  for _, raw in ipairs(redis.call('LRANGE', inflight, 0, -1)) do
    if string.find(raw, '"receipt":true', 1, true) then
      local ok, e = pcall(cjson.decode, raw)
      if ok and type(e.data) == 'table' and e.data.receipt == true and type(e.id) == 'string' then
        if redis.call('HSET', hash, e.id, value) == 1 then redis.call('LPUSH', order, e.id) end
      end
    end
  end
  local record = redis.call('GET', a2a)
  if record then
    local ok, r = pcall(cjson.decode, record)
    local secs = ok and type(r) == 'table' and tonumber(r.conversationSeconds)
    if secs and secs * 1000 > keep then keep = secs * 1000 end
  end
  local ok, v = pcall(cjson.decode, value)
  local now = ok and type(v) == 'table' and tonumber(v.timeMs)
  if not now then return end
  while true do
    local id = redis.call('LINDEX', order, -1)
    if not id then break end
    local raw = redis.call('HGET', hash, id)
    if raw then
      local ok2, r = pcall(cjson.decode, raw)
      local t = ok2 and type(r) == 'table' and tonumber(r.timeMs)
      if t and t + keep > now then break end
      redis.call('HDEL', hash, id)
    end
    redis.call('RPOP', order)
  end
end

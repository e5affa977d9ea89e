-- Also defines receipts(inflight, hash, order, value, cap): records `value` under the id of
-- every event in flight that asks for a receipt (its data has "receipt": true), newest ids
-- first in the list `order`, forgetting the oldest beyond `cap`.
local function receipts(inflight, hash, order, value, cap)
  for _, raw in ipairs(redis.call('LRANGE', inflight, 0, -1)) do
    if string.find(raw, '"receipt":true', 1, true) then
      local ok, e = pcall(cjson.decode, raw)
      if ok and type(e.data) == 'table' and e.data.receipt == true and type(e.id) == 'string' then
        if redis.call('HSET', hash, e.id, value) == 1 then redis.call('LPUSH', order, e.id) end
      end
    end
  end
  local n = redis.call('LLEN', order)
  if n > cap then
    local old = redis.call('LRANGE', order, cap, -1)
    redis.call('LTRIM', order, 0, cap - 1)
    for i = 1, #old, 1000 do
      redis.call('HDEL', hash, unpack(old, i, math.min(i + 999, #old)))
    end
  end
end

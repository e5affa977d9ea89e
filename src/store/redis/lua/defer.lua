-- Fenced. Leaves events of the cycle under way for a later cycle (another party's events,
-- see crate::party::split): those in flight whose ids ARGV names move back to the head of the
-- inbox, in the order they came, and are counted as held (a pause takes them for no news).
-- KEYS: 1 lease, 2 inflight, 3 inbox, 4 held. ARGV: 1 lease value, 2.. event ids.
-- Returns how many moved.
local wanted = {}
for i = 2, #ARGV do wanted[ARGV[i]] = true end
local all = redis.call('LRANGE', KEYS[2], 0, -1)
local keep, moved = {}, {}
for _, raw in ipairs(all) do
  local ok, event = pcall(cjson.decode, raw)
  if ok and type(event) == 'table' and wanted[event.id] then
    moved[#moved + 1] = raw
  else
    keep[#keep + 1] = raw
  end
end
if #moved == 0 then return 0 end
redis.call('DEL', KEYS[2])
for i = 1, #keep, 1000 do
  redis.call('RPUSH', KEYS[2], unpack(keep, i, math.min(i + 999, #keep)))
end
for i = #moved, 1, -1 do redis.call('LPUSH', KEYS[3], moved[i]) end
redis.call('INCRBY', KEYS[4], #moved)
return #moved

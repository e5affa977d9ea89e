-- Fenced. Leaves events of the cycle under way for a later cycle (another party's events,
-- see crate::party::split): those in flight whose ids ARGV names go back to the inbox, merged
-- by their time with what waits there (so each party's events stay in the order they came,
-- whenever they were taken), and are counted as held (a pause takes them for no news).
-- KEYS: 1 lease, 2 inflight, 3 inbox, 4 held. ARGV: 1 lease value, 2.. event ids.
-- Returns how many moved.
local wanted = {}
for i = 2, #ARGV do wanted[ARGV[i]] = true end
local function decoded(raw)
  local ok, event = pcall(cjson.decode, raw)
  if ok and type(event) == 'table' then return event end
  return nil
end
local function time_of(event)
  return (event and tonumber(event.time_ms)) or 0
end
local all = redis.call('LRANGE', KEYS[2], 0, -1)
local keep, moved, moved_times = {}, {}, {}
for _, raw in ipairs(all) do
  local event = decoded(raw)
  if event and wanted[event.id] then
    moved[#moved + 1] = raw
    moved_times[#moved_times + 1] = time_of(event)
  else
    keep[#keep + 1] = raw
  end
end
if #moved == 0 then return 0 end
redis.call('DEL', KEYS[2])
for i = 1, #keep, 1000 do
  redis.call('RPUSH', KEYS[2], unpack(keep, i, math.min(i + 999, #keep)))
end
local waiting = redis.call('LRANGE', KEYS[3], 0, -1)
local merged = {}
local i, j = 1, 1
while i <= #moved or j <= #waiting do
  if j > #waiting or (i <= #moved and moved_times[i] <= time_of(decoded(waiting[j]))) then
    merged[#merged + 1] = moved[i]
    i = i + 1
  else
    merged[#merged + 1] = waiting[j]
    j = j + 1
  end
end
redis.call('DEL', KEYS[3])
for k = 1, #merged, 1000 do
  redis.call('RPUSH', KEYS[3], unpack(merged, k, math.min(k + 999, #merged)))
end
redis.call('INCRBY', KEYS[4], #moved)
return #moved

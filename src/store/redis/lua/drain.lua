-- Fenced. Moves the inbox in flight and marks the agent thinking when anything is in flight;
-- what an earlier cycle left for later (held) is in flight again, so nothing is held now.
-- KEYS: 1 lease, 2 inbox, 3 inflight, 4 state, 5 held. ARGV: 1 lease value.
-- Returns every event in flight (those of an unfinished cycle first).
move_all(KEYS[2], KEYS[3])
redis.call('DEL', KEYS[5])
local all = redis.call('LRANGE', KEYS[3], 0, -1)
if #all > 0 then redis.call('SET', KEYS[4], 'thinking') end
return all

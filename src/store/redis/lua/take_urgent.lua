-- Fenced. Moves the urgent queue in flight (acknowledged with the cycle).
-- KEYS: 1 lease, 2 urgent, 3 inflight. ARGV: 1 lease value.
-- Returns the urgent events.
local items = move_all(KEYS[2], KEYS[3])
return items

-- Fenced. One look at the inbox between steps: takes the urgent queue in flight when asked,
-- counts what waits, and previews the first inbox events (left in place).
-- KEYS: 1 lease, 2 urgent, 3 inflight, 4 inbox.
-- ARGV: 1 lease value, 2 take urgent (0/1), 3 preview limit.
-- Returns {urgent events, waiting count, preview events}.
local urgent = {}
if ARGV[2] == '1' then urgent = move_all(KEYS[2], KEYS[3]) end
local waiting = redis.call('LLEN', KEYS[4]) + redis.call('LLEN', KEYS[2])
local preview = {}
local limit = tonumber(ARGV[3])
if limit > 0 and waiting > 0 then preview = redis.call('LRANGE', KEYS[4], 0, limit - 1) end
return {urgent, waiting, preview}

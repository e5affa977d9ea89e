-- Gives a lease up; publishes a wake signal when events are left waiting or in flight (the
-- worker was scaled down as they arrived), so that the operator brings a worker back. Not
-- while a cycle is paused for a human: that worker went because nothing can go on until the
-- answer, which wakes the agent when it comes.
-- KEYS: 1 lease, 2 inbox, 3 urgent, 4 inflight, 5 state.
-- ARGV: 1 lease value (HOLDER|TOKEN), 2 the agent's NS/NAME, 3 wake channels, 4 publish command
--   (see lib/push.lua's signal).
-- Returns 1 when it was ours.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
local left = redis.call('LLEN', KEYS[2]) + redis.call('LLEN', KEYS[3]) + redis.call('LLEN', KEYS[4])
if left > 0 and redis.call('GET', KEYS[5]) ~= 'paused' then
  signal(ARGV[4], ARGV[3], ARGV[2])
end
return 1

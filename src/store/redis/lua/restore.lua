-- Fenced. Makes the consciousness what it was after a retained checkpoint: drops the log
-- entries after it and the later checkpoints, and records the restore request applied (if
-- any). Refused with INFLIGHT while a cycle is in flight (as replace.lua).
-- KEYS: 1 lease, 2 clog, 3 cmeta, 4 checkpoints, 5 inflight, 6 state, 7 journal.
-- ARGV: 1 lease value, 2 the plan (JSON, numbers as strings).
if redis.call('EXISTS', KEYS[5], KEYS[6], KEYS[7]) > 0 then
  return redis.error_reply('INFLIGHT a cycle is in flight')
end
local plan = cjson.decode(ARGV[2])
-- The highest cycle the agent has had stays: the next commit is numbered past it, so it never
-- takes the number (and the archived object) of an abandoned cycle.
local highest = math.max(tonumber(redis.call('HGET', KEYS[3], 'highest') or '0'),
  tonumber(redis.call('HGET', KEYS[3], 'cycle') or '0'))
local base = tonumber(redis.call('HGET', KEYS[3], 'base') or '0')
local keep = tonumber(plan.finish) - base
if keep <= 0 then redis.call('DEL', KEYS[2]) else redis.call('LTRIM', KEYS[2], 0, keep - 1) end
redis.call('HSET', KEYS[3], 'start', plan.start, 'end', plan.finish, 'summaryCycle', plan.summaryCycle,
  'cycle', plan.cycle, 'digest', plan.digest, 'tokens', plan.tokens, 'highest', highest)
if plan.restored ~= '' then redis.call('HSET', KEYS[3], 'restored', plan.restored) end
redis.call('DEL', KEYS[4])
for _, c in ipairs(plan.checkpoints) do redis.call('RPUSH', KEYS[4], c) end
return 1

-- Fenced. Replaces the agent's consciousness and notes with a snapshot (an archived checkpoint
-- restored, another agent's copied, the latest recovered): the log holds its messages from
-- sequence `start`, its summary is the only one, its checkpoint the only one retained, and the
-- notes are its notes. Refused with INFLIGHT while a cycle is under way, paused or left to
-- resume (events in flight, a state, a journal): nothing is changed then.
-- KEYS: 1 lease, 2 clog, 3 cmeta, 4 checkpoints, 5 summaries, 6 inflight, 7 state, 8 journal,
--   9 memories, 10 goals, 11 plans.
-- ARGV: 1 lease value, 2 the plan (JSON, numbers as strings), then the messages.
if redis.call('EXISTS', KEYS[6], KEYS[7], KEYS[8]) > 0 then
  return redis.error_reply('INFLIGHT a cycle is in flight')
end
local plan = cjson.decode(ARGV[2])
redis.call('DEL', KEYS[2], KEYS[4], KEYS[5], KEYS[9], KEYS[10], KEYS[11])
for i = 3, #ARGV, 1000 do
  redis.call('RPUSH', KEYS[2], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
if plan.summaryCycle ~= '' then redis.call('HSET', KEYS[5], plan.summaryCycle, plan.summaryText) end
local used = redis.call('HGET', KEYS[3], 'tokensUsed')
-- The highest cycle the agent has had stays (as restore.lua), or the snapshot's when higher
-- (a recovery's: the highest archived).
local highest = math.max(tonumber(redis.call('HGET', KEYS[3], 'highest') or '0'),
  tonumber(redis.call('HGET', KEYS[3], 'cycle') or '0'), tonumber(plan.highest or '0'))
if not used or used == '0' then used = plan.tokensUsed end
redis.call('DEL', KEYS[3])
redis.call('HSET', KEYS[3], 'base', plan.start, 'start', plan.start, 'end', plan.finish,
  'summaryCycle', plan.summaryCycle, 'cycle', plan.cycle, 'digest', plan.digest,
  'tokens', plan.tokens, 'tokensUsed', used, 'lastCycleMs', plan.lastCycleMs, 'highest', highest)
if plan.restored ~= '' then redis.call('HSET', KEYS[3], 'restored', plan.restored) end
redis.call('RPUSH', KEYS[4], plan.checkpoint)
for k, list in pairs({ [9] = plan.memories, [10] = plan.goals, [11] = plan.plans }) do
  for i = 1, #list, 1000 do
    redis.call('HSET', KEYS[k], unpack(list, i, math.min(i + 999, #list)))
  end
end
return 1

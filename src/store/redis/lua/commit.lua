-- Fenced. Commits a cycle in one step: appends its messages to the consciousness log, records
-- the compaction's summary, trims what no retained checkpoint needs, writes the window and the
-- retained checkpoints, acknowledges the in-flight events with their receipts (as ack.lua),
-- and keeps the cycle's record, if any (see record_cycle). Refused with
-- CONFLICT when the consciousness is no longer at the cycle the commit was planned on.
-- KEYS: 1 lease, 2 clog, 3 cmeta, 4 checkpoints, 5 summaries, 6 inflight, 7 state, 8 urgent,
--   9 inbox, 10 journal, 11 receipts, 12 receipt ids, 13 the agent's A2A record, 14 records,
--   15 record heads.
-- ARGV: 1 lease value, 2 the plan (JSON, numbers as strings; `receipt` the events' receipt
--   as JSON, `receipts` how long receipts are kept at least, in ms; `recordKeep` and
--   `recordBytes` the records' bounds), 3 the record's head, 4 the record ('' for none), then
--   the new messages.
local plan = cjson.decode(ARGV[2])
local cur = redis.call('HGET', KEYS[3], 'cycle') or '0'
if cur ~= plan.prevCycle then
  return redis.error_reply('CONFLICT consciousness is at cycle ' .. cur .. ', the commit expected ' .. plan.prevCycle)
end
for i = 5, #ARGV, 1000 do
  redis.call('RPUSH', KEYS[2], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
if plan.summaryText ~= '' then redis.call('HSET', KEYS[5], plan.summaryCycle, plan.summaryText) end
for _, s in ipairs(plan.dropSummaries) do redis.call('HDEL', KEYS[5], s) end
local base = tonumber(redis.call('HGET', KEYS[3], 'base') or '0')
local trim = tonumber(plan.trimBefore)
if trim > base then
  redis.call('LTRIM', KEYS[2], trim - base, -1)
  base = trim
end
redis.call('HSET', KEYS[3], 'base', base, 'start', plan.start, 'end', plan.finish,
  'summaryCycle', plan.summaryCycle, 'cycle', plan.cycle, 'digest', plan.digest,
  'tokens', plan.tokens, 'lastCycleMs', plan.timeMs)
redis.call('HINCRBY', KEYS[3], 'tokensUsed', plan.cycleTokens)
redis.call('DEL', KEYS[4])
for _, c in ipairs(plan.checkpoints) do redis.call('RPUSH', KEYS[4], c) end
receipts(KEYS[6], KEYS[11], KEYS[12], plan.receipt, KEYS[13], tonumber(plan.receipts))
redis.call('DEL', KEYS[6], KEYS[7], KEYS[10])
move_all(KEYS[8], KEYS[9])
record_cycle(KEYS[14], KEYS[15], ARGV[3], ARGV[4], tonumber(plan.recordKeep), tonumber(plan.recordBytes))
return 1

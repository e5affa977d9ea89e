-- Fenced. Writes one of an agent's keyed notes (memories, goals or plans).
-- KEYS: 1 lease, 2 the notes hash.
-- ARGV: 1 lease value, 2 `set` then FIELD VALUE..., or `del` then FIELD...
-- Returns the number of fields deleted (0 for `set`).
if #ARGV < 3 then return 0 end
if ARGV[2] == 'set' then
  redis.call('HSET', KEYS[2], unpack(ARGV, 3))
  return 0
end
return redis.call('HDEL', KEYS[2], unpack(ARGV, 3))

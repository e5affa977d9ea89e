-- push(inbox, urgent, ids, state, lease, id, json, is_urgent, time_ms, seen_max, agent, wake,
-- publish):
-- queues one event of one agent unless its id was seen (the agent's last seen_max ids); an
-- urgent event goes to the urgent queue while the agent thinks. Publishes (`publish`: PUBLISH
-- on one Redis, SPUBLISH on a cluster, where `wake` is the agent's own channel) the agent's
-- NS/NAME on the wake channel when no worker holds its lease, unless a cycle of the agent is paused for
-- a human: what arrives then waits for the answer (which clears the pause, see
-- complete_call.lua). Returns queued, woke (0/1).
local function push(inbox, urgent, ids, state, lease, id, json, is_urgent, time_ms, seen_max, agent, wake,
                    publish)
  if redis.call('ZADD', ids, 'NX', time_ms, id) == 0 then return 0, 0 end
  local n = redis.call('ZCARD', ids)
  local max = tonumber(seen_max)
  if n > max then redis.call('ZREMRANGEBYRANK', ids, 0, n - max - 1) end
  if is_urgent == '1' and redis.call('GET', state) == 'thinking' then
    redis.call('RPUSH', urgent, json)
  else
    redis.call('RPUSH', inbox, json)
  end
  if redis.call('EXISTS', lease) == 0 and redis.call('GET', state) ~= 'paused' then
    redis.call(publish, wake, agent)
    return 1, 1
  end
  return 1, 0
end

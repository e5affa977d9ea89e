-- signal(publish, channels, agent): publishes the agent's NS/NAME on each of `channels`
-- (space-separated: on one Redis the fleet's channel and the agent's own, on a cluster the
-- agent's own alone) with `publish` (PUBLISH, or SPUBLISH on a cluster).
local function signal(publish, channels, agent)
  for channel in string.gmatch(channels, '%S+') do
    redis.call(publish, channel, agent)
  end
end

-- push(inbox, urgent, ids, state, lease, id, json, is_urgent, time_ms, seen_max, agent, wake,
-- publish):
-- queues one event of one agent unless its id was seen (the agent's last seen_max ids); an
-- urgent event goes to the urgent queue while the agent thinks. Signals the agent's wake (see
-- signal below) when no worker holds its lease, unless a cycle of the agent is paused for
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
    signal(publish, wake, agent)
    return 1, 1
  end
  return 1, 0
end

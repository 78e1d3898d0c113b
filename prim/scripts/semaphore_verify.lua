-- Point-in-time check that this owner holds a permit. It prunes expired
-- permits, so it writes (see semaphore_acquire.lua for the layout).
-- KEYS[1] semaphore key; ARGV[1] member ('P:' .. owner token)
-- Reply: 1 held, -1 not held
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TYPE', KEYS[1])
t = t.ok or t
if t ~= 'zset' then
  return -1
end
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
if redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now) > 0 then
  local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if top[2] == nil or top[2] == '-1' then
    redis.call('DEL', KEYS[1])
  end
end
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 1
end
return -1

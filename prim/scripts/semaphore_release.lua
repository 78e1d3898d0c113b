-- Release one permit of a semaphore, only for its owner (see
-- semaphore_acquire.lua for the layout).
-- KEYS[1] semaphore key; ARGV[1] member ('P:' .. owner token)
-- Reply: 1 released, 0 this owner holds no permit
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TYPE', KEYS[1])
t = t.ok or t
if t ~= 'zset' then
  return 0
end
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now)
local n = redis.call('ZREM', KEYS[1], ARGV[1])
-- No permit left: the capacity goes with the key. Else the key lives as long
-- as its latest permit.
local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if top[2] == nil or top[2] == '-1' then
  redis.call('DEL', KEYS[1])
elseif top[2] == 'inf' then
  redis.call('PERSIST', KEYS[1])
else
  redis.call('PEXPIREAT', KEYS[1], top[2])
end
return n

-- Renew (or change the expiry of) one permit, only for its owner; a permit
-- that is gone is never created again (see semaphore_acquire.lua for the
-- layout).
-- KEYS[1] semaphore key; ARGV[1] member ('P:' .. owner token), ARGV[2]
-- duration ms (0: no expiry)
-- Reply: 1 renewed, 0 this owner holds no permit
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TYPE', KEYS[1])
t = t.ok or t
if t ~= 'zset' then
  return 0
end
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now)
local n = 0
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  local score = '+inf'
  if ARGV[2] ~= '0' then
    score = now + tonumber(ARGV[2])
  end
  redis.call('ZADD', KEYS[1], 'XX', score, ARGV[1])
  n = 1
end
local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if top[2] == nil or top[2] == '-1' then
  redis.call('DEL', KEYS[1])
elseif top[2] == 'inf' then
  redis.call('PERSIST', KEYS[1])
else
  redis.call('PEXPIREAT', KEYS[1], top[2])
end
return n

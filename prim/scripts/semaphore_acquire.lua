-- Take one permit of a semaphore. One sorted set per semaphore: each permit is
-- a member 'P:' .. owner token scored with its server-time deadline in ms
-- ('+inf' for a permit without expiry); the capacity every contender uses is
-- the reserved member 'C:' .. capacity, scored -1 (below every deadline, so
-- pruning, which removes scores 0..now, never touches it).
-- KEYS[1] semaphore key; ARGV[1] member ('P:' .. owner token), ARGV[2]
-- duration ms (0: no expiry), ARGV[3] capacity
-- Reply: {1, 'ok'}          acquired (or this owner's own acquisition, resent)
--        {0, live permits}  every permit is taken; nothing written but pruning
--        {-1, capacity}     live permits use another capacity; nothing written
--                           but pruning
--        {-2, 'wrongtype'}  the key holds another type; nothing written
-- Effects replication first, so a server with lua-replicate-commands off
-- (Redis 5/6) can run a script that writes after reading TIME.
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TYPE', KEYS[1])
t = t.ok or t
if t ~= 'none' and t ~= 'zset' then
  return {-2, 'wrongtype'}
end
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return {1, 'ok'}
end
local caps = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(0')
local live = redis.call('ZCARD', KEYS[1]) - #caps
local want = 'C:' .. ARGV[3]
if live > 0 and caps[1] ~= nil and caps[1] ~= want then
  return {-1, string.sub(caps[1], 3)}
end
if live >= tonumber(ARGV[3]) then
  return {0, live}
end
if caps[1] ~= want or #caps > 1 then
  for _, m in ipairs(caps) do
    redis.call('ZREM', KEYS[1], m)
  end
  redis.call('ZADD', KEYS[1], -1, want)
end
local score = '+inf'
if ARGV[2] ~= '0' then
  score = now + tonumber(ARGV[2])
end
redis.call('ZADD', KEYS[1], score, ARGV[1])
-- The key lives as long as its latest permit.
local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if top[2] == 'inf' then
  redis.call('PERSIST', KEYS[1])
else
  redis.call('PEXPIREAT', KEYS[1], top[2])
end
return {1, 'ok'}

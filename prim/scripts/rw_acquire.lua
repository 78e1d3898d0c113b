-- Acquire a read or write lease on a sorted set of owners.
-- KEYS[1] the rw key (a sorted set: member = mode marker and owner token,
--         score = the owner's deadline in server-time milliseconds)
-- ARGV[1] member ('r:' or 'w:' followed by the owner token)
-- ARGV[2] lease duration in milliseconds
-- Expired owners are removed first; a reader needs no live writer, a writer
-- needs no live owner at all. The key expires at the latest owner deadline.
-- Reply: {1, deadline ms}          acquired
--        {0, ms until the blocking owners' lease ends}  contended; nothing written
--        {-1, 'wrongtype'}         the key holds another type; nothing written
if redis.replicate_commands then
  redis.replicate_commands()
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ty = redis.call('TYPE', KEYS[1])['ok']
if ty ~= 'none' and ty ~= 'zset' then
  return {-1, 'wrongtype'}
end
if ty == 'zset' then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  local n = redis.call('ZCARD', KEYS[1])
  if n > 0 then
    if string.sub(ARGV[1], 1, 2) == 'w:' then
      local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
      return {0, tonumber(last[2]) - now}
    end
    -- A live writer was admitted only into an empty set and keeps readers
    -- out, so it is the only live owner when there is one.
    if n == 1 then
      local only = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
      if string.sub(only[1], 1, 2) == 'w:' then
        return {0, tonumber(only[2]) - now}
      end
    end
  end
end
local deadline = now + tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], deadline, ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
return {1, deadline}

-- Renew a read or write lease only for its owner, while its deadline has not
-- passed on the server's clock. The key's expiry follows the latest deadline.
-- KEYS[1] the rw key; ARGV[1] member, ARGV[2] new duration in milliseconds
-- Reply: 1 renewed, 0 not held (gone, expired, or a key of another type)
if redis.replicate_commands then
  redis.replicate_commands()
end
local s = redis.pcall('ZSCORE', KEYS[1], ARGV[1])
if type(s) ~= 'string' then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(s) <= now then
  redis.call('ZREM', KEYS[1], ARGV[1])
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if #last > 0 then
    redis.call('PEXPIREAT', KEYS[1], last[2])
  end
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
return 1

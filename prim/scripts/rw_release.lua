-- Release a read or write lease only for its owner; other owners are untouched.
-- The key's expiry follows the latest remaining deadline.
-- KEYS[1] the rw key; ARGV[1] member
-- Reply: 1 released, 0 not held (gone, or expired and now removed),
--        -1 the key holds another type
if redis.replicate_commands then
  redis.replicate_commands()
end
local s = redis.pcall('ZSCORE', KEYS[1], ARGV[1])
if type(s) == 'table' then
  return -1
end
if not s then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREM', KEYS[1], ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if #last > 0 then
  redis.call('PEXPIREAT', KEYS[1], last[2])
end
if tonumber(s) <= now then
  return 0
end
return 1

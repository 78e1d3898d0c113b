-- Count a latch generation down by one, atomically, never below zero.
-- KEYS[1] the latch key; ARGV[1] the generation id the signal is for
-- Reply: the remaining count (>= 0)  counted down
--        -1  the generation was replaced, or the latch deleted; nothing written
--        -2  the generation is already complete (count 0); nothing written
--        -3  the key holds another type; nothing written
local v = redis.pcall('HMGET', KEYS[1], 'gen', 'count')
if v.err then
  return -3
end
if v[1] ~= ARGV[1] then
  return -1
end
local n = tonumber(v[2])
if not n or n <= 0 then
  return -2
end
return redis.call('HINCRBY', KEYS[1], 'count', -1)

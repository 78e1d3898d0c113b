-- Point-in-time ownership check of a read or write lease (writes nothing).
-- KEYS[1] the rw key; ARGV[1] member
-- Reply: remaining ms on the server's clock when held, -1 when not
local s = redis.pcall('ZSCORE', KEYS[1], ARGV[1])
if type(s) ~= 'string' then
  return -1
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local left = tonumber(s) - now
if left <= 0 then
  return -1
end
return left

-- Acquire a named lease stored as one hash field with its own field expiry.
-- KEYS[1] hash key; ARGV[1] owner token, ARGV[2] duration ms, ARGV[3] field
-- Reply: {1, 'ok'}           acquired
--        {0, field PTTL ms}  contended; nothing written
--        {-1, reason}        refused before anything was written
local r = redis.pcall('HPTTL', KEYS[1], 'FIELDS', 1, ARGV[3])
if type(r) == 'table' and r.err then
  if string.find(r.err, 'WRONGTYPE') then
    return {-1, 'wrongtype'}
  end
  return {-1, 'no-hfe'}
end
if redis.call('PTTL', KEYS[1]) >= 0 then
  return {-1, 'key-expiry'}
end
local f = r[1]
if f ~= nil and f ~= -2 then
  return {0, f}
end
redis.call('HSET', KEYS[1], ARGV[3], ARGV[1])
redis.call('HPEXPIRE', KEYS[1], ARGV[2], 'FIELDS', 1, ARGV[3])
return {1, 'ok'}

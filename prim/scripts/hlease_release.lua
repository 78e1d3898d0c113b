-- Release a hash-field lease only for its owner; other fields are untouched.
-- KEYS[1] hash key; ARGV[1] owner, ARGV[3] field
-- Reply: 1 released, 0 no such field, -1 another owner holds it
local v = redis.pcall('HGET', KEYS[1], ARGV[3])
if v == ARGV[1] then
  redis.call('HDEL', KEYS[1], ARGV[3])
  return 1
end
if v == false then
  return 0
end
return -1

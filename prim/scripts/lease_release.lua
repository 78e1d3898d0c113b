-- Release a lease only for its owner.
-- KEYS[1] lease key; ARGV[1] owner token
-- Reply: 1 released, 0 no lease exists, -1 another owner holds it
local v = redis.pcall('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
if v == false then
  return 0
end
return -1

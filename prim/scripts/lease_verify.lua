-- Point-in-time ownership check.
-- KEYS[1] lease key; ARGV[1] owner token
-- Reply: remaining PTTL in ms when owned, -1 when not
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PTTL', KEYS[1])
end
return -1

-- Renew a lease only for its current owner; the value (and so the fencing token
-- bound to it) is untouched.
-- KEYS[1] lease key; ARGV[1] owner token, ARGV[2] new duration in milliseconds
-- Reply: 1 renewed, 0 not the owner (expired or replaced)
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0

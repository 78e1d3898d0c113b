-- Point-in-time ownership check of a hash-field lease.
-- KEYS[1] hash key; ARGV[1] owner, ARGV[3] field
-- Reply: remaining field PTTL in ms when owned, -1 when not
if redis.pcall('HGET', KEYS[1], ARGV[3]) == ARGV[1] then
  return redis.call('HPTTL', KEYS[1], 'FIELDS', 1, ARGV[3])[1]
end
return -1

-- Renew a hash-field lease only for its owner.
-- KEYS[1] hash key; ARGV[1] owner, ARGV[2] duration ms, ARGV[3] field
-- Reply: 1 renewed, 0 not the owner
if redis.pcall('HGET', KEYS[1], ARGV[3]) == ARGV[1] then
  redis.call('HPEXPIRE', KEYS[1], ARGV[2], 'FIELDS', 1, ARGV[3])
  return 1
end
return 0

-- Create (or replace) a countdown latch generation.
-- KEYS[1] the latch key (a hash: gen = the generation's unique id, count)
-- ARGV[1] the new generation id, ARGV[2] its count (>= 0),
-- ARGV[3] 'create' (fails when a latch exists) or 'reset' (create or replace)
-- Reply: {1, 'ok'}         written (or this generation already stored; prim
--                          never resends this script: a resend could
--                          overwrite a newer generation)
--        {0, 'exists'}     create: a latch exists; nothing written
--        {-1, 'wrongtype'} the key holds another type; nothing written
local ty = redis.call('TYPE', KEYS[1])['ok']
if ty ~= 'none' and ty ~= 'hash' then
  return {-1, 'wrongtype'}
end
if ty == 'hash' then
  if redis.call('HGET', KEYS[1], 'gen') == ARGV[1] then
    return {1, 'ok'}
  end
  if ARGV[3] == 'create' then
    return {0, 'exists'}
  end
end
redis.call('HSET', KEYS[1], 'gen', ARGV[1], 'count', ARGV[2])
return {1, 'ok'}

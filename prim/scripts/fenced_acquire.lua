-- Acquire a fenced lock: check the counter, check contention, increment the
-- counter and create the expiring lease, all in one atomic step.
-- KEYS[1] lease key, KEYS[2] counter key
-- ARGV[1] owner token, ARGV[2] lease duration in milliseconds
-- Reply: {1, token as decimal string} acquired
--        {0, lease PTTL in ms}          contended
--        {-1, reason}                   the counter is unusable; nothing written
local t = redis.call('TYPE', KEYS[2]).ok
if t ~= 'none' then
  if t ~= 'string' then
    return {-1, 'counter holds a ' .. t .. ', not a decimal integer'}
  end
  if redis.call('PTTL', KEYS[2]) ~= -1 then
    return {-1, 'expiring'}
  end
  local c = redis.call('GET', KEYS[2])
  if string.match(c, '^%-%d+$') then
    return {-1, 'negative'}
  end
  if not string.match(c, '^%d+$') or (string.len(c) > 1 and string.sub(c, 1, 1) == '0') then
    return {-1, 'malformed'}
  end
  if string.len(c) > 19 or (string.len(c) == 19 and c >= '9223372036854775807') then
    return {-1, 'overflow'}
  end
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, redis.call('PTTL', KEYS[1])}
end
-- INCR does exact 64-bit arithmetic on the server; the new value is read back as
-- a string because Lua numbers are doubles and lose integers above 2^53.
redis.call('INCR', KEYS[2])
local token = redis.call('GET', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, token}

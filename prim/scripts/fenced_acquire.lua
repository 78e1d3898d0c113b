-- Acquire a fenced lock: check contention, check the counter, increment the
-- counter and create the expiring lease, all in one atomic step.
-- KEYS[1] lease key, KEYS[2] counter key
-- ARGV[1] owner token, ARGV[2] lease duration in milliseconds
-- Reply: {1, token as decimal string} acquired
--        {0, lease PTTL in ms}          contended; nothing written
--        {-1, reason}                   the counter is unusable; nothing written
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, redis.call('PTTL', KEYS[1])}
end
local c = redis.pcall('GET', KEYS[2])
local token
if c == false then
  token = '1'
else
  if type(c) ~= 'string' then
    return {-1, 'counter key holds a ' .. redis.call('TYPE', KEYS[2]).ok .. ', not a decimal integer'}
  end
  if redis.call('PTTL', KEYS[2]) ~= -1 then
    return {-1, 'expiring'}
  end
  if string.match(c, '^%-%d+$') then
    return {-1, 'negative'}
  end
  local n = string.len(c)
  if n == 0 or not string.match(c, '^%d+$') or (n > 1 and string.byte(c, 1) == 48) then
    return {-1, 'malformed'}
  end
  if n > 19 or (n == 19 and c >= '9223372036854775807') then
    return {-1, 'overflow'}
  end
  -- Decimal increment on the string: Lua numbers are doubles and would round
  -- integers above 2^53, so the counter never passes through a Lua number.
  local i = n
  while i > 0 and string.byte(c, i) == 57 do
    i = i - 1
  end
  if i == 0 then
    token = '1' .. string.rep('0', n)
  else
    token = string.sub(c, 1, i - 1) .. string.char(string.byte(c, i) + 1) .. string.rep('0', n - i)
  end
end
redis.call('SET', KEYS[2], token)
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, token}

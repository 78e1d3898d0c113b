-- Acquire a fenced lock: check contention, check the counter, increment the
-- counter and create the expiring lease, all in one atomic step.
-- KEYS[1] lease key, KEYS[2] counter key
-- ARGV[1] owner token, ARGV[2] lease duration in milliseconds
-- Reply: token (integer, or its decimal text above 2^53) acquired
--        {0, lease PTTL in ms}                           contended; nothing written
--        {-1, reason}                                    the counter is unusable; nothing written
-- The acquired reply is a bare value, not a table: it is the hot path, and
-- building and serialising a reply table costs more server time than the
-- checks themselves.
local held = redis.call('PTTL', KEYS[1])
if held ~= -2 then
  return {0, held}
end
local cttl = redis.call('PTTL', KEYS[2])
if cttl >= 0 then
  return {-1, 'expiring'}
end
local c = false
if cttl == -1 then
  c = redis.pcall('GET', KEYS[2])
  if type(c) ~= 'string' then
    return {-1, 'malformed'}
  end
  if string.byte(c, 1) == 45 then
    return {-1, 'negative'}
  end
end
-- INCR itself refuses anything that is not a canonical decimal int64 (leading
-- zeros, signs, spaces, fractions) and an increment past MaxInt64, without
-- writing; its error says which.
local t = redis.pcall('INCR', KEYS[2])
if type(t) == 'table' then
  -- 'would overflow' past MaxInt64; 'out of range' for longer digit strings
  if string.find(t.err, 'overflow') or (c and string.match(c, '^[1-9]%d*$')) then
    return {-1, 'overflow'}
  end
  return {-1, 'malformed'}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
-- Lua numbers are doubles: below 2^53 the integer reply is exact, above it the
-- new value is read back as the server's own decimal text.
if t < 9007199254740992 then
  return t
end
return redis.call('GET', KEYS[2])

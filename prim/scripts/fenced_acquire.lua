-- Acquire a fenced lock: check contention, check the counter, increment the
-- counter and create the expiring lease, all in one atomic step.
-- KEYS[1] lease key, KEYS[2] counter key
-- ARGV[1] owner token, ARGV[2] lease duration in milliseconds
-- The lease's value is "<owner token>:<fencing token>".
-- Reply: token (integer, or its decimal text above 2^53) acquired
--        {0, lease PTTL in ms}                           contended; nothing written
--        {-1, reason}                                    refused; nothing written
--        an error reply                                  the server refused a command
-- The acquired reply is a bare value, not a table: it is the hot path, and
-- building and serialising a reply table costs more server time than the
-- checks themselves.
local held = redis.call('PTTL', KEYS[1])
if held ~= -2 then
  local v = redis.pcall('GET', KEYS[1])
  if type(v) ~= 'string' then
    return {-1, 'wrongtype'}
  end
  -- A resend of this very acquisition (the client lost the first reply and sent
  -- the script again): the lease is this owner's, so answer the token it got.
  local n = #ARGV[1]
  if string.sub(v, 1, n + 1) == ARGV[1] .. ':' then
    local ts = string.sub(v, n + 2)
    local t = tonumber(ts)
    if t and t < 9007199254740992 then
      return t
    end
    return ts
  end
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
-- writing; its error says which. Any other refusal (OOM, NOPERM, READONLY,
-- MISCONF) is the server's own error, returned as it is: nothing was written.
local t = redis.pcall('INCR', KEYS[2])
if type(t) == 'table' then
  local e = t.err or ''
  if string.find(e, 'overflow', 1, true) then
    return {-1, 'overflow'}
  end
  if string.find(e, 'not an integer', 1, true) then
    -- 'out of range' for digit strings longer than an int64
    if c and string.match(c, '^[1-9]%d*$') then
      return {-1, 'overflow'}
    end
    return {-1, 'malformed'}
  end
  return t
end
-- Lua numbers are doubles: below 2^53 the integer is exact (and %d prints it
-- exactly), above it the new value is read back as the server's own text.
local ts
if t < 9007199254740992 then
  ts = string.format('%d', t)
else
  ts = redis.call('GET', KEYS[2])
end
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. ts, 'PX', ARGV[2])
if t < 9007199254740992 then
  return t
end
return ts

-- Acquire a named lease stored as one hash field with its own field expiry.
-- KEYS[1] hash key; ARGV[1] owner token, ARGV[2] duration ms, ARGV[3] field
-- Reply: {1, 'ok'}           acquired (or this owner's own acquisition, resent)
--        {0, field PTTL ms}  contended; nothing written
--        {-1, reason}        refused before anything was written
--        an error reply      the server refused a command; nothing is left
--                            written (a field without expiry is removed again)
local r = redis.pcall('HPTTL', KEYS[1], 'FIELDS', 1, ARGV[3])
if type(r) == 'table' and r.err then
  if string.find(r.err, 'WRONGTYPE', 1, true) then
    return {-1, 'wrongtype'}
  end
  local e = string.lower(r.err)
  -- 'unknown command' (7.2+), 'Unknown Redis command called from script' (7.0)
  if string.find(e, 'unknown command', 1, true) or string.find(e, 'unknown redis command', 1, true) then
    return {-1, 'no-hfe'}
  end
  return r
end
if redis.call('PTTL', KEYS[1]) >= 0 then
  return {-1, 'key-expiry'}
end
local f = r[1]
if f ~= nil and f ~= -2 then
  -- A resend of this very acquisition finds its own field: the same answer.
  if redis.call('HGET', KEYS[1], ARGV[3]) == ARGV[1] then
    if f == -1 then
      redis.call('HPEXPIRE', KEYS[1], ARGV[2], 'FIELDS', 1, ARGV[3])
    end
    return {1, 'ok'}
  end
  return {0, f}
end
-- HSETEX (Redis 8.0+, Valkey 9.0+) writes the field and its expiry at once, so
-- no refusal can leave a field without expiry. Without it (Redis 7.4, or an ACL
-- that allows HSET and HPEXPIRE but not HSETEX), HSET then HPEXPIRE, and the
-- field is removed again if HPEXPIRE is refused.
local s = redis.pcall('HSETEX', KEYS[1], 'PX', ARGV[2], 'FIELDS', 1, ARGV[3], ARGV[1])
if type(s) == 'table' and s.err then
  local e = string.lower(s.err)
  if not (string.find(e, 'unknown command', 1, true) or string.find(e, 'unknown redis command', 1, true)
          or string.find(e, 'noperm', 1, true)
          or string.find(e, 'no permissions', 1, true) or string.find(e, "can't run", 1, true)) then
    return s
  end
  redis.call('HSET', KEYS[1], ARGV[3], ARGV[1])
  local x = redis.pcall('HPEXPIRE', KEYS[1], ARGV[2], 'FIELDS', 1, ARGV[3])
  if type(x) == 'table' and x.err then
    redis.pcall('HDEL', KEYS[1], ARGV[3])
    return x
  end
end
return {1, 'ok'}

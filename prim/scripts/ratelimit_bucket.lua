-- Token-bucket rate limiter: one decision for ARGV[1] tokens, atomically, on
-- the server's clock (TIME).
-- KEYS[1] a hash of two fields: 'tokens', the tokens left at the last write
--         (a double), and 'time', the server time of that write in
--         microseconds (an integer). No key: a full bucket. Other fields are
--         ignored; a hash without these two is malformed.
-- ARGV[1] n, tokens asked (0 <= n <= limit; 0 reports availability and writes
--         nothing)
-- ARGV[2] limit, the bucket's size
-- ARGV[3] tokens added per period
-- ARGV[4] period in ms
-- Refill is continuous: tokens = min(limit, tokens + elapsed*rate/period). A
-- server clock found behind the stored time (a backward jump, a failover to
-- a server whose clock is behind) refills nothing and keeps the stored time,
-- so permits come late, never early (RetryAfter and reset count the wait for
-- the clock too). A refusal writes nothing (refill is a
-- function of the stored pair and the time).
-- The numbers are written as Lua numbers, which the server formats exactly
-- (%.17g on Redis 7.0, the shortest round-trip form on later servers): the
-- tokens read back are the tokens written, bit for bit.
-- Expiry: the key outlives the time at which its bucket is full again (F; a
-- full bucket needs no state), by one to two seconds: PEXPIREAT at F rounded
-- down to the second, plus two seconds. F depends only on the stored pair
-- (refill does not move it), so a request whose write leaves that deadline
-- where it was sends no PEXPIREAT.
-- Reply: {1, remaining, 0, reset}      granted (n == 0: one token is free)
--        {0, remaining, retry, reset}  refused; retry ms until n tokens
--        {-1, reason}                  'wrongtype' or 'malformed'
-- remaining: whole tokens left; reset: ms until the bucket is full.
if redis.replicate_commands then
  redis.replicate_commands()
end
-- ARGV are prim's own decimal integers; the state is checked below.
local tonumber = tonumber
local n = ARGV[1] + 0
local limit = ARGV[2] + 0
local per = ARGV[3] / (ARGV[4] * 1000) -- tokens per µs
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local s = redis.pcall('HMGET', KEYS[1], 'tokens', 'time')
if s.err then
  return {-1, 'wrongtype'}
end
local tokens, last, deadline = limit, now, nil
if s[1] then
  tokens, last = tonumber(s[1]), tonumber(s[2])
  if not tokens or not last or not (tokens >= 0 and tokens < math.huge) or last < 0 or last % 1 ~= 0 then
    return {-1, 'malformed'}
  end
  deadline = math.floor((last + (limit - tokens) / per) / 1000000)
  if now > last then
    tokens = tokens + (now - last) * per
  end
  if tokens > limit then
    tokens = limit
  end
elseif s[2] or redis.call('EXISTS', KEYS[1]) == 1 then
  return {-1, 'malformed'}
end
-- Times are counted from the later of now and the stored time: behind it (a
-- backward jump) nothing refills until the server's clock passes it again.
local from = now
if last > now then
  from = last
end
local want = n
if n == 0 then
  want = 1
end
if tokens < want then
  local retry = math.ceil((from - now + (want - tokens) / per) / 1000)
  if retry < 1 then
    retry = 1
  end
  return {0, math.floor(tokens), retry, math.ceil((from - now + (limit - tokens) / per) / 1000)}
end
if n == 0 then
  return {1, math.floor(tokens), 0, math.ceil((from - now + (limit - tokens) / per) / 1000)}
end
tokens = tokens - n
redis.call('HSET', KEYS[1], 'tokens', tokens, 'time', from)
local full = from + (limit - tokens) / per
local d = math.floor(full / 1000000)
if d ~= deadline then
  redis.call('PEXPIREAT', KEYS[1], (d + 2) * 1000)
end
return {1, math.floor(tokens), 0, math.ceil((full - now) / 1000)}

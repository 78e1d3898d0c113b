-- Token-bucket rate limiter: one decision for ARGV[1] tokens, atomically, on
-- the server's clock (TIME).
-- KEYS[1] a hash of exactly two fields: 'tokens', the tokens left at the last
--         write (a double, '%.17g'), and 'time', the server time of that
--         write in microseconds. No key: a full bucket.
-- ARGV[1] n, tokens asked (0 <= n <= limit; 0 reports availability and writes
--         nothing)
-- ARGV[2] limit, the bucket's size
-- ARGV[3] tokens added per period
-- ARGV[4] period in ms
-- Refill is continuous: tokens = min(limit, tokens + elapsed*rate/period). A
-- server clock found behind the stored time (a backward jump, a failover to
-- a server whose clock is behind) refills nothing and keeps the stored time,
-- so permits come late, never early. A refusal writes nothing (refill is a
-- function of the stored pair and the time).
-- Reply: {1, remaining, 0, reset}      granted (n == 0: one token is free)
--        {0, remaining, retry, reset}  refused; retry ms until n tokens
--        {-1, reason}                  'wrongtype' or 'malformed'
-- remaining: whole tokens left; reset: ms until the bucket is full.
if redis.replicate_commands then
  redis.replicate_commands()
end
local n = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local rate = tonumber(ARGV[3])
local period = tonumber(ARGV[4]) * 1000
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local h = redis.pcall('HGETALL', KEYS[1])
if h.err then
  return {-1, 'wrongtype'}
end
local tokens, last = limit, now
if #h > 0 then
  local f = {}
  for i = 1, #h, 2 do
    f[h[i]] = h[i + 1]
  end
  local tk, tm = f['tokens'], f['time']
  if #h ~= 4 or not tk or not tm or #tm > 17 or not string.match(tm, '^%d+$')
      or not string.match(tk, '^%d[%d%.eE%+%-]*$') then
    return {-1, 'malformed'}
  end
  tokens, last = tonumber(tk), tonumber(tm)
  if not tokens or tokens ~= tokens or tokens == math.huge then
    return {-1, 'malformed'}
  end
  if now > last then
    tokens = tokens + (now - last) * rate / period
  end
  if tokens > limit then
    tokens = limit
  end
end
local function ms(need)
  local d = math.ceil(need * period / rate / 1000)
  if d < 1 and need > 0 then
    d = 1
  end
  return d
end
local want = n
if n == 0 then
  want = 1
end
if tokens < want then
  return {0, math.floor(tokens), ms(want - tokens), ms(limit - tokens)}
end
if n == 0 then
  return {1, math.floor(tokens), 0, ms(limit - tokens)}
end
tokens = tokens - n
if last < now then
  last = now
end
local reset = ms(limit - tokens)
redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens), 'time', string.format('%d', last))
redis.call('PEXPIRE', KEYS[1], reset + 1000)
return {1, math.floor(tokens), 0, reset}

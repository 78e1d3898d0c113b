-- Fixed-window rate limiter: one decision for ARGV[1] permits, atomically.
-- KEYS[1] the counter (a string holding a decimal count)
-- ARGV[1] n, permits asked (0 <= n <= limit; 0 reports availability and
--         writes nothing)
-- ARGV[2] limit, permits per window
-- ARGV[3] window in milliseconds
-- The window starts at the request that creates the counter (SET … PX window)
-- and ends when the counter expires: the server's own clock measures it, so no
-- TIME is needed. A counter found without an expiry (persisted by hand, or a
-- PERSIST) would deny forever once full: the first request with n > 0 that
-- finds it gives it a whole window (the repair INCREX's ENX makes too).
-- Reply: {1, remaining, pttl}   granted (n == 0: at least one permit free)
--        {0, remaining, pttl}   refused; retry when the counter expires
--        {-1, reason}           'wrongtype' or 'malformed'; nothing written
-- pttl: the counter's remaining life in ms (0: no counter); for n == 0 on a
-- counter without expiry, the window the next request will give it.
local n = ARGV[1] + 0
local limit = ARGV[2] + 0
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  return {-1, 'wrongtype'}
end
if not v then
  if n == 0 then
    return {1, limit, 0}
  end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
  return {1, limit - n, tonumber(ARGV[3])}
end
if #v > 18 or not (v == '0' or string.match(v, '^[1-9]%d*$')) then
  return {-1, 'malformed'}
end
local count = tonumber(v)
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 then
  if n > 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
  end
  pttl = tonumber(ARGV[3])
end
local want = n
if n == 0 then
  want = 1
end
if count + want <= limit then
  if n > 0 then
    count = redis.call('INCRBY', KEYS[1], n)
  end
  return {1, limit - count, pttl}
end
local rem = limit - count
if rem < 0 then
  rem = 0
end
return {0, rem, pttl}

-- Sliding-window rate limiter: one decision for ARGV[1] permits, atomically,
-- on the server's clock (TIME).
-- KEYS[1] a hash: one field per active segment, named by the segment's END
--         time in ms, holding the permits granted in it (a positive integer)
-- ARGV[1] n, permits asked (0 <= n <= limit; 0 reports availability and
--         writes nothing)
-- ARGV[2] limit, permits in any window
-- ARGV[3] window in ms
-- ARGV[4] segment length in ms (window / segments)
-- A grant at server time t is recorded in the segment ending at
-- floor(t/s)*s + s: rounded forward, so it counts for at least one window
-- after t (never expires early; availability comes up to a segment late). A
-- segment counts while end + window > now; the others are deleted by the next
-- request with n > 0. Only granted permits are stored, so the active segments
-- never hold more than limit.
-- The key expires at its newest segment's end + window (PEXPIREAT, set when a
-- request creates that segment: the deadline only moves then).
-- Reply: {1, remaining, 0, reset}           granted (n == 0: one is free)
--        {0, remaining, retry, reset}        refused; retry ms until n fit
--        {-1, reason}                        'wrongtype' or 'malformed'
-- reset: ms until every active segment has expired (0: none).
if redis.replicate_commands then
  redis.replicate_commands()
end
-- ARGV are prim's own decimal integers; the state is checked below.
local tonumber = tonumber
local n = ARGV[1] + 0
local limit = ARGV[2] + 0
local window = ARGV[3] + 0
local seg = ARGV[4] + 0
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local h = redis.pcall('HGETALL', KEYS[1])
if h.err then
  return {-1, 'wrongtype'}
end
-- A segment ending after from is active.
local from = now - window
-- A field or count that is not a number makes the arithmetic raise: caught,
-- it is a malformed state (nothing written yet).
local sum, last, stale = 0, 0, nil
local ok = pcall(function()
  for i = 1, #h, 2 do
    local e, c = h[i] + 0, h[i + 1] + 0
    if e < 1 or c < 1 or e % 1 ~= 0 or c % 1 ~= 0 then
      error('malformed')
    end
    if e > from then
      sum = sum + c
      if e > last then
        last = e
      end
    elseif stale then
      stale[#stale + 1] = h[i]
    else
      stale = {h[i]}
    end
  end
end)
if not ok then
  return {-1, 'malformed'}
end
local reset = 0
if last > 0 then
  reset = last + window - now
end
local rem = limit - sum
if rem < 0 then
  rem = 0
end
local want = n
if n == 0 then
  want = 1
end
if n > 0 and stale then
  redis.call('HDEL', KEYS[1], unpack(stale))
end
if sum + want > limit then
  -- Refused: retry when enough of the oldest active segments have expired
  -- for want to fit (a segment stops counting at end + window).
  local ends, counts = {}, {}
  for i = 1, #h, 2 do
    local e = tonumber(h[i])
    if e > from then
      ends[#ends + 1] = e
      counts[e] = tonumber(h[i + 1])
    end
  end
  table.sort(ends)
  local retry = reset
  local s = sum
  for _, e in ipairs(ends) do
    s = s - counts[e]
    if s + want <= limit then
      retry = e + window - now
      break
    end
  end
  return {0, rem, retry, reset}
end
if n == 0 then
  return {1, rem, 0, reset}
end
-- Lua numbers are sent as the server formats them: integers below 2^53 as
-- plain decimal integers.
local cur = now - now % seg + seg
redis.call('HINCRBY', KEYS[1], cur, n)
if cur > last then
  redis.call('PEXPIREAT', KEYS[1], cur + window)
  last = cur
end
return {1, rem - n, 0, last + window - now}

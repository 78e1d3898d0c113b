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
-- segment counts while end + window > now. Only granted permits are stored,
-- so the active segments never hold more than limit.
-- Reply: {1, remaining, 0, reset}           granted (n == 0: one is free)
--        {0, remaining, retry, reset}        refused; retry ms until n fit
--        {-1, reason}                        'wrongtype' or 'malformed'
-- reset: ms until every active segment has expired (0: none).
if redis.replicate_commands then
  redis.replicate_commands()
end
local n = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local window = tonumber(ARGV[3])
local seg = tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local h = redis.pcall('HGETALL', KEYS[1])
if h.err then
  return {-1, 'wrongtype'}
end
local ends, counts, stale = {}, {}, {}
local sum, last = 0, 0
for i = 1, #h, 2 do
  local e, c = h[i], h[i + 1]
  if #e > 15 or #c > 15 or not string.match(e, '^[1-9]%d*$') or not string.match(c, '^[1-9]%d*$') then
    return {-1, 'malformed'}
  end
  local ev = tonumber(e)
  if ev + window > now then
    local cv = tonumber(c)
    ends[#ends + 1] = ev
    counts[ev] = cv
    sum = sum + cv
    if ev > last then
      last = ev
    end
  else
    stale[#stale + 1] = e
  end
end
local reset = 0
if last > 0 then
  reset = last + window - now
end
-- retry: ms until enough of the oldest segments have expired for want.
local function retry(want)
  table.sort(ends)
  local s = sum
  for _, e in ipairs(ends) do
    s = s - counts[e]
    if s + want <= limit then
      return e + window - now
    end
  end
  return reset
end
local rem = limit - sum
if rem < 0 then
  rem = 0
end
if n == 0 then
  if sum + 1 <= limit then
    return {1, rem, 0, reset}
  end
  return {0, rem, retry(1), reset}
end
if #stale > 0 then
  redis.call('HDEL', KEYS[1], unpack(stale))
end
if sum + n > limit then
  return {0, rem, retry(n), reset}
end
local cur = math.floor(now / seg) * seg + seg
redis.call('HINCRBY', KEYS[1], string.format('%d', cur), n)
if cur > last then
  last = cur
end
reset = last + window - now
redis.call('PEXPIRE', KEYS[1], string.format('%d', reset))
return {1, rem - n, 0, reset}

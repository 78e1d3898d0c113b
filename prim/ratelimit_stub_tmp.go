package prim

// TEMPORARY (branch i17-http only): stand-ins for decide and record until
// branch i17-prim lands; deleted at the merge. decide is a plain fixed window
// on server time for every algorithm.

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

var stubFixed = redis.NewScript(`
local t = redis.call('TIME')
local n = tonumber(ARGV[1]); local limit = tonumber(ARGV[2]); local win = tonumber(ARGV[3])
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then ttl = win end
if cur + n <= limit then
  if n > 0 then
    cur = redis.call('INCRBY', KEYS[1], n)
    if cur == n then redis.call('PEXPIRE', KEYS[1], win) end
  end
  return {1, limit - cur, ttl}
end
return {0, limit - cur, ttl}
`)

func (l *Limiter) decide(ctx context.Context, n int64) (Decision, error) {
	if n > l.limit {
		return Decision{Limit: l.limit}, nil
	}
	r, err := stubFixed.Run(ctx, l.c.client, []string{l.key}, n, l.limit, l.window.Milliseconds()).Int64Slice()
	if err != nil {
		return Decision{}, err
	}
	d := Decision{Allowed: r[0] == 1, Remaining: r[1], Limit: l.limit, Reset: time.Duration(r[2]) * time.Millisecond}
	if !d.Allowed {
		d.RetryAfter, d.HasRetryAfter = d.Reset, true
	}
	return d, nil
}

func (l *Limiter) record(d Decision, err error) {
	l.st.mu.Lock()
	defer l.st.mu.Unlock()
	l.st.lastUsed = time.Now()
	if err != nil {
		return
	}
	l.st.available = d.Remaining
	if d.Allowed {
		l.st.granted++
	} else {
		l.st.rejected++
	}
}

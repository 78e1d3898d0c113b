package prim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ---- rate limiters: one decision ---------------------------------------------
//
// A decision is one atomic script on the limiter's one key (so one Cluster
// slot), on the server's clock: the fixed window's counter expires on the
// server's clock (PEXPIRE, PTTL), the sliding window and the bucket read TIME
// inside the script. No client time is ever sent: the arguments are n and the
// limiter's configuration.
//
// The fixed window first tries INCREX (Redis 8.8+, Valkey 9.2+) through the
// Coordinator's capability record (caps.go): INCREX and PTTL in one pipeline,
// one round trip; a node that answers "unknown command" gets the script in the
// same call and for the next five minutes.
//
// Resends. The scripts are not idempotent: a second run of a granted request
// consumes the permits again. prim sends them with go-redis's resends off and
// resends itself, following the client's policy (MaxRetries, back-off), so
// it knows whether an attempt went without a reply: a resend after a lost
// reply can only consume twice (fewer grants than the limit allows, never
// more), and if no attempt gets a reply, or a resend after a lost reply is
// denied (the lost attempt may have been granted), the error matches
// ErrUncertain. INCREX
// is never resent: a lost reply is ErrUncertain.

var (
	scriptFixed   = loadScript("ratelimit_fixed.lua")
	scriptSliding = loadScript("ratelimit_sliding.lua")
	scriptBucket  = loadScript("ratelimit_bucket.lua")
)

// decide makes one atomic decision for n permits and updates nothing local.
// n < 0 is ErrNegativePermits and n > limit a refusal without RetryAfter,
// both without I/O.
func (l *Limiter) decide(ctx context.Context, n int64) (Decision, error) {
	if n < 0 {
		return Decision{}, invalid(ErrNegativePermits, fmt.Sprint(n))
	}
	if n > l.limit {
		return Decision{Allowed: false, Limit: l.limit}, nil
	}
	if err := ctx.Err(); err != nil {
		return Decision{}, err // nothing sent
	}
	type result struct {
		d   Decision
		err error
	}
	r, cerr := bounded(ctx, func(ctx context.Context) result {
		d, err := l.decideOnce(ctx, n)
		return result{d, err}
	}, nil)
	if cerr != nil {
		l.c.m.add(ctx, l.c.m.uncertain, "rate-limiter", string(l.algo))
		return Decision{}, fmt.Errorf("%w: rate limiter %q: %w", ErrUncertain, l.key, cerr)
	}
	return r.d, r.err
}

// decideOnce is decide's I/O: the fast path where it applies, else the
// script.
func (l *Limiter) decideOnce(ctx context.Context, n int64) (Decision, error) {
	if l.algo == AlgoFixedWindow && n > 0 {
		if d, done, err := l.increx(ctx, n); done {
			return d, err
		}
	}
	var s *luaScript
	args := []any{n, l.limit, l.window.Milliseconds()}
	switch l.algo {
	case AlgoFixedWindow:
		s = scriptFixed
	case AlgoSlidingWindow:
		s = scriptSliding
		args = append(args, l.window.Milliseconds()/l.segments)
	case AlgoTokenBucket:
		s = scriptBucket
		args = []any{n, l.limit, l.tokens, l.window.Milliseconds()}
	default:
		return Decision{}, fmt.Errorf("prim: unknown rate-limiting algorithm %q", l.algo)
	}
	var r cmdResult
	for attempt := 0; ; attempt++ {
		if attempt > 0 && !sleepCtx(ctx, l.c.retry.backoff(attempt)) {
			break // ctx ended: r is the last attempt's
		}
		r.v, r.err = evalScript(ctx, l.c.client, s, false, []string{l.key}, args...).Result()
		if uncertain(r.err) {
			r.written = true // no reply: this attempt may have run
		}
		if !worthResending(r.err) || attempt >= l.c.retry.max {
			break
		}
	}
	if r.outcomeUnknown() {
		l.c.m.add(ctx, l.c.m.uncertain, "rate-limiter", string(l.algo))
		return Decision{}, fmt.Errorf("%w: rate limiter %q: %w", ErrUncertain, l.key, r.err)
	}
	if r.err != nil {
		return Decision{}, fmt.Errorf("prim: rate limiter %q: %w", l.key, serverError(r.err))
	}
	d, err := l.parseDecision(r.v)
	if err == nil && !d.Allowed && r.written && n > 0 {
		// An earlier attempt got no reply and may have been granted (and
		// taken the permits this resend was denied for): "denied, retry
		// after" would be a wrong answer. A resend that is granted stands
		// (consumed twice for one grant: never over-admission).
		l.c.m.add(ctx, l.c.m.uncertain, "rate-limiter", string(l.algo))
		return Decision{}, fmt.Errorf("%w: rate limiter %q: a reply was lost and the resend was denied: the lost attempt may have been granted", ErrUncertain, l.key)
	}
	return d, err
}

// parseDecision reads a script's reply: {1|0, remaining, retry ms, reset ms},
// the fixed window's {1|0, remaining, pttl}, or {-1, reason}.
func (l *Limiter) parseDecision(v any) (Decision, error) {
	a, ok := v.([]any)
	if !ok || len(a) < 2 {
		return Decision{}, fmt.Errorf("prim: rate limiter %q: unexpected script reply %v", l.key, v)
	}
	status, _ := a[0].(int64)
	if status == -1 {
		reason, _ := a[1].(string)
		if reason == "wrongtype" {
			return Decision{}, fmt.Errorf("%w: rate limiter key %q holds another type", ErrWrongType, l.key)
		}
		return Decision{}, fmt.Errorf("%w: rate limiter key %q: %s state", ErrLimiterState, l.key, reason)
	}
	ints := make([]int64, len(a))
	for i, x := range a {
		if ints[i], ok = x.(int64); !ok {
			return Decision{}, fmt.Errorf("prim: rate limiter %q: unexpected script reply %v", l.key, v)
		}
	}
	d := Decision{Allowed: status == 1, Remaining: max(ints[1], 0), Limit: l.limit, served: true}
	switch len(ints) {
	case 3: // fixed window: the counter's PTTL
		d.Reset = time.Duration(ints[2]) * time.Millisecond
		if !d.Allowed {
			d.RetryAfter, d.HasRetryAfter = fixedRetry(ints[2]), true
		}
	case 4:
		d.Reset = time.Duration(ints[3]) * time.Millisecond
		if !d.Allowed {
			d.RetryAfter, d.HasRetryAfter = time.Duration(ints[2])*time.Millisecond, true
		}
	default:
		return Decision{}, fmt.Errorf("prim: rate limiter %q: unexpected script reply %v", l.key, v)
	}
	return d, nil
}

// fixedRetry is the RetryAfter of a full counter whose PTTL is pttl ms: the
// server deletes a key once its clock is PAST the expiry time, so at exactly
// PTTL ms the counter still exists; one more millisecond and it is gone.
func fixedRetry(pttl int64) time.Duration {
	if pttl < 0 {
		// No counter any more (PTTL -2: it expired between INCREX and PTTL):
		// a retry now succeeds. 1ms, not 0, which would read as "no wait" in
		// Retry-After while the request was refused.
		return time.Millisecond
	}
	return time.Duration(pttl+1) * time.Millisecond
}

// increx is the fixed window's fast path: INCREX key BYINT n UBOUND limit PX
// window ENX (add n unless the counter would pass limit; ENX sets the window
// only when the counter has no expiry, so the request that creates the counter
// starts the window, and a counter found without expiry gets one) and PTTL,
// in one pipeline. done false: the node lacks INCREX (now, or recorded within
// five minutes), or INCREX answered with an error and so did not run, or the
// counter has no expiry; the caller runs the script, which decides (and
// types a malformed counter, repairs a counter without expiry).
//
// INCREX goes with resends off: a lost reply is ErrUncertain.
func (l *Limiter) increx(ctx context.Context, n int64) (d Decision, done bool, err error) {
	node := l.c.nodeName(ctx, l.key)
	if !l.c.caps.use(node, capIncrex) {
		return Decision{}, false, nil
	}
	windowMs := l.window.Milliseconds()
	inc := redis.NewSliceCmd(ctx, "increx", l.key, "byint", n, "ubound", l.limit, "px", windowMs, "enx")
	inc.SetFirstKeyPos(1)
	pttl := redis.NewIntCmd(ctx, "pttl", l.key)
	pipe := l.c.client.Pipeline()
	_ = pipe.Process(ctx, noRetrySlice{inc})
	_ = pipe.Process(ctx, pttl)
	_, _ = pipe.Exec(ctx)
	v, err := inc.Result()
	if err != nil {
		if errorReply(err) {
			// INCREX did not run. "unknown command": the node lacks it (recorded);
			// any other error reply (WRONGTYPE, a non-integer counter, NOPERM,
			// READONLY…) is the script's to answer and type.
			l.c.caps.learn(node, capIncrex, err)
			return Decision{}, false, nil
		}
		if errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrClosed) || dialFailed(err) {
			return Decision{}, true, fmt.Errorf("prim: rate limiter %q: %w", l.key, err) // nothing sent
		}
		l.c.m.add(ctx, l.c.m.uncertain, "rate-limiter", string(l.algo))
		return Decision{}, true, fmt.Errorf("%w: rate limiter %q: INCREX: %w", ErrUncertain, l.key, err)
	}
	if len(v) != 2 {
		return Decision{}, true, fmt.Errorf("prim: rate limiter %q: unexpected INCREX reply %v", l.key, v)
	}
	value, ok1 := v[0].(int64)
	applied, ok2 := v[1].(int64)
	if !ok1 || !ok2 || (applied != n && applied != 0) {
		return Decision{}, true, fmt.Errorf("prim: rate limiter %q: unexpected INCREX reply %v", l.key, v)
	}
	p, perr := pttl.Result()
	d = Decision{Allowed: applied == n, Remaining: max(l.limit-value, 0), Limit: l.limit, served: true}
	switch {
	case perr != nil:
		// INCREX answered, PTTL did not: the window's end is unknown, a whole
		// window is the longest it can be.
		d.Reset = l.window
	case p == -1:
		if d.Allowed {
			d.Reset = l.window // cannot happen: ENX gave it one
		} else {
			return Decision{}, false, nil // a counter without expiry: the script repairs it
		}
	case p >= 0:
		d.Reset = time.Duration(p) * time.Millisecond
	}
	if !d.Allowed {
		d.HasRetryAfter = true
		if perr != nil {
			d.RetryAfter = l.window + time.Millisecond
		} else {
			d.RetryAfter = fixedRetry(p)
		}
	}
	return d, true, nil
}

// record is the local bookkeeping of one decision (Allow's, or one of the
// queue's attempts): granted or rejected count, the available permits of the
// latest server reply, the time of the last use. An error counts in neither.
func (l *Limiter) record(d Decision, err error) {
	l.st.mu.Lock()
	defer l.st.mu.Unlock()
	l.st.lastUsed = time.Now()
	if err != nil {
		return
	}
	if d.Allowed {
		l.st.granted++
	} else {
		l.st.rejected++
	}
	if d.served {
		l.st.available = d.Remaining
	}
}

// isClosed reports whether Close was called.
func (l *Limiter) isClosed() bool {
	l.st.mu.Lock()
	defer l.st.mu.Unlock()
	return l.st.closed
}

package prim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ---- rate limiters: the public surface ---------------------------------------
//
// Three algorithms share one shape ([RateLimiter]) and one implementation of
// the local parts (queue, statistics, idleness, Close); each algorithm is one
// atomic script on one key on the server's clock: TIME, or for the fixed
// window the counter's expiry (ratelimit_decide.go, scripts/ratelimit_*.lua;
// the fixed window's INCREX fast path where the server has it).

// RateLimiter is what the three limiters share: callers and the net/http
// middleware (package prim/ratelimithttp) take any of them. *Limiter
// implements it.
type RateLimiter interface {
	// Allow makes one atomic decision for n permits on the server.
	Allow(ctx context.Context, n int64) (Decision, error)
	// Wait queues locally until n permits are granted, ctx ends or the limiter
	// is closed; a request the queue has no room for, or one for more permits
	// than the limit, is refused at once (for prim's limiters the queue's size
	// is stated on [WithQueue]; WithQueue(0, …) never queues).
	Wait(ctx context.Context, n int64) (Decision, error)
	// Stats reports this limiter's local statistics.
	Stats() LimiterStats
	// IdleDuration is the time without local acquisitions or queued requests.
	IdleDuration() time.Duration
	// Close ends queued requests (with ErrLimiterClosed) and refuses new ones.
	Close() error
}

// Decision is the answer to one request for permits.
type Decision struct {
	// Allowed reports that the permits were granted (and consumed).
	Allowed bool
	// Remaining is the number of permits available after this decision, as
	// the server computed it (other processes may consume them at once).
	Remaining int64
	// RetryAfter is how long until the server computed that the same request
	// can succeed; meaningful only when HasRetryAfter. A request for more
	// permits than the limit has none: it can never succeed.
	RetryAfter    time.Duration
	HasRetryAfter bool
	// Limit is the limiter's limit (permits per window, or the bucket's size).
	Limit int64
	// Reset is how long until the limiter is back to its full limit, as the
	// server computed it; zero when nothing is consumed.
	Reset time.Duration

	// served: the decision carries a server reply (not a request over the
	// limit, refused locally).
	served bool
}

// Served reports that the server made the decision, so Remaining and Reset
// are the server's computation. A request for more permits than the limit is
// refused locally (nothing sent): it carries only Limit, and Remaining and
// Reset are zero values, not the server's state.
func (d Decision) Served() bool { return d.served }

// LimiterStats are one limiter's local statistics.
type LimiterStats struct {
	// Granted and Rejected count this limiter's decisions (requests, not
	// permits): Allow and Wait calls that were granted, and those that were
	// refused (Allow not allowed, Wait refused because the request exceeds the
	// limit or the queue is full, or pushed out of it). Errors count in
	// neither (a Wait ended by its context or by Close), except that a queued
	// request granted by the server as its caller gave up counts as granted:
	// its permits are consumed.
	Granted, Rejected int64
	// QueuedPermits is the number of permits waiting in the local queue now.
	QueuedPermits int64
	// Available is the number of permits available according to the latest
	// server reply (other processes may have consumed them since); -1 before
	// the first reply.
	Available int64
}

// QueueOrder is the order in which a limiter's local queue is served.
type QueueOrder int

const (
	// OldestFirst serves the longest-waiting request first; a request that
	// arrives when the queue is full is refused (ErrQueueFull).
	OldestFirst QueueOrder = iota
	// NewestFirst serves the newest request first; a request that arrives
	// when the queue is full pushes out the oldest ones (they end with
	// ErrQueueFull).
	NewestFirst
)

func (o QueueOrder) String() string {
	switch o {
	case OldestFirst:
		return "oldest-first"
	case NewestFirst:
		return "newest-first"
	}
	return fmt.Sprintf("QueueOrder(%d)", int(o))
}

// LimiterOption configures a rate limiter.
type LimiterOption func(*limiterConfig)

// WithQueue sets the local queue of Wait: at most limit permits wait at once,
// a request for zero permits taking the room of one, served in the given
// order.
//
// Without WithQueue a limiter's queue holds as many permits as the limiter's
// limit (permits per window, or the bucket's size), served [OldestFirst]: Wait
// waits, as Go callers expect from golang.org/x/time/rate, and any request
// that can ever be granted finds room when the queue is empty; the wait is
// bounded by the caller's context. Unlike x/time/rate's, the queue is
// bounded: more waiters than it holds are refused with ErrQueueFull.
//
// WithQueue(0, OldestFirst) is the behaviour of the reference this package
// follows (whose queue limit defaults to zero): Wait does not queue, it
// answers at once as Allow does, with ErrQueueFull when the request is
// refused. prim departs from that default on purpose, since a Go Wait that
// returns before its context ends without waiting surprises its callers.
func WithQueue(limit int64, order QueueOrder) LimiterOption {
	return func(c *limiterConfig) { c.queueLimit, c.order, c.queueSet = limit, order, true }
}

// limiterConfig is what the options set.
type limiterConfig struct {
	queueLimit int64
	order      QueueOrder
	// queueSet: WithQueue was given; otherwise the queue is the default (the
	// limiter's limit, OldestFirst).
	queueSet bool
}

// Algorithm names a rate-limiting algorithm.
type Algorithm string

// The three algorithms.
const (
	AlgoFixedWindow   Algorithm = "fixed"
	AlgoSlidingWindow Algorithm = "sliding"
	AlgoTokenBucket   Algorithm = "bucket"
)

// The rate limiters' input errors; each matches ErrInvalidArgument as well.
var (
	ErrInvalidLimit    = argError("limit must be positive")
	ErrInvalidWindow   = argError("window must be a whole number of milliseconds, at least 1ms")
	ErrInvalidSegments = argError("segments must be positive and divide the window into whole milliseconds")
	ErrInvalidPeriod   = argError("replenishment period must be a whole number of milliseconds, at least 1ms")
	ErrInvalidTokens   = argError("tokens per period must be positive")
	ErrInvalidQueue    = argError("queue limit must not be negative, and the order must be OldestFirst or NewestFirst")
	ErrNegativePermits = argError("permit count must not be negative")
)

// ErrLimiterClosed ends a Wait queued on a limiter that was closed, and any
// call made after Close.
var ErrLimiterClosed = errors.New("prim: rate limiter closed")

// ErrQueueFull is returned by Wait when the request is refused and the local
// queue has no room for it (always with WithQueue(0, …)), or, with
// NewestFirst, when newer requests pushed it out.
var ErrQueueFull = errors.New("prim: rate limiter queue full")

// ErrLimiterState reports that the limiter's key holds a value this limiter
// cannot use (a malformed counter or state); nothing was written.
var ErrLimiterState = errors.New("prim: rate limiter state unusable")

// RateLimiters creates rate limiters on a Coordinator's client and prefix. It
// performs no I/O.
type RateLimiters struct {
	c *Coordinator
}

// RateLimiters returns the Coordinator's rate-limiter factory (the same one at
// every call; each prefixed view has its own). It sends nothing.
func (c *Coordinator) RateLimiters() *RateLimiters { return c.limiters }

// Limiter is a rate limiter made by [RateLimiters]; it implements
// [RateLimiter]. It is safe for concurrent use.
type Limiter struct {
	c    *Coordinator
	key  string // physical key
	algo Algorithm
	// limit is the permits per window (fixed, sliding) or the bucket's size.
	limit int64
	// window (fixed, sliding) or period (bucket).
	window   time.Duration
	segments int64 // sliding
	tokens   int64 // bucket: tokens per period
	cfg      limiterConfig
	st       limiterState
}

var _ RateLimiter = (*Limiter)(nil)

// Algorithm is the limiter's algorithm.
func (l *Limiter) Algorithm() Algorithm { return l.algo }

// Key is the limiter's physical key (prefix included).
func (l *Limiter) Key() string { return l.key }

// Limit is the limiter's limit: permits per window, or the bucket's size.
func (l *Limiter) Limit() int64 { return l.limit }

func validDuration(d time.Duration, base error) error {
	if d < time.Millisecond || d%time.Millisecond != 0 {
		return invalid(base, d.String())
	}
	return nil
}

func (f *RateLimiters) newLimiter(key string, algo Algorithm, limit int64, window time.Duration, opts []LimiterOption) (*Limiter, error) {
	if key == "" {
		return nil, invalid(ErrEmptyKey, "a rate limiter needs a key")
	}
	if limit <= 0 {
		return nil, invalid(ErrInvalidLimit, fmt.Sprint(limit))
	}
	var cfg limiterConfig
	for _, o := range opts {
		o(&cfg)
	}
	if !cfg.queueSet {
		cfg.queueLimit, cfg.order = limit, OldestFirst // WithQueue's default
	}
	if cfg.queueLimit < 0 || (cfg.order != OldestFirst && cfg.order != NewestFirst) {
		return nil, invalid(ErrInvalidQueue, fmt.Sprintf("limit %d, order %v", cfg.queueLimit, cfg.order))
	}
	l := &Limiter{c: f.c, key: f.c.key(key), algo: algo, limit: limit, window: window, cfg: cfg}
	l.st.init()
	return l, nil
}

// FixedWindow returns a fixed-window limiter: at most limit permits per
// window, the window starting at the first request after the previous one
// ended (one counter whose expiry is set by the request that creates it). It
// sends nothing.
func (f *RateLimiters) FixedWindow(key string, limit int64, window time.Duration, opts ...LimiterOption) (*Limiter, error) {
	if err := validDuration(window, ErrInvalidWindow); err != nil {
		return nil, err
	}
	return f.newLimiter(key, AlgoFixedWindow, limit, window, opts)
}

// SlidingWindow returns a sliding-window limiter: at most limit permits within
// any window, counted in segments (window/segments each, a whole number of
// milliseconds). It sends nothing.
func (f *RateLimiters) SlidingWindow(key string, limit int64, window time.Duration, segments int64, opts ...LimiterOption) (*Limiter, error) {
	if err := validDuration(window, ErrInvalidWindow); err != nil {
		return nil, err
	}
	if segments <= 0 || (window/time.Millisecond)%time.Duration(segments) != 0 {
		return nil, invalid(ErrInvalidSegments, fmt.Sprintf("%d segments of %v", segments, window))
	}
	l, err := f.newLimiter(key, AlgoSlidingWindow, limit, window, opts)
	if err != nil {
		return nil, err
	}
	l.segments = segments
	return l, nil
}

// TokenBucket returns a token-bucket limiter: a bucket of tokenLimit tokens,
// refilled continuously at tokensPerPeriod per period (server time). It sends
// nothing.
func (f *RateLimiters) TokenBucket(key string, tokenLimit, tokensPerPeriod int64, period time.Duration, opts ...LimiterOption) (*Limiter, error) {
	if err := validDuration(period, ErrInvalidPeriod); err != nil {
		return nil, err
	}
	if tokensPerPeriod <= 0 {
		return nil, invalid(ErrInvalidTokens, fmt.Sprint(tokensPerPeriod))
	}
	l, err := f.newLimiter(key, AlgoTokenBucket, tokenLimit, period, opts)
	if err != nil {
		return nil, err
	}
	l.tokens = tokensPerPeriod
	return l, nil
}

// limiterState is a limiter's local state: statistics, idleness, queue.
type limiterState struct {
	mu        sync.Mutex
	granted   int64
	rejected  int64
	queued    int64 // permits queued (Stats)
	room      int64 // queue room taken: max(n, 1) per queued request
	available int64
	lastUsed  time.Time
	closed    bool
	q         limiterQueue // Wait's queue (ratelimit_queue.go)
}

func (s *limiterState) init() { s.available = -1; s.lastUsed = time.Now(); s.q.init() }

// Allow makes one atomic decision for n permits on the server, with the
// server's clock: granted permits are consumed (there is no returning them).
//
// n == 0 reports availability and consumes nothing (and creates no key):
// Allowed reports that at least one permit is free, RetryAfter, when none is,
// when one will be. n larger than the limit is refused without RetryAfter and
// without an error (it can never succeed), and sends nothing; negative n is
// ErrNegativePermits (matching ErrInvalidArgument), after Close
// ErrLimiterClosed, both sending nothing.
//
// Uncertain outcomes: if ctx ends, or the connection drops, after the request
// was sent, the error matches ErrUncertain and the permits may have been
// consumed though nothing was reported granted. Allow returns by ctx's
// deadline even when the client's timeouts are longer. A request whose reply
// was lost is sent again as the client's MaxRetries allows (go-redis's
// default: 3): a resend may consume the permits a second time, so lost
// replies can only lower the grants below the limit, never raise them above
// it. A server refusal (READONLY, OOM, NOPERM…) matches ErrServerRefused and
// its class; a key of another type ErrWrongType; a malformed state
// ErrLimiterState (nothing written in either case).
func (l *Limiter) Allow(ctx context.Context, n int64) (Decision, error) {
	if n < 0 {
		return Decision{}, invalid(ErrNegativePermits, fmt.Sprint(n))
	}
	if l.isClosed() {
		return Decision{}, ErrLimiterClosed
	}
	l.begin()
	d, err := l.decide(ctx, n)
	l.end()
	l.record(d, err)
	return d, err
}

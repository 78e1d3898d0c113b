package prim

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	scriptLatchSet       = loadScript("latch_set.lua")
	scriptLatchCountDown = loadScript("latch_count_down.lua")
	scriptLatchRead      = loadScript("latch_read.lua")
)

// ErrNotFound is returned when the state an operation needs does not exist:
// JoinCountdownLatch on a key with no latch.
var ErrNotFound = errors.New("prim: not found")

// ErrLatchExists is returned by CreateCountdownLatch when the key already
// holds a latch (of any generation, complete or not). Nothing was written;
// ResetCountdownLatch replaces it.
var ErrLatchExists = errors.New("prim: a countdown latch already exists at the key")

// ErrLatchCompleted is returned by CountDown when the latch's generation has
// already reached zero: a signal never takes a count below zero. Nothing was
// written.
var ErrLatchCompleted = errors.New("prim: the countdown latch generation is already complete")

// ErrLatchState is returned by Wait, Count and JoinCountdownLatch when the
// latch hash holds a generation whose count is missing, not an integer or
// negative (written by something other than prim): the state is unusable, and
// never read as a completed latch.
var ErrLatchState = errors.New("prim: countdown latch state unusable")

// ErrInvalidCount: a countdown latch's count must be at least 0. It matches
// ErrInvalidArgument; nothing is sent.
var ErrInvalidCount = argError("latch count must be at least 0")

// How often a waiter re-reads the latch without a notification: while the
// key is tracked (an invalidation comes with any change), and while it cannot
// be (the watcher is connecting or the server refuses tracking).
const (
	latchRecheck         = 2 * time.Second
	latchRecheckUntraced = 250 * time.Millisecond
)

// CountdownLatch is one generation of a distributed countdown latch: a hash
// key holding the generation's unique id and its count. Signals (CountDown)
// decrement the count atomically; waiters complete when it reaches zero. A
// reset ([Coordinator.ResetCountdownLatch]) starts a new generation: signals
// and waits of the old one then answer -1 and false, and never touch the new
// count.
//
// The caller chooses the key's lifetime: prim sets no expiry and never deletes
// it. Keep the key until every participant is done with its generation;
// deleting it loses the generation (waiters return false). The count and
// generation follow the server's persistence and failover: an asynchronous
// failover or a restore can roll back signals or resets; this is not
// consensus across independent Redis histories.
//
// A CountdownLatch is a value of the key and the generation: it holds no
// connection and needs no Close. Its methods are safe for concurrent use.
type CountdownLatch struct {
	c   *Coordinator
	key string
	gen string
}

// Key returns the latch key as stored on the server (prefix included).
func (l *CountdownLatch) Key() string { return l.key }

// Generation returns the unique id of the latch's generation.
func (l *CountdownLatch) Generation() string { return l.gen }

// CreateCountdownLatch creates a new latch generation at key with count
// signals to wait for (count 0: already complete). If a latch exists at key it
// fails with ErrLatchExists and writes nothing. An empty key (ErrEmptyKey) or
// a negative count (ErrInvalidCount) fails before anything is sent; a key of
// another type fails with ErrWrongType, nothing written. The script is sent
// once, never resent: an outcome hidden by ctx's end or a lost reply matches
// ErrUncertain (the latch may exist; JoinCountdownLatch reads what is there).
func (c *Coordinator) CreateCountdownLatch(ctx context.Context, key string, count int64) (*CountdownLatch, error) {
	return c.setLatch(ctx, key, count, "create")
}

// ResetCountdownLatch creates a latch at key, or replaces the generation there
// (create-or-replace: a missing or deleted key starts a new latch), with a new
// unique generation of count signals. Waiters of the old generation wake and
// return false; its late signals return -1 and cannot touch the new count. A
// key-level expiry the caller set on the key is kept. Errors are those of
// CreateCountdownLatch, without ErrLatchExists; a reset is never resent either
// (a resend could overwrite a newer generation), so a lost reply matches
// ErrUncertain: the new generation may or may not be in place.
func (c *Coordinator) ResetCountdownLatch(ctx context.Context, key string, count int64) (*CountdownLatch, error) {
	return c.setLatch(ctx, key, count, "reset")
}

func (c *Coordinator) setLatch(ctx context.Context, key string, count int64, mode string) (*CountdownLatch, error) {
	if key == "" {
		return nil, invalid(ErrEmptyKey, "latch key must be non-empty")
	}
	if count < 0 {
		return nil, invalid(ErrInvalidCount, strconv.FormatInt(count, 10))
	}
	l := &CountdownLatch{c: c, key: c.key(key), gen: newOwnerToken()}
	if err := notSent(ctx, mode+" latch "+strconv.Quote(l.key)); err != nil {
		return nil, err
	}
	// Sent once, never resent: a resend after a lost reply recognises only
	// its own generation, so if another reset replaced it meanwhile the
	// resend would write this older generation over the newer one. A lost
	// reply is ErrUncertain.
	r, cerr := bounded(ctx, func(ctx context.Context) sliceResult {
		v, err := evalScript(ctx, c.client, scriptLatchSet, false, []string{l.key}, l.gen, count, mode).Slice()
		return sliceResult{v, err}
	}, nil)
	if cerr == nil && r.err != nil && uncertain(r.err) {
		cerr = r.err
	}
	if cerr != nil {
		c.m.add(ctx, c.m.uncertain, "latch", mode)
		return nil, fmt.Errorf("%w: %s latch %q: %w", ErrUncertain, mode, l.key, cerr)
	}
	if r.err != nil {
		return nil, fmt.Errorf("prim: %s latch %q: %w", mode, l.key, serverError(r.err))
	}
	status, val, err := parsePair(r.v)
	if err != nil {
		return nil, err
	}
	switch {
	case status == 1:
		return l, nil
	case status == 0:
		return nil, fmt.Errorf("%w: %q", ErrLatchExists, l.key)
	case val == "wrongtype":
		return nil, fmt.Errorf("%w: %q is not a latch (hash)", ErrWrongType, l.key)
	}
	return nil, fmt.Errorf("prim: %s latch %q: %s", mode, l.key, val)
}

type sliceResult struct {
	v   []any
	err error
}

// JoinCountdownLatch returns the current generation of the latch at key, or
// ErrNotFound when no latch state exists there. An empty key fails with
// ErrEmptyKey before anything is sent; a key of another type with
// ErrWrongType; a latch whose count is missing, not an integer or negative
// with ErrLatchState.
func (c *Coordinator) JoinCountdownLatch(ctx context.Context, key string) (*CountdownLatch, error) {
	if key == "" {
		return nil, invalid(ErrEmptyKey, "latch key must be non-empty")
	}
	k := c.key(key)
	st, err := bounded(ctx, func(ctx context.Context) latchState {
		return readLatchPrimary(ctx, c.client, k)
	}, nil)
	if err == nil {
		err = st.err
	}
	if err != nil {
		return nil, fmt.Errorf("prim: join latch %q: %w", k, serverError(err))
	}
	if st.gen == "" {
		return nil, fmt.Errorf("%w: no countdown latch at %q", ErrNotFound, k)
	}
	return &CountdownLatch{c: c, key: k, gen: st.gen}, nil
}

// latchState is what a read of the latch key found: gen "" when no latch
// exists.
type latchState struct {
	gen   string
	count int64
	err   error
}

// readLatch reads the generation and count (HMGET: a read that makes the
// server track the key when sent on a tracking connection, which is a
// dedicated connection to the key's primary).
func readLatch(ctx context.Context, p redis.Cmdable, key string) latchState {
	v, err := p.HMGet(ctx, key, "gen", "count").Result()
	if err != nil {
		return latchState{err: err}
	}
	return parseLatch(key, v)
}

// readLatchPrimary reads the generation and count through the caller's
// client on the key's primary: a script, which no read routing sends to a
// replica (Cluster ReadOnly, RouteByLatency, RouteRandomly). A plain HMGET
// there read a lagging replica: Join returned a replaced generation or
// ErrNotFound for a latch just created, Count -1 and Wait false for the
// current generation. A read is safe to resend.
func readLatchPrimary(ctx context.Context, p processor, key string) latchState {
	v, err := evalScript(ctx, p, scriptLatchRead, true, []string{key}).Slice()
	if err != nil {
		return latchState{err: err}
	}
	if len(v) != 2 {
		return latchState{err: fmt.Errorf("prim: latch %q: unexpected read reply %v", key, v)}
	}
	for i := range v {
		if b, ok := v[i].(bool); ok && !b {
			v[i] = nil // a missing field (Lua false)
		}
	}
	return parseLatch(key, v)
}

// parseLatch reads HMGET gen count's reply.
func parseLatch(key string, v []any) latchState {
	var st latchState
	st.gen, _ = v[0].(string)
	if st.gen == "" {
		return st // no latch
	}
	s, _ := v[1].(string)
	n, perr := strconv.ParseInt(s, 10, 64)
	if perr != nil || n < 0 {
		return latchState{err: fmt.Errorf("%w: latch %q: count %q", ErrLatchState, key, s)}
	}
	st.count = n
	return st
}

// CountDown signals the latch's generation once, atomically, and returns the
// remaining count: 0 when this signal completed it. It returns -1 when the
// generation was replaced (a reset) or the latch deleted, writing nothing, and
// an error matching ErrLatchCompleted when the generation had already reached
// zero (a count never goes below zero). The signal is sent once, never resent;
// if ctx ends or the reply is lost first, the error matches ErrUncertain: the
// signal may have been counted.
func (l *CountdownLatch) CountDown(ctx context.Context) (int64, error) {
	if err := notSent(ctx, "counting down latch "+strconv.Quote(l.key)); err != nil {
		return 0, err
	}
	r, cerr := bounded(ctx, func(ctx context.Context) int64Result {
		n, err := evalScript(ctx, l.c.client, scriptLatchCountDown, false, []string{l.key}, l.gen).Int64()
		return int64Result{n, err}
	}, nil)
	if cerr == nil && r.err != nil && uncertain(r.err) {
		cerr = r.err
	}
	if cerr != nil {
		l.c.m.add(ctx, l.c.m.uncertain, "latch", "count-down")
		return 0, fmt.Errorf("%w: counting down latch %q: %w", ErrUncertain, l.key, cerr)
	}
	if r.err != nil {
		return 0, fmt.Errorf("prim: count down latch %q: %w", l.key, serverError(r.err))
	}
	switch {
	case r.n >= 0:
		return r.n, nil
	case r.n == -1:
		return -1, nil
	case r.n == -2:
		return 0, fmt.Errorf("%w: %q", ErrLatchCompleted, l.key)
	}
	return 0, fmt.Errorf("%w: %q is not a latch (hash)", ErrWrongType, l.key)
}

// Count reads the generation's remaining count: -1 when it was replaced or
// the latch deleted. A count that is missing, not an integer or negative is
// ErrLatchState.
func (l *CountdownLatch) Count(ctx context.Context) (int64, error) {
	st, err := bounded(ctx, func(ctx context.Context) latchState {
		return readLatchPrimary(ctx, l.c.client, l.key)
	}, nil)
	if err == nil {
		err = st.err
	}
	if err != nil {
		if errors.Is(serverError(err), ErrWrongType) {
			return -1, nil
		}
		return 0, fmt.Errorf("prim: read latch %q: %w", l.key, serverError(err))
	}
	if st.gen != l.gen {
		return -1, nil
	}
	return st.count, nil
}

// Wait waits until the generation's count reaches zero (true), or until the
// generation was replaced or the latch deleted (false). It subscribes to the
// key's invalidations before each read of the latch, re-reads it after every
// notification and every few seconds without one; notifications are only
// hints, so one lost across a reconnect delays completion but never blocks
// it. Cancellation (ctx's end, returned as its error) stops this waiter only
// and never changes the count. Closing the Coordinator ends the wait with
// ErrClosed. A latch hash whose count is missing, not an integer or negative
// ends the wait with ErrLatchState, never true.
func (l *CountdownLatch) Wait(ctx context.Context) (bool, error) {
	c := l.c
	closed := c.ws.closedc
	group := newOwnerToken() // a queue of its own: every waiter of the latch wakes
	var (
		w  *watcher
		wt *waiter
	)
	leave := func() {
		if wt != nil {
			w.unregister(wt, false)
			wt = nil
		}
		if w != nil {
			c.releaseWatcher(w)
			w = nil
		}
	}
	defer leave()
	fail := func(err error) (bool, error) { return false, fmt.Errorf("prim: waiting for latch %q: %w", l.key, err) }
	for {
		select {
		case <-closed:
			return fail(ErrClosed)
		default:
		}
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		nw, werr := c.watcherFor(ctx, l.key)
		if errors.Is(werr, ErrClosed) {
			return fail(ErrClosed)
		}
		if nw != nil && nw == w {
			c.releaseWatcher(nw) // already held
		} else {
			leave()
			if w = nw; w != nil {
				wt = w.register(l.key, group) // registered before the read
			}
		}
		// Read on the tracking connection (the server then tracks the key for
		// this watcher) or, without one, through the client.
		var st latchState
		tracked := false
		if w != nil && w.refusal() == nil {
			if rerr := w.waitReady(ctx, closed); errors.Is(rerr, ErrClosed) {
				return fail(ErrClosed)
			} else if rerr == nil {
				// The read may outlive ctx (track then returns at once and
				// the read finishes in the background): its state comes
				// back on a channel, taken only when track returned it.
				got := make(chan latchState, 1)
				_, terr := w.track(ctx, func(ctx context.Context, cn *redis.Conn) (int64, error) {
					s := readLatch(ctx, cn, l.key)
					got <- s
					return 0, s.err
				})
				switch {
				case errors.Is(terr, ErrClosed):
					return fail(ErrClosed)
				case terr == nil:
					st, tracked = <-got, true
				case errors.Is(serverError(terr), ErrWrongType):
					return false, nil // the key holds something else now
				case errors.Is(terr, ErrLatchState):
					return fail(terr)
				}
			}
		}
		if !tracked {
			st, werr = bounded(ctx, func(ctx context.Context) latchState {
				return readLatchPrimary(ctx, c.client, l.key)
			}, nil)
			if werr == nil {
				werr = st.err
			}
			switch {
			case werr == nil:
			case errors.Is(serverError(werr), ErrWrongType):
				return false, nil
			case errors.Is(werr, ErrLatchState):
				return fail(werr)
			case ctx.Err() != nil:
				return fail(ctx.Err())
			default:
				c.logger.DebugContext(ctx, "prim: latch read failed; reading again shortly", "key", l.key, "err", werr)
				st.gen = l.gen
				st.count = -1 // unknown: wait and read again
			}
		}
		if st.gen != l.gen {
			return false, nil // replaced or deleted
		}
		if st.count == 0 {
			return true, nil
		}
		wait := latchRecheck
		if !tracked {
			wait = latchRecheckUntraced
		}
		t := time.NewTimer(wait)
		var wake chan struct{}
		if wt != nil {
			wake = wt.ch
		}
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
		case <-closed:
		}
		t.Stop()
	}
}

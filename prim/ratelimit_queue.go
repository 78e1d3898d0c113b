package prim

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// ---- rate limiters: Wait's local queue, Stats, IdleDuration, Close -----------
//
// A limiter's queue holds the Wait calls that were refused. While it is not
// empty one goroutine of the limiter serves it: it takes the head (the oldest
// or the newest request, by WithQueue's order), makes one decision for it, and
// on a grant hands the Decision to the waiting caller and goes on with the next
// head at once; on a refusal it sleeps until the RetryAfter the server computed,
// and tries again. It never polls: one decision per server-computed
// availability (and one per grant). The sleep is the RetryAfter of the last
// refusal, even if the head changed meanwhile (a newer request with
// NewestFirst, or the head's caller giving up): for a token bucket a smaller
// request could have been granted sooner, by at most that sleep. The
// goroutine exits when the queue is empty, and Close stops it.

// Backoff of the queue's goroutine when a decision gives no RetryAfter (an
// error from the server or the connection, or a refusal without RetryAfter):
// capped exponential, with jitter (half of each delay is random).
const (
	limiterBackoffBase = 10 * time.Millisecond
	limiterBackoffCap  = time.Second
)

// limiterQueue is the queue part of limiterState; limiterState.mu guards it.
type limiterQueue struct {
	list     list.List    // *limitWaiter, oldest at the front
	inflight int          // decisions in flight outside the queue (Allow, Wait's first)
	serving  bool         // the queue's goroutine runs (true whenever list is not empty)
	busy     *limitWaiter // the queued request whose decision is in flight
	served   chan struct{}
	// wake tells the queue's goroutine (buffered, 1) that the queue emptied.
	wake chan struct{}
	// ctx ends at Close: it stops the goroutine and cancels its decision.
	ctx    context.Context
	cancel context.CancelFunc
}

func (q *limiterQueue) init() {
	q.wake = make(chan struct{}, 1)
	q.ctx, q.cancel = context.WithCancel(context.Background())
}

func (q *limiterQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// limitWaiter is one queued Wait call.
type limitWaiter struct {
	ctx  context.Context
	n    int64
	el   *list.Element   // its place in the queue; nil once out of it
	done chan waitResult // buffered (1); receives at most one result
	// uncertain: a decision for it went without an answer (cut off when its
	// ctx ended, or a lost reply): it may have been granted (st.mu).
	uncertain bool
}

type waitResult struct {
	d   Decision
	err error
}

// head is the request the queue serves next; nil when the queue is empty.
// Requests whose context has ended leave the queue here (their Wait returns
// the context's error).
func (l *Limiter) head() *limitWaiter {
	for {
		w := l.peek()
		if w == nil || w.ctx.Err() == nil {
			return w
		}
		l.dequeue(w)
	}
}

// dequeue takes w out of the queue (st.mu held).
func (l *Limiter) dequeue(w *limitWaiter) {
	if w.el == nil {
		return
	}
	l.st.q.list.Remove(w.el)
	w.el = nil
	l.st.queued -= w.n
	l.st.room -= queueRoom(w.n)
	if l.st.q.list.Len() == 0 {
		l.st.lastUsed = time.Now()
	}
}

// finish takes w out of the queue and hands it its result (st.mu held).
func (l *Limiter) finish(w *limitWaiter, d Decision, err error) {
	l.dequeue(w)
	w.done <- waitResult{d, err}
}

// Wait is Allow that queues. If the local queue is empty it makes one
// decision, and returns it if granted. A refused request waits in the queue
// when the permits already queued plus n fit the queue limit (by default the
// limiter's limit, see [WithQueue]; a request for zero permits takes the room
// of one, so with no queue it is refused with ErrQueueFull like any other);
// otherwise, with OldestFirst, it is refused with ErrQueueFull, and with
// NewestFirst the oldest queued requests are pushed out to make room (their
// Wait ends with ErrQueueFull; a request whose decision is in flight cannot be
// pushed out, and if the room is still short the newcomer gets ErrQueueFull).
// With WithQueue(0, …) Wait never queues: it returns the refused Decision
// with ErrQueueFull. A request that arrives while others are queued joins the
// queue without trying first.
//
// A queued request sleeps until the time the server computed that it can
// succeed (Decision.RetryAfter), then tries again: it does not poll. When a
// decision gives no RetryAfter (an error: connection, timeout, failover; the
// queue keeps the request and retries), the retries back off exponentially
// with jitter, from 10ms up to 1s between attempts. Errors that retrying cannot
// cure (ErrLimiterState, ErrInvalidArgument, ErrWrongType, ErrNoPermission) end
// the request at the head of the queue with that error. The first decision's
// error, before the request is queued, is returned as Allow returns it.
//
// Wait ends with ctx's error (wrapped: errors.Is(err, context.Canceled) or
// context.DeadlineExceeded holds) when ctx ends first, and the request leaves
// the queue at once. If the request's decision was in flight when ctx ended
// (the decision is sent under ctx, so ending ctx cuts it off), the server may
// have granted it: those permits are consumed and the error matches
// ErrUncertain as well as ctx's error (a request that was only waiting gets
// ctx's error alone); Stats counts the request as granted when the grant's reply arrived,
// and in neither count when the reply was lost (prim cannot know). Wait ends with
// ErrLimiterClosed when the limiter is closed, and fails with it after Close.
// Negative n is ErrNegativePermits (nothing sent); n larger than the limit is
// answered as Allow answers it (not allowed, no RetryAfter, no error) and is
// never queued. n == 0 waits (queued like any request, taking one permit's
// room in the queue) until a permit is available, and consumes none.
//
// The order is local to this limiter: other processes, other limiters on the
// same key, and local Allow calls can take permits ahead of queued requests.
func (l *Limiter) Wait(ctx context.Context, n int64) (Decision, error) {
	if n < 0 {
		return Decision{}, invalid(ErrNegativePermits, fmt.Sprint(n))
	}
	s := &l.st
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return Decision{}, ErrLimiterClosed
	}
	if n > l.limit {
		s.mu.Unlock()
		return l.Allow(ctx, n)
	}
	refused, tried := Decision{Limit: l.limit}, false
	if s.q.list.Len() == 0 {
		s.q.inflight++
		s.mu.Unlock()
		d, err := l.decide(ctx, n)
		s.mu.Lock()
		s.q.inflight--
		s.lastUsed = time.Now()
		if err != nil || d.Allowed {
			s.mu.Unlock()
			l.record(d, err)
			return d, err
		}
		if d.served {
			s.available = d.Remaining
		}
		refused, tried = d, true
		if s.closed {
			s.mu.Unlock()
			return d, ErrLimiterClosed
		}
	}
	if err := ctx.Err(); err != nil {
		s.mu.Unlock()
		return refused, fmt.Errorf("prim: rate limiter wait: %w", err)
	}
	if !l.makeRoom(n) {
		s.rejected++
		s.lastUsed = time.Now()
		s.mu.Unlock()
		return refused, ErrQueueFull
	}
	w := &limitWaiter{ctx: ctx, n: n, done: make(chan waitResult, 1)}
	w.el = s.q.list.PushBack(w)
	s.queued += n
	s.room += queueRoom(n)
	if !s.q.serving {
		s.q.serving = true
		s.q.served = make(chan struct{})
		var delay time.Duration
		if tried {
			delay = retryDelay(refused, 0)
		}
		go l.serve(s.q.served, delay)
	}
	s.mu.Unlock()

	select {
	case r := <-w.done:
		return r.d, r.err
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case r := <-w.done: // answered as ctx ended: the answer stands
		return r.d, r.err
	default:
	}
	inFlight := s.q.busy == w || w.uncertain // a decision was sent unanswered: it may have been granted
	if w.el != nil {
		l.dequeue(w)
		if s.q.list.Len() == 0 {
			s.q.signal() // the goroutine exits now, not at its next wake
		}
	}
	s.lastUsed = time.Now()
	if inFlight {
		return Decision{Limit: l.limit}, fmt.Errorf("%w: rate limiter wait: its decision was in flight: %w", ErrUncertain, ctx.Err())
	}
	return Decision{Limit: l.limit}, fmt.Errorf("prim: rate limiter wait: %w", ctx.Err())
}

// queueRoom is the room a request for n permits takes in the queue: n, and
// one for n == 0 (a request waits like any other, so it counts against the
// limit).
func queueRoom(n int64) int64 { return max(n, 1) }

// makeRoom reports whether a request for n more permits fits the queue,
// pushing out the oldest requests with NewestFirst (st.mu held).
func (l *Limiter) makeRoom(n int64) bool {
	s := &l.st
	limit := l.cfg.queueLimit
	need := queueRoom(n)
	if s.room+need <= limit {
		return true
	}
	if l.cfg.order != NewestFirst || need > limit {
		return false
	}
	// The request in flight (the head the goroutine serves) cannot be pushed
	// out: its permits may be granted any moment.
	var movable int64
	busy := l.busy()
	for e := s.q.list.Front(); e != nil; e = e.Next() {
		if w := e.Value.(*limitWaiter); w != busy {
			movable += queueRoom(w.n)
		}
	}
	if s.room-movable+need > limit {
		return false
	}
	for e := s.q.list.Front(); e != nil && s.room+need > limit; {
		next := e.Next()
		if w := e.Value.(*limitWaiter); w != busy {
			s.rejected++
			l.finish(w, Decision{Limit: l.limit}, ErrQueueFull)
		}
		e = next
	}
	return true
}

// busy is the queued request whose decision is in flight, if any (st.mu
// held).
func (l *Limiter) busy() *limitWaiter { return l.st.q.busy }

// peek is the head of the queue as it stands (st.mu held).
func (l *Limiter) peek() *limitWaiter {
	e := l.st.q.list.Front()
	if l.cfg.order == NewestFirst {
		e = l.st.q.list.Back()
	}
	if e == nil {
		return nil
	}
	return e.Value.(*limitWaiter)
}

// serve is the queue's goroutine: it runs while the queue is not empty and
// the limiter open, first sleeping delay (the RetryAfter of the refusal that
// queued the first request).
func (l *Limiter) serve(served chan struct{}, delay time.Duration) {
	defer close(served)
	s := &l.st
	failures := 0
	for {
		if delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-s.q.wake:
			case <-s.q.ctx.Done():
			}
			t.Stop()
		}
		s.mu.Lock()
		select { // a change before this point is seen below
		case <-s.q.wake:
		default:
		}
		w := l.head()
		if s.closed || w == nil {
			s.q.serving = false
			s.mu.Unlock()
			return
		}
		s.q.busy = w
		s.mu.Unlock()

		ctx, cancel := context.WithCancel(w.ctx)
		stop := context.AfterFunc(s.q.ctx, cancel)
		d, err := l.decide(ctx, w.n)
		stop()
		cancel()

		s.mu.Lock()
		s.lastUsed = time.Now()
		if errors.Is(err, ErrUncertain) {
			w.uncertain = true
		}
		if !(err == nil && d.Allowed) {
			s.q.busy = nil
		}
		switch {
		case err == nil && d.Allowed:
			// Granted, and counted before the caller hears of it. If w's
			// caller gave up (ctx, Close) meanwhile, the permits are
			// consumed all the same: counted as granted.
			s.mu.Unlock()
			l.record(d, nil)
			s.mu.Lock()
			s.q.busy = nil // not pushed out before it hears of its grant
			if w.el != nil {
				l.finish(w, d, nil)
			}
			s.mu.Unlock()
			failures, delay = 0, 0
			continue
		case err == nil && d.HasRetryAfter:
			if d.served {
				s.available = d.Remaining
			}
			failures, delay = 0, retryDelay(d, 0)
		case w.ctx.Err() != nil || s.closed:
			// The decision was cancelled with its request: next head.
			l.dequeue(w)
			delay = 0
		case err != nil && permanent(err):
			if w.el != nil {
				l.finish(w, d, err)
			}
			delay = 0
		default:
			if err == nil && d.served {
				s.available = d.Remaining
			}
			failures++
			delay = retryDelay(Decision{}, failures)
		}
		s.mu.Unlock()
	}
}

// retryDelay is how long the queue sleeps after a refusal: the server's
// RetryAfter (at least 1ms), or without one the backoff after failures
// consecutive failures.
func retryDelay(d Decision, failures int) time.Duration {
	if d.HasRetryAfter {
		return max(d.RetryAfter, time.Millisecond)
	}
	b := limiterBackoffBase << min(max(failures-1, 0), 10)
	b = min(b, limiterBackoffCap)
	return b/2 + rand.N(b/2+1)
}

// permanent reports errors that retrying does not cure: a bad state or
// argument, a key of another type (the scripts report it as a reply, not as a
// WRONGTYPE error), an ACL refusal (NOPERM, or "ACL failure in script" from a
// script on Redis 7+; serverError maps both to ErrNoPermission).
func permanent(err error) bool {
	return errors.Is(err, ErrLimiterState) || errors.Is(err, ErrInvalidArgument) ||
		errors.Is(err, ErrWrongType) || errors.Is(err, ErrNoPermission)
}

// begin counts a decision in flight outside the queue (IdleDuration is zero
// meanwhile).
func (l *Limiter) begin() {
	l.st.mu.Lock()
	defer l.st.mu.Unlock()
	l.st.q.inflight++
}

// end ends what begin began.
func (l *Limiter) end() {
	l.st.mu.Lock()
	defer l.st.mu.Unlock()
	l.st.q.inflight--
	l.st.lastUsed = time.Now()
}

// Stats reports this limiter's local statistics.
func (l *Limiter) Stats() LimiterStats {
	l.st.mu.Lock()
	defer l.st.mu.Unlock()
	return LimiterStats{Granted: l.st.granted, Rejected: l.st.rejected, QueuedPermits: l.st.queued, Available: l.st.available}
}

// IdleDuration is the time since this limiter last made a decision or had a
// request queued: zero while a Wait is queued or a decision (Allow's, Wait's)
// is in flight.
// The state on the server is shared and stays; only this local limiter is
// idle (a cache of limiters can Close and forget it).
func (l *Limiter) IdleDuration() time.Duration {
	l.st.mu.Lock()
	defer l.st.mu.Unlock()
	if l.st.q.list.Len() > 0 || l.st.q.inflight > 0 {
		return 0
	}
	return time.Since(l.st.lastUsed)
}

// Close ends every queued Wait with ErrLimiterClosed, makes later Allow and
// Wait calls fail with it, and stops the queue's goroutine (cancelling a
// decision in flight: the server may have granted it; those permits are
// consumed). It returns once the goroutine has stopped. It sends nothing; the
// state on the server stays. Idempotent.
func (l *Limiter) Close() error {
	s := &l.st
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		s.q.cancel()
		for e := s.q.list.Front(); e != nil; {
			next := e.Next()
			l.finish(e.Value.(*limitWaiter), Decision{Limit: l.limit}, ErrLimiterClosed)
			e = next
		}
	}
	served := s.q.served
	s.mu.Unlock()
	if served != nil {
		<-served
	}
	return nil
}

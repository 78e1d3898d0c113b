package mutants

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/scenarios"
)

func init() { scenarios.RegisterImpl(WaiterIgnoresDeadline{}) }

// WaiterIgnoresDeadline is prim's fenced lock with a waiting acquisition of
// its own that, like prim's, sleeps on client-side-tracking invalidations of
// the lease key between attempts, but never wakes at the holder's deadline
// (prim also wakes at the lease's PTTL): a holder that dies without releasing
// leaves its key to expire, and an expiring key sends no invalidation until a
// command touches it, so with active expiry off its waiters sleep on.
type WaiterIgnoresDeadline struct{}

// Name implements scenarios.LockImpl.
func (WaiterIgnoresDeadline) Name() string { return "mutant-waiter-ignores-deadline" }

// Fenced implements scenarios.LockImpl.
func (WaiterIgnoresDeadline) Fenced() bool { return true }

// TryAcquire implements scenarios.LockImpl.
func (WaiterIgnoresDeadline) TryAcquire(ctx context.Context, c redis.UniversalClient, key string, ttl time.Duration) (scenarios.Held, error) {
	return primAcquire(ctx, c, key, ttl)
}

// Waiting implements scenarios.Waiter.
func (WaiterIgnoresDeadline) Waiting(*slog.Logger) scenarios.Waiting {
	return &invalidationWaiting{watchers: map[string]*invalidations{}}
}

// invalidationWaiting keeps one invalidation watcher per server node.
type invalidationWaiting struct {
	mu       sync.Mutex
	watchers map[string]*invalidations
	closed   bool
}

var errWaitingClosed = errors.New("mutants: waiting closed")

// Acquire implements scenarios.Waiting: attempt; when contended, read the
// lease key on the tracking connection (so the server tracks it) and sleep
// until an invalidation, then attempt again. The bug: no timer at the
// holder's deadline.
func (w *invalidationWaiting) Acquire(ctx context.Context, c redis.UniversalClient, key string, ttl time.Duration) (scenarios.Held, error) {
	lease := "{" + key + "}:lease"
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		iv, err := w.watcher(ctx, c, lease)
		if err != nil {
			return nil, err
		}
		// Taken before the attempt, so no invalidation after it is missed.
		wake := iv.wakeup()
		h, err := primAcquire(ctx, c, key, ttl)
		if !errors.Is(err, scenarios.ErrContended) {
			return h, err
		}
		gone, err := iv.track(ctx, lease)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		if gone {
			continue // released or expired since the attempt: try again now
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Close implements scenarios.Waiting.
func (w *invalidationWaiting) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	for _, iv := range w.watchers {
		iv.close()
	}
}

// watcher returns the watcher of the node that holds key, starting it (and
// waiting for its subscription) on first use.
func (w *invalidationWaiting) watcher(ctx context.Context, c redis.UniversalClient, key string) (*invalidations, error) {
	var node *redis.Client
	switch c := c.(type) {
	case *redis.Client:
		node = c
	case *redis.ClusterClient:
		n, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		node = n
	default:
		return nil, fmt.Errorf("mutants: cannot wait on a %T", c)
	}
	addr := node.Options().Addr
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil, errWaitingClosed
	}
	iv := w.watchers[addr]
	if iv == nil {
		iv = newInvalidations(node)
		w.watchers[addr] = iv
	}
	w.mu.Unlock()
	select {
	case <-iv.ready:
		return iv, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// invalidations is a RESP2 Pub/Sub connection subscribed to
// __redis__:invalidate and a tracking connection redirecting its
// invalidations there (CLIENT TRACKING ON REDIRECT), as prim's watcher: every
// invalidation, and every reconnection of the Pub/Sub connection, wakes every
// waiter on the node.
type invalidations struct {
	ps, tr  *redis.Client
	pubsub  *redis.PubSub
	psID    atomic.Int64  // the Pub/Sub connection's id
	trackTo atomic.Int64  // the id the tracking connection redirects to (0: none)
	ready   chan struct{} // closed once subscribed
	done    chan struct{} // closed by close
	trMu    sync.Mutex

	mu   sync.Mutex
	wake chan struct{} // closed and replaced by each wake-up
}

func newInvalidations(node *redis.Client) *invalidations {
	iv := &invalidations{ready: make(chan struct{}), done: make(chan struct{}), wake: make(chan struct{})}
	base := *node.Options()
	base.Protocol, base.PoolSize, base.MinIdleConns, base.MaxRetries, base.DisableIdentity = 2, 1, 0, -1, true
	psOpts := base
	psOpts.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		id, err := cn.ClientID(ctx).Result()
		if err != nil {
			return err
		}
		iv.psID.Store(id)
		iv.wakeAll() // what was tracked towards the old connection is lost
		return nil
	}
	trOpts := base
	trOpts.OnConnect = func(context.Context, *redis.Conn) error {
		iv.trackTo.Store(0) // a new connection tracks nothing
		return nil
	}
	iv.ps, iv.tr = redis.NewClient(&psOpts), redis.NewClient(&trOpts)
	iv.pubsub = iv.ps.Subscribe(context.Background())
	go iv.run()
	return iv
}

func (iv *invalidations) run() {
	ctx := context.Background()
	for {
		if err := iv.pubsub.Subscribe(ctx, "__redis__:invalidate"); err == nil {
			if _, err := iv.pubsub.Receive(ctx); err == nil {
				break
			}
		}
		select {
		case <-iv.done:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	close(iv.ready)
	for range iv.pubsub.Channel() {
		iv.wakeAll()
	}
}

// wakeup returns the channel the next wake-up closes.
func (iv *invalidations) wakeup() <-chan struct{} {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	return iv.wake
}

func (iv *invalidations) wakeAll() {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	close(iv.wake)
	iv.wake = make(chan struct{})
}

// track reads key on the tracking connection, so the server sends an
// invalidation when it changes or is removed; gone when it no longer exists.
func (iv *invalidations) track(ctx context.Context, key string) (gone bool, err error) {
	iv.trMu.Lock()
	defer iv.trMu.Unlock()
	if id := iv.psID.Load(); iv.trackTo.Load() != id {
		if err := iv.tr.Do(ctx, "CLIENT", "TRACKING", "ON", "REDIRECT", id).Err(); err != nil {
			return false, err
		}
		iv.trackTo.Store(id)
	}
	// The reply's ttl is ignored: that is the bug.
	ms, err := iv.tr.Do(ctx, "PTTL", key).Int64()
	return ms == -2, err
}

func (iv *invalidations) close() {
	close(iv.done)
	iv.pubsub.Close()
	iv.ps.Close()
	iv.tr.Close()
}

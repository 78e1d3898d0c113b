package prim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Invalidation-driven waiting.
//
// A watcher per node (per Coordinator) holds two dedicated RESP2 connections
// made from a copy of the node's client options: a Pub/Sub connection subscribed
// to __redis__:invalidate, read continuously by its own goroutine, and a
// tracking connection with CLIENT TRACKING ON REDIRECT <that connection's id>.
// A waiter whose acquisition script found the key held registers for the key,
// then reads it (PTTL) on the tracking connection — which makes the server
// track it — and sleeps only if that read still finds the key: a release or
// expiry after that read leaves an invalidation queued for the waiter, one
// before it makes the waiter retry at once. Notifications are hints: only the
// script grants ownership.
//
// Why RESP2 with REDIRECT rather than RESP3 pushes: go-redis reads RESP3 push
// notifications only when a command is read on that connection (no background
// reader), so an idle waiter would not see its wake-up; a Pub/Sub connection has
// a reader goroutine. The watcher's connections are its own, so this works
// whatever protocol the caller's client uses.
//
// Lost notifications: when the Pub/Sub connection reconnects (its id changes),
// when the tracking connection fails, when a keep-alive PING on it fails, or on
// a null (flush) invalidation, every waiter on the node is woken to check
// again. The keep-alive runs only while someone waits: one PING per interval per
// node, whatever the number of waiters.
type watcher struct {
	c    *Coordinator
	addr string
	node *redis.Client // the caller's node client (scripts go through the caller's client)

	ps       *redis.Client // dedicated: the Pub/Sub connection
	tr       *redis.Client // dedicated: the tracking connection
	pubsub   *redis.PubSub
	cancel   context.CancelFunc
	done     chan struct{}
	psID     int64         // current Pub/Sub connection id (mu)
	psEpoch  int64         // bumped on every Pub/Sub (re)connect (mu)
	subEpoch int64         // the psEpoch whose SUBSCRIBE the server confirmed (mu)
	readyc   chan struct{} // closed while subEpoch == psEpoch > 0 (mu)

	mu      sync.Mutex
	waiters map[string]map[*waiter]struct{}
	nwait   int

	trMu    sync.Mutex // serialises use of the tracking connection
	trConn  *redis.Conn
	trEpoch int64 // psEpoch the tracking connection redirects to
	closed  bool
}

type waiter struct{ ch chan struct{} }

var errSubscribing = errors.New("prim: invalidation subscription not confirmed yet")

func (w *waiter) wake() {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// keepAlive is how often the tracking connection is checked while waiters exist.
const keepAlive = time.Second

func newWatcher(c *Coordinator, node *redis.Client) *watcher {
	w := &watcher{c: c, node: node, addr: node.Options().Addr, waiters: map[string]map[*waiter]struct{}{},
		done: make(chan struct{}), readyc: make(chan struct{})}
	base := *node.Options()
	base.Protocol = 2
	base.PoolSize = 1
	base.MinIdleConns = 0
	base.MaxRetries = -1
	base.DisableIdentity = true
	if base.ReadTimeout <= 0 || base.ReadTimeout > 3*time.Second {
		base.ReadTimeout = 3 * time.Second
	}
	psOpts := base
	psOpts.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		id, err := cn.ClientID(ctx).Result()
		if err != nil {
			return err
		}
		w.mu.Lock()
		w.psID = id
		w.psEpoch++
		w.readyLocked()
		w.mu.Unlock()
		w.wakeAll() // whatever was tracked towards the old connection is lost
		return nil
	}
	w.ps = redis.NewClient(&psOpts)
	trOpts := base
	w.tr = redis.NewClient(&trOpts)
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	w.pubsub = w.ps.Subscribe(ctx) // no connection until the first subscription
	go w.run(ctx)
	return w
}

// run subscribes, reads invalidations and keeps the tracking connection checked.
func (w *watcher) run(ctx context.Context) {
	defer close(w.done)
	go w.keepAliveLoop(ctx)
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		if err := w.pubsub.Subscribe(ctx, "__redis__:invalidate"); err != nil {
			w.c.logger.Debug("prim: invalidation subscription failed; retrying", "node", w.addr, "err", err)
			sleepCtx(ctx, backoff)
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		for ctx.Err() == nil {
			msg, err := w.pubsub.ReceiveTimeout(ctx, 2*keepAlive)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				var ne interface{ Timeout() bool }
				if errors.As(err, &ne) && ne.Timeout() {
					_ = w.pubsub.Ping(ctx) // keeps an idle subscription checked
					continue
				}
				// A null payload (FLUSHALL/FLUSHDB) reaches here as an unsupported
				// payload; a broken connection too. Either way: everyone re-checks.
				w.wakeAll()
				if !strings.Contains(err.Error(), "unsupported pubsub message payload") {
					sleepCtx(ctx, backoff)
					break
				}
				continue
			}
			if sub, ok := msg.(*redis.Subscription); ok && sub.Kind == "subscribe" {
				// Invalidations reach a RESP2 redirect target only once it is
				// subscribed; whoever tracked a key before this may have missed one.
				w.mu.Lock()
				w.subEpoch = w.psEpoch
				w.readyLocked()
				w.mu.Unlock()
				w.wakeAll()
				continue
			}
			if m, ok := msg.(*redis.Message); ok && m.Channel == "__redis__:invalidate" {
				if m.PayloadSlice == nil && m.Payload == "" {
					w.wakeAll()
				}
				for _, k := range m.PayloadSlice {
					w.wakeKey(k)
				}
				if m.Payload != "" {
					w.wakeKey(m.Payload)
				}
			}
		}
	}
}

func (w *watcher) keepAliveLoop(ctx context.Context) {
	t := time.NewTicker(keepAlive)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.mu.Lock()
		n := w.nwait
		w.mu.Unlock()
		if n == 0 {
			continue
		}
		w.trMu.Lock()
		if w.trConn != nil {
			pctx, cancel := context.WithTimeout(ctx, keepAlive)
			err := w.trConn.Ping(pctx).Err()
			cancel()
			if err != nil {
				w.resetTrackingLocked()
				w.trMu.Unlock()
				w.wakeAll()
				continue
			}
		}
		w.trMu.Unlock()
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (w *watcher) register(key string) *waiter {
	wt := &waiter{ch: make(chan struct{}, 1)}
	w.mu.Lock()
	m := w.waiters[key]
	if m == nil {
		m = map[*waiter]struct{}{}
		w.waiters[key] = m
	}
	m[wt] = struct{}{}
	w.nwait++
	w.mu.Unlock()
	return wt
}

func (w *watcher) unregister(key string, wt *waiter) {
	w.mu.Lock()
	if m := w.waiters[key]; m != nil {
		if _, ok := m[wt]; ok {
			delete(m, wt)
			w.nwait--
		}
		if len(m) == 0 {
			delete(w.waiters, key)
		}
	}
	w.mu.Unlock()
}

func (w *watcher) wakeKey(key string) {
	w.mu.Lock()
	for wt := range w.waiters[key] {
		wt.wake()
	}
	w.mu.Unlock()
}

func (w *watcher) wakeAll() {
	w.mu.Lock()
	for _, m := range w.waiters {
		for wt := range m {
			wt.wake()
		}
	}
	w.mu.Unlock()
}

func (w *watcher) resetTrackingLocked() {
	if w.trConn != nil {
		_ = w.trConn.Close()
		w.trConn = nil
	}
}

// track makes the server track key for this watcher by reading it with the
// given read command on the tracking connection, and returns the reply. The
// Pub/Sub connection must be up (so the REDIRECT target exists).
func (w *watcher) track(ctx context.Context, read func(ctx context.Context, c *redis.Conn) (int64, error)) (int64, error) {
	w.trMu.Lock()
	defer w.trMu.Unlock()
	if w.closed {
		return 0, ErrClosed
	}
	w.mu.Lock()
	id, epoch, sub := w.psID, w.psEpoch, w.subEpoch
	w.mu.Unlock()
	if epoch == 0 || sub != epoch {
		return 0, errSubscribing
	}
	if w.trConn != nil && w.trEpoch != epoch {
		w.resetTrackingLocked() // the redirect target changed
	}
	if w.trConn == nil {
		cn := w.tr.Conn()
		if err := cn.Do(ctx, "CLIENT", "TRACKING", "ON", "REDIRECT", id).Err(); err != nil {
			_ = cn.Close()
			return 0, fmt.Errorf("prim: CLIENT TRACKING ON REDIRECT %d: %w", id, err)
		}
		w.trConn, w.trEpoch = cn, epoch
	}
	v, err := read(ctx, w.trConn)
	if err != nil && uncertain(err) {
		w.resetTrackingLocked()
	}
	return v, err
}

// readyLocked makes readyc reflect whether the current Pub/Sub connection's
// subscription is confirmed. Called with mu held after either epoch changes.
func (w *watcher) readyLocked() {
	ready := w.psEpoch > 0 && w.subEpoch == w.psEpoch
	select {
	case <-w.readyc:
		if !ready {
			w.readyc = make(chan struct{})
		}
	default:
		if ready {
			close(w.readyc)
		}
	}
}

// waitReady waits (bounded) until the Pub/Sub connection is subscribed, or
// until closed is closed (ErrClosed).
func (w *watcher) waitReady(ctx context.Context, closed <-chan struct{}) error {
	w.mu.Lock()
	ready := w.readyc
	w.mu.Unlock()
	select {
	case <-ready:
		return nil
	default:
	}
	t := time.NewTimer(2 * time.Second)
	defer t.Stop()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-closed:
		return ErrClosed
	case <-t.C:
		return errors.New("prim: invalidation subscription did not connect in 2s")
	}
}

func (w *watcher) close() {
	w.trMu.Lock()
	w.closed = true
	w.resetTrackingLocked()
	w.trMu.Unlock()
	w.cancel()
	_ = w.pubsub.Close()
	<-w.done
	_ = w.ps.Close()
	_ = w.tr.Close()
}

// watchers is the Coordinator's per-node watcher set, shared by its prefixed views.
type watchers struct {
	mu      sync.Mutex
	byAddr  map[string]*watcher
	closed  bool
	closedc chan struct{} // closed by Close: ends every wait in progress
}

func newWatchers() *watchers {
	return &watchers{byAddr: map[string]*watcher{}, closedc: make(chan struct{})}
}

// watcherFor returns the watcher of the node that serves key, starting it on
// first use. It does not wait for its subscription (see waitReady).
func (c *Coordinator) watcherFor(ctx context.Context, key string) (*watcher, error) {
	node, err := c.fences.nodeFor(ctx, key)
	if err != nil {
		return nil, err
	}
	addr := node.Options().Addr
	c.ws.mu.Lock()
	defer c.ws.mu.Unlock()
	if c.ws.closed {
		return nil, ErrClosed
	}
	w := c.ws.byAddr[addr]
	if w == nil {
		w = newWatcher(c, node)
		c.ws.byAddr[addr] = w
	}
	return w, nil
}

// Close stops the background watchers (the connections waiting acquisitions
// use). A Coordinator and the views WithPrefix made from it share them, so Close
// on any of them ends waiting for all of them. Waits in progress end promptly
// with an error matching ErrClosed (an acquisition script already in flight is
// let finish, and returns the lock if it took it); later waiting calls fail
// with ErrClosed before any I/O. Immediate acquisitions and held handles keep
// working, and the caller's client stays open. Safe to call more than once.
func (c *Coordinator) Close() error {
	c.ws.mu.Lock()
	if c.ws.closed {
		c.ws.mu.Unlock()
		return nil
	}
	c.ws.closed = true
	close(c.ws.closedc)
	ws := c.ws.byAddr
	c.ws.byAddr = nil
	c.ws.mu.Unlock()
	for _, w := range ws {
		w.close()
	}
	return nil
}

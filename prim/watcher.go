package prim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim/internal/knobs"
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
// node, whatever the number of waiters. A reply to it, even a refusal, shows
// the connection alive. The Pub/Sub connection is checked by repeating its
// SUBSCRIBE after a quiet spell, so that any error reply on it is the
// subscription's.
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
	waiters map[string]map[string][]*waiter // key -> group -> FIFO queue
	nwait   int
	refused error // the server refused the subscription (mu); waiters re-check on a timer
	// refusedc is closed while refused is set (mu): a wait for the
	// subscription ends as soon as the server refuses it.
	refusedc chan struct{}
	users    int       // waits holding this watcher (watchers.mu)
	idle     time.Time // when users last fell to 0 (watchers.mu)

	// trLock serialises use of the tracking connection (a one-slot
	// channel, so that a caller waits for it only as long as its context
	// allows: a read stalled on a silent connection, which go-redis's
	// defaults leave to the read timeout whatever the context says, holds
	// it for seconds). What it guards is said "(trLock)" below.
	trLock  chan struct{}
	trConn  *redis.Conn
	trEpoch int64 // psEpoch the tracking connection redirects to
	closed  atomic.Bool
	// trRefused is the server's refusal of CLIENT TRACKING (trLock): an ACL
	// without it, or a server without client tracking. Waiters re-check on a
	// timer meanwhile, and CLIENT TRACKING is sent again only from
	// trRetryAt, with a back-off doubling from 50ms (trBackoff) to
	// maxRefusedBackoff.
	trRefused error
	trRetryAt time.Time
	trBackoff time.Duration
	// pingRefused: the server refused the keep-alive's PING (trLock); the
	// keep-alive sends CLIENT ID instead.
	pingRefused bool
}

// waiter is one waiting acquisition registered with a watcher. Waiters for the
// same lock (the same key and, for hash leases, field: the same group) form a
// FIFO queue: only its head is woken by invalidations, lost tracking and its
// holder's deadline, and attempts; the others sleep until they become head.
// When the head leaves, the next one becomes head and is woken; held says the
// head left holding the lock, so the key is known to be taken and the new head
// only needs to track it. So one hand-off costs the same number of commands
// whatever the number of waiters in the process.
type waiter struct {
	ch         chan struct{}
	key, group string
	head, held bool // under watcher.mu
}

var errSubscribing = errors.New("prim: invalidation subscription not confirmed yet")

// errTrackingRefused marks a tracking read not sent because the server
// refused CLIENT TRACKING (logged once by the watcher).
var errTrackingRefused = errors.New("prim: CLIENT TRACKING refused")

func (w *waiter) wake() {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// keepAlive is how often the tracking connection is checked while waiters
// exist, and how long a check may take.
const keepAlive = time.Second

func newWatcher(c *Coordinator, node *redis.Client) *watcher {
	w := &watcher{c: c, node: node, addr: node.Options().Addr, waiters: map[string]map[string][]*waiter{},
		done: make(chan struct{}), readyc: make(chan struct{}), refusedc: make(chan struct{}), idle: time.Now(),
		trLock: make(chan struct{}, 1)}
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
	refusedBackoff := 50 * time.Millisecond // grows until a subscription is confirmed
	// refused says the server's refusal and waits, longer each time, before
	// the next try; waiters re-check on a timer meanwhile.
	refused := func(err error) {
		w.refuse(ctx, err)
		sleepCtx(ctx, refusedBackoff)
		refusedBackoff = min(2*refusedBackoff, maxRefusedBackoff)
	}
	for ctx.Err() == nil {
		if err := w.pubsub.Subscribe(ctx, "__redis__:invalidate"); err != nil {
			var re redis.Error
			if errors.As(err, &re) {
				// The server refused the connection's set-up (NOPERM on
				// CLIENT ID: a user without prim.ACLWaiting): as a refused
				// SUBSCRIBE, waiters re-check on a timer, and it is said.
				refused(err)
				continue
			}
			w.c.logger.Debug("prim: invalidation subscription failed; retrying", "node", w.addr, "err", err)
			sleepCtx(ctx, backoff)
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		// awaiting: a keep-alive SUBSCRIBE was sent and nothing has come
		// back since.
		awaiting := false
		for ctx.Err() == nil {
			msg, err := w.pubsub.ReceiveTimeout(ctx, 2*keepAlive)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				var ne interface{ Timeout() bool }
				if errors.As(err, &ne) && ne.Timeout() {
					if awaiting {
						// The keep-alive SUBSCRIBE got no confirmation in
						// 2×keepAlive: the connection is open but silent (a
						// stalled link, a half-dead peer), and invalidations
						// sent on it are lost. A lost connection: replace it,
						// and every waiter of the node re-checks.
						w.c.logger.Warn("prim: invalidation connection silent (no confirmation of its SUBSCRIBE); reconnecting, waiters re-check",
							"node", w.addr, "after", 2*keepAlive)
						w.c.m.degradedAdd(ctx, "pubsub-silent")
						w.replacePubSub(ctx)
						w.wakeAll()
						break
					}
					// Keeps an idle subscription checked: SUBSCRIBE again, which
					// the subscription needs anyway, and whose refusal is a
					// refused subscription. (A PING needs +ping as well, and
					// its refusal could not be told from a refused SUBSCRIBE.)
					// A write error shows in the next receive; no
					// confirmation by the next spell's end, a silent
					// connection.
					_ = w.pubsub.Subscribe(ctx, "__redis__:invalidate")
					awaiting = true
					continue
				}
				// A null payload (FLUSHALL/FLUSHDB) reaches here as an unsupported
				// payload; a broken connection or a refusal too. Either way:
				// everyone re-checks.
				w.wakeAll()
				var re redis.Error
				if errors.As(err, &re) {
					// The server refused SUBSCRIBE (NOPERM: an ACL user without
					// channel permission, Redis 7's default for new users). It
					// will go on refusing: back off, and let waiters re-check on
					// a timer meanwhile.
					refused(err)
					break
				}
				if !strings.Contains(err.Error(), "unsupported pubsub message payload") {
					sleepCtx(ctx, backoff)
					break
				}
				continue
			}
			awaiting = false // the connection answered
			if sub, ok := msg.(*redis.Subscription); ok && sub.Kind == "subscribe" {
				// Invalidations reach a RESP2 redirect target only once it is
				// subscribed; whoever tracked a key before this may have missed one.
				// A confirmation on a connection already subscribed (the
				// keep-alive's) loses nothing: no one to wake.
				w.mu.Lock()
				fresh := w.subEpoch != w.psEpoch
				w.subEpoch = w.psEpoch
				w.readyLocked()
				wasRefused := w.refused
				if w.refused != nil {
					w.refusedc = make(chan struct{})
				}
				w.refused = nil
				w.mu.Unlock()
				if wasRefused != nil {
					w.c.logger.Info("prim: invalidation subscription accepted; waiters on this node wait on invalidations again", "node", w.addr)
				}
				refusedBackoff = 50 * time.Millisecond
				if fresh || wasRefused != nil {
					w.wakeAll()
				}
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

// replacePubSub closes the current Pub/Sub connection and starts a new
// PubSub (no connection until its first subscription, which run sends next).
// Until that one is confirmed the watcher is not ready, so no read is
// tracked with a redirect to the dead connection. Only run calls it; close
// reads w.pubsub under mu.
func (w *watcher) replacePubSub(ctx context.Context) {
	w.mu.Lock()
	old := w.pubsub
	w.pubsub = w.ps.Subscribe(ctx)
	w.subEpoch = 0
	w.readyLocked()
	w.mu.Unlock()
	_ = old.Close()
}

// maxRefusedBackoff bounds the wait between subscriptions the server refuses.
const maxRefusedBackoff = 30 * time.Second

// refuse records that the server refused the subscription: once per episode a
// Warn and the prim.waiting.degraded metric.
func (w *watcher) refuse(ctx context.Context, err error) {
	w.mu.Lock()
	first := w.refused == nil
	w.refused = err
	if first {
		close(w.refusedc) // waits for the subscription re-check on a timer instead
	}
	w.mu.Unlock()
	if first {
		w.c.logger.Warn("prim: invalidation subscription refused by the server; waiters on this node re-check on a timer (every 50ms, one waiter per lock) until it is allowed",
			"node", w.addr, "err", err, "fix", "grant the ACL user prim.ACLWaiting ("+ACLWaiting+"): the refused command or the channel __redis__:invalidate")
		w.c.m.degradedAdd(ctx, "subscribe-refused")
	}
}

func (w *watcher) keepAliveLoop(ctx context.Context) {
	t := time.NewTicker(time.Duration(knobs.KeepAliveEvery.Load()))
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
			if w.c.reapIfIdle(w) {
				return
			}
			continue
		}
		w.wakeMoved(ctx)
		select {
		case w.trLock <- struct{}{}:
		case <-ctx.Done():
			return
		}
		if w.trConn != nil {
			pctx, cancel := context.WithTimeout(ctx, keepAlive)
			var err error
			if w.pingRefused {
				err = w.trConn.ClientID(pctx).Err()
			} else {
				err = w.trConn.Ping(pctx).Err()
			}
			cancel()
			var re redis.Error
			if errors.As(err, &re) {
				// The server replied: the connection is alive, whatever the
				// reply (BUSY and LOADING included). A refused PING (NOPERM:
				// an ACL without +ping; or a server that renamed it away) is
				// said once; CLIENT ID, which the watcher needs anyway, checks
				// from then on.
				code, _, _ := strings.Cut(re.Error(), " ")
				refused := code == "NOPERM" || (code == "ERR" && strings.Contains(strings.ToLower(re.Error()), "unknown command"))
				if refused && !w.pingRefused {
					w.pingRefused = true
					w.c.logger.Warn("prim: keep-alive PING refused by the server; the invalidation watcher checks its tracking connection with CLIENT ID instead",
						"node", w.addr, "err", err, "fix", "grant the ACL user +ping (prim.ACLWaiting: "+ACLWaiting+")")
				}
				err = nil
			}
			if err != nil {
				w.resetTrackingLocked()
				<-w.trLock
				w.wakeAll()
				continue
			}
		}
		<-w.trLock
	}
}

// register queues a waiter for key's group.
func (w *watcher) register(key, group string) *waiter {
	wt := &waiter{ch: make(chan struct{}, 1), key: key, group: group}
	w.mu.Lock()
	g := w.waiters[key]
	if g == nil {
		g = map[string][]*waiter{}
		w.waiters[key] = g
	}
	wt.head = len(g[group]) == 0 || knobs.WakeEveryWaiter.Load()
	g[group] = append(g[group], wt)
	w.nwait++
	w.mu.Unlock()
	return wt
}

// unregister removes wt from its queue. If it was the head, the next waiter
// becomes head and is woken; acquired says wt leaves holding the lock.
func (w *watcher) unregister(wt *waiter, acquired bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := w.waiters[wt.key]
	q := g[wt.group]
	i := slices.Index(q, wt)
	if i < 0 {
		return
	}
	q = slices.Delete(q, i, i+1)
	w.nwait--
	if len(q) == 0 {
		delete(g, wt.group)
		if len(g) == 0 {
			delete(w.waiters, wt.key)
		}
		return
	}
	g[wt.group] = q
	if wt.head && !q[0].head {
		q[0].head, q[0].held = true, acquired
		q[0].wake()
	}
}

// turn reports whether wt is its queue's head, and whether it became head
// because the previous one left holding the lock (reported once).
func (w *watcher) turn(wt *waiter) (head, held bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	held, wt.held = wt.held, false
	return wt.head, held
}

// wakeKey wakes the head of every queue on key.
func (w *watcher) wakeKey(key string) {
	w.mu.Lock()
	for _, q := range w.waiters[key] {
		wakeHeads(q)
	}
	w.mu.Unlock()
}

// wakeAll wakes the head of every queue: whatever the server tracked for this
// watcher may be lost, so each lock's head re-checks (and re-tracks for its
// queue).
func (w *watcher) wakeAll() {
	w.mu.Lock()
	for _, g := range w.waiters {
		for _, q := range g {
			wakeHeads(q)
		}
	}
	w.mu.Unlock()
}

func wakeHeads(q []*waiter) {
	for _, wt := range q {
		if !wt.head {
			return
		}
		wt.wake()
	}
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
//
// It returns by ctx's end: waiting for the connection, or for a read that
// outlives ctx (a silent connection: go-redis's defaults wait for the read
// timeout), which then finishes in the background, still holding the
// connection, and resets the tracking if it got no reply.
func (w *watcher) track(ctx context.Context, read func(ctx context.Context, c *redis.Conn) (int64, error)) (int64, error) {
	select {
	case w.trLock <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	type result struct {
		v   int64
		err error
	}
	ch := make(chan result, 1)
	go func() {
		defer func() { <-w.trLock }()
		v, err := w.trackLocked(ctx, read)
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		select {
		case r := <-ch: // finished at the same instant: its answer stands
			return r.v, r.err
		default:
		}
		return 0, ctx.Err()
	}
}

// trackLocked is track's work, with trLock held.
func (w *watcher) trackLocked(ctx context.Context, read func(ctx context.Context, c *redis.Conn) (int64, error)) (int64, error) {
	if w.closed.Load() {
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
		if w.trRefused != nil && time.Now().Before(w.trRetryAt) {
			return 0, fmt.Errorf("%w on %s: %w", errTrackingRefused, w.addr, serverError(w.trRefused))
		}
		cn := w.tr.Conn()
		if err := cn.Do(ctx, "CLIENT", "TRACKING", "ON", "REDIRECT", id).Err(); err != nil {
			_ = cn.Close()
			err = fmt.Errorf("prim: CLIENT TRACKING ON REDIRECT %d: %w", id, err)
			if w.trackingRefusedLocked(ctx, err) {
				return 0, fmt.Errorf("%w on %s: %w", errTrackingRefused, w.addr, serverError(err))
			}
			return 0, err
		}
		w.trConn, w.trEpoch = cn, epoch
		if w.trRefused != nil {
			w.trRefused, w.trBackoff = nil, 0
			w.c.logger.Info("prim: CLIENT TRACKING accepted; waiters on this node wait on invalidations again", "node", w.addr)
		}
	}
	v, err := read(ctx, w.trConn)
	if err != nil && uncertain(err) {
		// Whatever the server tracked on this connection, for every waiter of
		// the node, is gone with it: all of them re-check (and re-track).
		w.resetTrackingLocked()
		w.wakeAll()
	}
	return v, err
}

// trackingRefusedLocked reports whether err, CLIENT TRACKING's failure, is
// the server refusing it for good: NOPERM (an ACL without +client|tracking)
// or an unknown command or subcommand (a server without client tracking, or
// CLIENT renamed away). Anything else (a lost connection, LOADING, the
// redirect target gone while the Pub/Sub connection reconnects) is retried at
// the next re-check. It records the refusal and when to try again, and once
// per episode logs a Warn and counts prim.waiting.degraded: until the server
// accepts, waiters on the node re-check on a timer. Called with trLock held.
func (w *watcher) trackingRefusedLocked(ctx context.Context, err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	code, _, _ := strings.Cut(msg, " ")
	lower := strings.ToLower(msg)
	if code != "NOPERM" && code != "NOAUTH" && (code != "ERR" || !strings.Contains(lower, "unknown") && !strings.Contains(lower, "unsupported")) {
		return false
	}
	first := w.trRefused == nil
	w.trRefused = err
	w.trBackoff = min(max(2*w.trBackoff, 50*time.Millisecond), maxRefusedBackoff)
	w.trRetryAt = time.Now().Add(w.trBackoff)
	if first {
		w.c.logger.Warn("prim: CLIENT TRACKING refused by the server; waiters on this node re-check on a timer (every 50ms, one waiter per lock) until it is accepted",
			"node", w.addr, "err", err, "fix", "grant the ACL user +client|tracking (prim.ACLWaiting: "+ACLWaiting+"); a server without client tracking cannot wake waiters")
		w.c.m.degradedAdd(ctx, "tracking-refused")
	}
	return true
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
	ready, refused := w.readyc, w.refusedc
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
	case <-refused:
		// The server refused the subscription (an ACL without the channel):
		// waiting for it would stall the first wait for the full 2s.
		if err := w.refusal(); err != nil {
			return err
		}
		return errSubscribing
	case <-ctx.Done():
		return ctx.Err()
	case <-closed:
		return ErrClosed
	case <-t.C:
		return errors.New("prim: invalidation subscription did not connect in 2s")
	}
}

// refusal is the server's refusal of the subscription, if it refuses it.
func (w *watcher) refusal() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.refused != nil {
		return fmt.Errorf("prim: invalidations unavailable on %s: %w", w.addr, serverError(w.refused))
	}
	return nil
}

// wakeMoved wakes the queues of keys whose slot another node now serves (a
// Cluster failover or resharding), so that their heads wait on that node's
// watcher instead. The slot map is the cluster client's own: no I/O unless it
// is due for a reload.
func (w *watcher) wakeMoved(ctx context.Context) {
	if _, ok := w.c.client.(*redis.ClusterClient); !ok {
		return
	}
	w.mu.Lock()
	keys := make([]string, 0, len(w.waiters))
	for k := range w.waiters {
		keys = append(keys, k)
	}
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, keepAlive)
	defer cancel()
	for _, k := range keys {
		if n, err := w.c.fences.nodeFor(ctx, k); err == nil && n.Options().Addr != w.addr {
			w.wakeKey(k)
		}
	}
}

// closeWait bounds how long close waits for the tracking connection: a read
// stalled on it is ended by closing its client instead.
const closeWait = 100 * time.Millisecond

func (w *watcher) close() {
	w.closed.Store(true)
	t := time.NewTimer(closeWait)
	select {
	case w.trLock <- struct{}{}:
		t.Stop()
		w.resetTrackingLocked()
		<-w.trLock
	case <-t.C:
		// A read holds it, maybe stalled: closing the tracking client below
		// closes its connection, which ends the read at once.
	}
	w.cancel()
	w.mu.Lock()
	ps := w.pubsub
	w.mu.Unlock()
	_ = ps.Close()
	_ = w.tr.Close()
	// Closing the Pub/Sub client too ends a connection run is dialing (its
	// OnConnect's CLIENT ID would wait for the read timeout, whatever the
	// cancelled context says), so run ends at once.
	_ = w.ps.Close()
	<-w.done
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
// first use, and holds it for the caller until releaseWatcher. It does not
// wait for its subscription (see waitReady).
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
	w.users++
	return w, nil
}

// releaseWatcher ends the caller's hold on w.
func (c *Coordinator) releaseWatcher(w *watcher) {
	c.ws.mu.Lock()
	if w.users--; w.users == 0 {
		w.idle = time.Now()
	}
	c.ws.mu.Unlock()
}

// reapIfIdle closes w if nobody has held it for watcherIdle (its connections
// close; the next wait on its node starts a new watcher). It reports whether
// it did. A Cluster node that no longer serves the keys waited on goes this
// way too, once its waiters have moved to the new owner's watcher.
func (c *Coordinator) reapIfIdle(w *watcher) bool {
	c.ws.mu.Lock()
	if c.ws.closed || c.ws.byAddr[w.addr] != w || w.users > 0 || time.Since(w.idle) < time.Duration(knobs.WatcherIdle.Load()) {
		c.ws.mu.Unlock()
		return false
	}
	delete(c.ws.byAddr, w.addr)
	c.ws.mu.Unlock()
	c.logger.Debug("prim: closing an idle invalidation watcher", "node", w.addr)
	w.close()
	return true
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

// How long a watcher nobody waits on keeps its connections, and the period of
// the tracking-connection check: 30s and keepAlive, except in tests that need
// them shorter or out of the way (knobs.WatcherIdle, knobs.KeepAliveEvery).
// knobs.WakeEveryWaiter restores the landed wake-up, in which every waiter of a
// key is woken by each invalidation (for benchmarks that compare the two).
func init() {
	knobs.WatcherIdle.Store(int64(30 * time.Second))
	knobs.KeepAliveEvery.Store(int64(keepAlive))
}

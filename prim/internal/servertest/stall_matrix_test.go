package servertest_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
)

// Bounds of the stall matrix, as a user would notice them: a call given a
// 300 ms deadline that returns more than 2 s after it has ignored it; a
// Close that takes more than 2 s hangs. (Beside two busy loops under -race a
// timer fires up to ~1.5 s late: 2 s is still what a user would call prompt
// next to go-redis's 3 s read timeout, which the bound exists to rule out.)
const (
	stallDeadline = 300 * time.Millisecond
	stallNotice   = 2 * time.Second
	stallTTL      = 3 * time.Second // the ttl of every lease the matrix takes
)

// stallEnv is one row's world: a client with go-redis's default options
// (and a Redlock group of three such clients on databases 0-2) whose
// connections go through an in-test proxy, and the row's keys.
type stallEnv struct {
	*env
	proxy *holdProxy
	co    *prim.Coordinator
	rl    *prim.RedlockGroup
	key   string // the row's key (a hash tag of its own); every command of the row names it
	latch *prim.CountdownLatch
}

func (s *stallEnv) fence() string { return s.key + ":fence" }

// stallOp is one call of a primitive.
type stallOp struct {
	name string
	// write: the call changes the server's state, so a reply that never came
	// leaves its outcome unknown (ErrUncertain); a read has no outcome to hide.
	write bool
	// fenced: the call fences its command when the outcome is unknown
	// (CLIENT KILL of its dedicated connection, then an owner-checked
	// release), so a request held before it reached the server leaves nothing
	// behind once the proxy lets it go.
	fenced bool
	// needs is a server feature the call needs ("hfe": hash-field expiry).
	needs string
	setup func(ctx context.Context, t *testing.T, s *stallEnv)
	call  func(ctx context.Context, s *stallEnv) error
	// residue checks the server's state once the proxy released and the
	// clean-ups ended: no lease past its ttl; nothing at all when the request
	// was held before it reached the server and the call fences it.
	residue func(ctx context.Context, t *testing.T, s *stallEnv, gone bool)
}

// leaseResidue: the key is gone, or expires within the ttl it was asked for
// (gone when nothing reached the server and the call fences).
func leaseResidue(ctx context.Context, t *testing.T, s *stallEnv, gone bool) {
	t.Helper()
	for _, a := range s.admins(t) {
		d, err := a.PTTL(ctx, s.key).Result()
		if err != nil || d == -1 || d > stallTTL || (gone && d != -2) {
			t.Errorf("key %s after the release: pttl %v (err %v), want gone (%v) or within the %v ttl", s.key, d, err, gone, stallTTL)
		}
	}
}

// admins are the row's servers as the admin sees them (databases 0-2 for a
// Redlock row, database 0 otherwise).
func (s *stallEnv) admins(t *testing.T) []*redis.Client {
	if s.rl == nil {
		return []*redis.Client{s.admin}
	}
	var out []*redis.Client
	for db := 0; db < 3; db++ {
		c := redis.NewClient(&redis.Options{Addr: s.topo.Nodes()[0].DirectAddr(), DB: db})
		t.Cleanup(func() { c.Close() })
		out = append(out, c)
	}
	return out
}

func fieldResidue(ctx context.Context, t *testing.T, s *stallEnv, gone bool) {
	t.Helper()
	v, err := s.admin.Do(ctx, "HPTTL", s.key, "FIELDS", 1, "f").Int64Slice()
	if err != nil || len(v) != 1 || v[0] == -1 || time.Duration(v[0])*time.Millisecond > stallTTL || (gone && v[0] != -2) {
		t.Errorf("field f of %s after the release: hpttl %v (err %v), want gone (%v) or within the %v ttl", s.key, v, err, gone, stallTTL)
	}
}

func latchSetup(count int64) func(ctx context.Context, t *testing.T, s *stallEnv) {
	return func(ctx context.Context, t *testing.T, s *stallEnv) {
		l, err := s.co.CreateCountdownLatch(ctx, s.key, count)
		if err != nil {
			t.Fatal(err)
		}
		s.latch = l
	}
}

func allow(f func(r *prim.RateLimiters, key string) (*prim.Limiter, error), wait bool) func(ctx context.Context, s *stallEnv) error {
	return func(ctx context.Context, s *stallEnv) error {
		l, err := f(s.co.RateLimiters(), s.key)
		if err != nil {
			return err
		}
		defer l.Close()
		var d prim.Decision
		if wait {
			d, err = l.Wait(ctx, 1)
		} else {
			d, err = l.Allow(ctx, 1)
		}
		if err == nil && !d.Allowed {
			return fmt.Errorf("%w: a definite denial (RetryAfter %v)", prim.ErrNotAcquired, d.RetryAfter)
		}
		if err == nil {
			return errors.New("allowed over a stalled connection")
		}
		return err
	}
}

func fixed(r *prim.RateLimiters, key string) (*prim.Limiter, error) {
	return r.FixedWindow(key, 5, time.Second)
}
func sliding(r *prim.RateLimiters, key string) (*prim.Limiter, error) {
	return r.SlidingWindow(key, 5, time.Second, 5)
}
func bucket(r *prim.RateLimiters, key string) (*prim.Limiter, error) {
	return r.TokenBucket(key, 5, 5, time.Second)
}

// stallOps are the calls of the matrix: every primitive, its waiting forms
// included.
var stallOps = []stallOp{
	{name: "TryAcquireFencedLock", write: true, residue: leaseResidue, call: func(ctx context.Context, s *stallEnv) error {
		_, err := s.co.TryAcquireFencedLock(ctx, s.key, s.fence(), stallTTL)
		return err
	}},
	{name: "AcquireFencedLock", write: true, residue: leaseResidue, call: func(ctx context.Context, s *stallEnv) error {
		_, err := s.co.AcquireFencedLock(ctx, s.key, s.fence(), stallTTL)
		return err
	}},
	{name: "TryAcquireLease", write: true, fenced: true, needs: "hfe", residue: fieldResidue, call: func(ctx context.Context, s *stallEnv) error {
		_, err := s.co.TryAcquireLease(ctx, s.key, "f", stallTTL)
		return err
	}},
	{name: "AcquireLease", write: true, fenced: true, needs: "hfe", residue: fieldResidue, call: func(ctx context.Context, s *stallEnv) error {
		_, err := s.co.AcquireLease(ctx, s.key, "f", stallTTL)
		return err
	}},
	{name: "TryAcquireReadLock", write: true, residue: leaseResidue, call: func(ctx context.Context, s *stallEnv) error {
		_, err := s.co.TryAcquireReadLock(ctx, s.key, stallTTL)
		return err
	}},
	{name: "TryAcquireWriteLock", write: true, residue: leaseResidue, call: func(ctx context.Context, s *stallEnv) error {
		_, err := s.co.TryAcquireWriteLock(ctx, s.key, stallTTL)
		return err
	}},
	{name: "Semaphore.TryAcquire", write: true, fenced: true, residue: leaseResidue, call: func(ctx context.Context, s *stallEnv) error {
		_, err := s.co.Semaphore(s.key, 2).TryAcquire(ctx, stallTTL)
		return err
	}},
	{name: "CreateCountdownLatch", write: true, call: func(ctx context.Context, s *stallEnv) error {
		_, err := s.co.CreateCountdownLatch(ctx, s.key, 2)
		return err
	}},
	{name: "latch.CountDown", write: true, setup: latchSetup(2), call: func(ctx context.Context, s *stallEnv) error {
		_, err := s.latch.CountDown(ctx)
		return err
	}},
	{name: "latch.Count", setup: latchSetup(2), call: func(ctx context.Context, s *stallEnv) error {
		_, err := s.latch.Count(ctx)
		return err
	}},
	{name: "latch.Wait", setup: latchSetup(2), call: func(ctx context.Context, s *stallEnv) error {
		done, err := s.latch.Wait(ctx)
		if err == nil {
			return fmt.Errorf("latch.Wait answered %v over a stalled connection", done)
		}
		return err
	}},
	{name: "JoinCountdownLatch", setup: latchSetup(2), call: func(ctx context.Context, s *stallEnv) error {
		_, err := s.co.JoinCountdownLatch(ctx, s.key)
		return err
	}},
	{name: "FixedWindow.Allow", write: true, residue: leaseResidue, call: allow(fixed, false)},
	{name: "SlidingWindow.Allow", write: true, call: allow(sliding, false)},
	{name: "TokenBucket.Allow", write: true, call: allow(bucket, false)},
	{name: "FixedWindow.Wait", write: true, residue: leaseResidue, call: allow(fixed, true)},
	{name: "TokenBucket.Wait", write: true, call: allow(bucket, true)},
	{name: "Redlock.TryAcquire", write: true, residue: leaseResidue, call: func(ctx context.Context, s *stallEnv) error {
		_, err := s.rl.TryAcquire(ctx, s.key, stallTTL)
		return err
	}},
}

// newStallEnv makes the row's world: a proxy in front of the server, a
// client through it with go-redis's default options, a Coordinator on it
// and, for a Redlock row, a group of three clients (databases 0, 1, 2 of the
// same server, through the same proxy: three deployments as far as the
// group can tell).
func newStallEnv(t *testing.T, e *env, row string, redlock bool) *stallEnv {
	t.Helper()
	proxy := newHoldProxy(t, e.topo.Nodes()[0].DirectAddr())
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr()}) // go-redis's defaults
	t.Cleanup(func() { c.Close() })
	warm(t, c)
	s := &stallEnv{env: e, proxy: proxy, co: prim.New(c), key: e.k("{" + row + "/" + strconv.FormatInt(time.Now().UnixNano(), 36) + "}")}
	t.Cleanup(func() { s.co.Close() })
	if redlock {
		var cs []redis.UniversalClient
		for db := 0; db < 3; db++ {
			rc := redis.NewClient(&redis.Options{Addr: proxy.Addr(), DB: db}) // go-redis's defaults
			t.Cleanup(func() { rc.Close() })
			warm(t, rc)
			cs = append(cs, rc)
		}
		// loadedNodeTimeout: the rows stall the group's connections
		// themselves; a healthy node missing the 100 ms default on a loaded
		// machine would fail the row's set-up, not its rule.
		s.rl = group(t, cs, prim.WithNodeTimeout(loadedNodeTimeout))
	}
	return s
}

// warm has c's first connection set up before a row uses c from several
// goroutines: go-redis v9.23 writes the client's shared options once while
// it sets up a first connection the server refuses the
// maintenance-notifications handshake on (redis-8.0, valkey-8.1), a data race
// when two first connections are set up at once (prim's own dedicated
// connections are gated; a Coordinator's pool and watcher connections are
// the client's).
func warm(t *testing.T, c *redis.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("the row's client: %v", err)
	}
}

// checkOutcome: the call returned by its deadline (within what a user would
// notice), and said what it knows: ErrUncertain for a write (its reply held,
// or the request itself: sent, it may still run), ErrUncertain or the
// context's error for a read, never a definite "not
// acquired", "not found" or "denied" (a Redlock call may also
// say ErrNoQuorum: its nodes timed out, it released its token, as
// documented).
//
// extra is a wait past the deadline that the reference prescribes (a failed
// permit renewal's owner-token release, bounded by its own second).
func (s *stallEnv) checkOutcome(t *testing.T, held fault, write bool, err error, took, extra time.Duration) {
	t.Helper()
	t.Logf("%v after %v", err, took.Round(time.Millisecond))
	// The command may still be on its way through the proxy (a loaded machine
	// schedules the proxy's goroutine late): give it what a user would not
	// notice.
	if !s.proxy.waitFired(stallNotice) {
		t.Fatalf("no command named the key within %v of the call's return: nothing was stalled", stallNotice)
	}
	if took > stallDeadline+extra+stallNotice {
		t.Errorf("returned %v after its %v deadline (%v allowed beside it)", took-stallDeadline, stallDeadline, extra)
	}
	switch {
	case err == nil:
		t.Errorf("no error over a stalled connection")
	case s.rl != nil && (errors.Is(err, prim.ErrUncertain) || errors.Is(err, prim.ErrNoQuorum)):
	case s.rl != nil && errors.Is(err, context.DeadlineExceeded) && strings.Contains(err.Error(), "ended the lease"):
		// The reference: a Redlock renewal that a quorum does not confirm,
		// "including one ended by node timeouts or caller cancellation,
		// ends the lease" (the handle reports released, the token is
		// removed best-effort): the context's error, saying so.
		// Done closing is checked by the caller.
	case write && !errors.Is(err, prim.ErrUncertain):
		// Sent, from the client's side, whichever way it stalled: it ran,
		// or may still run when the network lets it through.
		t.Errorf("a write over a stalled connection (%v held) answered %v, want ErrUncertain", held, err)
	case !errors.Is(err, prim.ErrUncertain) && !errors.Is(err, context.DeadlineExceeded):
		// "not acquired", "not found", "completed", ... : an answer the
		// server never gave.
		t.Errorf("a definite answer over a stalled connection: %v, want ErrUncertain or the context's error", err)
	}
}

// closeAndRelease: Close is prompt with the connection still stalled; then
// the proxy lets everything through (held bytes delivered, as a network that
// recovers would) and the clean-ups end.
func (s *stallEnv) closeAndRelease(ctx context.Context, t *testing.T) {
	t.Helper()
	start := time.Now()
	s.co.Close()
	if took := time.Since(start); took > stallNotice {
		t.Errorf("Coordinator.Close with a stalled connection took %v", took)
	}
	s.proxy.ReleaseAll()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.co.WaitCleanups(wctx); err != nil {
		t.Errorf("clean-ups did not end within 10s of the release: %v", err)
	}
	if s.rl != nil {
		if err := s.rl.WaitCleanups(wctx); err != nil {
			t.Errorf("Redlock clean-ups did not end within 10s of the release: %v", err)
		}
	}
	time.Sleep(100 * time.Millisecond) // held bytes delivered
}

// stallRow names a row of a matrix and the server feature it needs ("hfe":
// hash-field expiry).
type stallRow struct{ name, needs string }

// forEachStallRow runs f for every build, every held direction (a stalled
// reply, a stalled request) and every row, the rows of a build in parallel:
// they wait on timers, each on its own proxy and keys. name is the row's
// subtest name ("reply/<row>" or "request/<row>").
func forEachStallRow(t *testing.T, rows []stallRow, f func(t *testing.T, ctx context.Context, e *env, held fault, i int, name string)) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, 2*time.Minute)
		hfe := hasFieldExpiry(ctx, e.admin)
		for _, held := range []fault{stallReply, stallRequest} {
			for i, row := range rows {
				name := held.String() + "/" + row.name
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					if row.needs == "hfe" && !hfe {
						t.Skip("the server has no hash-field expiry")
					}
					f(t, ctx, e, held, i, name)
				})
			}
		}
	})
}

// TestStallMatrix tries every primitive against a stalled reply (the
// command ran, its reply is held) and a stalled request (the command is held
// before it reaches the server), each picked by the very command that names
// the row's key, with go-redis's default client options (issue 31). Every
// call must return by its 300 ms deadline (within 2 s, what a user would
// not notice as ignoring it); a write whose reply was held answers
// ErrUncertain, never a definite "not acquired" or "denied" (a Redlock
// attempt may also say ErrNoQuorum: its nodes timed out and it released its
// token, as documented); a read answers an error, never a value; Close is
// prompt with the connection still stalled; and once the proxy releases,
// the clean-ups end and no lease outlives the ttl it was asked for.
func TestStallMatrix(t *testing.T) {
	rows := make([]stallRow, len(stallOps))
	for i, op := range stallOps {
		rows[i] = stallRow{name: op.name, needs: op.needs}
	}
	forEachStallRow(t, rows, func(t *testing.T, ctx context.Context, e *env, held fault, i int, name string) {
		op := stallOps[i]
		s := newStallEnv(t, e, name, op.name == "Redlock.TryAcquire")
		if op.setup != nil {
			op.setup(ctx, t, s)
		}
		s.proxy.StallWhen(held, s.key)
		cctx, cancel := context.WithTimeout(ctx, stallDeadline)
		start := time.Now()
		err := op.call(cctx, s)
		took := time.Since(start)
		cancel()
		s.checkOutcome(t, held, op.write, err, took, 0)
		s.closeAndRelease(ctx, t)
		if op.residue != nil {
			op.residue(ctx, t, s, held == stallRequest && op.fenced)
		}
	})
}

// renewable is a held handle of any primitive.
type renewable interface {
	Renew(ctx context.Context, ttl time.Duration) (bool, error)
	Done() <-chan struct{}
}

// stallHeldTTL is the ttl of a handle whose renewal the matrix stalls.
const stallHeldTTL = 1500 * time.Millisecond

// stallHandles acquire one handle of each primitive, for ttl.
var stallHandles = []struct {
	name    string
	needs   string
	acquire func(ctx context.Context, s *stallEnv, ttl time.Duration) (renewable, error)
}{
	{"FencedLock", "", func(ctx context.Context, s *stallEnv, ttl time.Duration) (renewable, error) {
		return s.co.TryAcquireFencedLock(ctx, s.key, s.fence(), ttl)
	}},
	{"Lease", "hfe", func(ctx context.Context, s *stallEnv, ttl time.Duration) (renewable, error) {
		return s.co.TryAcquireLease(ctx, s.key, "f", ttl)
	}},
	{"ReadLock", "", func(ctx context.Context, s *stallEnv, ttl time.Duration) (renewable, error) {
		return s.co.TryAcquireReadLock(ctx, s.key, ttl)
	}},
	{"WriteLock", "", func(ctx context.Context, s *stallEnv, ttl time.Duration) (renewable, error) {
		return s.co.TryAcquireWriteLock(ctx, s.key, ttl)
	}},
	{"Permit", "", func(ctx context.Context, s *stallEnv, ttl time.Duration) (renewable, error) {
		return s.co.Semaphore(s.key, 2).TryAcquire(ctx, ttl)
	}},
	{"Redlock", "", func(ctx context.Context, s *stallEnv, ttl time.Duration) (renewable, error) {
		return s.rl.TryAcquire(ctx, s.key, ttl)
	}},
}

// TestStallMatrixRenew: a held handle of every primitive whose renewal
// stalls (its reply held, or its request held before the server) — the
// renewal returns by its 300 ms deadline without claiming success, the
// handle's Done closes by its local deadline (the 1.5 s it was acquired for,
// within what a user would notice), Close is prompt, and once the proxy
// releases, the clean-ups end and nothing outlives the ttl asked for.
func TestStallMatrixRenew(t *testing.T) {
	rows := make([]stallRow, len(stallHandles))
	for i, h := range stallHandles {
		rows[i] = stallRow{h.name, h.needs}
	}
	forEachStallRow(t, rows, func(t *testing.T, ctx context.Context, e *env, held fault, i int, name string) {
		h := stallHandles[i]
		s := newStallEnv(t, e, "renew/"+name, h.name == "Redlock")
		start := time.Now()
		hd, err := h.acquire(ctx, s, stallHeldTTL)
		if err != nil {
			t.Fatal(err)
		}
		s.proxy.StallWhen(held, s.key) // whatever command renews (a script, or SET IFEQ where the server has it)
		cctx, cancel := context.WithTimeout(ctx, stallDeadline)
		rstart := time.Now()
		ok, err := hd.Renew(cctx, stallTTL)
		took := time.Since(rstart)
		cancel()
		if ok {
			t.Errorf("Renew succeeded over a stalled connection")
		}
		var extra time.Duration
		if h.name == "Permit" {
			// The reference: a failed renewal surrenders the permit and
			// "attempts an owner-token release with a separate one-second
			// bound before the exception propagates".
			extra = time.Second
		}
		s.checkOutcome(t, held, true, err, took, extra)
		select {
		case <-hd.Done():
		case <-time.After(time.Until(start.Add(stallHeldTTL + stallNotice))):
			t.Errorf("Done still open %v after the handle's %v local deadline", stallNotice, stallHeldTTL)
		}
		s.closeAndRelease(ctx, t)
		if h.needs == "hfe" {
			fieldResidue(ctx, t, s, false)
		} else {
			leaseResidue(ctx, t, s, false)
		}
	})
}

// stallWaiters are the calls that wait for another owner's release (or a
// latch's completion) through the watcher's connections: setup takes the
// resource with the other Coordinator and returns the call and what frees it.
var stallWaiters = []struct {
	name  string
	needs string
	setup func(ctx context.Context, t *testing.T, s *stallEnv, other *prim.Coordinator) (wait func(ctx context.Context) error, free func())
}{
	{"AcquireFencedLock", "", func(ctx context.Context, t *testing.T, s *stallEnv, other *prim.Coordinator) (func(context.Context) error, func()) {
		held, err := other.TryAcquireFencedLock(ctx, s.key, s.fence(), 30*time.Second)
		return waiterOn(ctx, t, held, err, func(ctx context.Context) (*prim.FencedLock, error) {
			return s.co.AcquireFencedLock(ctx, s.key, s.fence(), stallTTL)
		})
	}},
	{"AcquireLease", "hfe", func(ctx context.Context, t *testing.T, s *stallEnv, other *prim.Coordinator) (func(context.Context) error, func()) {
		held, err := other.TryAcquireLease(ctx, s.key, "f", 30*time.Second)
		return waiterOn(ctx, t, held, err, func(ctx context.Context) (*prim.Lease, error) {
			return s.co.AcquireLease(ctx, s.key, "f", stallTTL)
		})
	}},
	{"latch.Wait", "", func(ctx context.Context, t *testing.T, s *stallEnv, other *prim.Coordinator) (func(context.Context) error, func()) {
		l, err := other.CreateCountdownLatch(ctx, s.key, 1)
		if err != nil {
			t.Fatal(err)
		}
		joined, err := s.co.JoinCountdownLatch(ctx, s.key)
		if err != nil {
			t.Fatal(err)
		}
		return func(ctx context.Context) error {
				done, err := joined.Wait(ctx)
				if err == nil && !done {
					return errors.New("latch.Wait answered false for its current generation")
				}
				return err
			}, func() {
				if _, err := l.CountDown(ctx); err != nil {
					t.Error(err)
				}
			}
	}},
}

// waiterOn: the other owner's held lease (or the error taking it), the
// waiting acquisition (releasing what it got) and the release that frees it.
func waiterOn[H interface {
	Release(context.Context) (prim.ReleaseResult, error)
}](ctx context.Context, t *testing.T, held H, err error, acquire func(context.Context) (H, error)) (func(context.Context) error, func()) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	return func(ctx context.Context) error {
			h, err := acquire(ctx)
			if err == nil {
				_, _ = h.Release(ctx)
			}
			return err
		}, func() {
			if _, err := held.Release(ctx); err != nil {
				t.Error(err)
			}
		}
}

// TestStallMatrixSilentWatcher: every waiting call against a watcher
// connection that stays open but goes silent (its replies dropped): the
// Pub/Sub connection (picked by SUBSCRIBE) or the tracking connection
// (picked by CLIENT TRACKING). A waiter given 300 ms returns by then (within
// what a user would notice); a waiter set up before the silence sees the
// release within 12 s (the other owner's lease has 30 s: two keep-alive
// spells, a reconnect and a re-check on a loaded machine); Close is prompt;
// the clean-ups end once the proxy releases.
func TestStallMatrixSilentWatcher(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, 2*time.Minute)
		hfe := hasFieldExpiry(ctx, e.admin)
		oc, _ := e.client(t)
		other := prim.New(oc)
		t.Cleanup(func() { other.Close() }) // after the parallel rows
		for _, conn := range []string{"subscribe", "tracking"} {
			for _, w := range stallWaiters {
				name := conn + "/" + w.name
				t.Run(name, func(t *testing.T) {
					t.Parallel() // the rows wait on timers, each on its own proxy and keys
					if w.needs == "hfe" && !hfe {
						t.Skip("the server has no hash-field expiry")
					}
					s := newStallEnv(t, e, "silent/"+name, false)
					wait, free := w.setup(ctx, t, s, other)
					got := make(chan error, 1)
					go func() {
						wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
						defer cancel()
						got <- wait(wctx)
					}()
					cs := s.proxy.waitSent(conn)
					time.Sleep(500 * time.Millisecond) // the waiter is set up
					for _, pc := range cs {
						pc.DropReplies()
					}
					cctx, cancel := context.WithTimeout(ctx, stallDeadline)
					start := time.Now()
					err := wait(cctx)
					took := time.Since(start)
					cancel()
					t.Logf("bounded waiter: %v after %v", err, took.Round(time.Millisecond))
					if err == nil {
						t.Errorf("a waiter succeeded before the release")
					}
					if took > stallDeadline+stallNotice {
						t.Errorf("a waiter returned %v after its %v deadline over a silent %s connection", took-stallDeadline, stallDeadline, conn)
					}
					free()
					freed := time.Now()
					select {
					case err := <-got:
						if err != nil {
							t.Errorf("waiter: %v", err)
						}
						t.Logf("woke %v after the release", time.Since(freed).Round(time.Millisecond))
					case <-time.After(12 * time.Second):
						t.Errorf("the waiter did not wake within 12s of the release over a silent %s connection", conn)
					}
					s.closeAndRelease(ctx, t)
				})
			}
		}
	})
}

package servertest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/testbed"
)

// Redlock runs on independent sets of five standalone servers (r1…r5), one
// per build, shared by the tests of this file (the benchmarks use all five,
// the tests the first three); tests use keys of their own and dial as peers of
// their own, so a partition or latency they inject on their links is theirs
// alone. A test that kills a node starts it again before it ends.
//
// Every client is made with go-redis's default options (MaxRetries 3,
// ContextTimeoutEnabled false; the testbed's dial, read and write timeouts
// are 3s, go-redis's read and write defaults), checked by rlEnv.clients, and
// every group uses prim's defaults (node timeout 100ms, drift factor 0.01)
// unless a test says why it sets a node timeout.

var (
	setsMu sync.Mutex
	sets   = map[string]*testbed.Topology{}
)

const setSize = 5

func independentSet(build string) (*testbed.Topology, error) {
	setsMu.Lock()
	defer setsMu.Unlock()
	if s, ok := sets[build]; ok {
		return s, nil
	}
	s, err := testbed.NewIndependentSet(context.Background(), build, setSize)
	if err != nil {
		return nil, err
	}
	sets[build] = s
	return s, nil
}

func closeSets() {
	setsMu.Lock()
	defer setsMu.Unlock()
	for _, s := range sets {
		s.Close()
	}
}

type rlEnv struct {
	topo *testbed.Topology
	ns   string
	peer string
}

// forEachSet runs f on the shared independent set of every build of the
// matrix. A build that cannot start fails the test.
func forEachSet(t *testing.T, f func(t *testing.T, e *rlEnv)) {
	t.Helper()
	for _, b := range testbed.Matrix() {
		t.Run(b, func(t *testing.T) {
			topo, err := independentSet(b)
			if err != nil {
				t.Fatal(err)
			}
			// The keys are the test's and the peer's: a test run again (-count)
			// in the same process finds none of the last run's.
			peer := fmt.Sprintf("p%d", peerSeq.Add(1))
			ns := strings.NewReplacer("/", ":", " ", "_").Replace(t.Name()) + ":" + peer + ":"
			f(t, &rlEnv{topo: topo, ns: ns, peer: peer})
		})
	}
}

func nodeName(i int) string { return fmt.Sprintf("r%d", i+1) }

// clients returns one client per node (r1…rn), as the peer named, each with
// go-redis's default options.
func (e *rlEnv) clientsAs(t testing.TB, peer string, n int) []redis.UniversalClient {
	t.Helper()
	var out []redis.UniversalClient
	for i := range n {
		c, err := e.topo.NodeClient(nodeName(i), testbed.AsPeer(peer))
		if err != nil {
			t.Fatal(err)
		}
		if o := c.Options(); o.MaxRetries != 3 || o.ContextTimeoutEnabled {
			t.Fatalf("client options: MaxRetries %d ContextTimeoutEnabled %v; want go-redis's defaults", o.MaxRetries, o.ContextTimeoutEnabled)
		}
		t.Cleanup(func() { c.Close() })
		out = append(out, c)
	}
	return out
}

func (e *rlEnv) clients(t testing.TB, n int) []redis.UniversalClient {
	return e.clientsAs(t, e.peer, n)
}

func (e *rlEnv) admin(i int) *redis.Client { return e.topo.Node(nodeName(i)).Admin() }

func (e *rlEnv) k(key string) string { return e.ns + key }

// link is this test's peer's link to node i, healed at the end of the test.
func (e *rlEnv) link(t *testing.T, i int) *testbed.Link {
	t.Helper()
	l, err := e.topo.Link(e.peer, nodeName(i))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Heal(); err != nil {
			t.Error(err)
		}
	})
	return l
}

// kill kills node i; it is started again (empty) at the end of the test.
func (e *rlEnv) kill(t *testing.T, i int) {
	t.Helper()
	if err := e.topo.Kill(nodeName(i)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := e.topo.Start(ctx, nodeName(i)); err != nil {
			t.Errorf("restart %s: %v", nodeName(i), err)
		}
	})
}

// holders reports, for each of the first n nodes, the value at key ("" when
// absent, "?" when the node cannot be read).
func (e *rlEnv) holders(ctx context.Context, key string, n int) []string {
	out := make([]string, n)
	for i := range n {
		v, err := e.admin(i).Get(ctx, key).Result()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			out[i] = "?"
		default:
			out[i] = v
		}
	}
	return out
}

func count(vals []string, v string) int {
	n := 0
	for _, x := range vals {
		if x == v {
			n++
		}
	}
	return n
}

// loadedNodeTimeout is the node timeout of the tests whose rules do not
// depend on the bound. The default (100ms) is a quiet network's: on CI's
// loaded two-core machine healthy local nodes missed it, and the acquisition
// a test needs failed with ErrNoQuorum (TestLeastPrivilegeRedlock,
// TestRedlockRenewal's set-up). A local node silent for 2s is one a user
// would call down. The default is held to its bound where the bound is the
// rule: TestRedlockSlowNode and TestRedlockExclusion.
const loadedNodeTimeout = 2 * time.Second

func group(t testing.TB, cs []redis.UniversalClient, opts ...prim.Option) *prim.RedlockGroup {
	t.Helper()
	g, err := prim.NewRedlockGroup(cs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestRedlockQuorum: one node of three down (killed) or partitioned (a silent
// cut of this client's link: commands go unanswered) leaves a quorum: the
// lease is acquired on the other two, renewed and released; the token is on
// both while held and gone after.
func TestRedlockQuorum(t *testing.T) {
	forEachSet(t, func(t *testing.T, e *rlEnv) {
		ctx := ctxT(t, 2*time.Minute)
		for _, fault := range []string{"down", "partitioned"} {
			t.Run(fault, func(t *testing.T) {
				// loadedNodeTimeout: on CI's loaded machine (-race, other
				// packages beside) the healthy nodes missed 100ms.
				// TryAcquire returns at a majority, so the bound costs
				// nothing here.
				g := group(t, e.clients(t, 3), prim.WithNodeTimeout(loadedNodeTimeout))
				key := e.k(fault)
				if fault == "down" {
					e.kill(t, 2)
				} else if err := e.link(t, 2).Partition(); err != nil {
					t.Fatal(err)
				}
				l, err := g.TryAcquire(ctx, key, 10*time.Second)
				if err != nil {
					t.Fatalf("acquire with r3 %s: %v", fault, err)
				}
				if l.AcquiredOn() != 2 {
					t.Fatalf("acquired on %d nodes, want 2", l.AcquiredOn())
				}
				if r := l.RemainingEstimate(); r <= 0 || r > 10*time.Second-g.DriftAllowance(10*time.Second) {
					t.Fatalf("estimate %v of a 10s lease (drift allowance %v)", r, g.DriftAllowance(10*time.Second))
				}
				if h := e.holders(ctx, key, 2); h[0] != l.OwnerToken() || h[1] != l.OwnerToken() {
					t.Fatalf("holders %q, want the owner token on r1 and r2", h)
				}
				if _, err := g.TryAcquire(ctx, key, 10*time.Second); !errors.Is(err, prim.ErrNotAcquired) || errors.Is(err, prim.ErrNoQuorum) {
					t.Fatalf("second owner: %v, want contention (ErrNotAcquired, not ErrNoQuorum)", err)
				}
				if ok, err := l.Renew(ctx, 10*time.Second); !ok || err != nil {
					t.Fatalf("renew on two of three: %v %v", ok, err)
				}
				ok, err := l.Release(ctx)
				if !ok || err != nil {
					t.Fatalf("release: %v %v", ok, err)
				}
				if h := e.holders(ctx, key, 2); h[0] != "" || h[1] != "" {
					t.Fatalf("holders after release %q", h)
				}
				if l.State() != prim.StateReleased || l.RemainingEstimate() != 0 {
					t.Fatalf("state %v estimate %v after release", l.State(), l.RemainingEstimate())
				}
				select {
				case <-l.Done():
				default:
					t.Fatal("Done not closed after release")
				}
			})
		}
	})
}

// TestRedlockTwoDown: with two of three nodes down (killed) or partitioned,
// an attempt fails with ErrNoQuorum (not contention) and leaves no token on
// the reachable node when it returns.
func TestRedlockTwoDown(t *testing.T) {
	forEachSet(t, func(t *testing.T, e *rlEnv) {
		ctx := ctxT(t, 2*time.Minute)
		for _, fault := range []string{"down", "partitioned"} {
			t.Run(fault, func(t *testing.T) {
				// loadedNodeTimeout: the healthy r1 must confirm (Confirmed
				// 1), which a loaded machine made it miss within 100ms.
				g := group(t, e.clients(t, 3), prim.WithNodeTimeout(loadedNodeTimeout))
				key := e.k(fault)
				for _, i := range []int{1, 2} {
					if fault == "down" {
						e.kill(t, i)
					} else if err := e.link(t, i).Partition(); err != nil {
						t.Fatal(err)
					}
				}
				before := cmdCalls(ctx, e.admin(0), "set")
				l, err := g.TryAcquire(ctx, key, 10*time.Second)
				if !errors.Is(err, prim.ErrNoQuorum) || !errors.Is(err, prim.ErrNotAcquired) || l != nil {
					t.Fatalf("acquire with two of three %s: %v %v, want ErrNoQuorum", fault, l, err)
				}
				var re *prim.RedlockError
				if !errors.As(err, &re) || re.Confirmed != 1 || re.Failed != 2 || re.NodeErrors[0] != nil ||
					re.NodeErrors[1] == nil || re.NodeErrors[2] == nil {
					t.Fatalf("error details: %+v", re)
				}
				if fault == "partitioned" && !errors.Is(re.NodeErrors[1], prim.ErrNodeTimeout) {
					t.Fatalf("a silent node's error %v, want ErrNodeTimeout", re.NodeErrors[1])
				}
				if got := cmdCalls(ctx, e.admin(0), "set") - before; got != 1 {
					t.Fatalf("r1 ran %d SETs, want 1 (the attempt reached it)", got)
				}
				if n, _ := e.admin(0).Exists(ctx, key).Result(); n != 0 {
					t.Fatalf("the failed attempt left its token on r1: %q", e.holders(ctx, key, 1))
				}
			})
		}
	})
}

// TestRedlockSlowNode: a node slower than the node timeout counts as failed.
// Its command still lands: with a constant delay the clean-up follows it
// there and removes it; when the delay varies (jitter) the command can land
// after the clean-up, and if its reply is lost too (prim releases again on a
// late reply) that node keeps the failed attempt's token until its ttl — the
// next attempt, with one more node down, then reaches no quorum (ErrNoQuorum,
// the slow node answering "held by another owner"), as the package
// documentation says, until the token expires.
func TestRedlockSlowNode(t *testing.T) {
	forEachSet(t, func(t *testing.T, e *rlEnv) {
		ctx := ctxT(t, 3*time.Minute)
		// The default node timeout (100ms); r3 is 200ms away each way.
		g := group(t, e.clients(t, 3))
		slow := e.link(t, 2)
		if err := slow.Latency(200*time.Millisecond, 0); err != nil {
			t.Fatal(err)
		}

		t.Run("counts as failed", func(t *testing.T) {
			// Again (a fresh key) while r1 or r2 misses the 100ms only
			// because the machine is loaded; r3's 400ms round trip misses
			// it every time.
			var (
				key string
				l   *prim.RedlockLease
				err error
				re  *prim.RedlockError
			)
			for try := range 5 {
				key = e.k(fmt.Sprintf("slow-%d", try))
				if l, err = g.TryAcquire(ctx, key, 10*time.Second); !errors.As(err, &re) ||
					!errors.Is(re.NodeErrors[0], prim.ErrNodeTimeout) && !errors.Is(re.NodeErrors[1], prim.ErrNodeTimeout) {
					break
				}
				t.Logf("try %d: a healthy node missed the node timeout: %v", try, err)
			}
			if err != nil {
				t.Fatal(err)
			}
			if l.AcquiredOn() != 2 {
				t.Fatalf("acquired on %d, want 2 (r3 is slower than the node timeout)", l.AcquiredOn())
			}
			// The release too can miss the 100ms on r1 or r2 only because
			// the machine is loaded: the lease has ended all the same (their
			// token expires), and r3 is what is checked below.
			if ok, err := l.Release(ctx); !ok || err != nil {
				if !errors.As(err, &re) || !errors.Is(re.NodeErrors[0], prim.ErrNodeTimeout) && !errors.Is(re.NodeErrors[1], prim.ErrNodeTimeout) {
					t.Fatal(ok, err)
				}
				t.Logf("the release: a healthy node missed the node timeout: %v", err)
			}
			// r3's SET lands, then the release that waited for it: nothing stays.
			if !eventually(5*time.Second, func() bool { return e.holders(ctx, key, 3)[2] == "" }) {
				t.Fatalf("r3 keeps %q after the release", e.holders(ctx, key, 3)[2])
			}
		})

		e.kill(t, 1)
		t.Run("no quorum with one more down", func(t *testing.T) {
			key := e.k("slow-down")
			_, err := g.TryAcquire(ctx, key, 10*time.Second)
			var re *prim.RedlockError
			if !errors.Is(err, prim.ErrNoQuorum) || !errors.As(err, &re) || !errors.Is(re.NodeErrors[2], prim.ErrNodeTimeout) {
				t.Fatalf("acquire with r2 down and r3 slow: %v, want ErrNoQuorum with r3 timed out", err)
			}
			// The clean-up waited for r3's acquisition, so it removed it.
			if !eventually(5*time.Second, func() bool { h := e.holders(ctx, key, 3); return h[0] == "" && h[2] == "" }) {
				t.Fatalf("holders %q after the failed attempt", e.holders(ctx, key, 3))
			}
		})

		t.Run("lands after clean-up", func(t *testing.T) {
			if err := slow.Heal(); err != nil {
				t.Fatal(err)
			}
			const ttl = 3 * time.Second
			for attempt := range 40 {
				// Delays of 10–390ms each way, drawn per packet: the SET to
				// r3 can be overtaken by the clean-up sent after it.
				if err := slow.Latency(200*time.Millisecond, 190*time.Millisecond); err != nil {
					t.Fatal(err)
				}
				key := e.k(fmt.Sprintf("late-%d", attempt))
				l, err := g.TryAcquire(ctx, key, ttl)
				if err == nil {
					// r3 happened to answer within the node timeout.
					l.Release(ctx)
					if err := slow.Heal(); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if !errors.Is(err, prim.ErrNoQuorum) {
					t.Fatalf("attempt %d: %v, want ErrNoQuorum (r2 down, r3 slow)", attempt, err)
				}
				// When the token shows up on r3 after the attempt returned,
				// cut r3 off at once: the SET's reply is lost, so prim cannot
				// learn that it landed and release it again.
				stale := ""
				for end := time.Now().Add(600 * time.Millisecond); stale == "" && time.Now().Before(end); {
					if stale = e.holders(ctx, key, 3)[2]; stale == "" {
						time.Sleep(time.Millisecond)
					}
				}
				if stale != "" {
					if err := slow.Partition(); err != nil {
						t.Fatal(err)
					}
				}
				time.Sleep(500 * time.Millisecond)  // what was on its way before the cut has landed or been dropped
				if err := slow.Heal(); err != nil { // closes r3's connections: the SET's reply is lost for good
					t.Fatal(err)
				}
				if stale == "" || e.holders(ctx, key, 3)[2] != stale {
					continue // the clean-up came after the SET, or the reply came through and prim released it
				}
				t.Logf("attempt %d: r3's SET landed after the clean-up and its reply was lost; r3 holds %s", attempt, stale)
				// The next attempt, again while r1 or r3 misses the 100ms
				// node timeout only because the machine is loaded (CI);
				// the stale token lives 3s, a few tries fit.
				var re *prim.RedlockError
				for try := 0; try < 5; try++ {
					if _, err = g.TryAcquire(ctx, key, ttl); !errors.As(err, &re) ||
						!errors.Is(re.NodeErrors[0], prim.ErrNodeTimeout) && !errors.Is(re.NodeErrors[2], prim.ErrNodeTimeout) {
						break
					}
				}
				if !errors.Is(err, prim.ErrNoQuorum) || !errors.As(err, &re) || !errors.Is(re.NodeErrors[2], prim.ErrHeldElsewhere) ||
					re.Confirmed != 1 {
					t.Fatalf("next attempt: %v, want ErrNoQuorum with r3 held by the stale token", err)
				}
				if h := e.holders(ctx, key, 3); h[0] != "" || h[2] != stale {
					t.Fatalf("after the next attempt: holders %q (stale %s)", h, stale)
				}
				// Once the stale token expires, r1 and r3 make a quorum again.
				if !eventually(2*ttl, func() bool { return e.holders(ctx, key, 3)[2] == "" }) {
					t.Fatal("the stale token did not expire")
				}
				// Again while r1 or r3 misses the 100ms only because the
				// machine is loaded (CI); a failed attempt's token that its
				// clean-up missed too expires with the ttl, so the tries end
				// at 2×ttl. A failure without a timeout before is final.
				loaded, until := false, time.Now().Add(2*ttl)
				for {
					if l, err = g.TryAcquire(ctx, key, ttl); err == nil {
						break
					}
					if errors.As(err, &re) && slices.ContainsFunc(re.NodeErrors, func(err error) bool { return errors.Is(err, prim.ErrNodeTimeout) }) {
						loaded = true
					}
					if !loaded || time.Now().After(until) {
						t.Fatalf("after expiry: %v", err)
					}
					t.Logf("after expiry, again: %v", err)
					g.WaitCleanups(ctx)
				}
				l.Release(ctx)
				return
			}
			t.Fatal("in 40 attempts r3's SET never landed after the clean-up with its reply lost")
		})
	})
}

// TestRedlockValidity: ttl 100ms with 80ms of latency on every link (each
// way: a round trip of at least 160ms) is refused with ErrValidityExpired
// though every node set the key; with a ttl of 5s the same latency is
// acquired. The node timeout (loadedNodeTimeout, 2s) is above the round trip
// so the nodes do not fail, and only the validity decides.
func TestRedlockValidity(t *testing.T) {
	forEachSet(t, func(t *testing.T, e *rlEnv) {
		ctx := ctxT(t, time.Minute)
		g := group(t, e.clients(t, 3), prim.WithNodeTimeout(loadedNodeTimeout))
		for i := range 3 {
			if err := e.link(t, i).Latency(80*time.Millisecond, 0); err != nil {
				t.Fatal(err)
			}
		}
		key := e.k("v")
		_, err := g.TryAcquire(ctx, key, 100*time.Millisecond)
		var re *prim.RedlockError
		if !errors.Is(err, prim.ErrValidityExpired) || !errors.Is(err, prim.ErrNotAcquired) || !errors.As(err, &re) ||
			re.Confirmed < 2 || re.Validity > 0 {
			t.Fatalf("ttl 100ms over 80ms links: %v, want ErrValidityExpired with a quorum confirmed", err)
		}
		l, err := g.TryAcquire(ctx, e.k("v5"), 5*time.Second)
		if err != nil {
			t.Fatalf("ttl 5s over the same links: %v", err)
		}
		if r := l.RemainingEstimate(); r > 5*time.Second-160*time.Millisecond {
			t.Fatalf("estimate %v: the elapsed round trip is not counted", r)
		}
		if ok, err := l.Release(ctx); !ok || err != nil {
			t.Fatal(ok, err)
		}
	})
}

// TestRedlockRenewal: a renewal a quorum does not confirm ends the lease and
// removes the token where it can: nodes partitioned (ErrNoQuorum), the token
// gone from a majority (false, nil), the context ending mid-way.
func TestRedlockRenewal(t *testing.T) {
	forEachSet(t, func(t *testing.T, e *rlEnv) {
		ctx := ctxT(t, 2*time.Minute)
		// loadedNodeTimeout: CI runs this under -race beside other packages
		// on two cores, where the setup acquisitions missed 100ms on two
		// nodes; the renewal rules checked here do not depend on the bound.
		g := group(t, e.clients(t, 3), prim.WithNodeTimeout(loadedNodeTimeout))

		t.Run("renewed", func(t *testing.T) {
			key := e.k("ok")
			l := acquireOnAll(ctx, t, e, g, key, 2*time.Second)
			defer l.Close()
			if ok, err := l.Renew(ctx, 30*time.Second); !ok || err != nil {
				t.Fatal(ok, err)
			}
			// Renew returns once a majority renewed; the third node follows.
			renewed := func() int {
				n := 0
				for i := range 3 {
					if p := e.admin(i).PTTL(ctx, key).Val(); p > 20*time.Second {
						n++
					}
				}
				return n
			}
			if n := renewed(); n < 2 {
				t.Fatalf("%d nodes renewed to 30s when Renew returned, want a majority", n)
			}
			if !eventually(5*time.Second, func() bool { return renewed() == 3 }) {
				t.Fatal("the third node was never renewed")
			}
			if l.RemainingEstimate() < 20*time.Second {
				t.Fatalf("estimate %v after renewing to 30s", l.RemainingEstimate())
			}
		})

		t.Run("quorum partitioned", func(t *testing.T) {
			key := e.k("part")
			l := acquireOnAll(ctx, t, e, g, key, 30*time.Second)
			l2, l3 := e.link(t, 1), e.link(t, 2)
			if err := l2.Partition(); err != nil {
				t.Fatal(err)
			}
			if err := l3.Partition(); err != nil {
				t.Fatal(err)
			}
			ok, err := l.Renew(ctx, 30*time.Second)
			if ok || !errors.Is(err, prim.ErrNoQuorum) {
				t.Fatalf("renew with two of three partitioned: %v %v, want false, ErrNoQuorum", ok, err)
			}
			if l.State() != prim.StateReleased || l.RemainingEstimate() != 0 {
				t.Fatalf("state %v estimate %v after a failed renewal", l.State(), l.RemainingEstimate())
			}
			select {
			case <-l.Done():
			default:
				t.Fatal("Done not closed")
			}
			if ok, err := l.Renew(ctx, 30*time.Second); ok || err != nil {
				t.Fatalf("renew after the lease ended: %v %v", ok, err)
			}
			// The reachable node is cleaned in the background.
			if !eventually(5*time.Second, func() bool { return e.holders(ctx, key, 1)[0] == "" }) {
				t.Fatal("r1 keeps the token of an ended lease")
			}
			if h := e.holders(ctx, key, 3); h[1] != l.OwnerToken() || h[2] != l.OwnerToken() {
				t.Fatalf("holders %q: the partitioned nodes should still hold the token", h)
			}
			if ok, err := l.Release(ctx); ok || !errors.Is(err, prim.ErrNoQuorum) {
				t.Fatalf("release with two partitioned: %v %v, want false, ErrNoQuorum", ok, err)
			}
			if err := l2.Heal(); err != nil {
				t.Fatal(err)
			}
			if err := l3.Heal(); err != nil {
				t.Fatal(err)
			}
			// Release keeps the token: a retry reaches the healed nodes.
			if !eventually(10*time.Second, func() bool { ok, _ := l.Release(ctx); return ok }) {
				t.Fatal("release retry after healing never reached a quorum")
			}
			// It returned at a majority; the third node follows.
			if !eventually(5*time.Second, func() bool { return count(e.holders(ctx, key, 3), "") == 3 }) {
				t.Fatalf("holders %q after the retried release", e.holders(ctx, key, 3))
			}
		})

		t.Run("not owned on a majority", func(t *testing.T) {
			key := e.k("gone")
			l := acquireOnAll(ctx, t, e, g, key, 30*time.Second)
			e.admin(0).Del(ctx, key)
			e.admin(1).Set(ctx, key, "someone else", 30*time.Second)
			if ok, err := l.Renew(ctx, 30*time.Second); ok || err != nil {
				t.Fatalf("renew with the token on one node: %v %v, want false, nil", ok, err)
			}
			if l.State() != prim.StateReleased {
				t.Fatalf("state %v", l.State())
			}
			if !eventually(5*time.Second, func() bool { return e.holders(ctx, key, 3)[2] == "" }) {
				t.Fatal("r3 keeps the token of an ended lease")
			}
			if v := e.holders(ctx, key, 2)[1]; v != "someone else" {
				t.Fatalf("r2 holds %q: the clean-up touched another owner's key", v)
			}
		})

		t.Run("release queued behind a renewal", func(t *testing.T) {
			// loadedNodeTimeout: the renewal is slowed on purpose (300ms
			// round trips) and must still succeed.
			g := group(t, e.clients(t, 3), prim.WithNodeTimeout(loadedNodeTimeout))
			key := e.k("queued")
			l := acquireOnAll(ctx, t, e, g, key, 30*time.Second)
			for i := range 3 {
				if err := e.link(t, i).Latency(150*time.Millisecond, 0); err != nil {
					t.Fatal(err)
				}
			}
			renewed := make(chan error, 1)
			go func() {
				ok, err := l.Renew(ctx, 30*time.Second)
				if err == nil && !ok {
					err = errors.New("not renewed")
				}
				renewed <- err
			}()
			time.Sleep(50 * time.Millisecond) // the renewal is on its way
			rctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
			defer cancel()
			ok, err := l.Release(rctx)
			if ok || !errors.Is(err, prim.ErrReleasePending) {
				t.Fatalf("release behind a renewal with a 10ms context: %v %v, want ErrReleasePending", ok, err)
			}
			if l.State() != prim.StateReleased {
				t.Fatalf("state %v after the release was queued", l.State())
			}
			if err := <-renewed; err != nil {
				t.Fatalf("the renewal in flight: %v", err)
			}
			// The queued release runs after the renewal, whatever its context.
			if !eventually(10*time.Second, func() bool { return count(e.holders(ctx, key, 3), "") == 3 }) {
				t.Fatalf("holders %q: the queued release did not run", e.holders(ctx, key, 3))
			}
		})

		t.Run("close", func(t *testing.T) {
			key := e.k("close")
			l := acquireOnAll(ctx, t, e, g, key, 30*time.Second)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if l.State() != prim.StateReleased {
				t.Fatalf("state %v after Close", l.State())
			}
			if !eventually(5*time.Second, func() bool { return count(e.holders(ctx, key, 3), "") == 3 }) {
				t.Fatalf("holders %q after Close", e.holders(ctx, key, 3))
			}
			if ok, err := l.Release(ctx); !ok || err != nil {
				t.Fatalf("release after Close: %v %v", ok, err)
			}
		})

		t.Run("cancelled", func(t *testing.T) {
			key := e.k("cancel")
			l := acquireOnAll(ctx, t, e, g, key, 30*time.Second)
			for i := range 3 {
				if err := e.link(t, i).Latency(40*time.Millisecond, 0); err != nil {
					t.Fatal(err)
				}
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
			defer cancel()
			ok, err := l.Renew(cctx, 30*time.Second)
			if ok || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("renew cancelled mid-way: %v %v", ok, err)
			}
			if l.State() != prim.StateReleased {
				t.Fatalf("state %v after a cancelled renewal", l.State())
			}
			if !eventually(5*time.Second, func() bool { return count(e.holders(ctx, key, 3), "") == 3 }) {
				t.Fatalf("holders %q after the lease a cancelled renewal ended", e.holders(ctx, key, 3))
			}
		})
	})
}

// acquireOnAll takes key on g and waits until every node holds the token:
// TryAcquire returns at a majority, and the third node's SET may land later,
// after a renewal (then not renewed there), a clean-up or a change the test
// makes on that node, which a loaded machine showed. Tests of what happens
// to a lease on all three nodes start from all three.
func acquireOnAll(ctx context.Context, t *testing.T, e *rlEnv, g *prim.RedlockGroup, key string, ttl time.Duration) *prim.RedlockLease {
	t.Helper()
	l, err := g.TryAcquire(ctx, key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	if !eventually(5*time.Second, func() bool { return count(e.holders(ctx, key, 3), l.OwnerToken()) == 3 }) {
		t.Fatalf("holders %q: the token never reached the third node", e.holders(ctx, key, 3))
	}
	return l
}

// TestRedlockExclusion: 8 clients (each a peer of its own with its own three
// clients) × 100 attempts on one key, no faults: never two holders at once,
// and while a lease is held its token is on a majority of the nodes (sampled
// on every node).
func TestRedlockExclusion(t *testing.T) {
	forEachSet(t, func(t *testing.T, e *rlEnv) {
		ctx := ctxT(t, 3*time.Minute)
		key := e.k("x")
		var (
			holder        atomic.Pointer[string]
			acquired      atomic.Int64
			releaseFailed atomic.Int64
			wg            sync.WaitGroup
		)
		for p := range 8 {
			g := group(t, e.clientsAs(t, fmt.Sprintf("%s-%d", e.peer, p), 3))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 100 {
					l, err := g.TryAcquire(ctx, key, 5*time.Second)
					if errors.Is(err, prim.ErrNotAcquired) {
						time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					acquired.Add(1)
					owner := l.OwnerToken()
					if !holder.CompareAndSwap(nil, &owner) {
						t.Errorf("two holders at once: %s and %s", *holder.Load(), owner)
					}
					if h := e.holders(ctx, key, 3); count(h, owner) < 2 {
						t.Errorf("held by %s but the nodes hold %q", owner, h)
					}
					holder.Store(nil) // before the release: the next owner may come at once
					// On a loaded machine a release can miss the 100ms node
					// timeout on a majority: the lease has ended all the same
					// and its token expires; exclusion is what is checked.
					if ok, err := l.Release(ctx); !ok && !errors.Is(err, prim.ErrNoQuorum) {
						t.Errorf("release: %v %v", ok, err)
					} else if !ok {
						releaseFailed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if acquired.Load() == 0 {
			t.Fatal("no attempt acquired")
		}
		t.Logf("%d of 800 attempts acquired, %d releases reached no quorum", acquired.Load(), releaseFailed.Load())
	})
}

// TestRedlockBadInput: a wrong client count, the same client twice, options
// out of range, an empty key or a ttl that is not a whole number of
// milliseconds are typed errors (ErrInvalidArgument) and write nothing
// (DBSIZE on every node).
func TestRedlockBadInput(t *testing.T) {
	forEachSet(t, func(t *testing.T, e *rlEnv) {
		ctx := ctxT(t, time.Minute)
		for i := range setSize {
			if err := e.admin(i).FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		cs := e.clients(t, 5)
		other, err := e.topo.NodeClient("r1", testbed.AsPeer(e.peer+"-b"))
		if err != nil {
			t.Fatal(err)
		}
		groups := []struct {
			name    string
			clients []redis.UniversalClient
			opts    []prim.Option
			want    error
		}{
			{"none", nil, nil, prim.ErrTooFewNodes},
			{"one", cs[:1], nil, prim.ErrTooFewNodes},
			{"two", cs[:2], nil, prim.ErrTooFewNodes},
			{"four", cs[:4], nil, prim.ErrEvenNodes},
			{"same client twice", []redis.UniversalClient{cs[0], cs[1], cs[0]}, nil, prim.ErrDuplicateNode},
			{"same server twice", []redis.UniversalClient{cs[0], cs[1], other}, nil, prim.ErrDuplicateNode},
			{"nil client", []redis.UniversalClient{cs[0], cs[1], nil}, nil, prim.ErrNilNode},
			{"nil *redis.Client", []redis.UniversalClient{cs[0], cs[1], (*redis.Client)(nil)}, nil, prim.ErrNilNode},
			{"node timeout 0", cs[:3], []prim.Option{prim.WithNodeTimeout(0)}, prim.ErrInvalidOption},
			{"drift 1", cs[:3], []prim.Option{prim.WithClockDriftFactor(1)}, prim.ErrInvalidOption},
			{"drift NaN", cs[:3], []prim.Option{prim.WithClockDriftFactor(math.NaN())}, prim.ErrInvalidOption},
			{"drift negative", cs[:3], []prim.Option{prim.WithClockDriftFactor(-0.1)}, prim.ErrInvalidOption},
		}
		for _, c := range groups {
			g, err := prim.NewRedlockGroup(c.clients, c.opts...)
			if g != nil || !errors.Is(err, c.want) || !errors.Is(err, prim.ErrInvalidArgument) {
				t.Errorf("%s: %v %v, want %v", c.name, g, err, c.want)
			}
		}
		g := group(t, cs[:3])
		if g5 := group(t, cs); g5.Quorum() != 3 || g.Quorum() != 2 {
			t.Fatalf("quorum %d of 5, %d of 3", g5.Quorum(), g.Quorum())
		}
		acquisitions := []struct {
			name string
			key  string
			ttl  time.Duration
			want error
		}{
			{"empty key", "", time.Second, prim.ErrEmptyKey},
			{"ttl 0", e.k("k"), 0, prim.ErrInvalidTTL},
			{"ttl negative", e.k("k"), -time.Second, prim.ErrInvalidTTL},
			{"ttl below 1ms", e.k("k"), 999 * time.Microsecond, prim.ErrInvalidTTL},
			{"ttl not whole ms", e.k("k"), 1500 * time.Microsecond, prim.ErrInvalidTTL},
		}
		for _, c := range acquisitions {
			l, err := g.TryAcquire(ctx, c.key, c.ttl)
			if l != nil || !errors.Is(err, c.want) || !errors.Is(err, prim.ErrInvalidArgument) {
				t.Errorf("%s: %v %v, want %v", c.name, l, err, c.want)
			}
		}
		done, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := g.TryAcquire(done, e.k("k"), time.Second); !errors.Is(err, context.Canceled) {
			t.Errorf("a context already done: %v", err)
		}
		for i := range setSize {
			if n := e.admin(i).DBSize(ctx).Val(); n != 0 {
				t.Errorf("r%d has %d keys after bad inputs", i+1, n)
			}
		}
		// A held lease refuses a bad renewal ttl without touching it.
		l, err := g.TryAcquire(ctx, e.k("held"), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if !eventually(5*time.Second, func() bool { return count(e.holders(ctx, e.k("held"), 3), l.OwnerToken()) == 3 }) {
			t.Fatalf("holders %q", e.holders(ctx, e.k("held"), 3))
		}
		p := e.admin(0).PTTL(ctx, e.k("held")).Val()
		if ok, err := l.Renew(ctx, 1500*time.Microsecond); ok || !errors.Is(err, prim.ErrInvalidTTL) {
			t.Errorf("renew with a bad ttl: %v %v", ok, err)
		}
		if l.State() != prim.StateHeld || e.admin(0).PTTL(ctx, e.k("held")).Val() > p {
			t.Errorf("a refused renewal changed the lease: %v", l.State())
		}
		l.Release(ctx)
	})
}

// TestRedlockMetricsAndLogger: WithMeterProvider and WithLogger apply to a
// group: its acquisitions, renewals and releases are counted (primitive
// "redlock", by result) and a lease a renewal ends is logged at Warn.
func TestRedlockMetricsAndLogger(t *testing.T) {
	forEachSet(t, func(t *testing.T, e *rlEnv) {
		ctx := ctxT(t, time.Minute)
		reader := sdkmetric.NewManualReader()
		var logs bytes.Buffer
		var logMu sync.Mutex
		logger := slog.New(slog.NewTextHandler(lockedWriter{&logs, &logMu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
		// loadedNodeTimeout: no node is slow here, and on CI's loaded
		// machine healthy nodes missed the default 100ms.
		g := group(t, e.clients(t, 3), prim.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
			prim.WithLogger(logger), prim.WithNodeTimeout(loadedNodeTimeout))
		key := e.k("m")
		l, err := g.TryAcquire(ctx, key, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := g.TryAcquire(ctx, key, 10*time.Second); !errors.Is(err, prim.ErrNotAcquired) {
			t.Fatal(err)
		}
		if ok, err := l.Renew(ctx, 10*time.Second); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if ok, err := l.Release(ctx); !ok || err != nil {
			t.Fatal(ok, err)
		}
		l2, err := g.TryAcquire(ctx, key, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			e.admin(i).Del(ctx, key)
		}
		if ok, err := l2.Renew(ctx, 10*time.Second); ok || err != nil {
			t.Fatalf("renew of a deleted lease: %v %v", ok, err)
		}
		for _, c := range []struct {
			name, result string
			want         int64
		}{
			{"prim.lock.acquire", "acquired", 2},
			{"prim.lock.acquire", "contended", 1},
			{"prim.lock.renew", "renewed", 1},
			{"prim.lock.renew", "not-owned", 1},
			{"prim.lock.release", "released", 1},
		} {
			if got := counterSum(t, reader, c.name, map[string]string{"primitive": "redlock", "result": c.result}); got != c.want {
				t.Errorf("%s{result=%s} = %d, want %d", c.name, c.result, got, c.want)
			}
		}
		logMu.Lock()
		defer logMu.Unlock()
		if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "redlock lease ended") {
			t.Errorf("the ended lease was not logged through WithLogger's logger:\n%s", logs.String())
		}
	})
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// TestRedlockWaitCleanups: a node command still in flight after the
// operation returned (r3 is loadedNodeTimeout away each way, twice the node
// timeout for a round trip) is background work WaitCleanups waits for: a
// short wait ends with the context's error, a long one returns nil once the
// reply came.
func TestRedlockWaitCleanups(t *testing.T) {
	forEachSet(t, func(t *testing.T, e *rlEnv) {
		ctx := ctxT(t, time.Minute)
		// loadedNodeTimeout (CI's loaded machine missed the default 100ms
		// on healthy nodes).
		g := group(t, e.clients(t, 3), prim.WithNodeTimeout(loadedNodeTimeout))
		slow := e.link(t, 2)
		if err := slow.Latency(loadedNodeTimeout, 0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { slow.Heal() })
		key := e.k("bg")
		l, err := g.TryAcquire(ctx, key, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := l.Release(ctx); !ok || err != nil {
			t.Fatal(ok, err)
		}
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if err := g.WaitCleanups(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitCleanups while r3's SET is on the wire (%v round trip): %v, want a deadline error", 2*loadedNodeTimeout, err)
		}
		long, cancel2 := context.WithTimeout(ctx, 10*loadedNodeTimeout)
		defer cancel2()
		if err := g.WaitCleanups(long); err != nil {
			t.Fatalf("WaitCleanups: %v", err)
		}
	})
}

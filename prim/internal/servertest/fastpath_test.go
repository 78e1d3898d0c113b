package servertest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/prim/internal/knobs"
	"github.com/coordtorture/coordtorture/testbed"
)

// What each build of the matrix answers to the fast commands (checked by hand
// on each: see the notes of issue 16). A build not listed (a user's binary) is
// asked directly, which is a weaker check.
var buildHas = map[string]struct{ delex, setIfeq bool }{
	"redis-7.0":  {false, false},
	"redis-8.0":  {false, false},
	"redis-8.6":  {true, true},
	"valkey-8.1": {false, true},
	"valkey-9.1": {false, true},
}

func hasFast(t *testing.T, e *env, build string) (delex, setIfeq bool) {
	if h, ok := buildHas[build]; ok {
		return h.delex, h.setIfeq
	}
	ctx := ctxT(t, 10*time.Second)
	k := e.k("probe")
	delex = !strings.Contains(fmt.Sprint(e.admin.Do(ctx, "DELEX", k, "IFEQ", "x").Err()), "unknown command")
	setIfeq = e.admin.Do(ctx, "SET", k, "x", "IFEQ", "y", "PX", 1000).Err() == redis.Nil
	return delex, setIfeq
}

// cmdLog records the lock commands a client sends (on its pool and its
// dedicated connections), in order.
type cmdLog struct {
	mu    sync.Mutex
	names []string
}

var lockCommands = []string{"delex", "set", "evalsha", "eval", "get"}

func (l *cmdLog) DialHook(next redis.DialHook) redis.DialHook { return next }
func (l *cmdLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); slices.Contains(lockCommands, n) {
			l.mu.Lock()
			l.names = append(l.names, n)
			l.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}
func (l *cmdLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// take returns the commands recorded since the last take, EVAL folded into
// EVALSHA (a script's first run on a server sends both).
func (l *cmdLog) take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, n := range l.names {
		if n == "eval" && len(out) > 0 && out[len(out)-1] == "evalsha" {
			continue
		}
		out = append(out, n)
	}
	l.names = nil
	return strings.Join(out, " ")
}

func loggedClient(t *testing.T, e *env, opts ...testbed.ClientOption) (redis.UniversalClient, *cmdLog) {
	c, _ := e.client(t, opts...)
	log := &cmdLog{}
	c.AddHook(log)
	return c, log
}

// lockOps acquires a lock (its commands are dropped from the log), renews it
// and releases it, and returns the commands of the renewal and the release.
func lockOps(t *testing.T, ctx context.Context, co *prim.Coordinator, log *cmdLog, lease, fence string) (renew, release string) {
	t.Helper()
	l, err := co.TryAcquireFencedLock(ctx, lease, fence, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	log.take()
	if ok, err := l.Renew(ctx, 10*time.Second); !ok || err != nil {
		t.Fatalf("renew: %v %v", ok, err)
	}
	renew = log.take()
	if r, err := l.Release(ctx); r != prim.Released || err != nil {
		t.Fatalf("release: %v %v", r, err)
	}
	return renew, log.take()
}

// On every build the commands a node has are used, and the scripts where it
// has not: release is DELEX (Redis 8.4+) or the script, renewal SET IFEQ
// (Redis 8.4+, Valkey 8.1+) or the script. The first use on a node without
// the command sends it once (the node's "unknown command" or "syntax error"),
// then the script; afterwards only the script.
func TestFastPathsByBuild(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		delex, setIfeq := hasFast(t, e, e.topo.Build.Name)
		c, log := loggedClient(t, e)
		co := prim.New(c)
		lease, fence := e.k("{f}:lease"), e.k("{f}:fence")
		want := func(first bool) (renew, release string) {
			renew, release = "evalsha", "evalsha"
			if setIfeq {
				renew = "set"
			} else if first {
				renew = "set evalsha"
			}
			if delex {
				release = "delex"
			} else if first {
				release = "delex evalsha"
			}
			return renew, release
		}
		for i, first := range []bool{true, false, false} {
			renew, release := lockOps(t, ctx, co, log, lease, fence)
			wr, wl := want(first)
			if renew != wr || release != wl {
				t.Fatalf("round %d: renewal sent %q (want %q), release sent %q (want %q)", i, renew, wr, release, wl)
			}
			if n := e.admin.Exists(ctx, lease).Val(); n != 0 {
				t.Fatal("the lease is still there after Released")
			}
		}
		if delex {
			// On the server too: one DELEX per release, no script ran for it.
			before := cmdstatCalls(t, e, "delex")
			if _, rel := lockOps(t, ctx, co, log, lease, fence); rel != "delex" {
				t.Fatalf("release sent %q", rel)
			}
			if n := cmdstatCalls(t, e, "delex") - before; n != 1 {
				t.Fatalf("INFO commandstats counts %d DELEX calls for one release, want 1", n)
			}
		}
	})
}

// cmdstatCalls reads one command's calls from INFO commandstats.
func cmdstatCalls(t *testing.T, e *env, name string) int64 {
	info, err := e.admin.Info(ctxT(t, 5*time.Second), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":calls="); ok {
			var n int64
			fmt.Sscanf(rest, "%d", &n)
			return n
		}
	}
	return 0
}

// The fast paths answer exactly what the scripts answer, on every build:
// release of a lease gone (AlreadyReleased), of a lease another owner holds
// and of a key of another type (NotOwned, untouched), renewal of either
// (false, untouched), and a missing key is never created by a renewal.
func TestFastPathAnswers(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		onBothPaths(t, e, "a", func(t *testing.T, ctx context.Context, co *prim.Coordinator, lease, fence string) {
			acquire := func() *prim.FencedLock {
				l, err := co.TryAcquireFencedLock(ctx, lease, fence, 10*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			// Gone.
			l := acquire()
			e.admin.Del(ctx, lease)
			if ok, err := l.Renew(ctx, time.Second); ok || err != nil {
				t.Fatalf("renew of a gone lease: %v %v", ok, err)
			}
			if e.admin.Exists(ctx, lease).Val() != 0 {
				t.Fatal("a renewal created the missing lease")
			}
			l = acquire()
			e.admin.Del(ctx, lease)
			if r, err := l.Release(ctx); r != prim.AlreadyReleased || err != nil {
				t.Fatalf("release of a gone lease: %v %v", r, err)
			}
			// Another owner's, or a key of another type.
			for _, typ := range []string{"string", "list"} {
				replace := func() {
					e.admin.Del(ctx, lease)
					if typ == "list" {
						e.admin.RPush(ctx, lease, "x")
					} else {
						e.admin.Set(ctx, lease, "someone:else", time.Minute)
					}
				}
				unchanged := func(what string) {
					t.Helper()
					if got := e.admin.Type(ctx, lease).Val(); got != typ {
						t.Fatalf("%s: another owner's %s became a %s", what, typ, got)
					}
					if typ == "string" && e.admin.Get(ctx, lease).Val() != "someone:else" {
						t.Fatalf("%s: another owner's value was changed", what)
					}
					if ttl := e.admin.PTTL(ctx, lease).Val(); typ == "string" && ttl < 50*time.Second {
						t.Fatalf("%s: another owner's expiry was changed (%v left)", what, ttl)
					}
				}
				e.admin.Del(ctx, lease)
				l = acquire()
				replace()
				if ok, err := l.Renew(ctx, time.Second); ok || err != nil {
					t.Fatalf("renew of another owner's %s: %v %v", typ, ok, err)
				}
				unchanged("renew")
				e.admin.Del(ctx, lease)
				l = acquire()
				replace()
				if r, err := l.Release(ctx); r != prim.NotOwned || err != nil {
					t.Fatalf("release of another owner's %s: %v %v, want NotOwned", typ, r, err)
				}
				unchanged("release")
				e.admin.Del(ctx, lease)
			}
		})
	})
}

// A node that answered "unknown command" is sent the scripts only, until five
// minutes later (the record's clock is advanced): then the fast command is
// tried again. Shown on every build without DELEX, and on redis-8.6 with
// DELEX renamed away (rename-command DELEX ""), where it truly answers
// "unknown command" while SET IFEQ stays.
func TestReprobeAfterFiveMinutes(t *testing.T) {
	run := func(t *testing.T, e *env, setIfeq bool) {
		ctx := ctxT(t, time.Minute)
		c, log := loggedClient(t, e)
		co := prim.New(c)
		lease, fence := e.k("{p}:lease"), e.k("{p}:fence")
		renewFirst, renewThen := "set evalsha", "evalsha"
		if setIfeq {
			renewFirst, renewThen = "set", "set"
		}
		step := func(name, wantRenew, wantRelease string) {
			t.Helper()
			renew, release := lockOps(t, ctx, co, log, lease, fence)
			if renew != wantRenew || release != wantRelease {
				t.Fatalf("%s: renewal sent %q (want %q), release %q (want %q)", name, renew, wantRenew, release, wantRelease)
			}
		}
		step("first use", renewFirst, "delex evalsha")
		step("second use", renewThen, "evalsha")
		restore := knobs.AdvanceCapClock(5*time.Minute - 2*time.Second)
		defer restore()
		step("4m58s later", renewThen, "evalsha")
		knobs.AdvanceCapClock(3 * time.Second)
		step("5m01s later", renewFirst, "delex evalsha")
		step("after the re-probe", renewThen, "evalsha")
	}
	forEachBuild(t, func(t *testing.T, e *env) {
		delex, setIfeq := hasFast(t, e, e.topo.Build.Name)
		if !delex {
			run(t, e, setIfeq)
			return
		}
		topo, err := testbed.NewStandalone(context.Background(), e.topo.Build.Name, testbed.WithConfig(`rename-command DELEX ""`))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { topo.Close() })
		run(t, newEnv(t, topo), setIfeq)
	})
}

// An ACL refusal of DELEX is the user's, not the node's: it is no evidence
// that the node lacks DELEX. The release runs the script in the same call,
// and every later release tries DELEX again; once the user is granted DELEX
// the next release uses it, with no five-minute wait.
func TestACLRefusedProbeDoesNotSwitch(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		if delex, _ := hasFast(t, e, e.topo.Build.Name); !delex {
			t.Skip("the build has no DELEX to refuse")
		}
		ctx := ctxT(t, time.Minute)
		user := "nodelex-" + e.peer
		if err := e.admin.Do(ctx, "ACL", "SETUSER", user, "reset", "on", ">pw-"+user, "~*", "&*", "+@all", "-delex").Err(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.admin.Do(context.Background(), "ACL", "DELUSER", user) })
		// go-redis sends AUTH only when a password is set.
		c, log := loggedClient(t, e, testbed.WithOptions(func(o *redis.UniversalOptions) {
			o.Username, o.Password = user, "pw-"+user
		}))
		co := prim.New(c)
		lease, fence := e.k("{acl}:lease"), e.k("{acl}:fence")
		for i := range 3 {
			if _, rel := lockOps(t, ctx, co, log, lease, fence); rel != "delex evalsha" {
				t.Fatalf("release %d as a user without DELEX sent %q, want \"delex evalsha\" (refused, then the script)", i, rel)
			}
		}
		if err := e.admin.Do(ctx, "ACL", "SETUSER", user, "+delex").Err(); err != nil {
			t.Fatal(err)
		}
		if _, rel := lockOps(t, ctx, co, log, lease, fence); rel != "delex" {
			t.Fatalf("release once DELEX is granted sent %q, want \"delex\"", rel)
		}
	})
}

// A release whose DELEX times out is uncertain (the handle fails closed), and
// is no evidence about the node either: the next release sends DELEX again.
func TestTimedOutProbeDoesNotSwitch(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		c, log := loggedClient(t, e)
		link, err := e.topo.Link(e.peer, "n1")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = link.Heal() })
		co := prim.New(c, prim.WithCleanupTimeout(time.Second))
		lease, fence := e.k("{to}:lease"), e.k("{to}:fence")
		l, err := co.TryAcquireFencedLock(ctx, lease, fence, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		log.take()
		if err := link.Partition(); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = l.Release(rctx)
		cancel()
		if !errors.Is(err, prim.ErrUncertain) {
			t.Fatalf("release over a partitioned link: %v, want ErrUncertain", err)
		}
		if got := log.take(); got != "delex" {
			t.Fatalf("the timed-out release sent %q, want \"delex\"", got)
		}
		if err := link.Heal(); err != nil {
			t.Fatal(err)
		}
		e.admin.Del(ctx, lease)
		delex, _ := hasFast(t, e, e.topo.Build.Name)
		want := "delex"
		if !delex {
			want = "delex evalsha" // tried again: its "unknown command" is the evidence
		}
		if _, rel := lockOps(t, ctx, co, log, lease, fence); rel != want {
			t.Fatalf("release after a timed-out DELEX sent %q, want %q", rel, want)
		}
	})
}

// The record follows a Sentinel failover. From a redis-8.6 primary to a
// redis-8.6 replica that truly does not know DELEX (rename-command DELEX "" in
// its configuration: replication from 8.6 to an older build cannot be set up,
// and an ACL denial is no evidence): the first release there sends DELEX, gets
// "unknown command" and releases with the script in the same call, and the
// releases after it send the script only; SET IFEQ, which the new primary
// has, stays. Failing back to the first primary, the fast path returns at the
// re-probe five minutes later. Then from an older primary (redis-8.0) to a
// redis-8.6 replica (mixed versions, older to newer): the re-probe finds DELEX
// and SET IFEQ on the new primary.
func TestFailoverChangesFastPath(t *testing.T) {
	if !slices.Contains(testbed.Matrix(), "redis-8.6") {
		t.Skip("needs redis-8.6 in the matrix")
	}
	// settle acquires throwaway locks until the client reaches the new
	// primary, and drops their commands from the log.
	settle := func(t *testing.T, ctx context.Context, co *prim.Coordinator, log *cmdLog, ns string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for i := 0; ; i++ {
			_, err := co.TryAcquireFencedLock(ctx, fmt.Sprintf("{%s%d}:lease", ns, i), fmt.Sprintf("{%s%d}:fence", ns, i), time.Second)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no acquisition through the failover client within 30s: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		log.take()
	}
	step := func(t *testing.T, ctx context.Context, co *prim.Coordinator, log *cmdLog, key, name, wantRenew, wantRelease string) {
		t.Helper()
		renew, release := lockOps(t, ctx, co, log, "{"+key+"}:lease", "{"+key+"}:fence")
		if renew != wantRenew || release != wantRelease {
			t.Fatalf("%s: renewal sent %q (want %q), release %q (want %q)", name, renew, wantRenew, release, wantRelease)
		}
	}
	t.Run("8.6 to 8.6 without DELEX and back", func(t *testing.T) {
		ctx := ctxT(t, 3*time.Minute)
		defer knobs.AdvanceCapClock(0)()
		topo := testbed.Replicated(t, "redis-8.6", 1, 3, testbed.WithNodeConfig("n2", `rename-command DELEX ""`))
		c, err := topo.Client()
		if err != nil {
			t.Fatal(err)
		}
		log := &cmdLog{}
		c.AddHook(log)
		co := prim.New(c)
		step(t, ctx, co, log, "a", "on the 8.6 primary", "set", "delex")
		np, err := topo.FailoverSentinel(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if np.Name != "n2" {
			t.Fatalf("failed over to %s", np.Name)
		}
		settle(t, ctx, co, log, "w1-")
		step(t, ctx, co, log, "b", "first release on the new primary", "set", "delex evalsha")
		step(t, ctx, co, log, "c", "then", "set", "evalsha")
		if np, err = topo.FailoverSentinel(ctx); err != nil || np.Name != "n1" {
			t.Fatalf("failing back: %v %v", np, err)
		}
		settle(t, ctx, co, log, "w2-")
		step(t, ctx, co, log, "d", "back on n1, within five minutes", "set", "evalsha")
		knobs.AdvanceCapClock(reprobe)
		step(t, ctx, co, log, "e", "back on n1, five minutes later", "set", "delex")
	})
	t.Run("8.0 to 8.6", func(t *testing.T) {
		if !slices.Contains(testbed.Matrix(), "redis-8.0") {
			t.Skip("needs redis-8.0 in the matrix")
		}
		ctx := ctxT(t, 3*time.Minute)
		defer knobs.AdvanceCapClock(0)()
		topo := testbed.Replicated(t, "redis-8.0", 1, 3, testbed.WithNodeBuild("n2", "redis-8.6"))
		c, err := topo.Client()
		if err != nil {
			t.Fatal(err)
		}
		log := &cmdLog{}
		c.AddHook(log)
		co := prim.New(c)
		step(t, ctx, co, log, "a", "on the 8.0 primary", "set evalsha", "delex evalsha")
		if np, err := topo.FailoverSentinel(ctx); err != nil || np.Name != "n2" {
			t.Fatalf("failover: %v %v", np, err)
		}
		settle(t, ctx, co, log, "w1-")
		step(t, ctx, co, log, "b", "on the 8.6 primary, within five minutes", "evalsha", "evalsha")
		knobs.AdvanceCapClock(reprobe)
		step(t, ctx, co, log, "c", "on the 8.6 primary, five minutes later", "set", "delex")
	})
}

// reprobe is a little more than the five minutes after which a node is
// probed again.
const reprobe = 5*time.Minute + time.Second

// A node whose lease script found no hash-field expiry ("unknown command" to
// HPTTL) refuses named leases without sending anything for five minutes, then
// asks again. On servers with it, every attempt runs the script.
func TestHashFieldExpiryRecorded(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		defer knobs.AdvanceCapClock(0)()
		hfe := hasFieldExpiry(ctx, e.admin)
		c, log := loggedClient(t, e)
		co := prim.New(c)
		h := e.k("leases")
		attempt := func(name, want string) {
			t.Helper()
			l, err := co.TryAcquireLease(ctx, h, "f", time.Second)
			if hfe {
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				l.Release(ctx)
			} else if !errors.Is(err, prim.ErrFeatureUnsupported) {
				t.Fatalf("%s: %v, want ErrFeatureUnsupported", name, err)
			}
			if got := log.take(); got != want {
				t.Fatalf("%s sent %q, want %q", name, got, want)
			}
		}
		if hfe {
			attempt("first", "evalsha evalsha") // acquisition, release
			attempt("second", "evalsha evalsha")
			return
		}
		// No fallback: every acquisition asks the server (a record that
		// refused without asking would outlive a failover to a server that
		// has it).
		attempt("first", "evalsha")
		attempt("second", "evalsha")
	})
}

// beforeCmd runs a function once, right before the client's next command
// of that name.
type beforeCmd struct {
	name string
	mu   sync.Mutex
	f    func()
}

func (h *beforeCmd) arm(f func()) { h.mu.Lock(); h.f = f; h.mu.Unlock() }

func (h *beforeCmd) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *beforeCmd) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == h.name {
			h.mu.Lock()
			f := h.f
			h.f = nil
			h.mu.Unlock()
			if f != nil {
				f()
			}
		}
		return next(ctx, cmd)
	}
}
func (h *beforeCmd) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// When DELEX removes nothing (a lease gone and another owner's both answer
// 0) the release script follows, on the primary, and answers: gone is
// AlreadyReleased, another owner's NotOwned (untouched); no plain read is
// sent, which a client reading from replicas could send to a lagging one.
// The state may change between DELEX and the script; the script's answer is
// the one at its run: the lease gone meanwhile is AlreadyReleased, taken
// meanwhile NotOwned (untouched), and this owner's own value back (as a
// failover to a replica that still had it would bring) is removed: Released.
func TestDelexMiss(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		if delex, _ := hasFast(t, e, e.topo.Build.Name); !delex {
			t.Skip("the build has no DELEX")
		}
		ctx := ctxT(t, time.Minute)
		c, log := loggedClient(t, e)
		hook := &beforeCmd{name: "evalsha"}
		c.AddHook(hook)
		co := prim.New(c)
		lease, fence := e.k("{race}:lease"), e.k("{race}:fence")
		other := func(string) { e.admin.Set(ctx, lease, "other", time.Minute) }
		gone := func(string) { e.admin.Del(ctx, lease) }
		cases := []struct {
			name         string
			atDelex      func(own string) // the state DELEX finds
			beforeScript func(own string) // changed before the script, or nil
			want         prim.ReleaseResult
			wantLeftVal  string // "" : no key left
		}{
			{"gone", gone, nil, prim.AlreadyReleased, ""},
			{"another owner's", other, nil, prim.NotOwned, "other"},
			{"gone before the script", other, gone, prim.AlreadyReleased, ""},
			{"taken before the script", gone, other, prim.NotOwned, "other"},
			{"own value back before the script", other,
				func(own string) { e.admin.Set(ctx, lease, own, time.Minute) }, prim.Released, ""},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				e.admin.Del(ctx, lease)
				l, err := co.TryAcquireFencedLock(ctx, lease, fence, 10*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				own := l.OwnerToken()
				tc.atDelex(own)
				if tc.beforeScript != nil {
					hook.arm(func() { tc.beforeScript(own) })
				}
				log.take()
				r, err := l.Release(ctx)
				hook.arm(nil)
				if r != tc.want || err != nil {
					t.Fatalf("release: %v %v, want %v", r, err, tc.want)
				}
				if got, want := log.take(), "delex evalsha"; got != want {
					t.Fatalf("release sent %q, want %q", got, want)
				}
				if got := e.admin.Get(ctx, lease).Val(); got != tc.wantLeftVal {
					t.Fatalf("the key holds %q after the release, want %q", got, tc.wantLeftVal)
				}
			})
		}
	})
}

// A server out of memory (maxmemory reached, noeviction) refuses SET ("OOM
// command not allowed…") but not the renewal script's PEXPIRE, nor DELEX or
// the release script's DEL. Any error reply to SET IFEQ (WRONGTYPE aside)
// means SET did not run: the script renews in the same call, on every build
// (on redis-7.0/8.0 the OOM check precedes SET's parsing, so the probe never
// gets its "syntax error"), with the fast paths and with the scripts forced.
func TestOutOfMemoryRenewAndRelease(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		onBothPaths(t, e, "oom", func(t *testing.T, ctx context.Context, co *prim.Coordinator, lease, fence string) {
			l, err := co.TryAcquireFencedLock(ctx, lease, fence, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			policy := e.admin.ConfigGet(ctx, "maxmemory-policy").Val()["maxmemory-policy"]
			t.Cleanup(func() {
				ctx := ctxT(t, 10*time.Second)
				if err := e.admin.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
					t.Errorf("restoring maxmemory: %v", err)
				}
				if policy != "" {
					e.admin.ConfigSet(ctx, "maxmemory-policy", policy)
				}
			})
			if err := e.admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
				t.Fatal(err)
			}
			if err := e.admin.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
				t.Fatal(err)
			}
			if err := e.admin.Set(ctx, e.k("oom-probe"), "x", time.Second).Err(); err == nil || !strings.HasPrefix(err.Error(), "OOM") {
				t.Fatalf("the server is not out of memory: SET answered %v", err)
			}
			for i := range 3 {
				if ok, err := l.Renew(ctx, 10*time.Second); !ok || err != nil {
					t.Fatalf("renewal %d out of memory: %v %v, want true (the script renews)", i, ok, err)
				}
			}
			if ttl := e.admin.PTTL(ctx, lease).Val(); ttl < 9*time.Second {
				t.Fatalf("the lease has %v left after the renewal", ttl)
			}
			if r, err := l.Release(ctx); r != prim.Released || err != nil {
				t.Fatalf("release out of memory: %v %v, want Released", r, err)
			}
			if e.admin.Exists(ctx, lease).Val() != 0 {
				t.Fatal("the lease is still there after Released")
			}
		})
	})
}

// onBothPaths runs f twice, as subtests: with the fast paths, and with the
// scripts forced (knobs.SetForceFallback while the Coordinator is made), each
// on keys of its own under tag.
func onBothPaths(t *testing.T, e *env, tag string, f func(t *testing.T, ctx context.Context, co *prim.Coordinator, lease, fence string)) {
	for _, fallback := range []bool{false, true} {
		t.Run(fmt.Sprintf("fallback=%v", fallback), func(t *testing.T) {
			ctx := ctxT(t, time.Minute)
			restore := knobs.SetForceFallback(fallback)
			c, _ := e.client(t)
			co := prim.New(c)
			restore()
			f(t, ctx, co, e.k(fmt.Sprintf("{%s%v}:lease", tag, fallback)), e.k(fmt.Sprintf("{%s%v}:fence", tag, fallback)))
		})
	}
}

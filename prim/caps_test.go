package prim

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim/internal/knobs"
	"github.com/coordtorture/coordtorture/prim/internal/localserver"
)

// replyErr is a server error reply as go-redis returns it.
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

// Only a server's "does not know it" is evidence; the texts are the exact
// replies of the matrix's builds (issue 16's notes).
func TestLacks(t *testing.T) {
	unknown := replyErr("ERR unknown command 'DELEX', with args beginning with: 'k' 'IFEQ' 'v' ")
	syntax := replyErr("ERR syntax error")
	notEvidence := []error{
		nil,
		redis.Nil,
		replyErr("NOPERM User nodelex has no permissions to run the 'delex' command"),
		replyErr("LOADING Redis is loading the dataset in memory"),
		replyErr("READONLY You can't write against a read only replica."),
		replyErr("MOVED 3999 127.0.0.1:6381"),
		replyErr("ERR Key should be of string type if conditions are specified"),
		replyErr("WRONGTYPE Operation against a key holding the wrong kind of value"),
		context.DeadlineExceeded,
		&net.OpError{Op: "read", Err: errors.New("i/o timeout")},
		redis.ErrPoolTimeout,
	}
	for c := range numCaps {
		if !lacks(c, unknown) {
			t.Errorf("%v: %q is evidence", c, unknown)
		}
		if lacks(c, syntax) != (c == capSetIfeq) {
			t.Errorf("%v: a syntax error is evidence only for SET IFEQ (whose older servers parse SET)", c)
		}
		for _, err := range notEvidence {
			if lacks(c, err) {
				t.Errorf("%v: %v taken as evidence the node lacks it", c, err)
			}
		}
	}
	// Every error reply (the fast command did not run) but redis.Nil; a lost
	// reply or a timeout is none.
	for i, err := range notEvidence {
		if want := i >= 2 && i <= 7; errorReply(err) != want {
			t.Errorf("errorReply(%v) = %v", err, !want)
		}
	}
	if !errorReply(unknown) || !errorReply(syntax) || !errorReply(replyErr("OOM command not allowed when used memory > 'maxmemory'.")) {
		t.Error("errorReply: an error reply not recognised")
	}
}

// The record: try the fast command until an "unknown command" answer, then
// the fallback for five minutes on that node only, then try again.
func TestCapRecord(t *testing.T) {
	defer knobs.AdvanceCapClock(0)()
	r := newCapRecord()
	unknown := replyErr("ERR unknown command 'DELEX', with args beginning with: ")
	for _, err := range []error{replyErr("NOPERM no"), context.DeadlineExceeded, replyErr("LOADING x")} {
		if r.learn("a", capDelex, err) || !r.use("a", capDelex) {
			t.Fatalf("%v switched the node", err)
		}
	}
	if !r.learn("a", capDelex, unknown) {
		t.Fatal("unknown command not learned")
	}
	if r.use("a", capDelex) {
		t.Fatal("fast path used right after unknown command")
	}
	if !r.use("b", capDelex) || !r.use("a", capSetIfeq) {
		t.Fatal("the record is per node and per capability")
	}
	knobs.AdvanceCapClock(reprobeAfter - time.Second)
	if r.use("a", capDelex) {
		t.Fatal("re-probed before five minutes")
	}
	knobs.AdvanceCapClock(2 * time.Second)
	if !r.use("a", capDelex) {
		t.Fatal("not re-probed after five minutes")
	}
	if !r.use("a", capDelex) {
		t.Fatal("a re-probe is repeated until an answer decides")
	}
	defer knobs.SetForceFallback(true)()
	if newCapRecord().use("c", capDelex) {
		t.Fatal("ForceFallback ignored")
	}
}

// countHook counts the commands named name a client sends.
type countHook struct {
	name string
	n    atomic.Int64
}

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == h.name {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if cmd.Name() == h.name {
				h.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// The INCREX probe of the fixed-window limiter, on every build of the
// matrix: where the server answers "unknown command" (every build so far:
// INCREX is Redis 8.8+, Valkey 9.2+) the same call runs the script, and INCREX
// is not sent again for five minutes; where the server has it, it counts.
func TestIncrexProbe(t *testing.T) {
	defer knobs.AdvanceCapClock(0)()
	for _, build := range localserver.Matrix() {
		t.Run(build, func(t *testing.T) {
			ctx := context.Background()
			c, admin := standalone(t, build, nil)
			h := &countHook{name: "increx"}
			c.AddHook(h)
			lim, err := New(c).RateLimiters().FixedWindow("ctr", 10, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			allow := func() {
				t.Helper()
				if d, err := lim.Allow(ctx, 1); err != nil || !d.Allowed {
					t.Fatalf("Allow: %+v, %v", d, err)
				}
			}
			allow()
			if v := admin.Get(ctx, "ctr").Val(); v != "1" || admin.PTTL(ctx, "ctr").Val() <= 0 {
				t.Fatalf("counter %q, PTTL %v after one grant", v, admin.PTTL(ctx, "ctr").Val())
			}
			if h.n.Load() != 1 {
				t.Fatalf("INCREX sent %d times by the first decision", h.n.Load())
			}
			allow()
			fast := admin.Do(ctx, "increx", "probe", "byint", 1).Err() == nil
			if want := map[bool]int64{true: 2, false: 1}[fast]; h.n.Load() != want {
				t.Fatalf("INCREX sent %d times within five minutes (server has it: %v)", h.n.Load(), fast)
			}
			knobs.AdvanceCapClock(reprobeAfter + time.Second)
			allow()
			if want := map[bool]int64{true: 3, false: 2}[fast]; h.n.Load() != want {
				t.Fatalf("INCREX sent %d times after five minutes, want a second probe", h.n.Load())
			}
			if v := admin.Get(ctx, "ctr").Val(); v != "3" {
				t.Fatalf("counter %q after three grants", v)
			}
		})
	}
}

package servertest_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/coordtorture/coordtorture/prim"
)

// lockModel is what a fenced lock's handles must report: the current holder (an
// index into handles, or -1), the counter, and each handle's local state.
type lockModel struct {
	holder   int
	counter  int64
	released []bool // Release/Close ran to completion on the handle
	lost     []bool // the handle learned it no longer holds the lease
}

var rapidSeq atomic.Int64

// TestFencedLockStateMachine drives random acquire / renew / verify / release /
// close / expire steps against a real server and compares every answer with a
// model. Rapid generates the schedule and shrinks a failure to a minimal one.
func TestFencedLockStateMachine(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		c, _ := e.client(t)
		co := prim.New(c)
		ctx := context.Background()
		rapid.Check(t, func(rt *rapid.T) {
			n := rapidSeq.Add(1)
			lease, fence := e.k(fmt.Sprintf("{sm%d}:lease", n)), e.k(fmt.Sprintf("{sm%d}:fence", n))
			m := &lockModel{holder: -1}
			var handles []*prim.FencedLock
			pick := func(rt *rapid.T) int {
				if len(handles) == 0 {
					rt.Skip("no handle yet")
				}
				return rapid.IntRange(0, len(handles)-1).Draw(rt, "handle")
			}
			rt.Repeat(map[string]func(*rapid.T){
				"acquire": func(rt *rapid.T) {
					l, err := co.TryAcquireFencedLock(ctx, lease, fence, 10*time.Second)
					if m.holder >= 0 {
						if !errors.Is(err, prim.ErrNotAcquired) {
							rt.Fatalf("acquire while held by %d: %v, %v", m.holder, l, err)
						}
						return
					}
					if err != nil {
						rt.Fatalf("acquire of a free lock: %v", err)
					}
					m.counter++
					if l.FencingToken() != m.counter {
						rt.Fatalf("token %d, model %d", l.FencingToken(), m.counter)
					}
					handles = append(handles, l)
					m.released = append(m.released, false)
					m.lost = append(m.lost, false)
					m.holder = len(handles) - 1
				},
				"renew": func(rt *rapid.T) {
					i := pick(rt)
					ok, err := handles[i].Renew(ctx, 10*time.Second)
					if err != nil {
						rt.Fatal(err)
					}
					want := m.holder == i && !m.released[i] && !m.lost[i]
					if ok != want {
						rt.Fatalf("renew handle %d: %v, model %v", i, ok, want)
					}
					if !ok {
						m.lost[i] = true
					}
				},
				"verify": func(rt *rapid.T) {
					i := pick(rt)
					held, err := handles[i].VerifyStillHeld(ctx)
					if err != nil {
						rt.Fatal(err)
					}
					want := m.holder == i && !m.released[i] && !m.lost[i]
					if held != want {
						rt.Fatalf("verify handle %d: %v, model %v", i, held, want)
					}
					if !held {
						m.lost[i] = true
					}
				},
				"release": func(rt *rapid.T) {
					i := pick(rt)
					r, err := handles[i].Release(ctx)
					if err != nil {
						rt.Fatal(err)
					}
					want := prim.AlreadyReleased
					switch {
					case m.released[i]:
					case m.holder == i:
						want = prim.Released
					case m.holder >= 0:
						want = prim.NotOwned
					}
					if r != want {
						rt.Fatalf("release handle %d: %v, model %v", i, r, want)
					}
					m.released[i] = true
					if m.holder == i {
						m.holder = -1
					}
				},
				"close": func(rt *rapid.T) {
					i := pick(rt)
					if err := handles[i].Close(); err != nil {
						rt.Fatal(err)
					}
					if m.holder == i && !m.released[i] {
						m.holder = -1
					}
					m.released[i] = true
				},
				"expire": func(rt *rapid.T) {
					// The lease runs out on the server while its handle still
					// estimates time left (a pause, a skewed clock).
					if m.holder < 0 {
						rt.Skip("nothing to expire")
					}
					e.admin.Del(ctx, lease)
					m.holder = -1
				},
				"": func(rt *rapid.T) {
					// The counter only ever moves forward and matches the model.
					got, _ := e.admin.Get(ctx, fence).Int64()
					if got != m.counter {
						rt.Fatalf("counter %d, model %d", got, m.counter)
					}
					if m.holder >= 0 && e.admin.Get(ctx, lease).Val() != handles[m.holder].OwnerToken() {
						rt.Fatal("the lease does not hold the model holder's owner token")
					}
				},
			})
			for _, h := range handles {
				h.Close()
			}
		})
	})
}

package servertest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/coordtorture/coordtorture/prim"
)

// latchModel is what a latch key holds: the current generation (an index
// into the machine's generations, -1 when there is no latch) and its count.
type latchModel struct {
	gen   int
	count int64
}

// latchHandle is one CountdownLatch value and the generation it is of.
type latchHandle struct {
	l   *prim.CountdownLatch
	gen int
}

// latchWaiter is a Wait running in the background on a handle.
type latchWaiter struct {
	h      latchHandle
	cancel context.CancelFunc
	done   chan struct{}
	ok     bool
	err    error
}

// latchWaitBound is how late a waiter may learn that its generation completed
// or was replaced: a missed wake-up is caught by the re-read every 2 s.
const latchWaitBound = 4 * time.Second

// TestLatchStateMachine drives random create / reset / join / count-down /
// count / wait / delete steps on one latch key against a real server and
// compares every answer with a model: a signal of a replaced generation
// answers -1, of a completed one ErrLatchCompleted; Create fails while a
// latch exists, Join finds the current generation; waiters started in the
// background return true when their generation completes and false when it
// is replaced or deleted, and not before.
func TestLatchStateMachine(t *testing.T) {
	rapidOnBuilds(t, 50, 25, nil, func(rt *rapid.T, e *env, co *prim.Coordinator) {
		ctx := context.Background()
		{
			key := rapidKey(e, "latch")
			m := latchModel{gen: -1}
			gens := 0
			var (
				handles []latchHandle
				waiters []*latchWaiter
			)
			defer func() {
				for _, w := range waiters {
					w.cancel()
					<-w.done
				}
			}()
			pick := func(rt *rapid.T) latchHandle {
				if len(handles) == 0 {
					rt.Skip("no latch yet")
				}
				return rapid.SampledFrom(handles).Draw(rt, "handle")
			}
			set := func(rt *rapid.T, reset bool) {
				n := rapid.Int64Range(0, 3).Draw(rt, "count")
				set := co.CreateCountdownLatch
				if reset {
					set = co.ResetCountdownLatch
				}
				l, err := set(ctx, key, n)
				if !reset && m.gen >= 0 {
					if !errors.Is(err, prim.ErrLatchExists) {
						rt.Fatalf("create over generation %d: %v, %v; model ErrLatchExists", m.gen, l, err)
					}
					return
				}
				if err != nil {
					rt.Fatalf("create/reset (count %d): %v", n, err)
				}
				m = latchModel{gen: gens, count: n}
				gens++
				handles = append(handles, latchHandle{l, m.gen})
			}
			rt.Repeat(map[string]func(*rapid.T){
				"create": func(rt *rapid.T) { set(rt, false) },
				"reset":  func(rt *rapid.T) { set(rt, true) },
				"join": func(rt *rapid.T) {
					l, err := co.JoinCountdownLatch(ctx, key)
					if m.gen < 0 {
						if !errors.Is(err, prim.ErrNotFound) {
							rt.Fatalf("join of no latch: %v, %v; model ErrNotFound", l, err)
						}
						return
					}
					if err != nil {
						rt.Fatalf("join: %v", err)
					}
					cur := handles[len(handles)-1]
					for _, h := range handles {
						if h.gen == m.gen {
							cur = h
							break
						}
					}
					if l.Generation() != cur.l.Generation() {
						rt.Fatalf("join: generation %q, model %q", l.Generation(), cur.l.Generation())
					}
					handles = append(handles, latchHandle{l, m.gen})
				},
				"countDown": func(rt *rapid.T) {
					h := pick(rt)
					n, err := h.l.CountDown(ctx)
					switch {
					case h.gen != m.gen:
						if n != -1 || err != nil {
							rt.Fatalf("count down of replaced generation %d: %d, %v; model -1", h.gen, n, err)
						}
					case m.count == 0:
						if !errors.Is(err, prim.ErrLatchCompleted) {
							rt.Fatalf("count down of completed generation %d: %d, %v; model ErrLatchCompleted", h.gen, n, err)
						}
					default:
						m.count--
						if n != m.count || err != nil {
							rt.Fatalf("count down of generation %d: %d, %v; model %d", h.gen, n, err, m.count)
						}
					}
				},
				"count": func(rt *rapid.T) {
					h := pick(rt)
					n, err := h.l.Count(ctx)
					want := int64(-1)
					if h.gen == m.gen {
						want = m.count
					}
					if n != want || err != nil {
						rt.Fatalf("count of generation %d: %d, %v; model %d", h.gen, n, err, want)
					}
				},
				"wait": func(rt *rapid.T) {
					// A waiter in the background, judged by every check.
					h := pick(rt)
					wctx, cancel := context.WithCancel(ctx)
					w := &latchWaiter{h: h, cancel: cancel, done: make(chan struct{})}
					go func() {
						defer close(w.done)
						w.ok, w.err = h.l.Wait(wctx)
					}()
					waiters = append(waiters, w)
				},
				"delete": func(rt *rapid.T) {
					// The caller's cleanup: the generation is lost.
					e.admin.Del(ctx, key)
					m.gen = -1
				},
				"": func(rt *rapid.T) {
					// Each waiter: true once its generation completed, false
					// once replaced or deleted, still waiting otherwise.
					var still []*latchWaiter
					for _, w := range waiters {
						switch {
						case w.h.gen != m.gen || m.count == 0:
							want := w.h.gen == m.gen
							select {
							case <-w.done:
							case <-time.After(latchWaitBound):
								rt.Fatalf("a waiter of generation %d still waits %v after its generation %s", w.h.gen, latchWaitBound,
									map[bool]string{true: "completed", false: "was replaced or deleted"}[want])
							}
							if w.ok != want || w.err != nil {
								rt.Fatalf("a waiter of generation %d: %v, %v; model %v", w.h.gen, w.ok, w.err, want)
							}
						default:
							select {
							case <-w.done:
								rt.Fatalf("a waiter of generation %d (count %d) returned %v, %v", w.h.gen, m.count, w.ok, w.err)
							default:
							}
							still = append(still, w)
						}
					}
					waiters = still
					// The key holds the model's count.
					if m.gen >= 0 {
						if got, _ := e.admin.HGet(ctx, key, "count").Int64(); got != m.count {
							rt.Fatalf("the key's count %d, model %d", got, m.count)
						}
					} else if n := e.admin.Exists(ctx, key).Val(); n != 0 {
						rt.Fatalf("the key exists; the model has no latch")
					}
				},
			})
		}
	})
}

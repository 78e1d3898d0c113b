package servertest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/prim/ratelimithttp"
	"github.com/coordtorture/coordtorture/testbed"
)

// The net/http middleware on a real httptest.Server, its limiters on a real
// server of the first build of the matrix.

// onFirstBuild runs f against the shared server of the matrix's first build.
func onFirstBuild(t *testing.T, f func(t *testing.T, env *env)) {
	t.Helper()
	b := testbed.Matrix()[0]
	t.Run(b, func(t *testing.T) {
		topo, err := server(b)
		if err != nil {
			t.Fatal(err)
		}
		f(t, newEnv(t, topo))
	})
}

// trackedLimiter is a real prim limiter whose Close the test can see.
type trackedLimiter struct {
	*prim.Limiter
	key    string
	closed atomic.Bool
}

func (l *trackedLimiter) Close() error { l.closed.Store(true); return l.Limiter.Close() }

var factoryRun atomic.Int64

// limiterFactory makes fixed-window limiters (limit per window, opts) under
// the test's namespace and remembers every one it made, by key.
type limiterFactory struct {
	mu   sync.Mutex
	made []*trackedLimiter
}

// Each call has keys of its own (a run number in the prefix), so a repeated
// run (-count) starts from fresh server state.
func (f *limiterFactory) of(rl *prim.RateLimiters, ns string, limit int64, window time.Duration, opts ...prim.LimiterOption) ratelimithttp.Factory {
	ns = fmt.Sprintf("%s%d:", ns, factoryRun.Add(1))
	return func(key string) (prim.RateLimiter, error) {
		l, err := rl.FixedWindow(ns+key, limit, window, opts...)
		if err != nil {
			return nil, err
		}
		tl := &trackedLimiter{Limiter: l, key: key}
		f.mu.Lock()
		f.made = append(f.made, tl)
		f.mu.Unlock()
		return tl, nil
	}
}

func (f *limiterFactory) list() []*trackedLimiter {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*trackedLimiter(nil), f.made...)
}

// okHandler answers 200 and counts the requests it served.
func okHandler(served *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		served.Add(1)
		io.WriteString(w, "ok")
	})
}

// get sends a GET with header X-Client: client (when not empty).
func get(t *testing.T, url, client string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if client != "" {
		req.Header.Set("X-Client", client)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func headerInt(t *testing.T, resp *http.Response, name string) int64 {
	t.Helper()
	v := resp.Header.Get(name)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("header %s = %q: %v", name, v, err)
	}
	return n
}

// TestMiddlewareRejects: within the limit requests pass with the RateLimit-*
// headers; beyond it 429 with Retry-After in whole seconds rounded up; keys
// are limited apart.
func TestMiddlewareRejects(t *testing.T) {
	onFirstBuild(t, func(t *testing.T, env *env) {
		c, _ := env.client(t)
		rl := prim.New(c).RateLimiters()
		var f limiterFactory
		window := 2500 * time.Millisecond
		m := ratelimithttp.New(f.of(rl, env.k("mw:"), 2, window), ratelimithttp.KeyByHeader("X-Client"))
		defer m.Close()
		var served atomic.Int64
		srv := httptest.NewServer(m.Handler(okHandler(&served)))
		defer srv.Close()

		start := time.Now()
		for i, wantRemaining := range []int64{1, 0} {
			resp := get(t, srv.URL, "alice")
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("request %d: %s", i, resp.Status)
			}
			if l, r, reset := headerInt(t, resp, "RateLimit-Limit"), headerInt(t, resp, "RateLimit-Remaining"), headerInt(t, resp, "RateLimit-Reset"); l != 2 || r != wantRemaining || reset < 1 || reset > 3 {
				t.Fatalf("request %d: RateLimit-Limit %d, -Remaining %d, -Reset %d", i, l, r, reset)
			}
			if resp.Header.Get("Retry-After") != "" {
				t.Fatalf("request %d granted with Retry-After", i)
			}
		}
		resp := get(t, srv.URL, "alice")
		elapsed := time.Since(start)
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("third request: %s, want 429", resp.Status)
		}
		ra := headerInt(t, resp, "Retry-After")
		if ra < 1 || ra > 3 {
			t.Fatalf("Retry-After %d for a %v window", ra, window)
		}
		// Less than 500ms after the window began, 2s < RetryAfter <= 2.5s:
		// rounded up that is 3 (rounded down or to the nearest, 2).
		if elapsed < 400*time.Millisecond && ra != 3 {
			t.Fatalf("Retry-After %d %v into a %v window, want 3 (rounded up)", ra, elapsed, window)
		}
		if r := headerInt(t, resp, "RateLimit-Remaining"); r != 0 {
			t.Fatalf("refused with RateLimit-Remaining %d", r)
		}
		if served.Load() != 2 {
			t.Fatalf("next served %d requests, want 2", served.Load())
		}
		if resp := get(t, srv.URL, "bob"); resp.StatusCode != http.StatusOK {
			t.Fatalf("another key: %s", resp.Status)
		}
		if m.Limiters() != 2 {
			t.Fatalf("%d limiters for two keys", m.Limiters())
		}
		// After the window (server time), alice passes again.
		time.Sleep(time.Duration(ra) * time.Second)
		if resp := get(t, srv.URL, "alice"); resp.StatusCode != http.StatusOK {
			t.Fatalf("after Retry-After: %s", resp.Status)
		}
	})
}

// TestMiddlewareWait: with WithWait a refused request waits in the limiter's
// queue and is admitted after the window; a wait bounded below the window
// gets 429.
func TestMiddlewareWait(t *testing.T) {
	onFirstBuild(t, func(t *testing.T, env *env) {
		c, _ := env.client(t)
		rl := prim.New(c).RateLimiters()
		var f limiterFactory
		window := time.Second
		m := ratelimithttp.New(f.of(rl, env.k("mw:"), 1, window, prim.WithQueue(5, prim.OldestFirst)),
			ratelimithttp.KeyByHeader("X-Client"), ratelimithttp.WithWait(10*time.Second))
		defer m.Close()
		var served atomic.Int64
		srv := httptest.NewServer(m.Handler(okHandler(&served)))
		defer srv.Close()
		if resp := get(t, srv.URL, "alice"); resp.StatusCode != http.StatusOK {
			t.Fatalf("first: %s", resp.Status)
		}
		start := time.Now()
		resp := get(t, srv.URL, "alice")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("queued request: %s, want 200 after the window", resp.Status)
		}
		if el := time.Since(start); el < window/3 {
			t.Fatalf("queued request admitted after %v, before its window could end", el)
		}

		short := ratelimithttp.New(f.of(rl, env.k("mw:"), 1, 5*time.Second, prim.WithQueue(5, prim.OldestFirst)),
			ratelimithttp.KeyByHeader("X-Client"), ratelimithttp.WithWait(200*time.Millisecond))
		defer short.Close()
		srv2 := httptest.NewServer(short.Handler(okHandler(&served)))
		defer srv2.Close()
		if resp := get(t, srv2.URL, "carol"); resp.StatusCode != http.StatusOK {
			t.Fatalf("first: %s", resp.Status)
		}
		start = time.Now()
		if resp := get(t, srv2.URL, "carol"); resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("wait bounded at 200ms in a 5s window: %s, want 429", resp.Status)
		}
		if el := time.Since(start); el > 4*time.Second {
			t.Fatalf("bounded wait took %v", el)
		}
	})
}

// TestMiddlewareIdleAndBound: idle limiters are dropped and closed after the
// idle timeout; at the bound the idlest is dropped for a new key; when every
// limiter is busy a new key gets 503 (or passes with WithFailOpen).
func TestMiddlewareIdleAndBound(t *testing.T) {
	onFirstBuild(t, func(t *testing.T, env *env) {
		c, _ := env.client(t)
		rl := prim.New(c).RateLimiters()
		t.Run("idle", func(t *testing.T) {
			var f limiterFactory
			m := ratelimithttp.New(f.of(rl, env.k("idle:"), 100, time.Minute), ratelimithttp.KeyByHeader("X-Client"),
				ratelimithttp.WithIdleTimeout(200*time.Millisecond))
			defer m.Close()
			var served atomic.Int64
			srv := httptest.NewServer(m.Handler(okHandler(&served)))
			defer srv.Close()
			get(t, srv.URL, "a")
			time.Sleep(300 * time.Millisecond)
			get(t, srv.URL, "b") // finds a idle
			made := f.list()
			if len(made) != 2 || made[0].key != "a" || !made[0].closed.Load() || made[1].closed.Load() {
				t.Fatalf("after a's idle timeout: %d limiters made, a closed %v", len(made), len(made) > 0 && made[0].closed.Load())
			}
			if m.Limiters() != 1 {
				t.Fatalf("%d limiters held, want 1", m.Limiters())
			}
			if resp := get(t, srv.URL, "a"); resp.StatusCode != http.StatusOK || headerInt(t, resp, "RateLimit-Remaining") != 98 {
				t.Fatalf("a again: %s, remaining %s (the server kept its count)", resp.Status, resp.Header.Get("RateLimit-Remaining"))
			}
			if len(f.list()) != 3 {
				t.Fatalf("a's new limiter not made: %d", len(f.list()))
			}
		})
		t.Run("bound", func(t *testing.T) {
			var f limiterFactory
			m := ratelimithttp.New(f.of(rl, env.k("bound:"), 100, time.Minute), ratelimithttp.KeyByHeader("X-Client"),
				ratelimithttp.WithMaxLimiters(2))
			defer m.Close()
			var served atomic.Int64
			srv := httptest.NewServer(m.Handler(okHandler(&served)))
			defer srv.Close()
			get(t, srv.URL, "a")
			time.Sleep(20 * time.Millisecond)
			get(t, srv.URL, "b")
			get(t, srv.URL, "c") // a is the idlest
			made := f.list()
			if len(made) != 3 || !made[0].closed.Load() || made[1].closed.Load() || made[2].closed.Load() || m.Limiters() != 2 {
				t.Fatalf("at the bound: %d made, %d held, closed a=%v b=%v", len(made), m.Limiters(), made[0].closed.Load(), made[1].closed.Load())
			}
		})
		for _, failOpen := range []bool{false, true} {
			t.Run(fmt.Sprintf("all-busy/fail-open=%v", failOpen), func(t *testing.T) {
				var f limiterFactory
				opts := []ratelimithttp.Option{ratelimithttp.WithMaxLimiters(1), ratelimithttp.WithWait(5 * time.Second),
					ratelimithttp.WithLogger(slog.New(slog.DiscardHandler))}
				if failOpen {
					opts = append(opts, ratelimithttp.WithFailOpen())
				}
				m := ratelimithttp.New(f.of(rl, env.k(fmt.Sprintf("busy%v:", failOpen)), 1, 2*time.Second, prim.WithQueue(5, prim.OldestFirst)),
					ratelimithttp.KeyByHeader("X-Client"), opts...)
				defer m.Close()
				var served atomic.Int64
				srv := httptest.NewServer(m.Handler(okHandler(&served)))
				defer srv.Close()
				get(t, srv.URL, "a") // takes a's permit
				done := make(chan int, 1)
				go func() {
					req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
					req.Header.Set("X-Client", "a")
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						done <- 0
						return
					}
					resp.Body.Close()
					done <- resp.StatusCode
				}()
				made := f.list()
				deadline := time.Now().Add(5 * time.Second)
				for made[0].Stats().QueuedPermits != 1 {
					if time.Now().After(deadline) {
						t.Fatal("a's second request never queued")
					}
					time.Sleep(5 * time.Millisecond)
				}
				want := http.StatusServiceUnavailable
				if failOpen {
					want = http.StatusOK
				}
				if resp := get(t, srv.URL, "b"); resp.StatusCode != want {
					t.Fatalf("new key while the only limiter is busy: %s, want %d", resp.Status, want)
				}
				if code := <-done; code != http.StatusOK {
					t.Fatalf("queued request: %d", code)
				}
			})
		}
	})
}

// TestMiddlewareErrors: a key error answers 400 (or the handler's answer)
// without reaching next; a limiter that cannot reach its server fails closed
// (503) by default and open with WithFailOpen; after Close requests get 503.
func TestMiddlewareErrors(t *testing.T) {
	onFirstBuild(t, func(t *testing.T, env *env) {
		c, _ := env.client(t)
		rl := prim.New(c).RateLimiters()
		var served atomic.Int64
		var f limiterFactory
		m := ratelimithttp.New(f.of(rl, env.k("err:"), 10, time.Minute), ratelimithttp.KeyByHeader("X-Client"))
		srv := httptest.NewServer(m.Handler(okHandler(&served)))
		defer srv.Close()
		if resp := get(t, srv.URL, ""); resp.StatusCode != http.StatusBadRequest || served.Load() != 0 {
			t.Fatalf("no key: %s, served %d", resp.Status, served.Load())
		}
		custom := ratelimithttp.New(f.of(rl, env.k("err:"), 10, time.Minute), ratelimithttp.KeyByHeader("X-Client"),
			ratelimithttp.WithKeyErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
				if !errors.Is(err, ratelimithttp.ErrNoKey) {
					t.Errorf("key error %v, want ErrNoKey", err)
				}
				w.WriteHeader(http.StatusUnauthorized)
			}))
		srvCustom := httptest.NewServer(custom.Handler(okHandler(&served)))
		defer srvCustom.Close()
		if resp := get(t, srvCustom.URL, ""); resp.StatusCode != http.StatusUnauthorized || served.Load() != 0 {
			t.Fatalf("no key, custom handler: %s", resp.Status)
		}

		if resp := get(t, srv.URL, "a"); resp.StatusCode != http.StatusOK {
			t.Fatalf("before Close: %s", resp.Status)
		}
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		if resp := get(t, srv.URL, "a"); resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("after Close: %s", resp.Status)
		}
		for _, l := range f.list()[:1] {
			if !l.closed.Load() {
				t.Fatal("Close left a limiter open")
			}
		}

		// A client of nothing (a closed port): every decision fails. MaxRetries
		// -1 only makes each refused dial fail at once; with the defaults the
		// answer is the same 503, three back-offs later.
		dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
		defer dead.Close()
		deadRL := prim.New(dead).RateLimiters()
		for _, failOpen := range []bool{false, true} {
			opts := []ratelimithttp.Option{ratelimithttp.WithLogger(slog.New(slog.DiscardHandler))}
			want := http.StatusServiceUnavailable
			if failOpen {
				opts, want = append(opts, ratelimithttp.WithFailOpen()), http.StatusOK
			}
			before := served.Load()
			dm := ratelimithttp.New(f.of(deadRL, "x:", 10, time.Minute), ratelimithttp.KeyByIP, opts...)
			dsrv := httptest.NewServer(dm.Handler(okHandler(&served)))
			resp := get(t, dsrv.URL, "")
			dsrv.Close()
			dm.Close()
			if resp.StatusCode != want || (served.Load() > before) != failOpen {
				t.Fatalf("unreachable limiter, fail open %v: %s, served %d", failOpen, resp.Status, served.Load()-before)
			}
		}

		// Close while a request waits in a queue: 503 at once, even failing open.
		wm := ratelimithttp.New(f.of(rl, env.k("closewait:"), 1, 10*time.Second, prim.WithQueue(5, prim.OldestFirst)),
			ratelimithttp.KeyByHeader("X-Client"), ratelimithttp.WithWait(20*time.Second), ratelimithttp.WithFailOpen(),
			ratelimithttp.WithLogger(slog.New(slog.DiscardHandler)))
		wsrv := httptest.NewServer(wm.Handler(okHandler(&served)))
		defer wsrv.Close()
		if resp := get(t, wsrv.URL, "w"); resp.StatusCode != http.StatusOK {
			t.Fatalf("first: %s", resp.Status)
		}
		done := make(chan int, 1)
		go func() {
			req, _ := http.NewRequest(http.MethodGet, wsrv.URL, nil)
			req.Header.Set("X-Client", "w")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
		made := f.list()
		waiting := made[len(made)-1]
		deadline := time.Now().Add(5 * time.Second)
		for waiting.Stats().QueuedPermits != 1 {
			if time.Now().After(deadline) {
				t.Fatal("the second request never queued")
			}
			time.Sleep(5 * time.Millisecond)
		}
		start := time.Now()
		wm.Close()
		select {
		case code := <-done:
			if code != http.StatusServiceUnavailable {
				t.Fatalf("queued request at Close: %d, want 503", code)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Close left the queued request waiting")
		}
		if el := time.Since(start); el > 3*time.Second {
			t.Fatalf("queued request released %v after Close", el)
		}
	})
}

// TestMiddlewareWeight: WithWeight takes that many permits per request; a
// request heavier than the limit is refused without Retry-After (it can never
// pass); a negative weight is a request error (400).
func TestMiddlewareWeight(t *testing.T) {
	onFirstBuild(t, func(t *testing.T, env *env) {
		c, _ := env.client(t)
		rl := prim.New(c).RateLimiters()
		var f limiterFactory
		m := ratelimithttp.New(f.of(rl, env.k("w:"), 5, time.Minute), ratelimithttp.KeyByIP,
			ratelimithttp.WithLogger(slog.New(slog.DiscardHandler)),
			ratelimithttp.WithWeight(func(r *http.Request) int64 {
				n, _ := strconv.ParseInt(r.Header.Get("X-Client"), 10, 64)
				return n
			}))
		defer m.Close()
		var served atomic.Int64
		srv := httptest.NewServer(m.Handler(okHandler(&served)))
		defer srv.Close()
		resp := get(t, srv.URL, "3")
		if resp.StatusCode != http.StatusOK || headerInt(t, resp, "RateLimit-Remaining") != 2 {
			t.Fatalf("weight 3 of 5: %s, remaining %s", resp.Status, resp.Header.Get("RateLimit-Remaining"))
		}
		resp = get(t, srv.URL, "3")
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("weight 3 with 2 left: %s, Retry-After %q", resp.Status, resp.Header.Get("Retry-After"))
		}
		resp = get(t, srv.URL, "6")
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "" {
			t.Fatalf("weight 6 over a limit of 5: %s, Retry-After %q (want 429 without)", resp.Status, resp.Header.Get("Retry-After"))
		}
		// The server made no decision: the limit is known, the remaining
		// count and reset are not.
		if h := resp.Header; h.Get("RateLimit-Limit") != "5" || h.Get("RateLimit-Remaining") != "" || h.Get("RateLimit-Reset") != "" {
			t.Fatalf("weight 6 over a limit of 5: RateLimit-Limit %q, -Remaining %q, -Reset %q; want 5 and no others",
				h.Get("RateLimit-Limit"), h.Get("RateLimit-Remaining"), h.Get("RateLimit-Reset"))
		}
		if resp := get(t, srv.URL, "-1"); resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("negative weight: %s, want 400", resp.Status)
		}
		if served.Load() != 1 {
			t.Fatalf("served %d", served.Load())
		}
	})
}

// TestMiddlewareNegativeWeightFailOpen: a negative weight (e.g. ContentLength
// -1 of a chunked body) is the request's error, not the limiter's: with
// WithFailOpen it is still refused (400 through the key-error handler, with
// prim.ErrNegativePermits), never passed on unlimited, never logged as a
// limiter failure.
func TestMiddlewareNegativeWeightFailOpen(t *testing.T) {
	onFirstBuild(t, func(t *testing.T, env *env) {
		c, _ := env.client(t)
		rl := prim.New(c).RateLimiters()
		var f limiterFactory
		var logs bytes.Buffer
		var keyErr atomic.Value
		m := ratelimithttp.New(f.of(rl, env.k("wfo:"), 5, time.Minute), ratelimithttp.KeyByIP,
			ratelimithttp.WithFailOpen(),
			ratelimithttp.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
			ratelimithttp.WithKeyErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
				keyErr.Store(err)
				http.Error(w, "bad weight", http.StatusBadRequest)
			}),
			ratelimithttp.WithWeight(func(r *http.Request) int64 { return r.ContentLength }))
		defer m.Close()
		var served atomic.Int64
		srv := httptest.NewServer(m.Handler(okHandler(&served)))
		defer srv.Close()
		// A chunked body: ContentLength -1 on the server.
		req, err := http.NewRequest(http.MethodPost, srv.URL, io.MultiReader(strings.NewReader("chunked")))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || served.Load() != 0 {
			t.Fatalf("negative weight with WithFailOpen: %s, served %d; want 400, not served", resp.Status, served.Load())
		}
		if err, _ := keyErr.Load().(error); !errors.Is(err, prim.ErrNegativePermits) {
			t.Fatalf("key-error handler got %v, want prim.ErrNegativePermits", err)
		}
		if logs.Len() != 0 {
			t.Fatalf("logged as a limiter failure: %s", logs.String())
		}
	})
}

// TestMiddlewareWaitOutage: with WithWait, a Redis that does not answer is an
// outage, not a queue that took too long (issue 31, item 6): the request gets
// 503 (fail closed) or is passed on (WithFailOpen), never 429. The limiter's
// link is cut silently (commands go unanswered), so the decision in flight
// when the wait's bound ends is uncertain.
func TestMiddlewareWaitOutage(t *testing.T) {
	onFirstBuild(t, func(t *testing.T, env *env) {
		c, _ := env.client(t)
		link, err := env.topo.Link(env.peer, "n1")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = link.Heal() })
		rl := prim.New(c).RateLimiters()
		var f limiterFactory
		// Warm: the script cached and the connections made.
		warm := ratelimithttp.New(f.of(rl, env.k("outage:"), 10, time.Minute), ratelimithttp.KeyByHeader("X-Client"))
		wsrv := httptest.NewServer(warm.Handler(okHandler(new(atomic.Int64))))
		if resp := get(t, wsrv.URL, "warm"); resp.StatusCode != http.StatusOK {
			t.Fatalf("warm-up: %s", resp.Status)
		}
		wsrv.Close()
		warm.Close()
		if err := link.Partition(); err != nil {
			t.Fatal(err)
		}
		for _, failOpen := range []bool{false, true} {
			var served atomic.Int64
			opts := []ratelimithttp.Option{ratelimithttp.WithWait(300 * time.Millisecond), ratelimithttp.WithLogger(slog.New(slog.DiscardHandler))}
			want := http.StatusServiceUnavailable
			if failOpen {
				opts, want = append(opts, ratelimithttp.WithFailOpen()), http.StatusOK
			}
			m := ratelimithttp.New(f.of(rl, env.k("outage:"), 10, time.Minute), ratelimithttp.KeyByHeader("X-Client"), opts...)
			srv := httptest.NewServer(m.Handler(okHandler(&served)))
			resp := get(t, srv.URL, "a")
			srv.Close()
			m.Close()
			if resp.StatusCode != want || (served.Load() > 0) != failOpen {
				t.Fatalf("WithWait, Redis not answering, fail open %v: %s, served %d; want %d", failOpen, resp.Status, served.Load(), want)
			}
		}
	})
}

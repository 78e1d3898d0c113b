package ratelimithttp_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/prim/ratelimithttp"
)

// Limit each client IP to 100 requests a minute on a shared fixed window;
// requests over the limit wait up to 2s in a local queue of 20 before a 429.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	limiters := prim.New(rdb).WithPrefix("ratelimit:").RateLimiters()

	m := ratelimithttp.New(
		func(key string) (prim.RateLimiter, error) {
			return limiters.FixedWindow("api:"+key, 100, time.Minute, prim.WithQueue(20, prim.OldestFirst))
		},
		ratelimithttp.KeyByIP,
		ratelimithttp.WithWait(2*time.Second),
		ratelimithttp.WithIdleTimeout(5*time.Minute),
	)
	defer m.Close()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello") })
	srv := &http.Server{Addr: ":8080", Handler: m.Handler(mux)}
	_ = srv // srv.ListenAndServe()
}

// Key by API key and route: each API key gets its own limit per route. The
// middleware wraps each handler on the mux, so the request's pattern is set.
func ExampleKeys() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	limiters := prim.New(rdb).RateLimiters()
	m := ratelimithttp.New(
		func(key string) (prim.RateLimiter, error) {
			return limiters.TokenBucket("api:"+key, 50, 10, time.Second)
		},
		ratelimithttp.Keys(ratelimithttp.KeyByHeader("X-API-Key"), ratelimithttp.KeyByRoute),
	)
	defer m.Close()
	mux := http.NewServeMux()
	mux.Handle("POST /orders", m.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
}

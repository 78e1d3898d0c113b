// Package ratelimithttp is net/http middleware that rate-limits requests with
// prim's Redis-backed rate limiters (or any [prim.RateLimiter]).
//
// Each request is mapped to a key by a [KeyFunc] (the client's IP address, an
// API key, the route, or a combination); each key gets its own limiter, made by
// the caller's factory the first time the key is seen and closed again when it
// has been idle for a while (WithIdleTimeout) or when the number of limiters
// reaches its bound (WithMaxLimiters). The limits themselves live on the
// server: dropping a local limiter forgets nothing but its local statistics,
// so a dropped key's next request makes a new limiter on the same state.
//
// A request that is refused gets 429 Too Many Requests with Retry-After (whole
// seconds, rounded up) when the limiter computed when it may succeed; with
// WithWait the request waits in the limiter's queue instead (prim's Wait,
// bounded by the request's context and WithWait's limit). Every request the
// server decided gets the RateLimit-Limit, RateLimit-Remaining and
// RateLimit-Reset headers of the IETF draft "RateLimit header fields for HTTP"
// (Reset in whole seconds, rounded up); a request heavier than the limit,
// refused without asking the server, gets RateLimit-Limit only.
//
// When no decision can be had (the limiter fails: Redis unreachable, a
// timeout; the factory fails; every limiter slot is busy) the request is
// refused with 503 Service Unavailable and the error is logged (fail closed),
// or, with WithFailOpen, passed on to the next handler unlimited (fail open),
// logged too.
package ratelimithttp

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coordtorture/coordtorture/prim"
)

// KeyFunc maps a request to its rate-limit key. An error refuses the request
// (see WithKeyErrorHandler).
type KeyFunc func(r *http.Request) (string, error)

// Factory makes the limiter of a key. It is called with the middleware's
// lock held, once per key until that key's limiter is dropped: it should do
// no I/O (prim's constructors do none). The middleware closes what it makes.
type Factory func(key string) (prim.RateLimiter, error)

// ErrNoKey reports a request that carries no key (KeyByHeader: the header is
// missing or empty).
var ErrNoKey = errors.New("ratelimithttp: request has no rate-limit key")

// ErrClosed is the error a request gets once the middleware is closed (503).
var ErrClosed = errors.New("ratelimithttp: middleware closed")

// ErrTooManyLimiters reports that the bound on the number of limiters is
// reached and every limiter has a request in flight, so none can be dropped
// for a new key.
var ErrTooManyLimiters = errors.New("ratelimithttp: too many rate limiters in use")

// Defaults of the options.
const (
	DefaultIdleTimeout = 10 * time.Minute
	DefaultMaxLimiters = 10000
)

// Option configures a Middleware.
type Option func(*config)

type config struct {
	wait        bool
	maxWait     time.Duration
	weight      func(*http.Request) int64
	failOpen    bool
	idle        time.Duration
	maxLimiters int
	logger      *slog.Logger
	limited     http.Handler
	keyError    func(http.ResponseWriter, *http.Request, error)
}

// WithWait makes a refused request wait in its limiter's queue (prim's Wait)
// instead of being refused at once: it is admitted when the limiter grants it,
// and gets 429 when the queue is full or the wait ends first while it queues
// or sleeps for its RetryAfter. A wait that ends while its decision is in
// flight (Redis did not answer in time: prim.ErrUncertain) is an outage, not
// a refusal: 503, or passed on with WithFailOpen. The wait is
// bounded by the request's context and, when maxWait > 0, by maxWait. The
// queue is the limiter's own, set by the factory: prim's limiters queue by
// default (see prim.WithQueue for the default size and order), and a limiter
// made with prim.WithQueue(0, …) refuses at once, WithWait or not.
func WithWait(maxWait time.Duration) Option {
	return func(c *config) { c.wait, c.maxWait = true, maxWait }
}

// WithWeight sets the number of permits a request takes (default 1). A
// negative weight (e.g. r.ContentLength, -1 for a chunked body) is the
// request's error, handled as a key error before any limiter is asked: the
// key-error handler gets an error matching prim.ErrNegativePermits (default
// 400), with or without WithFailOpen, and nothing is logged.
func WithWeight(f func(*http.Request) int64) Option { return func(c *config) { c.weight = f } }

// WithFailOpen passes requests on to the next handler, unlimited, when no
// decision can be had (default: fail closed, 503 Service Unavailable). Either
// way the error is logged at Warn.
func WithFailOpen() Option { return func(c *config) { c.failOpen = true } }

// WithIdleTimeout drops (closes) a key's limiter once it has been idle (its
// IdleDuration, with no request of the middleware in flight) for at least d.
// Default DefaultIdleTimeout; d <= 0 never drops for idleness. Idle limiters
// are looked for during requests, at most every d/4: without traffic they
// stay until the next request or Close.
func WithIdleTimeout(d time.Duration) Option { return func(c *config) { c.idle = d } }

// WithMaxLimiters bounds the number of limiters held (default
// DefaultMaxLimiters). When a new key arrives at the bound, the limiter whose
// last request ended longest ago, among those with no request in flight, is
// dropped (closed) to make room, idle timeout or not; if every limiter has a
// request in flight, the new key's request gets ErrTooManyLimiters (handled
// as a limiter error: 503, or passed on with WithFailOpen). Finding it takes
// constant time (a list in release order), so a flood of new keys costs each
// request O(1), not a scan of every limiter.
func WithMaxLimiters(n int) Option { return func(c *config) { c.maxLimiters = n } }

// WithLogger sets the logger of limiter errors (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithLimitedHandler writes the response to a refused request, after the
// status-independent headers (Retry-After, RateLimit-*) are set. It must write
// the status itself. Default: 429 with a short text body.
func WithLimitedHandler(h http.Handler) Option { return func(c *config) { c.limited = h } }

// WithKeyErrorHandler writes the response to a request whose key could not be
// computed, or whose weight (WithWeight) is negative (the error matches
// prim.ErrNegativePermits). Default: 400 Bad Request.
func WithKeyErrorHandler(f func(http.ResponseWriter, *http.Request, error)) Option {
	return func(c *config) { c.keyError = f }
}

// Middleware rate-limits requests per key. Make it with New; it is safe for
// concurrent use. Close it when the server stops.
type Middleware struct {
	factory Factory
	keyFunc KeyFunc
	cfg     config

	mu        sync.Mutex
	limiters  map[string]*entry
	idle      list.List // *entry without users, least recently released first
	closed    bool
	lastSweep time.Time
}

// entry is a key's limiter and the number of requests using it now.
type entry struct {
	key      string
	lim      prim.RateLimiter
	users    int
	released time.Time     // when users last fell to 0
	elem     *list.Element // in Middleware.idle while users == 0
}

// New returns middleware that takes each request's limiter from factory by
// keyFunc's key.
func New(factory Factory, keyFunc KeyFunc, opts ...Option) *Middleware {
	cfg := config{idle: DefaultIdleTimeout, maxLimiters: DefaultMaxLimiters}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.maxLimiters < 1 {
		cfg.maxLimiters = 1
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	if cfg.limited == nil {
		cfg.limited = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
		})
	}
	if cfg.keyError == nil {
		cfg.keyError = func(w http.ResponseWriter, _ *http.Request, _ error) {
			http.Error(w, http.StatusText(http.StatusBadRequest), http.StatusBadRequest)
		}
	}
	return &Middleware{factory: factory, keyFunc: keyFunc, cfg: cfg, limiters: map[string]*entry{}, lastSweep: time.Now()}
}

// Handler rate-limits the requests to next.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, err := m.keyFunc(r)
		if err != nil {
			m.cfg.keyError(w, r, err)
			return
		}
		n := int64(1)
		if m.cfg.weight != nil {
			n = m.cfg.weight(r)
		}
		if n < 0 {
			// The request's error, not the limiter's: never passed on
			// (whatever WithFailOpen says), never logged as a failure.
			m.cfg.keyError(w, r, fmt.Errorf("ratelimithttp: request weight %d: %w", n, prim.ErrNegativePermits))
			return
		}
		e, err := m.acquire(key)
		if err != nil {
			m.failed(w, r, next, err)
			return
		}
		d, err := m.decide(r.Context(), e.lim, n)
		m.release(e)
		if err == nil || d.HasRetryAfter {
			// A decision the server made (a Wait ended by its context, or
			// refused behind a queue, carries none).
			setHeaders(w.Header(), d)
		}
		switch {
		case err == nil && d.Allowed:
			next.ServeHTTP(w, r)
		case err == nil, errors.Is(err, prim.ErrQueueFull),
			// The wait's bound ended while the request queued or slept
			// for its RetryAfter: the limiter's answer. Not when a
			// decision was in flight (ErrUncertain: Redis did not answer
			// in time), which is an outage: 503, or passed on with
			// WithFailOpen.
			m.cfg.wait && !errors.Is(err, prim.ErrUncertain) && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)):
			if !d.Allowed && d.HasRetryAfter {
				w.Header().Set("Retry-After", strconv.FormatInt(ceilSeconds(d.RetryAfter), 10))
			}
			m.cfg.limited.ServeHTTP(w, r)
		default:
			m.failed(w, r, next, err)
		}
	})
}

func (m *Middleware) decide(ctx context.Context, lim prim.RateLimiter, n int64) (prim.Decision, error) {
	if !m.cfg.wait {
		return lim.Allow(ctx, n)
	}
	if m.cfg.maxWait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.cfg.maxWait)
		defer cancel()
	}
	return lim.Wait(ctx, n)
}

// failed answers a request that got no decision.
func (m *Middleware) failed(w http.ResponseWriter, r *http.Request, next http.Handler, err error) {
	if errors.Is(err, ErrClosed) || errors.Is(err, prim.ErrLimiterClosed) {
		// Close: the limiters are gone on purpose (a limiter in use is never
		// dropped for idleness or the bound), whatever WithFailOpen says.
		http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
		return
	}
	if r.Context().Err() != nil {
		// The client went away (or the server is shutting down): nobody
		// reads the answer, and it is no limiter failure worth a warning.
		http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
		return
	}
	if m.cfg.failOpen {
		m.cfg.logger.WarnContext(r.Context(), "ratelimithttp: no rate-limit decision; request passed (fail open)", "err", err)
		next.ServeHTTP(w, r)
		return
	}
	m.cfg.logger.WarnContext(r.Context(), "ratelimithttp: no rate-limit decision; request refused (fail closed)", "err", err)
	http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
}

// setHeaders sets the RateLimit-* headers the decision carries:
// RateLimit-Remaining and RateLimit-Reset only for a decision the server made
// (a request over the limit, refused locally, knows neither).
func setHeaders(h http.Header, d prim.Decision) {
	if d.Limit <= 0 {
		return
	}
	h.Set("RateLimit-Limit", strconv.FormatInt(d.Limit, 10))
	if !d.Served() {
		return
	}
	h.Set("RateLimit-Remaining", strconv.FormatInt(max(d.Remaining, 0), 10))
	h.Set("RateLimit-Reset", strconv.FormatInt(ceilSeconds(d.Reset), 10))
}

// ceilSeconds is d in whole seconds, rounded up (never negative).
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// acquire returns key's limiter (made if needed) with one more user.
func (m *Middleware) acquire(key string) (*entry, error) {
	var drop []prim.RateLimiter
	defer func() {
		for _, l := range drop {
			l.Close()
		}
	}()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	// Limiters without users wait in m.idle, least recently released
	// first, so the sweep and the bound's eviction look only at the front:
	// amortised O(1) per request, however many keys a flood of spoofed
	// client addresses brings (each new key used to scan every limiter
	// under this mutex).
	if now := time.Now(); m.cfg.idle > 0 && now.Sub(m.lastSweep) >= m.cfg.idle/4 {
		m.lastSweep = now
		for f, n := m.idle.Front(), m.idle.Len(); f != nil && n > 0; f, n = m.idle.Front(), n-1 {
			e := f.Value.(*entry)
			if now.Sub(e.released) < m.cfg.idle {
				break // the rest were released later still
			}
			if e.lim.IdleDuration() < m.cfg.idle {
				// The limiter was used elsewhere (a factory may share
				// one between keys): not idle; it goes to the back, so
				// the idle entries behind it are still swept.
				e.released = now
				m.idle.MoveToBack(f)
				continue
			}
			drop = append(drop, m.evictLocked(e))
		}
	}
	e, ok := m.limiters[key]
	if !ok {
		if len(m.limiters) >= m.cfg.maxLimiters {
			f := m.idle.Front()
			if f == nil {
				return nil, ErrTooManyLimiters // every limiter is in use
			}
			drop = append(drop, m.evictLocked(f.Value.(*entry)))
		}
		lim, err := m.factory(key)
		if err != nil {
			return nil, fmt.Errorf("ratelimithttp: making a limiter: %w", err)
		}
		e = &entry{key: key, lim: lim}
		m.limiters[key] = e
	}
	if e.elem != nil {
		m.idle.Remove(e.elem)
		e.elem = nil
	}
	e.users++
	return e, nil
}

// evictLocked drops an entry without users; the caller closes its limiter
// once the mutex is released.
func (m *Middleware) evictLocked(e *entry) prim.RateLimiter {
	m.idle.Remove(e.elem)
	e.elem = nil
	delete(m.limiters, e.key)
	return e.lim
}

func (m *Middleware) release(e *entry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e.users--
	if e.users == 0 && m.limiters[e.key] == e {
		e.released = time.Now()
		e.elem = m.idle.PushBack(e)
	}
}

// Limiters is the number of limiters the middleware holds now.
func (m *Middleware) Limiters() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.limiters)
}

// Close closes every limiter (requests waiting in a queue end with 503,
// prim.ErrLimiterClosed) and makes later requests fail with 503 (ErrClosed);
// neither passes with WithFailOpen.
// The state on the server stays. Idempotent.
func (m *Middleware) Close() error {
	m.mu.Lock()
	m.closed = true
	lims := m.limiters
	m.limiters = map[string]*entry{}
	m.idle.Init()
	m.mu.Unlock()
	var errs []error
	for _, e := range lims {
		errs = append(errs, e.lim.Close())
	}
	return errors.Join(errs...)
}

// ---- keys --------------------------------------------------------------------

// KeyByIP keys a request by the client's IP address, the host of
// r.RemoteAddr: the peer of the connection (a proxy's address behind a
// proxy: see KeyByTrustedHeader). IPv6 addresses are keyed by their /64
// network, which one client usually holds whole.
func KeyByIP(r *http.Request) (string, error) {
	return ipKey(r.RemoteAddr)
}

func ipKey(hostport string) (string, error) {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	addr, err := netip.ParseAddr(strings.TrimSpace(host))
	if err != nil {
		return "", fmt.Errorf("ratelimithttp: client address %q: %w", hostport, err)
	}
	addr = addr.Unmap().WithZone("")
	if addr.Is6() {
		p, _ := addr.Prefix(64)
		return p.String(), nil
	}
	return addr.String(), nil
}

// KeyByTrustedHeader keys a request by the client IP address a trusted proxy
// put in header name (such as "X-Real-IP" or "True-Client-IP"); for
// "X-Forwarded-For" the last address of the last such header, the one the
// proxy in front of this server appended. Use it only behind a proxy that sets
// the header: clients can send any value. A request without the header is
// keyed by RemoteAddr (KeyByIP).
func KeyByTrustedHeader(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) {
		vals := r.Header.Values(name)
		if len(vals) == 0 {
			return KeyByIP(r)
		}
		v := vals[len(vals)-1]
		if name == "X-Forwarded-For" {
			parts := strings.Split(v, ",")
			v = parts[len(parts)-1]
		}
		return ipKey(strings.TrimSpace(v))
	}
}

// KeyByHeader keys a request by the value of header name, such as an API key
// header ("X-API-Key"); a missing or empty header is ErrNoKey.
func KeyByHeader(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		v := r.Header.Get(name)
		if v == "" {
			return "", fmt.Errorf("%w: header %s", ErrNoKey, name)
		}
		return v, nil
	}
}

// KeyByRoute keys a request by its route: the pattern net/http's ServeMux
// matched (r.Pattern, set when the middleware wraps a handler registered on
// the mux), else the method and path.
func KeyByRoute(r *http.Request) (string, error) {
	if r.Pattern != "" {
		return r.Pattern, nil
	}
	return r.Method + " " + r.URL.Path, nil
}

// Keys combines key functions: the key is every part, length-prefixed so
// distinct combinations never make the same key; the first error is returned.
func Keys(fs ...KeyFunc) KeyFunc {
	return func(r *http.Request) (string, error) {
		var b strings.Builder
		for _, f := range fs {
			k, err := f(r)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(&b, "%d:%s", len(k), k)
		}
		return b.String(), nil
	}
}

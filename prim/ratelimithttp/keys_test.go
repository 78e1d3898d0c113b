package ratelimithttp

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// Pure functions: no server needed.

func TestCeilSeconds(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int64
	}{{0, 0}, {-time.Second, 0}, {time.Nanosecond, 1}, {time.Second, 1}, {time.Second + time.Millisecond, 2}, {2500 * time.Millisecond, 3}, {59 * time.Second, 59}} {
		if got := ceilSeconds(c.d); got != c.want {
			t.Errorf("ceilSeconds(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}

func TestKeyFuncs(t *testing.T) {
	req := func(remote string, h map[string][]string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/p/1", nil)
		r.RemoteAddr = remote
		for k, vs := range h {
			for _, v := range vs {
				r.Header.Add(k, v)
			}
		}
		return r
	}
	for _, c := range []struct {
		name string
		f    KeyFunc
		r    *http.Request
		want string
		err  bool
	}{
		{"ipv4", KeyByIP, req("192.0.2.7:1234", nil), "192.0.2.7", false},
		{"ipv6 /64", KeyByIP, req("[2001:db8:1:2:3:4:5:6]:80", nil), "2001:db8:1:2::/64", false},
		{"ipv4-mapped", KeyByIP, req("[::ffff:192.0.2.7]:80", nil), "192.0.2.7", false},
		{"no port", KeyByIP, req("192.0.2.7", nil), "192.0.2.7", false},
		{"garbage", KeyByIP, req("nonsense", nil), "", true},
		{"real ip", KeyByTrustedHeader("x-real-ip"), req("10.0.0.1:1", map[string][]string{"X-Real-Ip": {"198.51.100.9"}}), "198.51.100.9", false},
		{"xff last", KeyByTrustedHeader("X-Forwarded-For"), req("10.0.0.1:1", map[string][]string{"X-Forwarded-For": {"1.1.1.1, 2.2.2.2", "203.0.113.5, 198.51.100.9"}}), "198.51.100.9", false},
		{"header missing: RemoteAddr", KeyByTrustedHeader("X-Real-IP"), req("10.0.0.1:1", nil), "10.0.0.1", false},
		{"api key", KeyByHeader("X-API-Key"), req("10.0.0.1:1", map[string][]string{"X-Api-Key": {"k1"}}), "k1", false},
		{"api key missing", KeyByHeader("X-API-Key"), req("10.0.0.1:1", nil), "", true},
		{"route without pattern", KeyByRoute, req("10.0.0.1:1", nil), "GET /p/1", false},
		{"keys", Keys(KeyByIP, KeyByRoute), req("10.0.0.1:1", nil), "8:10.0.0.18:GET /p/1", false},
	} {
		got, err := c.f(c.r)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("%s: %q, %v; want %q, error %v", c.name, got, err, c.want, c.err)
		}
	}
	if _, err := KeyByHeader("X-API-Key")(req("10.0.0.1:1", nil)); !errors.Is(err, ErrNoKey) {
		t.Errorf("missing header: %v, want ErrNoKey", err)
	}
	// Keys never merge distinct combinations.
	a, _ := Keys(KeyByHeader("A"), KeyByHeader("B"))(req("", map[string][]string{"A": {"x:"}, "B": {"y"}}))
	b, _ := Keys(KeyByHeader("A"), KeyByHeader("B"))(req("", map[string][]string{"A": {"x"}, "B": {":y"}}))
	if a == b {
		t.Errorf("distinct combinations share key %q", a)
	}
	// The pattern ServeMux matched.
	mux := http.NewServeMux()
	var got string
	mux.HandleFunc("GET /p/{id}", func(_ http.ResponseWriter, r *http.Request) { got, _ = KeyByRoute(r) })
	mux.ServeHTTP(httptest.NewRecorder(), req("10.0.0.1:1", nil))
	if got != "GET /p/{id}" {
		t.Errorf("route key %q, want the pattern", got)
	}
}

package servertest_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/testbed"
)

// closedAddr returns a local address nothing listens on: dialing it is refused.
func closedAddr(t *testing.T) string {
	t.Helper()
	// A socket bound to the port and never listening holds it until the test
	// ends: a dial is refused, and no server another test starts can take the
	// port (CI: a port closed right after it was picked was taken by a
	// redis-7.0 of a parallel test, which answered instead of refusing).
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}

// definiteRefusal fails t unless err is a definite failure that wraps the
// refused dial: a connection refused before anything was sent cannot have run
// anything on a server, so it must not be reported as ErrUncertain.
func definiteRefusal(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error", what)
	}
	if errors.Is(err, prim.ErrUncertain) {
		t.Fatalf("%s: %v; a refused connection sent nothing, want a definite error, not ErrUncertain", what, err)
	}
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("%s: %v; want it to wrap the refused dial (*net.OpError, ECONNREFUSED)", what, err)
	}
}

// A client pointed at a port nobody listens on: every operation fails at once,
// definitely, naming the refused dial.
func TestConnectionRefusedIsDefinite(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	c := redis.NewClient(&redis.Options{Addr: closedAddr(t)})
	defer c.Close()
	co := prim.New(c)
	defer co.Close()

	_, err := co.TryAcquireFencedLock(ctx, "{r}:lease", "{r}:fence", time.Second)
	definiteRefusal(t, "TryAcquireFencedLock", err)
	_, err = co.TryAcquireLease(ctx, "r:leases", "f", time.Second)
	definiteRefusal(t, "TryAcquireLease", err)

	// The waiting forms return the refusal too, well before their deadline.
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, err = co.AcquireFencedLock(wctx, "{r}:lease", "{r}:fence", time.Second)
	definiteRefusal(t, "AcquireFencedLock", err)
	_, err = co.AcquireLease(wctx, "r:leases", "f", time.Second)
	definiteRefusal(t, "AcquireLease", err)
	if wctx.Err() != nil {
		t.Fatal("the waiting acquisitions waited out their deadline on a refused connection")
	}
}

// A renewal or release whose connection is refused sent nothing: it fails
// definitely, and the handle is not failed closed, so both can be retried once
// the server is reachable again (and the release then removes the lease).
func TestReleaseRefusedIsDefinite(t *testing.T) {
	forEachBuild(t, func(t *testing.T, e *env) {
		ctx := ctxT(t, time.Minute)
		// While refuse is set the client dials a port nobody listens on, and its
		// connections live 300ms, so the release below finds none to reuse
		// and dials.
		var refuse atomic.Bool
		closed := closedAddr(t)
		c, _ := e.client(t, testbed.WithOptions(func(o *redis.UniversalOptions) {
			dial := o.Dialer
			o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
				if refuse.Load() {
					addr = closed
				}
				return dial(ctx, network, addr)
			}
			o.ConnMaxLifetime = 300 * time.Millisecond
		}))
		co := prim.New(c, prim.WithCleanupTimeout(time.Second))
		defer co.Close()
		lease, fence := e.k("{rr}:lease"), e.k("{rr}:fence")
		l, err := co.TryAcquireFencedLock(ctx, lease, fence, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		refuse.Store(true)
		time.Sleep(time.Second) // every pooled connection has outlived its lifetime
		// The first renewal dials its dedicated connection.
		ok, err := l.Renew(ctx, 30*time.Second)
		definiteRefusal(t, "Renew", err)
		if ok {
			t.Fatal("a refused renewal reported renewed")
		}
		_, err = l.Release(ctx)
		definiteRefusal(t, "Release", err)
		if e.admin.Exists(ctx, lease).Val() != 1 {
			t.Fatal("the lease is gone though the release was refused")
		}
		refuse.Store(false)
		if ok, err := l.Renew(ctx, 30*time.Second); !ok || err != nil {
			t.Fatalf("renewal once reachable again: %v, %v; want renewed (a refused renewal or release does not fail the handle closed)", ok, err)
		}
		r, err := l.Release(ctx)
		if err != nil || r != prim.Released {
			t.Fatalf("release once reachable again: %v, %v; want Released", r, err)
		}
		if e.admin.Exists(ctx, lease).Val() != 0 {
			t.Fatal("the lease is still there after its release")
		}
	})
}

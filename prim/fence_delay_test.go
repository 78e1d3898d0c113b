package prim

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim/internal/localserver"
)

// The fence proven: a command whose bytes are still on their way when the
// caller gives up must never run once the fence is done. The test holds back
// every byte of one dedicated connection from its script (or SET … IFEQ) on (as a congested
// network would: written by the client, not yet read by the server), and keeps
// that connection open towards the server after the client closes it, as bytes
// in flight outlive a close. When the clean-up has run, the held bytes are let
// go; the server's MONITOR then shows whether the delayed script ran.
//
// With fence() made a no-op both cases fail: the delayed renewal reaches the
// server and runs, and the delayed acquisition creates a field nobody owns.
// The client has go-redis's default options (MaxRetries 3, ReadTimeout 3s,
// ContextTimeoutEnabled false).
func TestFenceStopsDelayedCommand(t *testing.T) {
	for _, b := range localserver.Matrix() {
		t.Run(b, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			hold := &byteHolder{}
			uc, admin := standalone(t, b, func(o *redis.Options) {
				var d net.Dialer
				o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
					c, err := d.DialContext(ctx, network, addr)
					if err != nil {
						return nil, err
					}
					return &holdConn{Conn: c, h: hold}, nil
				}
			})
			co := New(uc, WithCleanupTimeout(2*time.Second))
			defer co.Close()

			t.Run("renewal", func(t *testing.T) {
				l, err := co.TryAcquireFencedLock(ctx, "{fd}:lease", "{fd}:fence", 30*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				hold.arm()
				rctx, rcancel := context.WithTimeout(ctx, 300*time.Millisecond)
				ok, err := l.Renew(rctx, time.Hour)
				rcancel()
				if ok || !errors.Is(err, ErrUncertain) {
					t.Fatalf("renewal with its bytes held: %v, %v; want false and ErrUncertain", ok, err)
				}
				hc := hold.waitHeld(t)
				// The clean-up: the renewal's read times out (3s), the connection
				// is fenced, the lease released owner-checked.
				hc.waitRemoteClosed(15 * time.Second)
				waitFor(t, 15*time.Second, "the owner-checked clean-up", func() bool {
					return admin.Exists(ctx, "{fd}:lease").Val() == 0
				})
				ran := delivered(t, ctx, admin, hc, func(line string) bool {
					// The script, or SET … IFEQ where the server has it.
					return strings.Contains(line, `"{fd}:lease"`) &&
						(strings.Contains(line, scriptLeaseRenew.Hash()) || strings.Contains(strings.ToLower(line), `"ifeq"`))
				})
				if ran != "" {
					t.Fatalf("the delayed renewal ran after the fence: %s", ran)
				}
				if n := admin.Exists(ctx, "{fd}:lease").Val(); n != 0 {
					t.Fatal("the lease is back after the clean-up")
				}
			})

			t.Run("hash-lease acquisition", func(t *testing.T) {
				// Builds without hash-field expiry refuse named leases outright.
				if _, err := co.TryAcquireLease(ctx, "fd:probe", "f", time.Second); errors.Is(err, ErrFeatureUnsupported) {
					t.Skip("no hash-field expiry on", b)
				} else if err != nil {
					t.Fatal(err)
				}
				hold.arm()
				actx, acancel := context.WithTimeout(ctx, 300*time.Millisecond)
				l, err := co.TryAcquireLease(actx, "fd:hash", "job", time.Hour)
				acancel()
				if l != nil || !errors.Is(err, ErrUncertain) {
					t.Fatalf("acquisition with its bytes held: %v, %v; want no lease and ErrUncertain", l, err)
				}
				hc := hold.waitHeld(t)
				hc.waitRemoteClosed(15 * time.Second)
				// The owner-checked release finds nothing: the script never ran.
				ran := delivered(t, ctx, admin, hc, func(line string) bool {
					return strings.Contains(line, `"fd:hash"`) && strings.Contains(line, scriptHLeaseAcquire.Hash())
				})
				if ran != "" {
					t.Fatalf("the delayed acquisition ran after the fence: %s", ran)
				}
				if admin.HExists(ctx, "fd:hash", "job").Val() {
					t.Fatalf("field %q exists with nobody owning it (pttl %v)", "job", admin.HPTTL(ctx, "fd:hash", "job").Val())
				}
				// And the field is free for the next owner.
				l, err = co.TryAcquireLease(ctx, "fd:hash", "job", 5*time.Second)
				if err != nil {
					t.Fatalf("after the clean-up: %v", err)
				}
				l.Release(ctx)
			})
		})
	}
}

// delivered lets the held bytes of hc go, and returns the first line the
// server's MONITOR shows for which match is true, up to a marker command sent
// after the bytes (everything the server ran before the marker has been seen).
func delivered(t *testing.T, ctx context.Context, admin *redis.Client, hc *holdConn, match func(string) bool) string {
	t.Helper()
	mon, err := net.DialTimeout("tcp", admin.Options().Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	_ = mon.SetDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(mon)
	if _, err := mon.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
		t.Fatalf("MONITOR: %q %v", line, err)
	}
	hc.release()
	// Give the bytes time to arrive and run (they go through the proxy).
	time.Sleep(500 * time.Millisecond)
	marker := "fence-test-marker-" + newOwnerToken()
	if err := admin.Echo(ctx, marker).Err(); err != nil {
		t.Fatal(err)
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("MONITOR: %v (the marker never came)", err)
		}
		if strings.Contains(line, marker) {
			return ""
		}
		if match(line) {
			return strings.TrimSpace(line)
		}
	}
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// byteHolder holds back the bytes of the first connection that writes a script
// (or SET … IFEQ, the renewal where the server has it) after arm, until
// release.
type byteHolder struct {
	mu    sync.Mutex
	armed bool
	held  *holdConn
	got   chan struct{}
}

func (h *byteHolder) arm() {
	h.mu.Lock()
	h.armed, h.held, h.got = true, nil, make(chan struct{})
	h.mu.Unlock()
}

func (h *byteHolder) waitHeld(t *testing.T) *holdConn {
	t.Helper()
	h.mu.Lock()
	got := h.got
	h.mu.Unlock()
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("no script was written after arm")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held
}

type holdConn struct {
	net.Conn
	h *byteHolder

	mu           sync.Mutex
	holding      bool
	buf          bytes.Buffer
	closePending bool
	remoteClosed chan struct{}
}

func (c *holdConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if !c.holding {
		c.h.mu.Lock()
		lp := bytes.ToLower(p)
		if c.h.armed && (bytes.Contains(lp, []byte("evalsha")) || bytes.Contains(lp, []byte("\r\neval\r\n")) ||
			bytes.Contains(lp, []byte("\r\nifeq\r\n"))) {
			c.h.armed, c.h.held = false, c
			c.holding = true
			c.remoteClosed = make(chan struct{})
			close(c.h.got)
		}
		c.h.mu.Unlock()
	}
	if c.holding {
		defer c.mu.Unlock()
		return c.buf.Write(p)
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// Close by the client: a held connection stays open towards the server (its
// bytes are still in flight) until release; meanwhile the test watches for the
// server side going away (the fence's CLIENT KILL, seen through the proxy).
func (c *holdConn) Close() error {
	c.mu.Lock()
	if c.holding && !c.closePending {
		c.closePending = true
		c.mu.Unlock()
		go func() {
			var b [512]byte
			_ = c.Conn.SetReadDeadline(time.Time{})
			for {
				if _, err := c.Conn.Read(b[:]); err != nil {
					close(c.remoteClosed)
					return
				}
			}
		}()
		return nil
	}
	held := c.holding
	c.mu.Unlock()
	if held {
		return nil
	}
	return c.Conn.Close()
}

// waitRemoteClosed waits until the client has closed the connection and the
// server side has gone, or d passes (an unfenced connection never goes).
func (c *holdConn) waitRemoteClosed(d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		pending, ch := c.closePending, c.remoteClosed
		c.mu.Unlock()
		if pending {
			select {
			case <-ch:
			case <-time.After(time.Until(deadline)):
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// release sends the held bytes on and then closes the connection.
func (c *holdConn) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.Conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, _ = c.Conn.Write(c.buf.Bytes())
	c.buf.Reset()
	c.holding = false
	if c.closePending {
		go func() { time.Sleep(time.Second); _ = c.Conn.Close() }()
	}
}

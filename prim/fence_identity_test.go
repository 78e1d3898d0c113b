package prim

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/prim/internal/localserver"
)

// The fence names one connection by id, address and the server's address on
// it, and counts as done only when the server says that connection is gone.
// Ids restart with the server process, so after a restart or a failover "ID n"
// alone can name an unrelated connection: the fence must not kill it. And a
// kill that matched nothing proves the connection gone only on the server that
// held it. (The landed fence sent a bare CLIENT KILL ID n and counted a reply
// of 0 as fenced: both cases below failed on it.)
func TestFenceIdentity(t *testing.T) {
	for _, b := range localserver.Matrix() {
		t.Run(b, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c, admin := standalone(t, b, nil)
			co := New(c, WithCleanupTimeout(2*time.Second))
			defer co.Close()

			fc, err := co.fences.on(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			defer fc.conn.Close()
			if fc.id == 0 || fc.addr == "" || fc.laddr == "" {
				t.Fatalf("identity %+v: want id, addr and laddr from CLIENT INFO", fc)
			}
			// An unrelated connection of the same client: the one a reused id
			// would name.
			other := c.Conn()
			defer other.Close()
			otherID, err := other.ClientID(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}

			t.Run("a reused id does not kill another connection", func(t *testing.T) {
				stale := &fenceConn{conn: c.Conn(), id: otherID, addr: fc.addr, laddr: fc.laddr, node: c}
				if err := co.fence(ctx, stale); err != nil {
					t.Fatalf("fence of a connection that is gone: %v, want nil (the same server has no such connection)", err)
				}
				if err := other.Ping(ctx).Err(); err != nil {
					t.Fatalf("the fence killed connection %d, which only shared the id: %v", otherID, err)
				}
			})

			t.Run("nothing matched on another server is not fenced", func(t *testing.T) {
				elsewhere := &fenceConn{conn: c.Conn(), id: fc.id + 1000, addr: fc.addr, laddr: "127.0.0.1:1", node: c}
				err := co.fence(ctx, elsewhere)
				if !errors.Is(err, errNotFenced) {
					t.Fatalf("fence on a server that never held the connection: %v, want errNotFenced", err)
				}
			})

			t.Run("the connection itself is killed", func(t *testing.T) {
				if err := co.fence(ctx, fc); err != nil {
					t.Fatal(err)
				}
				for _, line := range strings.Split(admin.ClientList(ctx).Val(), "\n") {
					if id, _, _ := parseClientInfo(line); id == fc.id {
						t.Fatalf("connection %d still on the server after its fence: %s", fc.id, line)
					}
				}
				if err := other.Ping(ctx).Err(); err != nil {
					t.Fatalf("the fence killed another connection too: %v", err)
				}
			})
		})
	}
}

package prim

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim/internal/localserver"
)

// standalone starts a local server of build for t (stopped at its end) and
// returns a client of it with go-redis's default options, changed by opts if
// not nil, and an admin client for inspection. A build that cannot start fails
// the test.
func standalone(t *testing.T, build string, opts func(*redis.Options)) (c, admin *redis.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := localserver.Start(ctx, build)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	o := &redis.Options{Addr: s.Addr}
	if opts != nil {
		opts(o)
	}
	c, admin = redis.NewClient(o), redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { c.Close(); admin.Close() })
	return c, admin
}

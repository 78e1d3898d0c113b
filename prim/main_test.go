package prim_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim/internal/localserver"
)

// TestMain starts the server the examples run on: the default build when the
// matrix has it (the lease example needs hash-field expiry), else the first.
// The tests of prim under faults, replication and Cluster are in the
// prim/internal/servertest module.
func TestMain(m *testing.M) {
	os.Exit(func() int {
		build := localserver.Matrix()[0]
		if slices.Contains(localserver.Matrix(), localserver.DefaultBuild) {
			build = localserver.DefaultBuild
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		s, err := localserver.Start(ctx, build)
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer s.Close()
		c := redis.NewClient(&redis.Options{Addr: s.Addr})
		defer c.Close()
		exampleClient = c
		// The Redlock example needs three deployments: this one and two more.
		redlockClients = []redis.UniversalClient{c}
		for range 2 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			s, err := localserver.Start(ctx, build)
			cancel()
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer s.Close()
			rc := redis.NewClient(&redis.Options{Addr: s.Addr})
			defer rc.Close()
			redlockClients = append(redlockClients, rc)
		}
		return m.Run()
	}())
}

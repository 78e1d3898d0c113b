package prim

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Failover (Sentinel) clients of distinct deployments make a group: go-redis
// gives every one the same placeholder address, so only the same client
// twice is a duplicate (review: three failover clients were refused). No
// I/O: NewRedlockGroup sends nothing.
func TestRedlockGroupFailoverClients(t *testing.T) {
	fc := func(addr string) redis.UniversalClient {
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{addr}})
		t.Cleanup(func() { c.Close() })
		return c
	}
	a, b, c := fc("127.0.0.1:1"), fc("127.0.0.1:2"), fc("127.0.0.1:3")
	if _, err := NewRedlockGroup([]redis.UniversalClient{a, b, c}); err != nil {
		t.Fatalf("three failover clients of distinct deployments: %v", err)
	}
	if _, err := NewRedlockGroup([]redis.UniversalClient{a, b, a}); !errors.Is(err, ErrDuplicateNode) {
		t.Fatalf("the same failover client twice: %v, want ErrDuplicateNode", err)
	}
}

package scenarios

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/testbed"
)

// The state sampler and the owners of attempts: what the no-phantom-owner
// check compares. The sampler reads which owner a lock's lease key holds,
// every few milliseconds, over the admin connection of the node that serves
// the key (no fault touches it), and records each read as a "sample"
// operation of its own process. Every acquisition records the owner it sent,
// whatever its outcome, captured from the command on the wire by a hook on
// the workload's clients: a sampled owner that belongs to an acquisition
// answered "not acquired" is a phantom.

// LeaseKeyer is a LockImpl whose lease lives under another key than the one
// TryAcquire is given; the sampler reads LeaseKey(key). Without it the
// sampler reads the key itself.
type LeaseKeyer interface {
	LeaseKey(key string) string
}

// PrimLeaseKey is the lease key prim's fenced lock uses for a lock key (the
// counter shares its hash tag); implementations built like it return it from
// LeaseKey.
func PrimLeaseKey(key string) string { return "{" + key + "}:lease" }

func leaseKeyOf(l LockImpl, key string) string {
	if k, ok := l.(LeaseKeyer); ok {
		return k.LeaseKey(key)
	}
	return key
}

// attempt is the owner one acquisition sent: the value of the first SET, or
// the first script argument of the first EVAL/EVALSHA/FCALL, whose first key
// is the lease key, among the commands run with its context.
type attempt struct {
	lease string
	mu    sync.Mutex
	owner string
	seen  bool
}

type attemptKey struct{}

// withAttempt returns a context whose commands on lease record the owner the
// acquisition sends.
func withAttempt(ctx context.Context, lease string) (context.Context, *attempt) {
	a := &attempt{lease: lease}
	return context.WithValue(ctx, attemptKey{}, a), a
}

// Owner is the owner the attempt sent, or "" if none was seen.
func (a *attempt) Owner() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.owner
}

func (a *attempt) see(args []any) {
	if len(args) < 3 {
		return
	}
	owner, ok := "", false
	switch strings.ToLower(fmt.Sprint(args[0])) {
	case "set":
		ok = fmt.Sprint(args[1]) == a.lease
		owner = fmt.Sprint(args[2])
	case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
		n, err := strconv.Atoi(fmt.Sprint(args[2]))
		if err != nil || n < 1 || len(args) <= 3+n {
			return
		}
		ok = fmt.Sprint(args[3]) == a.lease
		owner = fmt.Sprint(args[3+n])
	}
	if !ok {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.seen {
		a.owner, a.seen = owner, true
	}
}

// ownerHook shows an attempt (withAttempt) the commands run with its context.
type ownerHook struct{}

func (ownerHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (ownerHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a, ok := ctx.Value(attemptKey{}).(*attempt); ok {
			a.see(cmd.Args())
		}
		return next(ctx, cmd)
	}
}

func (ownerHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if a, ok := ctx.Value(attemptKey{}).(*attempt); ok {
			for _, c := range cmds {
				a.see(c.Args())
			}
		}
		return next(ctx, cmds)
	}
}

// samplerProc is the sampler's process in the history (the nemesis is
// len(Clients)).
func (e *Env) samplerProc() int { return len(e.Clients) + 1 }

// Sampling bounds: a read every sampleEvery at most, and at most maxSamples
// in a run (longer runs read less often).
const (
	sampleEvery = 5 * time.Millisecond
	maxSamples  = 3000
)

// sampleLease records, until ctx ends, which owner lease (the lease key of
// the lock the history calls lock) holds: on the primary of a replicated
// topology (as the sentinels see it), on the slot's owner in a cluster. On
// an external deployment, where nothing injects faults, it reads through the
// first process's client.
func (e *Env) sampleLease(ctx context.Context, lock, lease string) {
	if e.Topo == nil {
		e.sampleWith(ctx, lock, func(ctx context.Context) (string, error) { return e.Clients[0].Get(ctx, lease).Result() })
		return
	}
	e.sampleWith(ctx, lock, func(ctx context.Context) (string, error) {
		// The node is looked up at every read: during a failover two nodes
		// may act as primary, and a node remembered from before it (an old
		// primary the sentinels have deposed but not yet told) shows a state
		// the clients, already on the new one, no longer see.
		lctx, cancel := context.WithTimeout(ctx, time.Second)
		var node *testbed.Node
		var err error
		if e.Topo.Kind == testbed.KindCluster {
			node, err = e.Topo.ClusterNodeFor(lctx, prim.Slot(lease))
		} else {
			node, err = e.Topo.Primary(lctx)
		}
		cancel()
		if err != nil {
			return "", fmt.Errorf("no node serves the lease key: %w", err)
		}
		return node.Admin().Get(ctx, lease).Result()
	})
}

// sampleWith records samples of lock read by get, every sampleEvery (at
// most maxSamples), until ctx ends.
func (e *Env) sampleWith(ctx context.Context, lock string, get func(context.Context) (string, error)) {
	every := sampleEvery
	if d, ok := ctx.Deadline(); ok {
		every = max(every, time.Until(d)/maxSamples)
	}
	proc := e.samplerProc()
	for i := 0; i < maxSamples && ctx.Err() == nil; i++ {
		if _, err := e.Rec.Invoke(proc, history.Op{F: history.FSample, Key: lock}); err != nil {
			return
		}
		v, err := get(ctx)
		switch {
		case err == redis.Nil:
			e.Rec.OK(proc, history.Op{})
		case err != nil:
			// A read that failed changed nothing: fail.
			e.Rec.Fail(proc, history.Op{Err: err.Error()})
		default:
			e.Rec.OK(proc, history.Op{Owner: v})
		}
		sleep(ctx, every)
	}
}

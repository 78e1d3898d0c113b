package scenarios

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/testbed"
)

// Probes that prove a fault had the effect its hazard needs (Env.Effect).
// They read the servers through the testbed's admin connections, which no
// fault touches.

// canaryKey is written just before a fault that may lose the dataset; its
// absence afterwards proves the loss. No workload uses it.
const canaryKey = "coordtorture:nemesis-canary"

// plantCanary writes the canary on node and returns how many keys the node
// held (-1 when it did not answer: then nothing is proven later).
func plantCanary(ctx context.Context, n *testbed.Node) int64 {
	a := n.Admin()
	size, err := a.DBSize(ctx).Result()
	if err != nil || a.Set(ctx, canaryKey, "1", 0).Err() != nil {
		return -1
	}
	return size
}

// checkCanary records the effect when the canary planted before the fault
// is gone, and removes it otherwise.
func checkCanary(ctx context.Context, e *Env, n *testbed.Node, before int64, what string) {
	if before < 0 {
		return
	}
	a := n.Admin()
	err := a.Get(ctx, canaryKey).Err()
	switch {
	case errors.Is(err, redis.Nil):
		e.Effect("%s lost the dataset: %d keys before, the canary written just before is gone", what, before+1)
	case err == nil:
		_ = a.Del(ctx, canaryKey).Err()
	}
}

// infoInt reads one integer field of an INFO section; ok is false when the
// node did not answer or has no such field.
func infoInt(ctx context.Context, n *testbed.Node, section, field string) (int64, bool) {
	info, err := n.Admin().Info(ctx, section).Result()
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			i, err := strconv.ParseInt(v, 10, 64)
			return i, err == nil
		}
	}
	return 0, false
}

// offsetWatch follows a primary's replication offset through a failover:
// it samples INFO replication every few milliseconds and keeps the highest
// offset the node reached while it still said role:master. A sentinel
// failover promotes the replica first and demotes the old primary later,
// so writes the old primary takes in between are lost; only a watch that
// lasts until the demotion sees them.
type offsetWatch struct {
	stop chan struct{}
	done chan struct{}
	max  int64 // written by the watcher until done is closed
}

// watchOffset starts watching n, with a first sample taken before it
// returns (a fault that demotes n at once, as a forced promotion does, must
// not outrun the watch). -1 as max means the node never answered as a
// primary.
func watchOffset(ctx context.Context, n *testbed.Node) *offsetWatch {
	w := &offsetWatch{stop: make(chan struct{}), done: make(chan struct{}), max: -1}
	sample := func() {
		if role, off, ok := replicationOf(ctx, n); ok && role == "master" && off > w.max {
			w.max = off
		}
	}
	sample()
	go func() {
		defer close(w.done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				sample()
			}
		}
	}()
	return w
}

// until stops the watch once the node reached more than beyond as a
// primary (the proof is in), once it is no longer a primary (no more can
// come), or after limit, and returns the highest offset it reached as one.
func (w *offsetWatch) until(ctx context.Context, n *testbed.Node, beyond int64, limit time.Duration) int64 {
	for end := time.Now().Add(limit); time.Now().Before(end) && ctx.Err() == nil; time.Sleep(5 * time.Millisecond) {
		role, off, ok := replicationOf(ctx, n)
		if ok && role == "master" && off > beyond {
			break
		}
		if ok && role != "master" {
			break
		}
	}
	close(w.stop)
	<-w.done
	if role, off, ok := replicationOf(ctx, n); ok && role == "master" && off > w.max {
		w.max = off
	}
	return w.max
}

// replicationOf reads a node's role and replication offset.
func replicationOf(ctx context.Context, n *testbed.Node) (role string, offset int64, ok bool) {
	info, err := n.Admin().Info(ctx, "replication").Result()
	if err != nil {
		return "", 0, false
	}
	haveOffset := false
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, found := strings.CutPrefix(line, "role:"); found {
			role = v
		}
		if v, found := strings.CutPrefix(line, "master_repl_offset:"); found {
			offset, err = strconv.ParseInt(v, 10, 64)
			haveOffset = err == nil
		}
	}
	return role, offset, role != "" && haveOffset
}

// failoverLoss waits (up to limit) for the proof that a failover discarded
// writes: the new primary took over at (second_repl_offset − 1), before an
// offset the old primary reached while it was still a primary (w). It
// records the effect when the proof comes, nothing otherwise.
func failoverLoss(ctx context.Context, e *Env, w *offsetWatch, old, np *testbed.Node, limit time.Duration) {
	second, ok := infoInt(ctx, np, "replication", "second_repl_offset")
	if !ok || second <= 0 {
		w.until(ctx, old, 0, 0)
		return
	}
	took := second - 1
	if reached := w.until(ctx, old, took, limit); reached > took {
		e.Effect("the new primary %s took over at replication offset %d; the old primary %s reached %d as a primary: %d bytes of its writes lost",
			np.Name, took, old.Name, reached, reached-took)
	}
}

// clockAhead records the effect of a clock offset: the server's TIME reads
// at least min ahead of (or behind) real time.
func clockAhead(ctx context.Context, e *Env, n *testbed.Node, min time.Duration) {
	t0 := time.Now()
	st, err := n.Admin().Time(ctx).Result()
	if err != nil {
		return
	}
	rtt := time.Since(t0)
	skew := st.Sub(t0.Add(rtt / 2))
	if skew.Abs() >= min {
		e.Effect("%s's clock reads %v from real time", n.Name, skew.Round(time.Millisecond))
	}
}

package scenarios

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/models"
	"github.com/coordtorture/coordtorture/testbed"
)

// Probes that prove a fault had the effect its hazard needs (Env.Effect).
// They read the servers through the testbed's admin connections, which no
// fault touches.

// canaryKey is written just before a fault that may lose the dataset; its
// absence afterwards proves the loss. No workload uses it.
const canaryKey = "coordtorture:nemesis-canary"

// plantCanary writes the canary on node and returns how many keys the node
// held (-1 when it did not answer).
//
// It tries for up to a second (a node still busy after an earlier restart);
// -1 when it could not, and the restart's checkCanary then fails its event.
func plantCanary(ctx context.Context, n *testbed.Node) int64 {
	a := n.Admin()
	for end := time.Now().Add(time.Second); ; sleep(ctx, 50*time.Millisecond) {
		size, err := a.DBSize(ctx).Result()
		if err == nil && a.Set(ctx, canaryKey, "1", 0).Err() == nil {
			return size
		}
		if time.Now().After(end) || ctx.Err() != nil {
			return -1
		}
	}
}

// checkCanary records the effect when the canary planted before the fault
// is gone, and removes it otherwise. A server that cannot be read (for two
// seconds: a restart still loading) is an error, so the event fails and the
// run is UNKNOWN: not knowing whether the dataset was lost is no proof that
// it was not.
func checkCanary(ctx context.Context, e *Env, n *testbed.Node, before int64, what string) error {
	if before < 0 {
		// The kill happened without a canary: a lost dataset would go
		// unproven, and violations after it would be judged as if no loss
		// had happened (FAIL). Not knowing is UNKNOWN.
		return fmt.Errorf("the canary could not be written before the fault, so whether %s lost the dataset is unknown", what)
	}
	a := n.Admin()
	var err error
	for end := time.Now().Add(2 * time.Second); ; sleep(ctx, 50*time.Millisecond) {
		err = a.Get(ctx, canaryKey).Err()
		if err == nil || errors.Is(err, redis.Nil) || time.Now().After(end) || ctx.Err() != nil {
			break
		}
	}
	switch {
	case errors.Is(err, redis.Nil):
		e.Effect("%s lost the dataset: %s before, the canary written just before is gone", what, models.Plural(before+1, "key"))
	case err == nil:
		_ = a.Del(ctx, canaryKey).Err()
	default:
		return fmt.Errorf("reading the canary after %s: %w", what, err)
	}
	return nil
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

// offsetWatch follows a primary through a failover: it samples, every few
// milliseconds, its replication offset and (for a fenced implementation)
// the lock's fencing counter, and keeps the highest of each the node
// reached while it still said role:master. A sentinel failover promotes the
// replica first and demotes the old primary later, so writes the old
// primary takes in between are lost; only a watch that lasts until the
// demotion sees them.
type offsetWatch struct {
	stop    chan struct{}
	done    chan struct{}
	counter string // the fencing counter's key; "" when the implementation has none
	// Written by the watcher until done is closed, then by until.
	max        int64 // replication offset; -1: the node never answered as a primary
	maxCounter int64 // fencing counter; -1: never read
	// others are the topology's other data nodes (the candidates for
	// promotion); took holds, for each, the lowest counter it held while it
	// said role:master: a bound on what it took over with, read within a
	// sample period of its promotion (the clients that follow it raise the
	// counter at once).
	others []*testbed.Node
	took   map[string]int64
}

// watchOffset starts watching n, with a first sample taken before it
// returns (a fault that demotes n at once, as a forced promotion does, must
// not outrun the watch). The counter followed is the run's lock's, when its
// implementation is fenced.
func watchOffset(ctx context.Context, e *Env, n *testbed.Node) *offsetWatch {
	w := &offsetWatch{stop: make(chan struct{}), done: make(chan struct{}), max: -1, maxCounter: -1, counter: e.counterKey(),
		took: map[string]int64{}}
	if w.counter != "" {
		for _, o := range e.Topo.Nodes() {
			if o != n {
				w.others = append(w.others, o)
			}
		}
	}
	w.sample(ctx, n)
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
				w.sample(ctx, n)
			}
		}
	}()
	return w
}

// sample reads n once: the counter first, then the role, so that a counter
// value counts only when the node still said it was a primary after it.
func (w *offsetWatch) sample(ctx context.Context, n *testbed.Node) {
	c := int64(-1)
	if w.counter != "" {
		if v, err := n.Admin().Get(ctx, w.counter).Int64(); err == nil {
			c = v
		} else if errors.Is(err, redis.Nil) {
			c = 0
		}
	}
	for _, o := range w.others {
		if v, ok := counterOf(ctx, o, w.counter); ok {
			if role, _, ok := replicationOf(ctx, o); ok && role == "master" {
				if t, seen := w.took[o.Name]; !seen || v < t {
					w.took[o.Name] = v
				}
			}
		}
	}
	role, off, ok := replicationOf(ctx, n)
	if !ok || role != "master" {
		return
	}
	w.max = max(w.max, off)
	w.maxCounter = max(w.maxCounter, c)
}

// counterOf reads a fencing counter on n (0 when absent); ok is false when
// n did not answer with one (down, or not the key's slot owner).
func counterOf(ctx context.Context, n *testbed.Node, key string) (int64, bool) {
	v, err := n.Admin().Get(ctx, key).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, true
	}
	return v, err == nil
}

// until stops the watch once proved says the highest offset and counter
// reached as a primary prove the loss, once the node is no longer a primary
// (no more can come), or after limit, and returns those highest values.
func (w *offsetWatch) until(ctx context.Context, n *testbed.Node, proved func(off, counter int64) bool, limit time.Duration) (int64, int64) {
	close(w.stop)
	<-w.done
	for end := time.Now().Add(limit); ; time.Sleep(5 * time.Millisecond) {
		w.sample(ctx, n)
		if proved != nil && proved(w.max, w.maxCounter) {
			break
		}
		if role, _, ok := replicationOf(ctx, n); ok && role != "master" {
			break
		}
		if !time.Now().Before(end) || ctx.Err() != nil {
			break
		}
	}
	return w.max, w.maxCounter
}

// counterKey is the fencing counter of the run's lock ("" for an
// implementation without fencing tokens): prim's and the mutants' layout.
func (e *Env) counterKey() string {
	if e.Impl == nil || !e.Impl.Fenced() {
		return ""
	}
	return "{" + e.Key(lockKey) + "}:fence"
}

// lossProof reads what the new primary np took over with (its replication
// offset at promotion, second_repl_offset − 1, and the fencing counter now,
// which is at least what it took over with) and returns the test of a
// loss: the old primary reached, as a primary, more than np took over.
// With a fencing counter the proof is the counter's (a token handed out on
// the old primary that the new one has not: the hazard's very cause);
// without one, the replication offset's (weaker: the old primary's own
// expirations move it too). ok is false when np's state could not be read.
func lossProof(ctx context.Context, w *offsetWatch, np *testbed.Node) (proved func(off, counter int64) bool, describe func(off, counter int64) string, ok bool) {
	second, ok := infoInt(ctx, np, "replication", "second_repl_offset")
	if !ok || second <= 0 {
		return nil, nil, false
	}
	took := second - 1
	if w.counter == "" {
		return func(off, _ int64) bool { return off > took },
			func(off, _ int64) string {
				return fmt.Sprintf("took over at replication offset %d; the old primary reached %d as a primary: %d bytes of its writes lost (replication offsets: this implementation has no fencing counter to compare)",
					took, off, off-took)
			}, true
	}
	// The lowest value np was seen to hold as a primary, or, if it was never
	// sampled as one, what it holds now (higher than what it took over with,
	// so the proof stays sound, only harder to get).
	nc, seen := w.took[np.Name]
	if now, ok := counterOf(ctx, np, w.counter); ok && (!seen || now < nc) {
		nc, seen = now, true
	}
	if !seen {
		return nil, nil, false
	}
	return func(_, counter int64) bool { return counter > nc },
		func(_, counter int64) string {
			return fmt.Sprintf("took over with the fencing counter at %d or below; the old primary had handed out token %d as a primary: %s lost, the counter regressed",
				nc, counter, models.Plural(counter-nc, "token"))
		}, true
}

// failoverLoss waits (up to limit) for the proof that a failover discarded
// the lock's writes (lossProof), and records the effect when it comes,
// nothing otherwise.
func failoverLoss(ctx context.Context, e *Env, w *offsetWatch, old, np *testbed.Node, limit time.Duration) {
	proved, describe, ok := lossProof(ctx, w, np)
	if !ok {
		w.until(ctx, old, nil, 0)
		return
	}
	if off, c := w.until(ctx, old, proved, limit); proved(off, c) {
		e.EffectOngoing(old, "the new primary %s %s", np.Name, describe(off, c))
	}
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

// serverSkew reads how far a server's clock (TIME) is from real time, to the
// millisecond: what a clock scenario checks before counting on its jump.
func serverSkew(ctx context.Context, n *testbed.Node) (time.Duration, error) {
	t0 := time.Now()
	st, err := n.Admin().Time(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("reading the restarted server's clock: %w", err)
	}
	return st.Sub(t0.Add(time.Since(t0) / 2)).Round(time.Millisecond), nil
}

// restartClocks kills the named nodes, then starts them together with their
// clocks 4 ttls ahead (ahead) or on true time, and reads each back (TIME): a
// restart that did not set the clock is an error (the event fails, the run is
// UNKNOWN). It returns the skews read, in the order of names. The nodes are
// down together and come back together, so the fault's window is one
// restart's, not one per node.
func restartClocks(ctx context.Context, e *Env, names []string, ahead bool) ([]time.Duration, error) {
	off := time.Duration(0)
	if ahead {
		off = 4 * e.TTL
	}
	for _, name := range names {
		if err := e.Topo.Kill(name); err != nil {
			return nil, err
		}
	}
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() { errs[i] = e.Topo.Start(ctx, name, testbed.WithClockOffset(off)) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	skews := make([]time.Duration, len(names))
	for i, name := range names {
		skew, err := serverSkew(ctx, e.Topo.Node(name))
		if err != nil {
			return nil, err
		}
		if (ahead && skew < off/2) || (!ahead && skew.Abs() > 2*e.TTL) {
			return nil, fmt.Errorf("%s's clock reads %v from real time, not %v: the restart did not set it", name, skew, off)
		}
		skews[i] = skew
	}
	return skews, nil
}

// leaseClockJumps restarts the server (with AOF: the leases or permits
// survive) with its clock 4 ttls ahead at d/3, and on true time again at
// 2d/3 (the semaphore and rwlock clock-skew scenarios). Each restart must
// have set the clock (read back from TIME): one that did not leaves the
// scenario untested, so the event fails and the run is UNKNOWN, never a PASS.
// The jump ahead is the effect once it outruns a ttl, from the same reading.
func leaseClockJumps(_ *rand.Rand, d, _ time.Duration) []Event {
	restart := func(ahead bool) func(context.Context, *Env) error {
		return func(ctx context.Context, e *Env) error {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
			defer cancel()
			skews, err := restartClocks(sctx, e, []string{"n1"}, ahead)
			if err != nil {
				return err
			}
			skew := skews[0]
			if ahead && skew >= e.TTL {
				// Leases and permits end early only if the jump outruns them.
				e.EffectExplaining(models.LeaseLossKinds, "n1's clock reads %v from real time", skew)
			}
			return nil
		}
	}
	return []Event{
		{At: d / 3, Name: "restart the server 4 leases ahead", Do: restart(true)},
		{At: 2 * d / 3, Name: "restart the server on true time", Do: restart(false)},
	}
}

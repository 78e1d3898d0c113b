package scenarios

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/history"
	"github.com/coordtorture/coordtorture/testbed"
)

// The leak step: after the workload stops and every lease of the run could
// have expired, the harness reads the servers for what is left of the
// scenario's leases and records it as a leak_scan operation, which the
// leaks checker (models.CheckLeaks) judges.

// leakKeys names, by family, the key whose lease and owner entries the
// family's workload leaves on the server: every key whose name contains it
// is scanned, except the fencing counter ("…:fence", permanent by design).
var leakKeys = map[string]string{
	"fenced-lock":  lockKey,
	"waiting-lock": lockKey,
	"hash-lease":   leaseHash,
	"semaphore":    semKey,
	"latch":        latchPrefix, // every round's latch is deleted: nothing may remain
	"rwlock":       rwKeyPrefix,
	"redlock":      redlockKey,
}

// leakKey returns the key the scenario's leak scan looks for ("" when its
// family leaves no leases).
func (s *Scenario) leakKey() string {
	family, _, _ := strings.Cut(s.Name, "/")
	return leakKeys[family]
}

// leakScanNA says why the leak scan of a run does not apply ("" when it
// does): nothing the servers hold can be judged against the history's TTLs.
func (s *Scenario) leakScanNA(env *Env, h *history.History) string {
	switch {
	case s.NoLeakScan != "":
		return s.NoLeakScan
	case env.Topo == nil:
		return "an external deployment: the harness does not scan servers it did not start"
	}
	for k := range h.Ops {
		op := &h.Ops[k]
		if isLeaseAcquire(op.F) && op.Type != history.Fail {
			return ""
		}
		if (op.F == history.FLatchCreate || op.F == history.FLatchReset) && op.Type != history.Fail {
			return ""
		}
	}
	return "no acquisition (or latch creation) succeeded or was of unknown outcome: nothing could have been left behind"
}

// isLeaseAcquire reports whether f acquires something the server keeps
// until it is released or expires.
func isLeaseAcquire(f string) bool {
	switch f {
	case history.FAcquire, history.FAcquireWait, history.FSemAcquire, history.FAcquireRead, history.FAcquireWrite:
		return true
	}
	return false
}

// leakScanAt is when the scan may run: a lease lives until its acquisition's
// or renewal's return plus its TTL (a delayed command the heal let through
// took effect by the heal), plus the drift allowance and a margin.
func leakScanAt(h *history.History, healed time.Duration, ttl, drift time.Duration) time.Duration {
	last := int64(healed)
	for k := range h.Ops {
		if op := &h.Ops[k]; op.F != history.FNemesis && op.Return > last && op.Return != history.Never {
			last = op.Return
		}
	}
	return time.Duration(last) + ttl + drift + 100*time.Millisecond
}

// scanLeaks reads every data node, primary or replica, for the keys
// containing key (except fencing counters) and records what it finds as one
// leak_scan operation of process proc: count is the number of entries
// (keys, or the fields of a hash), value lists them ("node: key" or
// "node: key field", with the key's PTTL; a replica's node is named
// "n2 (replica)"). Every node that holds data is read, not only those that
// say they are primaries: after a failover the run's end cut short, a node
// may be mid-promotion or mid-demotion, and a replica's data is what a later
// promotion serves. A replica is read once its link to its primary is up
// (5s at most: a heal just let it resync; past that it is read all the
// same, and named "n2 (replica, its link to its primary down)"), a cluster
// replica with READONLY.
// Keys and fields are read one by one, so a logically expired one is never
// counted, whatever the server's active expiry (a replica answers a key or
// field past its expiry as absent too). Semaphore permits whose owner is in
// kept (crashed holders' permits without expiry, keptOwners) are not
// counted. A scan that cannot read a server is info.
func (e *Env) scanLeaks(ctx context.Context, proc int, key string, kept map[string]bool) {
	if _, err := e.Rec.Invoke(proc, history.Op{F: history.FLeakScan, Key: key}); err != nil {
		return
	}
	var found []string
	err := func() error {
		for _, n := range e.Topo.Nodes() {
			a := n.Admin()
			role, err := a.Do(ctx, "ROLE").Slice()
			if err != nil {
				return fmt.Errorf("%s: ROLE: %w", n.Name, err)
			}
			name := n.Name
			if len(role) == 0 || role[0] != "master" {
				name += " (replica)"
				if !replicaLinkUp(ctx, a, 5*time.Second) {
					name = n.Name + " (replica, its link to its primary down)"
				}
				if e.Topo.Kind == testbed.KindCluster {
					ro := readOnlyClient(a)
					defer ro.Close()
					a = ro
				}
			}
			var keys []string
			iter := a.Scan(ctx, 0, "*"+e.Key(key)+"*", 1000).Iterator()
			for iter.Next(ctx) {
				keys = append(keys, iter.Val())
			}
			if err := iter.Err(); err != nil {
				return fmt.Errorf("%s: SCAN: %w", n.Name, err)
			}
			slices.Sort(keys)
			for _, k := range slices.Compact(keys) {
				if strings.HasSuffix(k, ":fence") {
					continue
				}
				entries, err := leftOf(ctx, a, k, kept)
				if err != nil {
					return fmt.Errorf("%s: %s: %w", n.Name, k, err)
				}
				for _, en := range entries {
					found = append(found, name+": "+en)
				}
			}
		}
		return nil
	}()
	if err != nil {
		e.Rec.Info(proc, history.Op{Err: err.Error()})
		return
	}
	e.Rec.OK(proc, history.Op{Count: int64(len(found)), Value: strings.Join(found, "\n")})
}

// replicaLinkUp waits, up to limit, until the replica a says its link to
// its primary is up (master_link_status:up), and reports whether it did.
func replicaLinkUp(ctx context.Context, a *redis.Client, limit time.Duration) bool {
	for end := time.Now().Add(limit); time.Now().Before(end) && ctx.Err() == nil; sleep(ctx, 50*time.Millisecond) {
		info, err := a.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return true
		}
	}
	return false
}

// readOnlyClient is a client with a's options whose connections say
// READONLY: a cluster replica answers reads of its slots (not MOVED).
func readOnlyClient(a *redis.Client) *redis.Client {
	o := a.Options()
	opts := *o
	opts.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		if o.OnConnect != nil {
			if err := o.OnConnect(ctx, cn); err != nil {
				return err
			}
		}
		return cn.ReadOnly(ctx).Err()
	}
	return redis.NewClient(&opts)
}

// leftOf lists what remains of key: the key itself with its PTTL, or for a
// hash each field still there, with its HPTTL when the server has field
// expiry, or for a sorted set (a read-write key) each owner still in it.
func leftOf(ctx context.Context, a *redis.Client, key string, kept map[string]bool) ([]string, error) {
	pttl, err := a.Do(ctx, "PTTL", key).Int64()
	if err != nil || pttl == -2 {
		return nil, err // gone (expired, released)
	}
	typ, err := a.Type(ctx, key).Result()
	if err != nil {
		return nil, err
	}
	if typ == "zset" && strings.Contains(key, semKey) {
		return permitsLeft(ctx, a, key, pttl, kept)
	}
	if typ == "zset" {
		// A read-write key: each owner still in the set, with its deadline.
		zs, err := a.ZRangeWithScores(ctx, key, 0, -1).Result()
		if err != nil {
			return nil, err
		}
		var out []string
		for _, z := range zs {
			out = append(out, fmt.Sprintf("%s %v (deadline %d, key pttl %d ms)", key, z.Member, int64(z.Score), pttl))
		}
		return out, nil
	}
	if typ != "hash" {
		return []string{fmt.Sprintf("%s (%s, pttl %d ms)", key, typ, pttl)}, nil
	}
	fields, err := a.HKeys(ctx, key).Result()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range fields {
		ok, err := a.HExists(ctx, key, f).Result()
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		ttl := "?"
		if v, err := a.Do(ctx, "HPTTL", key, "FIELDS", 1, f).Int64Slice(); err == nil && len(v) == 1 {
			ttl = fmt.Sprint(v[0])
		} else if err != nil && !isUnknownCommand(err) {
			return nil, err
		}
		out = append(out, fmt.Sprintf("%s %s (field pttl %s ms)", key, f, ttl))
	}
	return out, nil
}

func isUnknownCommand(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.Contains(strings.ToLower(re.Error()), "unknown command")
}

package testbed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ---- links -------------------------------------------------------------------

// Link returns the link from peer `from` (a node, sentinel or client peer name) to
// endpoint `to` (a node or sentinel name, or "nX.bus" for a cluster bus), creating
// it if no connection has used it yet.
func (t *Topology) Link(from, to string) (*Link, error) { return t.sb.link(from, to) }

// Links returns every link made so far.
func (t *Topology) Links() []*Link { return t.sb.allLinks() }

// peers is every peer name: nodes, sentinels and client peers.
func (t *Topology) allPeers() []string {
	var out []string
	for _, n := range append(append(t.Nodes(), t.sentinels...), t.Aux()...) {
		out = append(out, n.Name)
	}
	return append(out, t.ClientPeers()...)
}

// Partition cuts every link between a and b in both directions (silently: data is
// dropped, connections stay open), including links made later.
func (t *Topology) Partition(a, b string) error {
	if err := t.sb.setCut(a, b, true); err != nil {
		return err
	}
	return t.sb.setCut(b, a, true)
}

// HealPair undoes Partition(a, b).
func (t *Topology) HealPair(a, b string) error {
	if err := t.sb.setCut(a, b, false); err != nil {
		return err
	}
	return t.sb.setCut(b, a, false)
}

// Isolate cuts a peer off from every other peer, clients included.
func (t *Topology) Isolate(name string) error {
	return t.Split([]string{name})
}

// Split cuts the topology into side (the named peers) and everything else.
// Servers added beside the topology (AddStandalone: a service the clients
// use next to the system under test, such as the fenced resource) stay
// reachable from both sides unless named in side: a split of the system is
// not a split of its neighbours.
func (t *Topology) Split(side []string) error {
	aux := map[string]bool{}
	for _, n := range t.Aux() {
		aux[n.Name] = true
	}
	for _, a := range side {
		for _, b := range t.allPeers() {
			if !slices.Contains(side, b) && (!aux[b] || aux[a]) {
				if err := t.Partition(a, b); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// HealAll removes every partition and every toxic from every link.
func (t *Topology) HealAll() error {
	t.sb.mu.Lock()
	clear(t.sb.cut)
	t.sb.mu.Unlock()
	for _, l := range t.sb.allLinks() {
		if err := l.Heal(); err != nil {
			return err
		}
	}
	return nil
}

// ---- processes ---------------------------------------------------------------

func (t *Topology) mustNode(name string) (*Node, error) {
	n := t.Node(name)
	if n == nil {
		return nil, fmt.Errorf("testbed: no node %q in this %s topology", name, t.Kind)
	}
	return n, nil
}

func (n *Node) isPaused() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.paused
}

// Pause stops the server with SIGSTOP: connections stay open and nothing answers,
// like a long GC or VM pause.
func (t *Topology) Pause(name string) error {
	n, err := t.mustNode(name)
	if err != nil {
		return err
	}
	if err := n.proc.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	n.mu.Lock()
	n.paused = true
	n.mu.Unlock()
	return nil
}

// Resume continues a paused server (SIGCONT).
func (t *Topology) Resume(name string) error {
	n, err := t.mustNode(name)
	if err != nil {
		return err
	}
	if err := n.proc.signal(syscall.SIGCONT); err != nil {
		return err
	}
	n.mu.Lock()
	n.paused = false
	n.mu.Unlock()
	return nil
}

// Kill sends SIGKILL: no shutdown, no final save. It records the node's
// replication role first (when it answers) so Start brings it back the same way.
func (t *Topology) Kill(name string) error {
	n, err := t.mustNode(name)
	if err != nil {
		return err
	}
	if !n.Sentinel && !n.isPaused() {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		if p, ok := t.replicaOfNow(ctx, n); ok {
			n.mu.Lock()
			n.replicaOf = p
			n.mu.Unlock()
		}
		cancel()
	}
	n.proc.kill()
	n.mu.Lock()
	n.paused = false
	n.mu.Unlock()
	return nil
}

// replicaOfNow asks a node whom it replicates (nil = it is a primary).
func (t *Topology) replicaOfNow(ctx context.Context, n *Node) (*Node, bool) {
	info, err := n.admin.Info(ctx, "replication").Result()
	if err != nil {
		return nil, false
	}
	if infoField(info, "role") == "master" {
		return nil, true
	}
	p := infoField(info, "master_port")
	for _, m := range t.nodes {
		if port(m.Addr) == p {
			return m, true
		}
	}
	return nil, false
}

// RestartOption changes how a node comes back.
type RestartOption func(*Node)

// WithClockOffset starts the node with its wall clock shifted by d (see
// scripts/clockskew). It stays shifted across later restarts until set to 0.
func WithClockOffset(d time.Duration) RestartOption {
	return func(n *Node) { n.clockOffset = d }
}

// WithAOFOnRestart turns append-only persistence on or off for this and later starts.
func WithAOFOnRestart(on bool) RestartOption { return func(n *Node) { n.aof = on } }

// Start starts a killed node again with its data directory as it was left.
func (t *Topology) Start(ctx context.Context, name string, opts ...RestartOption) error {
	n, err := t.mustNode(name)
	if err != nil {
		return err
	}
	if n.Running() {
		return fmt.Errorf("testbed: %s is already running", name)
	}
	n.mu.Lock()
	for _, o := range opts {
		o(n)
	}
	n.mu.Unlock()
	return n.start(ctx)
}

// Restart is Kill then Start.
func (t *Topology) Restart(ctx context.Context, name string, opts ...RestartOption) error {
	if err := t.Kill(name); err != nil {
		return err
	}
	return t.Start(ctx, name, opts...)
}

// SetClockOffset restarts a node with its wall clock shifted by d. Without AOF
// the node comes back empty, as after any restart.
func (t *Topology) SetClockOffset(ctx context.Context, name string, d time.Duration) error {
	return t.Restart(ctx, name, WithClockOffset(d))
}

// EvictionPressure sets maxmemory and an evicting policy on a node, e.g.
// ("1mb", "allkeys-lru"): the server starts evicting keys once data outgrows it.
func (t *Topology) EvictionPressure(ctx context.Context, name, maxmemory, policy string) error {
	n, err := t.mustNode(name)
	if err != nil {
		return err
	}
	if err := n.admin.ConfigSet(ctx, "maxmemory-policy", policy).Err(); err != nil {
		return fmt.Errorf("testbed: %s: maxmemory-policy %s: %w", name, policy, err)
	}
	if err := n.admin.ConfigSet(ctx, "maxmemory", maxmemory).Err(); err != nil {
		return fmt.Errorf("testbed: %s: maxmemory %s: %w", name, maxmemory, err)
	}
	return nil
}

// ---- replication and failover -----------------------------------------------

// Primary returns the current primary of a replicated topology: the sentinels'
// view when there are sentinels, else the one data node whose role is master.
func (t *Topology) Primary(ctx context.Context) (*Node, error) {
	if t.Kind != KindReplicated {
		return t.nodes[0], nil
	}
	for _, s := range t.sentinels {
		if !s.Running() || s.isPaused() {
			continue
		}
		addr, err := s.admin.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MasterName).StringSlice()
		if err == nil && len(addr) == 2 {
			for _, n := range t.nodes {
				if port(n.Addr) == addr[1] {
					return n, nil
				}
			}
		}
	}
	var masters []*Node
	for _, n := range t.nodes {
		if !n.Running() || n.isPaused() {
			continue
		}
		if p, ok := t.replicaOfNow(ctx, n); ok && p == nil {
			masters = append(masters, n)
		}
	}
	if len(masters) != 1 {
		return nil, fmt.Errorf("testbed: %d nodes report role master", len(masters))
	}
	return masters[0], nil
}

// WaitInSync waits until every running replica of primary reports its link up and
// an offset equal to the primary's.
func (t *Topology) WaitInSync(ctx context.Context, timeout time.Duration) error {
	p, err := t.Primary(ctx)
	if err != nil {
		return err
	}
	return waitFor(ctx, timeout, "replicas in sync with "+p.Name, func(ctx context.Context) (bool, error) {
		info, err := p.admin.Info(ctx, "replication").Result()
		if err != nil {
			return false, err
		}
		off := infoField(info, "master_repl_offset")
		for _, n := range t.nodes {
			if n == p || !n.Running() || n.isPaused() {
				continue
			}
			ri, err := n.admin.Info(ctx, "replication").Result()
			if err != nil {
				return false, err
			}
			if infoField(ri, "master_link_status") != "up" || infoField(ri, "slave_repl_offset") != off ||
				infoField(ri, "master_port") != port(p.Addr) {
				return false, fmt.Errorf("%s: link %s offset %s (primary %s at %s)", n.Name,
					infoField(ri, "master_link_status"), infoField(ri, "slave_repl_offset"), p.Name, off)
			}
		}
		return true, nil
	})
}

// ReplicationInfo returns INFO replication fields of a node.
func (t *Topology) ReplicationInfo(ctx context.Context, name string) (map[string]string, error) {
	n, err := t.mustNode(name)
	if err != nil {
		return nil, err
	}
	info, err := n.admin.Info(ctx, "replication").Result()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			out[k] = v
		}
	}
	return out, nil
}

// FailoverSentinel asks a sentinel to fail over now (SENTINEL FAILOVER: no
// agreement, no wait for the replica to catch up) and waits until every sentinel
// names a new primary that reports role master. It returns the new primary.
func (t *Topology) FailoverSentinel(ctx context.Context) (*Node, error) {
	if len(t.sentinels) == 0 {
		return nil, fmt.Errorf("testbed: FailoverSentinel needs a topology with sentinels")
	}
	old, err := t.Primary(ctx)
	if err != nil {
		return nil, err
	}
	// NOGOODSLAVE (no replica the sentinels count as usable yet: a node just
	// demoted by a previous failover is not, until they see it replicating)
	// and INPROG (a failover still running) pass: asked again every 200ms,
	// for the start timeout at most.
	var lastErr error
	deadline := time.Now().Add(t.cfg.startTimeout)
	for {
		lastErr = errors.New("no sentinel running")
		for _, s := range t.sentinels {
			if !s.Running() || s.isPaused() {
				continue
			}
			if lastErr = s.admin.Do(ctx, "SENTINEL", "FAILOVER", MasterName).Err(); lastErr == nil {
				break
			}
		}
		passing := lastErr != nil && (strings.Contains(lastErr.Error(), "NOGOODSLAVE") || strings.Contains(lastErr.Error(), "INPROG"))
		if !passing || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	if lastErr != nil {
		return nil, fmt.Errorf("testbed: SENTINEL FAILOVER: %w", lastErr)
	}
	np, err := t.AwaitSentinelPromotion(ctx, old, t.cfg.startTimeout)
	if err != nil {
		return nil, &PromotionPendingError{Old: old, Err: err}
	}
	return np, nil
}

// PromotionPendingError is FailoverSentinel's error once a sentinel accepted
// the failover: it was started, and the wait for its promotion failed (ended
// by the caller's context, or timed out). AwaitSentinelPromotion can go on
// waiting for it.
type PromotionPendingError struct {
	Old *Node // the primary before the failover
	Err error
}

func (e *PromotionPendingError) Error() string { return e.Err.Error() }
func (e *PromotionPendingError) Unwrap() error { return e.Err }

// AwaitSentinelPromotion waits, up to timeout, until every running sentinel
// names the same primary other than old and that node reports role master,
// and returns it: the confirmation of a failover (FailoverSentinel).
func (t *Topology) AwaitSentinelPromotion(ctx context.Context, old *Node, timeout time.Duration) (*Node, error) {
	var np *Node
	err := waitFor(ctx, timeout, "sentinels to agree on a new primary", func(ctx context.Context) (bool, error) {
		var seen *Node
		for _, s := range t.sentinels {
			if !s.Running() || s.isPaused() {
				continue
			}
			addr, err := s.admin.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MasterName).StringSlice()
			if err != nil || len(addr) != 2 {
				return false, err
			}
			var n *Node
			for _, m := range t.nodes {
				if port(m.Addr) == addr[1] {
					n = m
				}
			}
			if n == nil || n == old || (seen != nil && n != seen) {
				return false, fmt.Errorf("%s names port %s", s.Name, addr[1])
			}
			seen = n
		}
		if p, ok := t.replicaOfNow(ctx, seen); !ok || p != nil {
			return false, fmt.Errorf("%s does not report role master yet", seen.Name)
		}
		np = seen
		return true, nil
	})
	if err != nil {
		// The data nodes' logs too: a stuck promotion shows on the replica.
		return nil, t.withLogs(err, append(slices.Clone(t.sentinels), t.nodes...)...)
	}
	t.setRoles(np)
	return np, nil
}

// FailoverCommand runs FAILOVER TO on the current primary: a coordinated hand-over
// that waits for the target to catch up (no acknowledged write is lost).
func (t *Topology) FailoverCommand(ctx context.Context, to string) error {
	target, err := t.mustNode(to)
	if err != nil {
		return err
	}
	p, err := t.Primary(ctx)
	if err != nil {
		return err
	}
	// Right after a (re)sync the primary may not count the target online yet;
	// that refusal is transient, so retry it within the start timeout.
	var ferr error
	if err := waitFor(ctx, t.cfg.startTimeout, "FAILOVER TO "+to, func(ctx context.Context) (bool, error) {
		ferr = p.admin.Do(ctx, "FAILOVER", "TO", t.announce, port(target.Addr), "TIMEOUT", 5000).Err()
		if ferr != nil && strings.Contains(ferr.Error(), "not online") {
			return false, ferr
		}
		return true, nil
	}); err != nil {
		return t.withLogs(fmt.Errorf("testbed: FAILOVER TO %s: %w", to, err), p, target)
	}
	if ferr != nil {
		return fmt.Errorf("testbed: FAILOVER TO %s: %w", to, ferr)
	}
	if err := waitFor(ctx, t.cfg.startTimeout, to+" to become primary", func(ctx context.Context) (bool, error) {
		info, err := p.admin.Info(ctx, "replication").Result()
		if err != nil {
			return false, err
		}
		if st := infoField(info, "master_failover_state"); st != "no-failover" {
			return false, fmt.Errorf("failover state %s", st)
		}
		r, ok := t.replicaOfNow(ctx, target)
		return ok && r == nil, fmt.Errorf("%s not master yet", to)
	}); err != nil {
		return t.withLogs(err, p, target)
	}
	t.setRoles(target)
	return nil
}

// ForcePromote makes a replica primary at once (REPLICAOF NO ONE) and points every
// other data node at it, without waiting for it to catch up: whatever the old
// primary acknowledged but had not replicated is discarded when it resyncs from
// the new primary. With sentinels, they are re-pointed at the new primary too
// (SENTINEL REMOVE + MONITOR), as an operator does after a manual promotion,
// once the other nodes replicate from it (so, with sentinels, a replication
// link cut at the promotion must be healed for it to return).
func (t *Topology) ForcePromote(ctx context.Context, name string) error {
	np, err := t.mustNode(name)
	if err != nil || np.Sentinel {
		return fmt.Errorf("testbed: ForcePromote: no data node %q", name)
	}
	if err := np.admin.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		return fmt.Errorf("testbed: %s: REPLICAOF NO ONE: %w", name, err)
	}
	for _, n := range t.nodes {
		if n == np || !n.Running() {
			continue
		}
		if err := n.admin.Do(ctx, "REPLICAOF", t.announce, port(np.Addr)).Err(); err != nil {
			return fmt.Errorf("testbed: %s: REPLICAOF %s: %w", n.Name, name, err)
		}
	}
	t.setRoles(np)
	if len(t.sentinels) > 0 {
		// A re-pointed sentinel learns the replicas from the primary's INFO,
		// at once and then every 10s: let them replicate first (once their
		// links allow), so it sees them at once.
		want := 0
		for _, n := range t.nodes {
			if n != np && n.Running() {
				want++
			}
		}
		if err := waitFor(ctx, t.cfg.startTimeout, name+" to count its replicas online", func(ctx context.Context) (bool, error) {
			info, err := np.admin.Info(ctx, "replication").Result()
			if err != nil {
				return false, err
			}
			got := onlineReplicas(info)
			return got >= want, fmt.Errorf("%s counts %d of %d replicas online", name, got, want)
		}); err != nil {
			return t.withLogs(err, np)
		}
	}
	for _, s := range t.sentinels {
		cmds := [][]any{
			{"SENTINEL", "REMOVE", MasterName},
			{"SENTINEL", "MONITOR", MasterName, t.announce, port(np.Addr), len(t.sentinels)/2 + 1},
			{"SENTINEL", "SET", MasterName, "down-after-milliseconds", t.cfg.downAfter.Milliseconds(),
				"failover-timeout", t.cfg.failoverTO.Milliseconds(), "parallel-syncs", 1},
		}
		for _, c := range cmds {
			if err := s.admin.Do(ctx, c...).Err(); err != nil {
				return fmt.Errorf("testbed: %s: %v: %w", s.Name, c, err)
			}
		}
	}
	if len(t.sentinels) > 0 {
		return t.waitSentinels(ctx, np)
	}
	return nil
}

func (t *Topology) setRoles(primary *Node) {
	for _, n := range t.nodes {
		n.mu.Lock()
		if n == primary {
			n.replicaOf = nil
		} else {
			n.replicaOf = primary
		}
		n.mu.Unlock()
	}
}

// ClusterFailover runs CLUSTER FAILOVER on a cluster replica; mode is "" (a
// coordinated hand-over), "FORCE" (no hand-shake with the primary) or "TAKEOVER"
// (no agreement of the other primaries either). It waits until the replica serves
// its slots and the cluster is ok again.
func (t *Topology) ClusterFailover(ctx context.Context, replica, mode string) error {
	r, err := t.mustNode(replica)
	if err != nil {
		return err
	}
	if t.Kind != KindCluster {
		return fmt.Errorf("testbed: ClusterFailover needs a cluster topology")
	}
	args := []any{"CLUSTER", "FAILOVER"}
	if mode != "" {
		args = append(args, mode)
	}
	// A manual failover the primary does not answer in time is aborted silently by
	// the replica (after 5s); so each attempt is watched for 6s and retried.
	deadline := time.Now().Add(t.cfg.startTimeout)
	for {
		if err := r.admin.Do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("testbed: %s: %v: %w", replica, args, err)
		}
		err := waitFor(ctx, 6*time.Second, replica+" to become a cluster primary", func(ctx context.Context) (bool, error) {
			role, err := r.admin.Do(ctx, "ROLE").Slice()
			if err != nil || len(role) == 0 {
				return false, err
			}
			return role[0] == "master", fmt.Errorf("%s role %v", replica, role[0])
		})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return t.withLogs(err, r)
		}
	}
	r.mu.Lock()
	old := r.replicaOf
	r.replicaOf = nil
	r.mu.Unlock()
	if old != nil {
		old.mu.Lock()
		old.replicaOf = r
		old.mu.Unlock()
		// The old primary learns of its demotion by gossip; when it is reachable (not
		// paused, killed or partitioned), wait for that so no caller sees two primaries for one shard.
		// The bound is generous: on a loaded machine a container (the docker
		// provider beside other topologies) has gone seconds without
		// answering ROLE (CI: 9s were not enough); a healthy one turns at once.
		if old.Running() && !old.isPaused() && !t.sb.touchesCut(old.Name) {
			if err := waitFor(ctx, 2*t.cfg.nodeTimeout+20*time.Second, old.Name+" to turn replica", func(ctx context.Context) (bool, error) {
				role, err := old.admin.Do(ctx, "ROLE").Slice()
				if err != nil || len(role) == 0 {
					return false, err
				}
				return role[0] == "slave", fmt.Errorf("%s role %v", old.Name, role[0])
			}); err != nil {
				return t.withLogs(err, old, r)
			}
		}
	}
	return t.WaitClusterOK(ctx)
}

// ClusterNodeFor returns the data node that currently serves slot as primary, as
// the node answering CLUSTER SLOTS first sees it.
func (t *Topology) ClusterNodeFor(ctx context.Context, slot int) (*Node, error) {
	for _, n := range t.nodes {
		if !n.Running() || n.isPaused() {
			continue
		}
		shards, err := n.admin.ClusterShards(ctx).Result()
		if err != nil {
			continue
		}
		for _, s := range shards {
			for _, r := range s.Slots {
				if int64(slot) < r.Start || int64(slot) > r.End {
					continue
				}
				addr := shardPrimary(s)
				for _, m := range t.nodes {
					if m.Addr == addr {
						return m, nil
					}
				}
			}
		}
	}
	return nil, fmt.Errorf("testbed: no node serves slot %d", slot)
}

// ClusterReplicaOf returns a running replica of the cluster primary that
// currently serves slot: the node to hand CLUSTER FAILOVER to.
func (t *Topology) ClusterReplicaOf(ctx context.Context, slot int) (*Node, error) {
	p, err := t.ClusterNodeFor(ctx, slot)
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(p.Addr)
	for _, n := range t.nodes {
		if n == p || !n.Running() || n.isPaused() {
			continue
		}
		r, err := n.admin.Do(ctx, "ROLE").Slice()
		if err == nil && len(r) > 3 && r[0] == "slave" && fmt.Sprint(r[2]) == port {
			return n, nil
		}
	}
	return nil, fmt.Errorf("testbed: no running replica of %s (slot %d)", p.Name, slot)
}

// ServerTime returns a node's TIME.
func (t *Topology) ServerTime(ctx context.Context, name string) (time.Time, error) {
	n, err := t.mustNode(name)
	if err != nil {
		return time.Time{}, err
	}
	v, err := n.admin.Do(ctx, "TIME").StringSlice()
	if err != nil || len(v) != 2 {
		return time.Time{}, fmt.Errorf("testbed: %s TIME: %v", name, err)
	}
	s, _ := strconv.ParseInt(v[0], 10, 64)
	us, _ := strconv.ParseInt(v[1], 10, 64)
	return time.Unix(s, us*1000), nil
}

// Disconnect takes a node's container off the topology's network (docker
// network disconnect): every link to and from it breaks at once, and its
// address answers nothing until Reconnect. With servers in containers only
// (WithContainers): elsewhere ErrNotInContainers.
func (t *Topology) Disconnect(ctx context.Context, name string) error {
	n, err := t.mustNode(name)
	if err != nil {
		return err
	}
	c, ok := n.proc.(*ctrServer)
	if !ok {
		return fmt.Errorf("%w: Disconnect (%s runs as a local process)", ErrNotInContainers, name)
	}
	return c.Disconnect(ctx)
}

// Reconnect puts a disconnected node's container back on the topology's
// network with its address (docker network connect). With servers in
// containers only (WithContainers).
func (t *Topology) Reconnect(ctx context.Context, name string) error {
	n, err := t.mustNode(name)
	if err != nil {
		return err
	}
	c, ok := n.proc.(*ctrServer)
	if !ok {
		return fmt.Errorf("%w: Reconnect (%s runs as a local process)", ErrNotInContainers, name)
	}
	return c.Connect(ctx)
}

package prim

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim/internal/knobs"
)

// ---- what each server node can do, learned from its own answers -------------
//
// prim sends a fast command where a node has it and the equivalent script where
// it does not. What a node has is learned from the answers the fast commands
// themselves get, never from version strings (forks and managed services bend
// those):
//
//   - the only evidence that a node lacks a command is the server's definite
//     "does not know it" reply, which also says nothing ran: "ERR unknown
//     command" for a command (DELEX, INCREX, HPTTL inside the lease script),
//     and for SET's IFEQ option, which older servers parse as a plain SET's,
//     "ERR syntax error";
//   - that answer makes the same call run the fallback at once, and the node
//     uses the fallback for reprobeAfter (five minutes); the next operation
//     after that tries the fast command again, so an upgraded server regains
//     the fast path;
//   - any other answer is not evidence and changes nothing: a timeout or lost
//     connection (the outcome rules of run.go apply: an uncertain fast command
//     is uncertain), an ACL refusal (NOPERM is about the user, not the node:
//     that call runs the fallback, the next one tries the fast command again),
//     LOADING, READONLY and the like (the operation's error, as the script's
//     would be).
//
// A stale record can therefore cost a round trip, never a wrong answer: a node
// recorded as having a command that answers "unknown command" (a failover to an
// older server) gets the fallback in the same call.
//
// Nodes are named as the client routes to them: a Cluster client's node for
// the key's slot (its master's address, from the client's slot map), a
// standalone client's address, and for a Sentinel failover client the client
// itself — whichever master it reaches now. go-redis does not expose a failover
// client's current master, and none is needed: after a failover to a server
// without the commands the first answer there ("unknown command") switches the
// record, and after one to a server with them the re-probe regains the fast
// path within reprobeAfter.

// capability is one fast path a node may lack.
type capability int

const (
	// capDelex: DELEX key IFEQ value (Redis 8.4+), the owner-checked release.
	capDelex capability = iota
	// capSetIfeq: SET key value IFEQ old PX ms (Redis 8.4+, Valkey 8.1+), the
	// owner-checked renewal.
	capSetIfeq
	// capIncrex: INCREX (Redis 8.8+, Valkey 9.2+), the rate limiters' counter.
	capIncrex
	// capHashFieldExpiry: HPEXPIRE, HPTTL (Redis 7.4+, Valkey 9+), which named
	// leases need (there is no fallback: ErrFeatureUnsupported).
	capHashFieldExpiry
	numCaps
)

func (c capability) String() string {
	switch c {
	case capDelex:
		return "DELEX"
	case capSetIfeq:
		return "SET IFEQ"
	case capIncrex:
		return "INCREX"
	case capHashFieldExpiry:
		return "hash-field expiry"
	}
	return "capability?"
}

// reprobeAfter is how long a node that answered "unknown command" uses the
// fallback before the fast command is tried again.
const reprobeAfter = 5 * time.Minute

// capRecord is the per-node record of a Coordinator (shared by its prefixed
// views). The zero time means "try the fast command".
type capRecord struct {
	mu     sync.Mutex
	absent map[string]*[numCaps]time.Time // node -> capability -> fallback until
	// forceFallback: every capability is treated as absent (benchmarks compare
	// the scripts with the fast paths; knobs.ForceFallback at New).
	forceFallback bool
}

func newCapRecord() *capRecord {
	return &capRecord{absent: map[string]*[numCaps]time.Time{}, forceFallback: knobs.ForceFallback.Load()}
}

// now is the record's clock: the wall clock, shifted by the tests' knob.
func capNow() time.Time { return time.Now().Add(time.Duration(knobs.CapClockOffset.Load())) }

// use reports whether the fast path of c should be tried on node.
func (r *capRecord) use(node string, c capability) bool {
	if r.forceFallback {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.absent[node]
	if !ok || a[c].IsZero() {
		return true
	}
	if capNow().Before(a[c]) {
		return false
	}
	a[c] = time.Time{} // re-probe: the next answer decides again
	return true
}

// learn records the answer err that node gave to c's fast command and reports
// whether it was the node's "does not know it", after which the caller runs
// the fallback (nothing ran). Any other answer changes nothing.
func (r *capRecord) learn(node string, c capability, err error) (unknown bool) {
	if !lacks(c, err) {
		return false
	}
	r.markAbsent(node, c)
	return true
}

func (r *capRecord) markAbsent(node string, c capability) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.absent[node]
	if !ok {
		a = new([numCaps]time.Time)
		r.absent[node] = a
	}
	a[c] = capNow().Add(reprobeAfter)
}

// lacks reports whether err is a server's definite "I do not know this" for
// c's fast command: "ERR unknown command …" (the same text on Redis 7.0 to 8.6
// and Valkey 8.1 and 9.1, and for a command renamed away), and for SET IFEQ,
// which every server knows as SET, "ERR syntax error".
func lacks(c capability, err error) bool {
	var re redis.Error
	if err == nil || !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	if strings.HasPrefix(msg, "ERR unknown command") {
		return true
	}
	return c == capSetIfeq && msg == "ERR syntax error"
}

// errorReply reports whether err is the server's error reply (not a lost
// reply, a timeout or redis.Nil): the command it answers did not run.
func errorReply(err error) bool {
	var re redis.Error
	return err != nil && !errors.Is(err, redis.Nil) && errors.As(err, &re)
}

// nodeName names the node a command on key goes to (see the comment at the
// top of this file).
func (c *Coordinator) nodeName(ctx context.Context, key string) string {
	switch cl := c.client.(type) {
	case *redis.ClusterClient:
		if n, err := cl.MasterForKey(ctx, key); err == nil {
			return n.Options().Addr
		}
		return "cluster"
	case *redis.Client:
		return cl.Options().Addr // "FailoverClient" for a failover client
	}
	return "client"
}

// nodeOf names the node of a dedicated connection's client, as nodeName does.
func nodeOf(n *redis.Client) string { return n.Options().Addr }

// noRetrySlice is a SliceCmd go-redis never resends once written.
type noRetrySlice struct{ *redis.SliceCmd }

// NoRetry implements redis.Cmder.
func (noRetrySlice) NoRetry() bool { return true }

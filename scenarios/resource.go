package scenarios

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/testbed"
)

// Resource is the protected resource the workloads write to: with fencing on it
// accepts a write only if its token is positive and not below the highest token
// it accepted (equal tokens are accepted); with fencing off it accepts every
// write, as a resource guarded by an unfenced lock does. Every write it decides
// gets the resource's sequence number, so the oracle can replay its order.
//
// On a local topology the resource is a server of its own (ResourceNode,
// started beside the system under test with appendfsync always) that each
// client reaches through its own proxied link ("c3→res"): a compare-token
// write in one Lua script. So the fencing side can be partitioned, delayed
// and restarted too, and a write whose reply is lost is of unknown outcome
// (info), as for any fenced store. It persists its last token and sequence
// number, as a real fenced store must: a resource that forgot its last token
// on a restart would accept every stale writer. On an external deployment
// (no testbed) it stays in-process.
type Resource struct {
	Fencing bool

	clients []*redis.Client // one per process; nil: in-process

	mu   sync.Mutex
	last int64
	seq  int64
}

// ResourceNode is the name of the resource server in a topology.
const ResourceNode = "res"

// Resource keys on the resource server.
const (
	resourceLast = "resource:last"  // the largest token accepted
	resourceSeq  = "resource:seq"   // the last sequence number given
	resourceData = "resource:value" // the last accepted write's value
)

// writeScript is the resource's compare-token write: KEYS last, seq, value;
// ARGV token, fencing ("1" on), value. It returns {accepted (1/0), seq}.
var writeScript = redis.NewScript(`
local seq = redis.call('INCR', KEYS[2])
local tok = tonumber(ARGV[1])
local last = tonumber(redis.call('GET', KEYS[1]) or '0')
if ARGV[2] == '1' and (tok <= 0 or tok < last) then
	return {0, seq}
end
if tok > last then
	redis.call('SET', KEYS[1], ARGV[1])
end
redis.call('SET', KEYS[3], ARGV[3])
return {1, seq}
`)

// startResource starts the resource server beside topo and gives every one
// of n processes its own client, through its own link (peer Peer(proc)):
// 250ms timeouts like the workload's clients, and no retries (a retried
// write whose first reply was lost would be decided twice).
func startResource(ctx context.Context, topo *testbed.Topology, n int, fencing bool) (*Resource, error) {
	if _, err := topo.AddStandalone(ctx, ResourceNode, true); err != nil {
		return nil, fmt.Errorf("scenarios: the resource server: %w", err)
	}
	r := &Resource{Fencing: fencing}
	for i := 0; i < n; i++ {
		c, err := topo.NodeClient(ResourceNode, testbed.AsPeer(Peer(i)), testbed.WithTimeout(250*time.Millisecond),
			testbed.WithOptions(func(o *redis.UniversalOptions) { o.MaxRetries = -1 }))
		if err != nil {
			return nil, err
		}
		r.clients = append(r.clients, c)
	}
	return r, nil
}

// Networked reports whether writes go to the resource server.
func (r *Resource) Networked() bool { return r.clients != nil }

// Write applies a write of proc with the writer's token and value and reports
// whether it was accepted, and its sequence number. An error means the
// outcome is unknown: the write may have been applied.
func (r *Resource) Write(ctx context.Context, proc int, token int64, value string) (bool, int64, error) {
	if r.clients == nil {
		ok, seq := r.writeLocal(token)
		return ok, seq, nil
	}
	fencing := "0"
	if r.Fencing {
		fencing = "1"
	}
	// The run's end does not cut a write short: the client's timeout bounds it.
	res, err := writeScript.Run(context.WithoutCancel(ctx), r.clients[proc],
		[]string{resourceLast, resourceSeq, resourceData}, token, fencing, value).Int64Slice()
	if err != nil {
		return false, 0, err
	}
	if len(res) != 2 {
		return false, 0, fmt.Errorf("scenarios: the resource replied %v", res)
	}
	return res[0] == 1, res[1], nil
}

func (r *Resource) writeLocal(token int64) (bool, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	if r.Fencing && (token <= 0 || token < r.last) {
		return false, r.seq
	}
	if token > r.last {
		r.last = token
	}
	return true, r.seq
}

// lastToken reads the resource server's last accepted token straight from
// the server (bypassing every link): -1 when it cannot be read.
func lastToken(ctx context.Context, topo *testbed.Topology) int64 {
	n := topo.Node(ResourceNode)
	if n == nil {
		return -1
	}
	v, err := n.Admin().Get(ctx, resourceLast).Int64()
	switch {
	case errors.Is(err, redis.Nil):
		return 0
	case err != nil:
		return -1
	}
	return v
}

package scenarios

import "sync"

// Resource is the protected resource the workloads write to: with fencing on it
// accepts a write only if its token is positive and not below the highest token
// it accepted (equal tokens are accepted); with fencing off it accepts every
// write, as a resource guarded by an unfenced lock does. Every write gets the
// resource's sequence number, so the oracle can replay its order.
type Resource struct {
	Fencing bool

	mu   sync.Mutex
	last int64
	seq  int64
}

// Write applies a write with the writer's token and reports whether it was
// accepted, and its sequence number.
func (r *Resource) Write(token int64) (bool, int64) {
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

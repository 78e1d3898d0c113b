package prim

import "sync"

// FencedRecord is an in-memory protected resource that enforces fencing tokens:
// a write is applied only if its token is positive and not lower than the
// highest token it has accepted. Equal tokens are accepted, so one lease can
// write repeatedly.
//
// It shows the check a real resource must make atomically with each write, in
// its own durable transaction shared by every writer (see the package
// documentation for a SQL version). A lock cannot stop a paused or partitioned
// old owner from writing; only the resource can refuse it.
type FencedRecord struct {
	mu        sync.Mutex
	lastToken int64
	value     string
}

// TryWrite applies value if token is acceptable and reports whether it did.
func (r *FencedRecord) TryWrite(token int64, value string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if token <= 0 || token < r.lastToken {
		return false
	}
	r.lastToken = token
	r.value = value
	return true
}

// Value returns the last accepted value and its token.
func (r *FencedRecord) Value() (string, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.value, r.lastToken
}

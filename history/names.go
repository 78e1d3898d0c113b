package history

// Operation names (the f field) that the checkers of package models read.
// FORMAT.md says which fields each one carries. Other names are allowed and
// ignored by the checkers.
const (
	// FAcquire is a try-acquisition of a lock or lease (exclusive): ok when
	// acquired (token, owner, ttl_ms), fail when contended.
	FAcquire = "acquire"
	// FAcquireWait is a waiting acquisition of a lock or lease (exclusive).
	FAcquireWait = "acquire_wait"
	// FAcquireRead is a try-acquisition of a read lease.
	FAcquireRead = "acquire_read"
	// FAcquireReadWait is a waiting acquisition of a read lease.
	FAcquireReadWait = "acquire_read_wait"
	// FAcquireWrite is a try-acquisition of a write lease.
	FAcquireWrite = "acquire_write"
	// FAcquireWriteWait is a waiting acquisition of a write lease.
	FAcquireWriteWait = "acquire_write_wait"
	// FSemAcquire is a try-acquisition of n semaphore permits.
	FSemAcquire = "sem_acquire"
	// FSemAcquireWait is a waiting acquisition of n semaphore permits.
	FSemAcquireWait = "sem_acquire_wait"
	// FRenew renews a lock, lease or permit (owner-checked): ok when renewed.
	FRenew = "renew"
	// FRelease releases a lock, lease or permit; the ok value says what
	// happened: "released" (or empty), "already_released" or "not_owned".
	FRelease = "release"
	// FVerify checks (owner-checked) that a lock or lease is still held: ok
	// with value "true" (held) or "false" (not held).
	FVerify = "verify"
	// FWrite is a write to a fenced resource with the writer's token: ok when
	// the resource accepted it, fail when it rejected the token.
	FWrite = "write"
	// FLatchCreate creates a countdown latch with count; ok carries gen.
	FLatchCreate = "latch_create"
	// FLatchReset creates or replaces a latch with count; ok carries gen.
	FLatchReset = "latch_reset"
	// FLatchJoin joins an existing latch; ok carries gen.
	FLatchJoin = "latch_join"
	// FLatchCountDown counts a latch generation down; ok carries count, the
	// remaining count, or -1 when the generation was replaced.
	FLatchCountDown = "latch_count_down"
	// FLatchWait waits for a latch generation; ok carries value "true"
	// (reached zero) or "false" (replaced or deleted).
	FLatchWait = "latch_wait"
	// FLatchDelete deletes a latch (every generation).
	FLatchDelete = "latch_delete"
	// FAllow asks a rate limiter for n permits at once: ok when granted,
	// fail when denied.
	FAllow = "allow"
	// FAllowWait waits for n permits from a rate limiter: ok when granted.
	FAllowWait = "allow_wait"
	// FNemesis is a fault the harness injected, recorded by its own process
	// beside the clients' operations: key says what it does ("fault" starts
	// a degraded state, "heal" ends them, "event" is one-shot), value names
	// it and its targets; ok when it happened, info when it failed.
	FNemesis = "nemesis"
	// FSample is a read of a lock's state by the harness's sampler, its own
	// process beside the clients: key (and field) name the lock as the
	// acquisitions do; ok with owner, the value the lease held at some instant
	// of the read (empty when no lease existed), fail or info when the read
	// failed. The lease holds an acquisition's owner, or (a fenced lock) that
	// owner followed by ":" and its fencing token.
	FSample = "sample"
	// FLeakScan is the final state read from the server after the workload
	// stopped and every TTL elapsed: ok with count (entries found) and value
	// (their listing). Anything found is a leak.
	FLeakScan = "leak_scan"
)

// Values of the value field with a fixed meaning.
const (
	// ValueReleased: a release that deleted the caller's own lease.
	ValueReleased = "released"
	// ValueAlreadyReleased: a release that found nothing to delete.
	ValueAlreadyReleased = "already_released"
	// ValueNotOwned: a release that found another owner's lease.
	ValueNotOwned = "not_owned"
	// ValueGone: a release after which the caller's token is certainly gone
	// (a Redlock release answered by a quorum: removed, already absent or
	// another owner's on each), saying nothing of whether it still held the
	// lease: neither a proof of holding nor a denial.
	ValueGone = "gone"
	// ValueTrue: a latch wait that saw its generation reach zero.
	ValueTrue = "true"
	// ValueFalse: a latch wait whose generation was replaced or deleted.
	ValueFalse = "false"
)

// Rate limiter algorithms (the algo field).
const (
	// AlgoFixed: fixed window (limit, window_ms).
	AlgoFixed = "fixed"
	// AlgoSliding: sliding window (limit, window_ms, segments).
	AlgoSliding = "sliding"
	// AlgoBucket: token bucket (burst, rate per period_ms).
	AlgoBucket = "bucket"
)

// Package prim provides coordination primitives on Redis and Valkey, built to
// be exactly as safe as they claim and no safer-sounding: fencing-token locks,
// waiting acquisition on invalidations, named hash-field leases, read-write
// leases, countdown latches, counting semaphores and fixed-window,
// sliding-window and token-bucket rate limiters (with a net/http middleware in
// package ratelimithttp) and Redlock quorum leases across independent
// deployments.
//
// # Coordinator
//
// [New] wraps a go-redis client (standalone, Sentinel failover or Cluster) and
// sends nothing; the caller keeps owning and closing the client.
// [Coordinator.WithPrefix] gives a view that prefixes every physical key.
//
// # The client as users have it
//
// prim is correct with go-redis's default options (MaxRetries 3,
// ContextTimeoutEnabled false); nothing needs to be set for it:
//   - go-redis resends a command whose reply was lost. The fenced acquisition
//     recognises its own resend — the lease holds "<owner token>:<fencing
//     token>" — and answers the token it took, so a resend yields the true
//     outcome; the hash-field acquisition likewise recognises its own field.
//     Release is sent with resends off (a resend could not tell "removed" from
//     "already gone"), so a lost release reply is [ErrUncertain]. Renewals and
//     hash-field acquisitions run on dedicated connections, which go-redis
//     never resends on.
//   - Every call returns by its context's deadline, even though go-redis then
//     bounds a command already written only by its read timeout: the command
//     goes on in the background and whatever it did is settled there (an
//     acquisition that turns out to have succeeded is released owner-checked;
//     an uncertain renewal is fenced and released), bounded by
//     [WithCleanupTimeout]. A context already done sends nothing and changes
//     nothing.
//   - An error reply is the server's answer and nothing was written: a refusal
//     matches [ErrServerRefused] and its class ([ErrNoPermission],
//     [ErrReadOnly], [ErrOutOfMemory], [ErrPersistenceFailure],
//     [ErrRedirected]); a key of another type matches [ErrWrongType]. Only the
//     counter's own state gives an [ErrCounterInvalid] error.
//
// # Handles
//
// A held lock or lease reports its ownership locally: [FencedLock.State],
// [FencedLock.RemainingEstimate], and [FencedLock.Done], a channel closed when
// ownership ends (estimate ran out, lost, uncertain, released).
// [FencedLock.Context] derives a context cancelled at that moment: run the
// protected work under it.
//
// # Fencing-token locks
//
// [Coordinator.TryAcquireFencedLock] takes two keys: an expiring lease key that
// holds a random owner token and the fencing token it was granted, and a
// persistent counter key. One Lua script
// checks the counter, checks contention, increments the counter and creates the
// lease, so every acquisition gets a fencing token larger than every earlier
// one of the same counter history. The token is exact for every positive
// int64: the script returns it as an integer below 2^53, where Lua's doubles
// are exact, and above that as the counter's own decimal text read back from
// Redis.
//
// Both keys must hash to the same Cluster slot after prefixing — use a hash tag,
// "{invoice:42}:lease" and "{invoice:42}:fence". This is checked client-side on
// every deployment, so code that works on one server keeps working on Cluster.
//
// # What fencing guarantees, and what it does not
//
// A lock alone cannot make a paused, slow or partitioned old owner stop. What
// keeps data safe is the protected resource: it must compare each write's
// token with the highest token it has accepted, atomically with the write, and
// refuse lower ones. [FencedRecord] shows that check in memory; a real resource
// does it in its own transaction, for example in SQL:
//
//	UPDATE invoices SET body = $2, last_token = $1
//	 WHERE id = $3 AND last_token <= $1;
//	-- 0 rows updated: a newer owner has written; this writer is stale.
//
// Equal tokens are accepted so one lease can write several times. Ownership
// (renew, verify, release) is checked with the random owner token; the resource
// orders writes with the fencing token.
//
// Tokens increase only within one retained counter history. Redis replicates
// asynchronously: a failover can lose the last increments, so a new primary can
// hand out a token that was already used. Restoring a backup, deleting or
// expiring the counter, or an evicting maxmemory policy reuse or lower tokens
// the same way. Keep the counter key for this primitive alone, never delete or
// expire it, run a non-evicting policy and durability fit for the resource.
// When tokens must be monotonic across any failover or rollback, use a
// consensus-backed fencing authority; the coordtorture harness shows each of
// these hazards happening (scenario fenced-lock/failover-forced).
//
// # Waiting without polling
//
// [Coordinator.AcquireFencedLock] and [Coordinator.AcquireLease] wait on
// server-assisted client-side-caching invalidations (CLIENT TRACKING), not on a
// sleep-and-retry loop: a waiter costs nothing while it waits and wakes within a
// round trip of a release. Nothing has to be configured on the server (no
// notify-keyspace-events) and nothing on the client: the Coordinator opens its
// own two connections per node, from a copy of the client's options (address,
// credentials, TLS, dialer), and speaks RESP2 on them whatever protocol the
// client uses:
//
//   - a Pub/Sub connection subscribed to __redis__:invalidate, read by its own
//     goroutine;
//   - a tracking connection, CLIENT TRACKING ON REDIRECT to the first, on which
//     the waiter reads the key (PTTL, HPTTL) so the server tracks it.
//
// RESP3 pushes would need only one connection, but go-redis reads a RESP3 push
// only when a reply is read on that connection, so an idle waiter would miss
// it; a Pub/Sub connection is always being read. A waiter runs the acquisition
// script first; only when it finds the lease held does it register and read
// the key on the tracking connection, and it sleeps only if that read still
// finds the key, so a release or expiry after the read leaves a wake-up queued
// and one before it makes the waiter retry at once. A wake-up that finds the
// lock free costs one round trip. Invalidations are hints and only the script
// grants.
//
// An expiring key sends its invalidation only when the server removes it, so a
// waiter also wakes at the holder's PTTL deadline. A lost Pub/Sub or tracking
// connection, a failed tracking read or keep-alive (one PING a second per node
// while anyone waits) or a flush wakes every lock's waiter on the node to
// check again. In Cluster the watcher is on the node that serves the key's
// slot; after a failover the waiter re-resolves the owner on its next wake,
// and the keep-alive wakes waiters whose key the client's slot map puts on
// another node.
//
// No herd: waiters of one lock (one lease key, or one field of a lease hash) in
// one Coordinator queue up in arrival order. Only the first attempts, tracks
// the key and is woken by invalidations and deadlines; the others sleep until
// it leaves. When it acquires, the next one only re-reads the key to keep it
// tracked; when it gives up (its context ends, an error), the next one
// attempts. So a hand-off costs the release, one script and one tracking read
// whatever the number of local waiters, and one script per process across
// processes.
//
// When the server refuses the subscription (NOPERM: an ACL user without
// permission for the channel, which is Redis 7's default for new users, see
// ACL permissions below), waiting still works, by polling: the first waiter of
// each lock re-checks every 50ms (or at the holder's deadline, if sooner), the
// others wait their turn as above, and a hand-off takes up to those 50ms. The
// watcher retries the subscription with a back-off doubling from 50ms to 30s,
// logs the refusal once at Warn, counts it in the prim.waiting.degraded metric
// (reason "subscribe-refused") and returns to invalidations as soon as the
// server accepts. The same holds when the server refuses CLIENT TRACKING (an
// ACL user without +client|tracking, or a server without client tracking):
// waiters poll, the watcher sends CLIENT TRACKING again with the same
// back-off, logs the refusal once at Warn with the node and the server's
// reply, counts it (reason "tracking-refused") and logs at Info when the
// server accepts it again.
//
// A Pub/Sub connection that stays open but goes silent (a stalled link, a
// half-dead peer) is found by its keep-alive: the watcher repeats its
// SUBSCRIBE after 2s without traffic, and when no confirmation comes back in
// the next 2s it logs a Warn, counts it (reason "pubsub-silent"), replaces
// the connection and wakes every waiter of the node to re-check. A tracking
// read stalled on a silent connection never holds a caller past its
// context, and Close ends it.
//
// A watcher nobody has waited on for 30s closes its two connections; the next
// wait on its node opens new ones. Call [Coordinator.Close] to stop the
// watchers: waits in progress end at once with [ErrClosed], and the client
// stays the caller's.
//
// # Named leases in hash fields
//
// [Coordinator.TryAcquireLease] keeps each named lease as one field of a hash,
// with its own field expiry (HPEXPIRE: Redis 7.4+, Valkey 9+; older servers fail
// with [ErrFeatureUnsupported] before anything is written). The hash must not
// have a key-level expiry, which would delete every lease at once
// ([ErrHashKeyExpiring]). Waiters on one hash wake on any change to it and make
// another owner-checked attempt. An acquisition with an uncertain outcome is
// never replayed: its dedicated connection is fenced with CLIENT KILL and the
// field released owner-checked. The field and its expiry are written at once
// (HSETEX on Redis 8.0+ and Valkey 9+; on Redis 7.4 HSET then HPEXPIRE, the
// field removed again if HPEXPIRE is refused), so no path leaves a lease without
// expiry. On Cluster the dedicated connection follows MOVED and ASK.
//
// # Rate limiters
//
// [Coordinator.RateLimiters] makes fixed-window, sliding-window and
// token-bucket limiters ([RateLimiters.FixedWindow], [RateLimiters.SlidingWindow],
// [RateLimiters.TokenBucket]); each is a [*Limiter] and implements
// [RateLimiter]. The constructors validate their arguments (typed errors
// matching [ErrInvalidArgument]) and send nothing.
//
// Every decision ([Limiter.Allow]) is one atomic script on the limiter's one
// key, so one Cluster slot, on the server's clock: the sliding window and the
// bucket read TIME inside the script, the fixed window's counter expires on the
// server's clock. No client time is ever sent, so a client's clock, however
// wrong, changes nothing. The state is what the decision needs and no more:
// fixed, one counter whose expiry the request that creates it sets (the window
// starts at the first request); sliding, one hash field per active segment,
// named by the segment's end (a grant is rounded forward to the end of its
// segment, so it never expires early; availability can come up to one segment
// late; at most limit permits are stored); bucket, the tokens left and the
// server time of the last write (continuous refill, capped at the bucket's
// size). A state the script cannot read (a malformed counter or hash) is
// [ErrLimiterState], a key of another type [ErrWrongType]; nothing is written
// then.
//
// [Limiter.Wait] waits for its permits in a local queue, sleeping until the
// time the server computed instead of polling; the queue's size and order
// (and its default) are [WithQueue]'s.
//
// Grants are consumptive: there is no returning permits. n == 0 reports
// availability and writes nothing; n above the limit is refused without
// RetryAfter (it can never succeed) and sends nothing; a negative n is
// [ErrNegativePermits]. A refusal's RetryAfter is the server's computation of
// when the same request can succeed, never early: the counter's PTTL plus one
// millisecond (the server deletes a key only once its clock is past the
// expiry), the time until enough of the oldest segments leave the window, the
// refill time of the missing tokens.
//
// Uncertain outcomes: if ctx ends or the connection drops after the request
// was sent, the error matches [ErrUncertain] and the permits may have been
// consumed. A request whose reply was lost is sent again within the client's
// MaxRetries: a resend may consume the permits a second time, so lost replies
// can only lower the grants below the limit, never raise them above it.
//
// Fixed windows use INCREX key BYINT n UBOUND limit PX window ENX (Redis 8.8+,
// Valkey 9.2+) where the server has it, pipelined with PTTL (one round trip;
// the PTTL gives a refusal its RetryAfter), and the equivalent Lua counter
// otherwise. After a node answers "unknown command", every limiter of the
// Coordinator, and of its prefixed views, uses the script on that node and
// tries INCREX again only after five minutes, so an upgraded server regains the
// fast path. INCREX is never resent: a lost reply is [ErrUncertain]. A counter
// found without an expiry (a PERSIST, a hand-written value) would deny forever
// once full: the request that finds it gives it a whole window (the script; on
// the fast path INCREX's ENX, or, when INCREX refused, the script in the same
// call).
//
// What a server's clock jump does: fixed windows measure only the counter's
// expiry on the server's own clock, so a jump moves the end of the current
// window at most (a forward jump ends it early: up to limit more grants in
// that span; a backward one prolongs it). Sliding windows and buckets
// compute with TIME: a forward jump makes segments leave the window, or tokens
// refill, early (over-admission, up to the permits of the jumped span); a
// backward jump makes them count longer (under-admission, permits delayed by
// up to the jump). The bucket never refills while the server's time is behind
// its stored refill time, and keeps that time, so a clock that goes back and
// forth never refills twice. A failover to a replica, or a restart without
// persistence, can lose grants (over-admission): the limiters are as durable
// as the server's data.
//
// Each script touches exactly one key; scripts are EVALSHA with an EVAL
// fallback and work on Redis 7.0+ and Valkey 8+. ACL: EVALSHA, EVAL (GET,
// SET, INCRBY, PTTL, PEXPIRE; TIME, HGETALL, HMGET, HSET, HINCRBY, HDEL,
// PEXPIREAT, EXISTS) on the key, and INCREX and PTTL for the fast path (a user
// without INCREX gets the script at the cost of a refused INCREX per decision).
//
// # Semaphores
//
// [Coordinator.Semaphore] names a counting semaphore without I/O;
// [Semaphore.TryAcquire] takes one permit at once or returns [ErrNotAcquired]
// (no queueing, no polling, no fairness: callers choose how to retry). Each
// permit has its own random owner token; [Permit.Renew] (which can also change
// the expiry, to [NoExpiry] or back), [Permit.VerifyStillHeld] and
// [Permit.Release] are owner-checked. Durations are whole milliseconds, at
// least 1ms, or [NoExpiry] for a permit that only a release ends. An empty key,
// a capacity below 1 or a bad duration is a typed error ([ErrInvalidArgument])
// with nothing sent.
//
// One key per semaphore, a sorted set: each permit is a member "P:" followed by
// its owner token, scored with its deadline in the server's milliseconds (TIME;
// +inf for no expiry). The capacity is stored in the same set, as the reserved
// member "C:" followed by the capacity, scored -1 so pruning (scores 0 to now)
// never touches it. Keeping the capacity in the set rather than in a second key
// or a hash keeps every operation a one-key script (one Cluster slot, no hash
// tag needed), lets the key's expiry cover both (the key expires with its
// latest permit, and is deleted when its last permit goes, capacity with it),
// and keeps pruning a range removal by score. Every script prunes expired
// permits first, atomically with what it then reads, so abandoned capacity
// comes back without a clean-up worker. Every contender of a key must use the
// same capacity: while any permit is live, another capacity is
// [ErrCapacityMismatch] with nothing written; once every permit is released or
// expired a new capacity is taken. A lower capacity therefore never revokes a
// permit. Use the key for nothing else; a key of another type is
// [ErrWrongType].
//
// Each script asks for effects replication first (redis.replicate_commands
// where it exists), so a Redis 5 or 6 server with lua-replicate-commands off
// would replicate the writes a script makes after reading TIME rather than
// the script. Every build this project tests (Redis 7.0, 8.0, 8.6; Valkey 8.1,
// 9.1) replicates effects only, where the call is a no-op: none of them
// exercises the path where it matters.
//
// The failure rules:
//   - VerifyStillHeld is a point-in-time check. A failed or cancelled one
//     returns its error and leaves the permit held: retry it. It prunes, so it
//     runs on the primary and needs write permission for the key.
//   - Renew: a context that ends while it waits for another operation of the
//     permit changes nothing. Once sent, a failed or cancelled renewal
//     surrenders the permit ([Permit.Surrendered]; RemainingEstimate 0; later
//     renewals false without I/O): it may still run on the server, and an error
//     reply does not undo the writes before it, so its lifetime there is
//     unknown. Before the error is returned the permit is released by its owner
//     token, bounded to about a second, then retried in the background. A late
//     renewal never creates a released permit again (it only updates an
//     existing member).
//   - Release that fails or whose context ends sends one more owner-token
//     release bounded to about a second before it returns the error. If that
//     cannot confirm either, the error matches [ErrUncertain] and the permit
//     fails closed: keep it only to retry Release.
//   - Close never fails and waits about a second at most; a release not
//     confirmed by then is retried in the background with capped, jittered
//     back-off (50ms doubling to 5s) for up to a minute (the clean-up
//     window, WithCleanupWindow).
//
// An acquisition runs on a dedicated connection. When its outcome is uncertain
// (its context ended, its reply was lost) it is never replayed nor returned as
// acquired: in the background its connection is fenced with CLIENT KILL, so a
// delayed acquisition cannot recreate a permit after its release, and then the
// permit is released by its owner token, each retried for up to a minute. A
// fence that never succeeds sends no release: an expiring permit then ends at
// its deadline, a permit without expiry stays. An error reply to an acquisition
// (other than a capacity mismatch; a refusal of EVALSHA itself, which ran
// nothing, excepted), such as an ACL refusing a command partway through the
// script, is followed by an owner-token release before it is returned.
// Background clean-up that gives up increments prim.cleanup.abandoned
// (attributes primitive, stage "fence" or "release", reason "no-permission",
// "refused", "unreachable" or "error") and logs a warning through the
// Coordinator's logger. A process that exits would lose the clean-ups still
// in progress: at shutdown, after closing its permits, call WaitCleanups
// (bounded by a context) so they finish, confirmed or given up and counted.
//
// Prefer a finite expiry. A permit without expiry has no server-side fallback:
// if its holder crashes, or clean-up cannot reach the server within the
// minute, it holds its share of the capacity, and blocks a capacity change,
// until it is removed. To recover, stop every holder and delete the key, or
// remove the stale "P:" members of its sorted set (ZREM). Asynchronous
// failover can roll permits back, and as deadlines are absolute server times
// a promoted replica with a skewed clock expires permits early or late.
//
// ACL permissions: CLIENT INFO and CLIENT KILL (the dedicated acquisition
// connection and its fence), EVALSHA and EVAL, and in the scripts TYPE, TIME,
// ZREMRANGEBYSCORE, ZSCORE, ZRANGEBYSCORE, ZRANGE, ZCARD, ZADD, ZREM, PEXPIREAT,
// PERSIST and DEL: the rule [ACLSemaphore].
//
// # Read-write leases
//
// [Coordinator.TryAcquireReadLock] and [Coordinator.TryAcquireWriteLock] take
// a shared or exclusive [RWLease] on one sorted-set key: each member is an
// owner ("r:" or "w:" and a random owner token), scored with its deadline in
// the server's clock. One script removes expired owners, checks for
// incompatible live owners (any writer, for a reader; any owner, for a writer),
// adds the owner and sets the key to expire at its latest owner deadline.
// Acquisition is immediate: no queue, no polling, no fairness. Readers keep
// being admitted while any reader is live, so overlapping readers can starve a
// writer: retry writes with a bounded backoff (see the example of
// TryAcquireWriteLock). A failed or uncertain renewal marks the handle lost; a
// failed or cancelled verification leaves it as it was, so Release still
// removes the entry; Close is best-effort and ignores failures — an entry it
// could not remove blocks incompatible owners until it expires. An
// acquisition is one round trip; one whose outcome is uncertain (or whose
// reply came after the lease duration) is never replayed: the entry is
// released owner-checked once the late reply says it was taken, or the reply
// is lost (else it expires after its duration). One key, one slot: Cluster needs
// no hash tags. Asynchronous failover can restore older owner sets: this is
// not consensus.
//
// # Redlock
//
// [NewRedlockGroup] takes an odd number, at least three, of clients of
// independent deployments (it never closes them); [RedlockGroup.TryAcquire]
// sets one random owner token on every node in parallel (SET NX PX, each
// command bounded by [WithNodeTimeout], default [DefaultNodeTimeout]) and
// holds the lease when a majority set it with positive validity: the ttl, less
// the time from before the first request to the majority's last answer, less
// the drift allowance (ttl × [WithClockDriftFactor], default 0.01, plus 2ms:
// the Redlock description's figures). It returns as soon as a majority
// answered, so it costs about one round trip to the slowest member of the
// fastest majority. A failed attempt removes its token (owner-checked) from
// every node that may have it before it returns. [RedlockLease.Renew] renews
// on a quorum or ends the lease (a partial renewal leaves nodes with
// different expiries), [RedlockLease.Release] removes the token everywhere and
// reports whether a majority answered, [RedlockLease.RemainingEstimate] is the
// local validity estimate.
//
// Redlock is not consensus, and it gives no fencing token. The nodes never
// talk to each other: each grants on its own clock and forgets on its own
// clock, and a majority is only a majority at the instant of its answers.
// Nothing orders one lease after another, so there is no number a protected
// resource could compare to reject a stale holder — and a stale holder is the
// ordinary case, not a corner one: a client whose process stalls (a GC pause,
// a page fault, a VM descheduled) or whose request sits in a network queue
// keeps believing it holds a lease that expired on the nodes and was granted
// to someone else, and its late write lands beside the new owner's. Martin
// Kleppmann's critique of Redlock makes this point: the local estimate cannot
// protect against pauses that happen after it was read, and the algorithm
// assumes bounded network delay, bounded pauses and clocks that run at nearly
// the same rate — a server whose clock jumps forward (an NTP step, an
// operator) expires the key early and grants it again while the first owner
// is within its validity. A node restarted without persistence (or from a
// snapshot older than the grant) comes back without the key, so a majority
// for a second owner can form from it and the nodes that never saw the first
// grant; keep nodes down for longer than the longest ttl after a crash, or
// run them with appendfsync always. Asynchronous replication behind a node
// (a failover client as a member) loses grants the same way.
//
// A node that does not answer within the node timeout counts as failed, but
// its command may still reach it. The clean-up of a node whose acquisition is
// still in flight waits for it (up to the node timeout) so that it does not
// overtake it on the way, and when a node's reply comes after the attempt
// failed or the lease was released and says it set the token, the token is
// released there once more. But a command can land after the clean-up (a
// client stalled, packets delayed unevenly) and its reply be lost: that node
// then keeps the token until the ttl, and until then the next attempts on that
// key reach no quorum (ErrNoQuorum) as soon as the other unavailable nodes and
// it leave fewer than a majority — with three nodes, one more node down. A
// node unreachable during clean-up keeps the token until it expires too.
//
// Each node is sent SET to acquire, the renewal script (GET, PEXPIRE) to
// renew and the release script (GET, DEL) to release. Redis 7.0+ and Valkey
// 8+ check the commands a script calls against the user's ACL too, so its ACL
// user needs SET, EVALSHA, EVAL, GET, PEXPIRE and DEL on the lock's keys (the
// rule [ACLRedlock]);
// none of these is ever resent but the renewal, which is idempotent.
//
// Use Redlock where an occasional double grant costs efficiency, not
// correctness. Where a stale owner must be rejected, use a fencing-token lock
// on one deployment ([Coordinator.TryAcquireFencedLock]) with a resource that
// checks the token, or a consensus-backed lock service.
//
// # Countdown latches
//
// [Coordinator.CreateCountdownLatch] starts a latch generation (a hash key
// holding a unique generation id and a count ≥ 0; [ErrLatchExists] if one is
// there), [Coordinator.JoinCountdownLatch] joins the current one
// ([ErrNotFound] when none exists) and [Coordinator.ResetCountdownLatch]
// creates or replaces it with a new generation. [CountdownLatch.CountDown]
// decrements atomically and returns what remains; against a replaced (or
// deleted) generation it returns -1 and writes nothing, and against a
// completed one it fails with [ErrLatchCompleted], never going below zero. A
// signal is sent once; if its reply is lost it is [ErrUncertain] (it may have
// counted). [CountdownLatch.Wait] registers for the key's invalidations before
// every read, re-reads after each notification and every few seconds without
// one, and returns true at zero, false once the generation is replaced or the
// key deleted; a notification lost across a reconnect only delays it, and
// cancellation leaves the count alone; a count that is missing, not an
// integer or negative is [ErrLatchState], never completion. prim sets no
// expiry on the key: its lifetime is the caller's.
//
// # Uncertain outcomes
//
// A timeout, cancellation or disconnect after a command was sent leaves its
// outcome unknown; such errors match [ErrUncertain]. An acquisition that ends
// this way is never returned as acquired: its token may be a gap and its lease
// expires after its duration. A reply that arrives after the whole lease
// duration is not returned either (its lease is released owner-checked). A
// renewal whose outcome is uncertain makes the handle fail closed: Renew
// returns false from then on, and in the background the dedicated connection
// it ran on is fenced with CLIENT KILL from another connection (so the renewal
// cannot still execute later), and the lease is released owner-checked.
//
// A failure before anything was sent is definite and does not match
// [ErrUncertain]: a refused or failed dial (the error wraps the dialer's
// *net.OpError, e.g. a client pointed at a closed port), a pool timeout, a
// closed client. The handle, if any, stays as it was: a refused Renew or
// Release can be called again.
//
// The fence names the connection by id, its address and the server's address
// on it (CLIENT KILL ID n ADDR a LADDR l, from CLIENT INFO), so after a restart
// or failover, when ids restart, it cannot kill an unrelated connection; and it
// counts as done only when the server killed it, or when the same server (same
// address on its side) has no such connection any more. Otherwise nothing is
// released (the delayed command could run after the release) and the lease
// expires server-side. A release queued behind an
// in-flight operation of the same handle waits for it, and still runs if its
// caller's context ends first ([ErrReleasePending]).
//
// # Fast paths and what each server has
//
// Where a server has them, a fenced lock is released with one plain command,
// DELEX lease IFEQ value (Redis 8.4+), and renewed with SET lease value IFEQ
// value PX ttl (Redis 8.4+, Valkey 8.1+), instead of a script; the answers are
// exactly the scripts'. DELEX answers 0 both for a lease that is gone and for
// another owner's: only then the release script follows, in the same call, on
// the primary (never a plain read, which a client reading from replicas could
// send to a lagging one), and its answer is the release's (gone:
// AlreadyReleased; another value or type: NotOwned; this owner's own value
// again, which only a failover to a replica that still had it can bring back:
// removed, Released). A renewal's SET IFEQ never creates a missing lease. Both are sent at most once,
// as the scripts are, and their uncertain outcomes are the scripts' (a release
// fails closed; a renewal fails closed and is fenced).
//
// What a server has is learned per node from the commands' own answers, never
// from version strings: a Cluster node by the client's slot map, a standalone
// server by its address, a Sentinel failover client's master as that client
// (after a failover the next answer decides). Only the server's definite "does
// not know it" switches a node to the scripts — "ERR unknown command" (DELEX, a
// command renamed away, HPTTL in the lease script), and for SET's IFEQ option,
// which older servers parse as a plain SET's, "ERR syntax error" — and that
// same call runs the script at once, since nothing ran. The node then uses the
// scripts for five minutes and tries the command again, so an upgraded server
// regains the fast path. No other answer is evidence: a timeout or lost reply
// is the operation's uncertain outcome; any other error reply (an ACL refusal,
// NOPERM; a server out of memory, which refuses SET but not the renewal
// script's PEXPIRE; LOADING, READONLY and the like) says the command did not
// run, so that call runs the script, whose answer is the operation's, and the
// next one tries the command again. The one exception is a key of another
// type (WRONGTYPE), which is answered as the script answers it.
//
// Named leases keep their scripts on every server: no command (Redis 8.6
// included) compares a hash field's value before deleting or re-expiring it.
// A node without hash-field expiry answers every named-lease acquisition with
// ErrFeatureUnsupported; it is asked each time (there is no fallback to take
// meanwhile, and a failover may land on a server that has it).
//
// # Cost
//
// The commands each operation sends. "Script" is EVALSHA (the first use of a
// script on a server adds EVALSHA's NOSCRIPT reply and EVAL):
//
//   - TryAcquireFencedLock: the acquisition script, on every server.
//   - Release and Close of a fenced lock: DELEX on Redis 8.4+ (and the release
//     script only when DELEX removed nothing: the lease gone or another
//     owner's); the release script elsewhere.
//   - Renew of a fenced lock: CLIENT INFO (the dedicated connection's identity,
//     for fencing), then SET IFEQ PX on Redis 8.4+ and Valkey 8.1+, the renewal
//     script elsewhere.
//   - VerifyStillHeld: the verification script (GET and PTTL), on every server.
//   - TryAcquireLease: CLIENT INFO, then the acquisition script; a lease's
//     Renew: CLIENT INFO, then its script; its Release and VerifyStillHeld:
//     their script — on every server.
//   - On a node without a fast command, its first use (and one use every five
//     minutes after) sends the command once more before the script: the
//     server's "unknown command" (or "syntax error") is the answer that keeps
//     the node on the scripts. Any other error reply to the command (an ACL
//     refusal, a server out of memory refusing SET) also adds the script to
//     that call, without being recorded: a user the ACL denies DELEX sends
//     DELEX and the script on every release.
//
// A waiting acquisition adds, after a contended attempt, one tracking read,
// and each wake-up costs one attempt.
//
// On the server a fenced acquisition is one script that calls PTTL on the
// lease, PTTL and GET on the counter, INCR and SET (four calls for the first
// acquisition of a new counter; a sixth, GET, past 2^53). A contended attempt
// is PTTL and GET on the lease. Counted with the
// repository's scripts/server-cost.sh on Redis 8.0, pipelined 16 deep and
// including reading and replying: a plain SET NX PX costs about 10k
// instructions, a script that only returns about the same, a script whose one
// call is SET NX PX about 30k, and the fenced acquisition about 51k. Those
// checks are what make the token trustworthy: no lease on an expiring, negative
// or malformed counter, and nothing written when one is refused. A scripted
// release costs what any compare-and-delete script costs.
//
// The fast paths, counted the same way on Redis 8.6 (scripts/server-cost.sh
// redis-8.6): releasing a held lease costs about 7.3k instructions with DELEX
// against 26k with the release script (3.6 times less), renewing it about 12.8k
// with SET IFEQ PX against 27.8k with the renewal script (2.2 times less); a
// DELEX that finds no lease costs about 4.7k and the release script follows
// it (about 21k, what the script alone costs).
//
// A waiter sends nothing while it waits. Its watcher sends one PING a second
// per node on the tracking connection while anyone waits (CLIENT ID instead
// once the server refuses PING, which it logs once at Warn: a refusal is a
// reply, so the connection is alive), and repeats its SUBSCRIBE on the
// Pub/Sub connection after every 2s without traffic for as long as the
// watcher exists (until 30s after the last wait on that node, or
// [Coordinator.Close]).
//
// # ACL permissions
//
// Each primitive's least-privilege rule is a constant in ACL SETUSER syntax
// without the user, password and key pattern (see [ACLFencedLock] for how to
// compose one): the commands the primitive sends and those its scripts call,
// which Redis 7+ and Valkey check against the user's ACL as well. A user
// with the rule and a key pattern covering the primitive's keys runs it; a
// rule less one of its commands makes the operations that need the command
// fail with an error matching [ErrNoPermission], at once and with nothing
// written (the optional parts below excepted: their fallbacks run). Every rule below is accepted by ACL SETUSER on Redis 7.0, 8.0, 8.6
// and Valkey 8.1, 9.1 (hash leases: where the server has hash-field expiry),
// and tested there with a client of go-redis's default options. For example:
//
//	ACL SETUSER orders on >secret resetchannels ~{orders}* +evalsha +eval +get +pttl +incr +set +pexpire +del +client|info +client|kill +client|id +client|tracking +subscribe +ping &__redis__:invalidate
//
// is a user of fenced locks, waiting included, on the keys {orders}*.
//
// The rules, exactly:
//
//	fenced locks             +evalsha +eval +get +pttl +incr +set +pexpire +del +client|info +client|kill
//	waiting (in addition)    +client|id +client|tracking +subscribe +ping &__redis__:invalidate
//	hash-field leases        +evalsha +eval +hpttl +pttl +hget +hset +hpexpire +hdel +client|info +client|kill
//	read-write leases        +evalsha +eval +time +type +zremrangebyscore +zcard +zrange +zadd +zscore +zrem +pexpireat +client|info +client|kill
//	semaphores               +evalsha +eval +time +type +zremrangebyscore +zscore +zrangebyscore +zrange +zcard +zadd +zrem +pexpireat +persist +del +client|info +client|kill
//	countdown latches        +evalsha +eval +type +hget +hset +hmget +hincrby
//	fixed-window limiters    +evalsha +eval +get +set +incrby +pexpire +pttl
//	sliding-window limiters  +evalsha +eval +time +hgetall +hincrby +hdel +pexpireat
//	token-bucket limiters    +evalsha +eval +time +exists +hmget +hset +pexpireat
//	Redlock (every node)     +set +evalsha +eval +get +pexpire +del
//
// What each command is for:
//
//   - Fenced locks, [ACLFencedLock]: TryAcquireFencedLock's script runs PTTL,
//     GET, INCR and SET on both keys; Renew runs on a dedicated connection
//     (CLIENT INFO), sends SET IFEQ where the server has it or the script (GET,
//     PEXPIRE), and fences an uncertain renewal with CLIENT KILL;
//     VerifyStillHeld's script runs GET and PTTL; Release and Close run the
//     script (GET, DEL).
//   - Waiting, [ACLWaiting], with the primitive's own rule, for
//     AcquireFencedLock, AcquireLease and CountdownLatch.Wait: the watcher's
//     CLIENT ID, CLIENT TRACKING, SUBSCRIBE and PING, the channel
//     __redis__:invalidate, and the read of the key (PTTL, HPTTL or HMGET, in
//     the primitive's rule). Optional: without it waiting falls back to
//     polling, as described above (a refused subscription or CLIENT
//     TRACKING is logged once at Warn and counted in prim.waiting.degraded).
//   - Named leases in hash fields, [ACLHashLease]: the scripts, and the
//     dedicated connection that fences uncertain acquisitions and renewals.
//     HPTTL and HPEXPIRE exist on Redis 7.4+ and Valkey 9+ only: older
//     servers refuse the rule, as they have no hash leases.
//   - Read-write leases, [ACLRWLease], and semaphores, [ACLSemaphore]: the
//     scripts, and the dedicated connection of acquisitions (semaphores) and
//     renewals, fenced with CLIENT KILL when their outcome is uncertain.
//   - Countdown latches, [ACLCountdownLatch]: the scripts and HMGET (Join,
//     Count); [ACLWaiting] too for Wait to wake on invalidations (without it
//     Wait re-reads every 250ms).
//   - Rate limiters: [ACLFixedWindow], [ACLSlidingWindow], [ACLTokenBucket],
//     each its script's commands.
//   - Redlock, [ACLRedlock], on every node of the group: a failed
//     acquisition, renewal or release whose nodes' refusals kept the quorum
//     out of reach matches [ErrNoPermission] as well as its reason.
//
// Optional commands of newer servers, each a fast path with a fallback that
// the rules above allow. ACL SETUSER refuses a rule naming a command the
// server does not know ("Unknown command or category name in ACL"), so add
// each only on servers that have it:
//
//   - [ACLFencedLockRelease] (+delex, Redis 8.4+): the one-command release of
//     fenced locks. Without it a release sends a refused DELEX, then the
//     script: it still releases, one round trip later.
//   - [ACLHashLeaseHSETEX] (+hsetex, Redis 8.0+, Valkey 9+): writes a lease
//     field and its expiry at once. Without it the script writes HSET then
//     HPEXPIRE, inside the same script: nothing is lost.
//   - [ACLFixedWindowINCREX] (+increx, Redis 8.8+, Valkey 9.2+): the fixed
//     window's fast path. Without it a decision sends a refused INCREX, then
//     the script.
//   - [ACLCluster] (+asking, Redis Cluster, every primitive but Redlock):
//     go-redis's cluster client and the fencing primitives' dedicated
//     connections follow an ASK redirection while a slot migrates; without
//     it operations fail with [ErrNoPermission] during the migration. go-redis's cluster client sends CLUSTER SLOTS and COMMAND
//     itself: grant +cluster|slots +command as well (without +cluster|slots
//     every command fails with [ErrNoPermission]).
//
// SET IFEQ (Redis 8.4+, Valkey 8.1+) is SET, in every fenced-lock rule.
// `coordtorture preflight` checks a deployment's user against the same lists
// with ACL DRYRUN.
//
// Scripts are loaded on first use: EVALSHA, then EVAL on a definitive NOSCRIPT
// reply (never SCRIPT LOAD). All scripts work on Redis 7.0+ and Valkey 8+.
package prim

package prim

// The least-privilege ACL rules of the primitives, in ACL SETUSER syntax:
// every command a primitive sends, the commands its scripts call (Redis 7+ and
// Valkey check a script's own commands against the user's ACL too) and, for
// waiting, the invalidation channel. Each is a rule without the user, the
// password and the key pattern; compose a user from the rules of the
// primitives it uses, the service's key pattern and, where it waits, the
// channel:
//
//	ACL SETUSER orders on >secret resetchannels ~{orders}* <ACLFencedLock> <ACLWaiting>
//
// (the key pattern must cover every key the primitive is given: a fenced
// lock's lease and counter keys both). Rules add up: a user of several
// primitives takes the union. Each rule names only commands that every server
// the primitive supports knows (Redis 7.0+ and Valkey 8+; hash leases Redis
// 7.4+ and Valkey 9+), so ACL SETUSER accepts it there. The optional rules
// below name commands of newer servers: ACL SETUSER refuses a rule naming a
// command the server does not know ("Unknown command or category name in
// ACL"), so add each only where the server has the command.
//
// prim never sends SCRIPT LOAD: scripts are loaded by EVAL after EVALSHA's
// NOSCRIPT, so both are in every rule that runs scripts. go-redis's own
// connection set-up needs nothing granted (HELLO and AUTH need no permission;
// its CLIENT SETINFO may be refused, and the refusal is ignored).
const (
	// ACLFencedLock: TryAcquireFencedLock (its script runs PTTL, GET, INCR and
	// SET on the lease and counter keys), Renew (SET IFEQ where the server has
	// it, else the script's GET and PEXPIRE, on a dedicated connection whose
	// CLIENT INFO identifies it, fenced with CLIENT KILL when the renewal's
	// outcome is uncertain), VerifyStillHeld (GET, PTTL), Release and Close
	// (GET, DEL; see [ACLFencedLockRelease]).
	ACLFencedLock = "+evalsha +eval +get +pttl +incr +set +pexpire +del +client|info +client|kill"

	// ACLWaiting: AcquireFencedLock, AcquireLease and CountdownLatch.Wait, in
	// addition to the primitive's own rule: the invalidation watcher's CLIENT
	// ID, CLIENT TRACKING, SUBSCRIBE and PING, and the channel
	// __redis__:invalidate. Without it waiting still works, by polling (a
	// re-check every 50ms per lock, every 250ms per latch), logged once at Warn
	// and counted in prim.waiting.degraded.
	ACLWaiting = "+client|id +client|tracking +subscribe +ping &__redis__:invalidate"

	// ACLHashLease: TryAcquireLease and lease handles (Redis 7.4+, Valkey 9+):
	// the scripts' HPTTL, PTTL, HGET, HSET, HPEXPIRE and HDEL, and CLIENT INFO
	// and CLIENT KILL for the dedicated connection that fences uncertain
	// acquisitions and renewals. See [ACLHashLeaseHSETEX].
	ACLHashLease = "+evalsha +eval +hpttl +pttl +hget +hset +hpexpire +hdel +client|info +client|kill"

	// ACLRWLease: TryAcquireReadLock, TryAcquireWriteLock and their handles.
	ACLRWLease = "+evalsha +eval +time +type +zremrangebyscore +zcard +zrange +zadd +zscore +zrem +pexpireat +client|info +client|kill"

	// ACLSemaphore: Semaphore.TryAcquire and permits.
	ACLSemaphore = "+evalsha +eval +time +type +zremrangebyscore +zscore +zrangebyscore +zrange +zcard +zadd +zrem +pexpireat +persist +del +client|info +client|kill"

	// ACLCountdownLatch: CreateCountdownLatch, ResetCountdownLatch,
	// JoinCountdownLatch, CountDown and Count. Wait needs [ACLWaiting] too to
	// wake on invalidations.
	ACLCountdownLatch = "+evalsha +eval +type +hget +hset +hmget +hincrby"

	// ACLFixedWindow: fixed-window limiters (the Lua counter). See
	// [ACLFixedWindowINCREX].
	ACLFixedWindow = "+evalsha +eval +get +set +incrby +pexpire +pttl"

	// ACLSlidingWindow: sliding-window limiters.
	ACLSlidingWindow = "+evalsha +eval +time +hgetall +hincrby +hdel +pexpireat"

	// ACLTokenBucket: token-bucket limiters.
	ACLTokenBucket = "+evalsha +eval +time +exists +hmget +hset +pexpireat"

	// ACLRedlock: a Redlock group's user on each of its nodes (SET to acquire,
	// the renewal script's GET and PEXPIRE, the release script's GET and DEL).
	ACLRedlock = "+set +evalsha +eval +get +pexpire +del"
)

// Optional rules: commands of newer servers that prim uses where the server
// has them. ACL SETUSER refuses each on a server that lacks the command.
const (
	// ACLFencedLockRelease: DELEX (Redis 8.4+), the one-command owner-checked
	// release of fenced locks. Without it on a server that has DELEX, every
	// release sends a refused DELEX and then the script (GET, DEL): it still
	// releases, one round trip later.
	ACLFencedLockRelease = "+delex"

	// ACLHashLeaseHSETEX: HSETEX (Redis 8.0+, Valkey 9+), which writes a lease
	// field and its expiry at once. Without it on a server that has HSETEX the
	// script writes HSET then HPEXPIRE (removing the field again if HPEXPIRE is
	// refused), which [ACLHashLease] allows: nothing is lost but a command.
	ACLHashLeaseHSETEX = "+hsetex"

	// ACLFixedWindowINCREX: INCREX (Redis 8.8+, Valkey 9.2+), the fixed
	// window's one-command fast path (pipelined with PTTL). Without it on a
	// server that has INCREX every decision sends a refused INCREX and then
	// the Lua counter: it still decides, one round trip later.
	ACLFixedWindowINCREX = "+increx"

	// ACLCluster: on Redis Cluster, every primitive (all but Redlock, whose
	// nodes are standalone) follows an ASK redirection while a slot migrates
	// with ASKING: go-redis's cluster client sends it for any command, and
	// the fencing primitives' dedicated connections too. Without it such
	// operations fail with [ErrNoPermission] during the migration. The
	// cluster client itself needs what it sends to learn the slot map and
	// the commands' key positions, which no rule here includes: go-redis v9
	// sends CLUSTER SLOTS (without +cluster|slots every command fails with
	// ErrNoPermission) and COMMAND (without +command it logs a refusal on
	// every command). A user with [ACLFencedLock], [ACLWaiting],
	// [ACLRWLease], ACLCluster and +cluster|slots +command ran fenced locks
	// and read-write leases on a 3-primary cluster of every build of the
	// test matrix; that check is not part of the test suite (a cluster per
	// build is too slow for it).
	ACLCluster = "+asking"
)

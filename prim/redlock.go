package prim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric/noop"
)

// The defaults of a Redlock group (see NewRedlockGroup).
const (
	// DefaultNodeTimeout bounds each node's command of a Redlock group unless
	// WithNodeTimeout says otherwise.
	DefaultNodeTimeout = 100 * time.Millisecond
	// DefaultClockDriftFactor is the share of the ttl a Redlock group sets
	// aside for clock drift between the nodes and the client unless
	// WithClockDriftFactor says otherwise: the drift allowance of a lease is
	// ttl × factor + RedlockDriftFixed (as in the Redlock description:
	// 0.01 × ttl + 2ms).
	DefaultClockDriftFactor = 0.01
	// RedlockDriftFixed is the fixed part of the drift allowance, for the
	// granularity of the servers' expiry (whole milliseconds) and timers.
	RedlockDriftFixed = 2 * time.Millisecond
)

// redlockConfig is what the Redlock-only options set on the scratch
// Coordinator NewRedlockGroup applies its options to.
type redlockConfig struct {
	nodeTimeout time.Duration
	drift       float64
	driftSet    bool
}

// WithNodeTimeout bounds every command a Redlock group sends to one node
// (acquisition, renewal, release): a node that has not answered within d
// counts as failed for that operation. Default DefaultNodeTimeout (100ms).
// Keep it small beside the ttl: an acquisition spends up to d of the lease's
// validity when a quorum member is slow. It applies to NewRedlockGroup only
// (New ignores it); d must be positive.
func WithNodeTimeout(d time.Duration) Option {
	return func(c *Coordinator) { c.rl.nodeTimeout = d }
}

// WithClockDriftFactor sets the share of the ttl a Redlock group sets aside
// for the drift between the nodes' clocks and the client's: a lease's validity
// is ttl − elapsed − (ttl × f + RedlockDriftFixed). Default
// DefaultClockDriftFactor (0.01); f must be in [0, 1). It applies to
// NewRedlockGroup only (New ignores it).
func WithClockDriftFactor(f float64) Option {
	return func(c *Coordinator) { c.rl.drift, c.rl.driftSet = f, true }
}

// The input errors of NewRedlockGroup; each matches ErrInvalidArgument too.
var (
	// ErrTooFewNodes: a Redlock group needs at least three clients.
	ErrTooFewNodes = argError("a Redlock group needs at least three clients")
	// ErrEvenNodes: a Redlock group needs an odd number of clients (an even
	// count adds a node without adding a tolerated failure).
	ErrEvenNodes = argError("a Redlock group needs an odd number of clients")
	// ErrDuplicateNode: the same client was given twice, or two clients of the
	// same server address and database: every client must reach a deployment
	// of its own.
	ErrDuplicateNode = argError("a Redlock group was given the same deployment twice")
	// ErrNilNode: a nil client.
	ErrNilNode = argError("a Redlock group was given a nil client")
	// ErrInvalidOption: an option out of range (a node timeout that is not
	// positive, a drift factor outside [0, 1)).
	ErrInvalidOption = argError("invalid option")
)

// ErrNoQuorum reports that fewer than a majority of a Redlock group's nodes
// confirmed an operation because some failed (unreachable, slower than the
// node timeout, an error reply). A Redlock acquisition error that matches it
// matches ErrNotAcquired too.
var ErrNoQuorum = errors.New("prim: no quorum of Redlock nodes")

// ErrValidityExpired reports a Redlock acquisition or renewal that a majority
// of nodes confirmed too late: the ttl less the time it took and the drift
// allowance left no validity. Its token was released. It matches
// ErrNotAcquired too when it ends an acquisition.
var ErrValidityExpired = errors.New("prim: Redlock quorum reached with no validity left")

// ErrNodeTimeout is the per-node error (RedlockError.NodeErrors) of a node
// that did not answer within the group's node timeout. Its command may still
// run on that node later.
var ErrNodeTimeout = errors.New("prim: the Redlock node did not answer within the node timeout")

// ErrHeldElsewhere is the per-node error (RedlockError.NodeErrors) of a node
// where another owner holds the key.
var ErrHeldElsewhere = errors.New("prim: held by another owner on this node")

// RedlockError is the error of a Redlock acquisition that did not acquire, or
// of a renewal or release that no quorum confirmed. errors.Is matches its
// reason — ErrNotAcquired (contention: nodes held by other owners alone
// prevent a quorum), ErrNoQuorum (failed nodes prevent it) or
// ErrValidityExpired — and, for an acquisition, ErrNotAcquired whatever the
// reason, and the refusal classes of its nodes' errors where those refusals
// alone prevented the quorum (ErrNoPermission where the nodes' ACL refused a
// command).
type RedlockError struct {
	Op        string        // "acquire", "renew" or "release"
	Key       string        // the key
	Nodes     int           // the group's size
	Quorum    int           // the majority needed
	Confirmed int           // nodes that confirmed (acquired, renewed, released or absent)
	Contended int           // nodes held by another owner (acquire) or not this owner's (renew)
	Failed    int           // nodes that failed: timeouts, unreachable, error replies
	Elapsed   time.Duration // from before the first request to the decision
	Validity  time.Duration // what was left (ValidityExpired: ≤ 0)
	// NodeErrors has one entry per node, in the group's order: nil for a node
	// that confirmed or was not waited for, ErrHeldElsewhere, an
	// ErrNodeTimeout error, or the node's error.
	NodeErrors []error
	reason     error
}

func (e *RedlockError) Error() string {
	var b strings.Builder
	switch e.reason {
	case ErrValidityExpired:
		fmt.Fprintf(&b, "prim: redlock %s %q: %d of %d nodes confirmed after %v, no validity left (%v)",
			e.Op, e.Key, e.Confirmed, e.Nodes, e.Elapsed.Round(time.Microsecond), e.Validity.Round(time.Microsecond))
		return b.String()
	case ErrNotAcquired:
		fmt.Fprintf(&b, "prim: redlock %s %q: held by another owner on %d of %d nodes (quorum %d)",
			e.Op, e.Key, e.Contended, e.Nodes, e.Quorum)
	default:
		fmt.Fprintf(&b, "prim: redlock %s %q: no quorum: %d of %d nodes confirmed (quorum %d), %d failed, %d held by another owner",
			e.Op, e.Key, e.Confirmed, e.Nodes, e.Quorum, e.Failed, e.Contended)
	}
	for i, err := range e.NodeErrors {
		if err != nil && !errors.Is(err, ErrHeldElsewhere) {
			fmt.Fprintf(&b, "; node %d: %v", i, err)
		}
	}
	return b.String()
}

// Is matches the reason, for an acquisition ErrNotAcquired, and, when the
// nodes' refusals alone prevented the quorum (ErrNoQuorum with more nodes
// refusing than the group can spare), each class of server refusal they
// answered ([ErrServerRefused], [ErrNoPermission], …): a user whose ACL
// lacks a command on the nodes sees ErrNoPermission; a refusing minority
// does not turn contention or timeouts into a refusal.
func (e *RedlockError) Is(target error) bool {
	if target == e.reason || (target == ErrNotAcquired && e.Op == "acquire") {
		return true
	}
	if target == nil || !errors.Is(target, ErrServerRefused) || e.reason != ErrNoQuorum {
		return false
	}
	// Only where the refusals alone kept the quorum out of reach (more
	// nodes refused than the group can spare beside the contended ones):
	// a refusing minority under contention, or beside timeouts, is not
	// what the caller should act on, and nodes not waited for are not
	// counted.
	refused, match := 0, false
	for _, err := range e.NodeErrors {
		if err != nil && errors.Is(err, ErrServerRefused) {
			refused++
			match = match || errors.Is(err, target)
		}
	}
	return match && refused > e.Nodes-e.Quorum-e.Contended
}

// Reason is ErrNotAcquired (contention), ErrNoQuorum or ErrValidityExpired.
func (e *RedlockError) Reason() error { return e.reason }

// RedlockGroup takes quorum leases (Redlock) across an odd number, at least
// three, of independent Redis or Valkey deployments. See the package
// documentation, "Redlock", for what it guarantees and what it does not. It
// is safe for concurrent use and never closes its clients.
type RedlockGroup struct {
	nodes       []redis.UniversalClient
	names       []string
	quorum      int
	nodeTimeout time.Duration
	drift       float64
	logger      *slog.Logger
	m           *metrics
	bg          *cleanups // node commands and clean-ups in the background (WaitCleanups)
}

// NewRedlockGroup returns a group over clients, each of which must reach a
// deployment of its own (a standalone server, or a failover or Cluster client
// of its own deployment). It sends nothing, and never closes the clients.
//
// Options: WithNodeTimeout, WithClockDriftFactor, WithLogger and
// WithMeterProvider (other options are ignored). Errors (all matching
// ErrInvalidArgument): ErrTooFewNodes below three clients, ErrEvenNodes for an
// even count, ErrDuplicateNode for the same client twice (or two *redis.Client
// of the same network, address and database), ErrNilNode, ErrInvalidOption.
func NewRedlockGroup(clients []redis.UniversalClient, opts ...Option) (*RedlockGroup, error) {
	cfg := Coordinator{logger: slog.Default(), rl: redlockConfig{nodeTimeout: DefaultNodeTimeout, drift: DefaultClockDriftFactor}}
	for _, o := range opts {
		o(&cfg)
	}
	n := len(clients)
	switch {
	case n < 3:
		return nil, invalid(ErrTooFewNodes, fmt.Sprintf("got %d", n))
	case n%2 == 0:
		return nil, invalid(ErrEvenNodes, fmt.Sprintf("got %d", n))
	case cfg.rl.nodeTimeout <= 0:
		return nil, invalid(ErrInvalidOption, fmt.Sprintf("node timeout %v must be positive", cfg.rl.nodeTimeout))
	case math.IsNaN(cfg.rl.drift) || cfg.rl.drift < 0 || cfg.rl.drift >= 1:
		return nil, invalid(ErrInvalidOption, fmt.Sprintf("clock drift factor %v must be in [0, 1)", cfg.rl.drift))
	}
	names := make([]string, n)
	for i, c := range clients {
		if c == nil || (reflect.ValueOf(c).Kind() == reflect.Pointer && reflect.ValueOf(c).IsNil()) {
			return nil, invalid(ErrNilNode, fmt.Sprintf("client %d", i))
		}
		names[i] = nodeLabel(i, c)
		for j := range i {
			if sameDeployment(clients[j], c) {
				return nil, invalid(ErrDuplicateNode, fmt.Sprintf("clients %d and %d (%s)", j, i, names[i]))
			}
		}
	}
	recording := cfg.meter != nil
	if !recording {
		cfg.meter = noop.NewMeterProvider().Meter("")
	}
	m := newMetrics(cfg.meter)
	m.off = !recording
	return &RedlockGroup{nodes: append([]redis.UniversalClient(nil), clients...), names: names, quorum: n/2 + 1,
		nodeTimeout: cfg.rl.nodeTimeout, drift: cfg.rl.drift, logger: cfg.logger, m: m, bg: &cleanups{}}, nil
}

func nodeLabel(i int, c redis.UniversalClient) string {
	if rc, ok := c.(*redis.Client); ok && rc.Options().Addr != "FailoverClient" {
		return fmt.Sprintf("%d:%s", i, rc.Options().Addr)
	}
	return fmt.Sprintf("%d", i)
}

// sameDeployment reports the same client, or two plain clients of the same
// network, address and database.
func sameDeployment(a, b redis.UniversalClient) bool {
	if reflect.TypeOf(a) == reflect.TypeOf(b) && reflect.TypeOf(a).Comparable() && a == b {
		return true
	}
	ca, ok1 := a.(*redis.Client)
	cb, ok2 := b.(*redis.Client)
	if !ok1 || !ok2 {
		return false
	}
	oa, ob := ca.Options(), cb.Options()
	// A failover (Sentinel) client's Addr is go-redis's placeholder, the same
	// for every one: only identity tells two of them apart.
	if oa.Addr == "FailoverClient" || ob.Addr == "FailoverClient" {
		return false
	}
	return oa.Network == ob.Network && oa.Addr == ob.Addr && oa.DB == ob.DB
}

// goCleanup runs f in the background as one of the group's clean-ups.
func (g *RedlockGroup) goCleanup(f func()) {
	g.bg.add()
	go func() {
		defer g.bg.done()
		f()
	}()
}

// WaitCleanups waits until the group's background work has finished: node
// commands still in flight after an operation returned (a slow node's
// acquisition, whose late success is released again), and the releases of
// abandoned attempts, ended leases and queued releases. It returns nil when
// none is left, or an error wrapping ctx's once ctx ends first (the work goes
// on). Call it at shutdown, after closing the leases, so that no token is
// left behind by the process's exit.
func (g *RedlockGroup) WaitCleanups(ctx context.Context) error { return g.bg.wait(ctx) }

// Nodes is the number of nodes of the group; Quorum the majority of them an
// operation needs.
func (g *RedlockGroup) Nodes() int { return len(g.nodes) }

// Quorum is the number of nodes an acquisition, renewal or release needs: a
// majority.
func (g *RedlockGroup) Quorum() int { return g.quorum }

// NodeTimeout is the bound of each node's command.
func (g *RedlockGroup) NodeTimeout() time.Duration { return g.nodeTimeout }

// DriftAllowance is what a lease of ttl sets aside for clock drift: ttl ×
// factor + RedlockDriftFixed.
func (g *RedlockGroup) DriftAllowance(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*g.drift) + RedlockDriftFixed
}

// validRedlockTTL refuses, before anything is sent, a ttl that is not a
// valid lease duration or that the drift allowance consumes whole: such a
// lease could never keep any validity, so every attempt would be written to
// the nodes only to be released again.
func (g *RedlockGroup) validRedlockTTL(ttl time.Duration) error {
	if err := validTTL(ttl); err != nil {
		return err
	}
	if d := g.DriftAllowance(ttl); ttl <= d {
		return invalid(ErrInvalidTTL, fmt.Sprintf("a Redlock lease of %v is all drift allowance (%v): it would never be valid", ttl, d))
	}
	return nil
}

// nodeOutcome is what one node answered.
type nodeOutcome int

const (
	nodeConfirmed nodeOutcome = iota + 1 // acquired, renewed, or released/absent
	nodeContended                        // another owner's (acquire) or not ours (renew)
	nodeFailed                           // timeout, unreachable, error reply
)

type nodeResult struct {
	i   int
	out nodeOutcome
	err error
}

// fan is one operation sent to several nodes at once, all bounded by one
// deadline (the node timeout from when they were sent): an answer after it
// counts as failed. With go-redis's default options a written command is
// bounded only by the client's read timeout, so a command can run after the
// deadline: its goroutine goes on alone and its answer is dropped.
type fan struct {
	results chan nodeResult
	ctx     context.Context // the ops' context: done at the deadline, or once every op returned
	nodes   []int
	cancel  context.CancelFunc
}

// fanOut runs op on each of nodes in a goroutine of its own, after wait(i)
// when wait is not nil. Every op gets one context with the fan's deadline
// (extra + the node timeout from now), which bounds what go-redis waits for
// before sending (a pool connection, a dial); it is cancelled once every op
// returned, after its answer was queued.
func (g *RedlockGroup) fanOut(nodes []int, extra time.Duration, wait func(i int), op func(ctx context.Context, i int, c redis.UniversalClient) nodeResult) *fan {
	ctx, cancel := context.WithTimeout(context.Background(), extra+g.nodeTimeout)
	f := &fan{results: make(chan nodeResult, len(nodes)), ctx: ctx, nodes: nodes, cancel: cancel}
	var left atomic.Int32
	left.Store(int32(len(nodes)))
	for _, i := range nodes {
		g.bg.add()
		go func() {
			defer g.bg.done()
			if wait != nil {
				wait(i)
			}
			r := op(ctx, i, g.nodes[i])
			r.i = i
			f.results <- r
			if left.Add(-1) == 0 {
				f.cancel()
			}
		}()
	}
	return f
}

// gather reads the fan's answers into t until decided(t), every node
// answered, or the deadline passed (the nodes that had not answered then
// count as failed). It returns false when ctx ended first.
func (g *RedlockGroup) gather(ctx context.Context, f *fan, t *tally, decided func(*tally) bool) bool {
	for answered := 0; answered < len(f.nodes); answered++ {
		select {
		case r := <-f.results:
			t.add(r)
		case <-f.ctx.Done():
			// The deadline, or every op returned (their answers are queued).
			for {
				select {
				case r := <-f.results:
					t.add(r)
					continue
				default:
				}
				break
			}
			for _, i := range f.nodes {
				if !t.seen[i] {
					t.add(nodeResult{i: i, out: nodeFailed, err: fmt.Errorf("%w (%v)", ErrNodeTimeout, g.nodeTimeout)})
				}
			}
			return true
		case <-ctx.Done():
			return false
		}
		if decided != nil && decided(t) {
			return true
		}
	}
	return true
}

// majority decides once a quorum confirmed or can no longer.
func (g *RedlockGroup) majority(t *tally) bool {
	return t.confirmed >= g.quorum || t.contended+t.failed > len(g.nodes)-g.quorum
}

// tally counts the answers of a fan-out.
type tally struct {
	confirmed, contended, failed int
	errs                         []error
	seen                         []bool
}

func newTally(n int) *tally { return &tally{errs: make([]error, n), seen: make([]bool, n)} }

func (t *tally) add(r nodeResult) {
	t.seen[r.i] = true
	switch r.out {
	case nodeConfirmed:
		t.confirmed++
	case nodeContended:
		t.contended++
		t.errs[r.i] = ErrHeldElsewhere
	default:
		t.failed++
		t.errs[r.i] = r.err
	}
}

func (g *RedlockGroup) failure(op, key string, t *tally, elapsed, validity time.Duration, reason error) *RedlockError {
	if reason == nil {
		reason = ErrNoQuorum
		if t.contended > len(g.nodes)-g.quorum {
			reason = ErrNotAcquired
		}
	}
	return &RedlockError{Op: op, Key: key, Nodes: len(g.nodes), Quorum: g.quorum, Confirmed: t.confirmed,
		Contended: t.contended, Failed: t.failed, Elapsed: elapsed, Validity: validity, NodeErrors: t.errs, reason: reason}
}

// TryAcquire takes the quorum lease of key for ttl at once, or fails; it never
// waits or retries. One random owner token is set on every node in parallel
// (SET key token NX PX ttl, each bounded by the node timeout); the lease
// is acquired when a majority set it and its validity — ttl less the time from
// before the first request was sent to the majority's last answer, less the
// drift allowance — is positive. It returns as soon as a majority confirmed:
// slower nodes' answers are not waited for (a slow node's token is removed by
// Release like any other).
//
// A failed attempt releases its token (owner-checked) on every node that may
// have it — all but the nodes that answered "held by another owner" — before
// it returns, and once more on a node whose reply comes later and says it set
// the token; a node that cannot be reached keeps it until the ttl. The error is a *RedlockError matching ErrNotAcquired and its
// reason: ErrNotAcquired alone (contention: other owners' leases alone leave no
// majority), ErrNoQuorum (failed or slow nodes leave none), ErrValidityExpired
// (a majority, too late).
//
// An empty key (ErrEmptyKey), a ttl that is not a whole number of
// milliseconds of at least 1ms, or one at or below its drift allowance
// (DriftAllowance: such a lease could never be valid) (ErrInvalidTTL) is
// returned before anything is sent. A context already done sends nothing. A context that ends during the
// attempt abandons it: its token is released in the background and the error
// matches ErrUncertain (the lease is not returned).
func (g *RedlockGroup) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*RedlockLease, error) {
	if key == "" {
		return nil, invalid(ErrEmptyKey, "redlock key must be non-empty")
	}
	if err := g.validRedlockTTL(ttl); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n := len(g.nodes)
	owner := newOwnerToken()
	l := &RedlockLease{g: g, key: key, owner: owner, ownerArg: any(owner), inflight: make([]chan struct{}, n),
		op: make(chan struct{}, 1), doneTimer: newDoneTimer(), state: stateHeld}
	for i := range l.inflight {
		l.inflight[i] = make(chan struct{})
	}
	ms := ttl.Milliseconds()
	start := time.Now()
	l.acqDeadline = start.Add(g.nodeTimeout)
	f := g.fanOut(l.allNodes(), 0, nil, func(ctx context.Context, i int, c redis.UniversalClient) nodeResult {
		r := acquireOn(ctx, c, key, l.ownerArg, ms)
		close(l.inflight[i])
		if r.out == nodeConfirmed && l.isOver() {
			// The node set the token after the attempt failed or the lease
			// was released: a clean-up sent before may have overtaken it
			// on the way (a stalled client, jitter).
			l.releaseOn([]int{i}, 0, "late acquisition reply")
		}
		return r
	})
	t := newTally(n)
	if !g.gather(ctx, f, t, g.majority) {
		g.m.add(ctx, g.m.uncertain, "redlock", "acquire")
		g.logger.WarnContext(ctx, "prim: redlock acquisition abandoned (context ended); its token is released in the background",
			"key", key, "err", ctx.Err())
		l.stop()
		l.g.goCleanup(func() { l.releaseOn(cleanupNodes(t), 0, "abandoned acquisition") })
		return nil, fmt.Errorf("%w: acquiring redlock %q: %w", ErrUncertain, key, ctx.Err())
	}
	elapsed := time.Since(start)
	validity := ttl - elapsed - g.DriftAllowance(ttl)
	if t.confirmed >= g.quorum && validity > 0 {
		l.mu.Lock()
		l.acquiredOn = t.confirmed
		l.deadline = start.Add(ttl - g.DriftAllowance(ttl))
		l.mu.Unlock()
		g.m.add(ctx, g.m.acquire, "redlock", "acquired")
		return l, nil
	}
	l.stop() // the attempt is over: a node that confirms later is released again
	var err *RedlockError
	result := "no-quorum"
	if t.confirmed >= g.quorum {
		err = g.failure("acquire", key, t, elapsed, validity, ErrValidityExpired)
		result = "validity-expired"
	} else {
		err = g.failure("acquire", key, t, elapsed, validity, nil)
		if err.reason == ErrNotAcquired {
			result = "contended"
		}
	}
	g.m.add(ctx, g.m.acquire, "redlock", result)
	if nodes := cleanupNodes(t); len(nodes) > 0 {
		l.releaseOn(nodes, 0, "failed acquisition")
	}
	return nil, err
}

// cleanupNodes lists the nodes that may hold an attempt's token: every node
// but those that answered "held by another owner" (SET NX wrote nothing there).
func cleanupNodes(t *tally) []int {
	var out []int
	for i := range t.seen {
		if !t.seen[i] || !errors.Is(t.errs[i], ErrHeldElsewhere) {
			out = append(out, i)
		}
	}
	return out
}

// acquireOn sets the owner token on one node unless the key exists: SET key
// token NX PX ms, the command every Redlock sends. "OK": set; nil: the key
// exists, held by another owner (the token is new to this attempt and each
// node is sent it once, so it cannot be ours). It is never resent: a resend
// after a lost reply would answer nil for our own token. A lost reply is a
// failed node whose token the attempt's clean-up removes.
func acquireOn(ctx context.Context, c redis.UniversalClient, key string, owner any, ms int64) nodeResult {
	cmd := redis.NewStatusCmd(ctx, "set", key, owner, "nx", "px", ms)
	_ = c.Process(ctx, noRetryStatus{cmd})
	switch err := cmd.Err(); {
	case errors.Is(err, redis.Nil):
		return nodeResult{out: nodeContended}
	case err != nil:
		return nodeResult{out: nodeFailed, err: serverError(err)}
	}
	return nodeResult{out: nodeConfirmed}
}

// noRetryStatus is a StatusCmd go-redis never resends once written.
type noRetryStatus struct{ *redis.StatusCmd }

// NoRetry implements redis.Cmder.
func (noRetryStatus) NoRetry() bool { return true }

// RedlockLease is a held quorum lease of a RedlockGroup. It has no fencing
// token: see the package documentation, "Redlock". Its methods are safe for
// concurrent use; Renew and Release run one at a time.
type RedlockLease struct {
	g           *RedlockGroup
	key         string
	owner       string
	ownerArg    any
	acquiredOn  int
	inflight    []chan struct{} // closed when node i's acquisition call returned
	acqDeadline time.Time       // the acquisition's node timeout

	op chan struct{} // one renewal or release at a time

	mu        sync.Mutex
	deadline  time.Time // start of the last confirmed request + ttl − drift
	state     lockState // stateHeld or stateReleased
	cleaned   bool      // a release reached a quorum
	doneTimer           // Done (mu); armed the first time anyone asks for it

	closeOnce sync.Once
}

// Key is the lease's key, as set on every node.
func (l *RedlockLease) Key() string { return l.key }

// OwnerToken is the random owner token the lease holds on its nodes (the
// keys' value).
func (l *RedlockLease) OwnerToken() string { return l.owner }

// AcquiredOn is the number of nodes that had confirmed the acquisition when it
// returned (at least the quorum; slower nodes may have set it since).
func (l *RedlockLease) AcquiredOn() int { return l.acquiredOn }

// arm starts the timer that closes done at the deadline, the first time
// anyone asks for done (Done, Context): a lease nobody watches costs no timer.
func (l *RedlockLease) arm() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armLocked(&l.mu, &l.deadline)
}

// stop marks the lease not owned (released): ownership has ended.
func (l *RedlockLease) stop() {
	l.mu.Lock()
	l.state = stateReleased
	l.endLocked()
	l.mu.Unlock()
}

// RemainingEstimate is the local estimate of the lease's validity: ttl from
// before the first request of the acquisition (or of the last renewal) was
// sent, less the drift allowance, less the time since; never negative, 0 once
// released or ended. It is computed locally and proves nothing: stop the
// protected work well before it ends.
func (l *RedlockLease) RemainingEstimate() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != stateHeld {
		return 0
	}
	return max(0, time.Until(l.deadline))
}

// State is StateHeld while the estimate has time left, StateEstimateEnded once
// it ran out, StateReleased once the lease ended: released, or ended by a
// renewal no quorum confirmed.
func (l *RedlockLease) State() State {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != stateHeld {
		return StateReleased
	}
	if !time.Now().Before(l.deadline) {
		return StateEstimateEnded
	}
	return StateHeld
}

// Done is closed when ownership ends: the estimate ran out, a renewal ended
// the lease, or it was released. Stop protected work then. It stays closed:
// a renewal in flight when the estimate ran out may still return true (the
// quorum confirmed it), but the protected work had to stop meanwhile; take a
// new lease for more of it.
func (l *RedlockLease) Done() <-chan struct{} {
	l.arm()
	return l.done
}

// Context returns a context derived from parent that is cancelled, with cause
// ErrOwnershipEnded, when Done is closed. Call the CancelFunc when the work is
// over.
func (l *RedlockLease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	done := l.Done()
	go func() {
		select {
		case <-done:
			cancel(ErrOwnershipEnded)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// Renew extends the lease to ttl on a quorum: an owner-checked PEXPIRE (the
// renewal script) on every node in parallel, each bounded by the node timeout.
// It returns true when a majority renewed with positive validity (ttl less the
// time it took less the drift allowance; the estimate then runs from before
// the first renewal request). Otherwise the lease ends — a partial renewal
// leaves the nodes with different expiries: the handle reports StateReleased,
// Done is closed, and the token is removed best-effort from every node in the
// background (call Release to retry that clean-up). It returns:
//
//	true, nil      renewed on a quorum
//	false, nil     the lease had ended (released, or the estimate ran out:
//	               no I/O then but the clean-up), or a majority answered that
//	               this owner no longer holds the key
//	false, error   no quorum because nodes failed or were too slow (a
//	               *RedlockError matching ErrNoQuorum or ErrValidityExpired),
//	               or ctx ended during the renewal (the error wraps ctx's)
//
// A bad ttl (ErrInvalidTTL, as for TryAcquire: at or below the drift
// allowance too) is returned before anything else, and a ctx that
// ends while another Renew or Release of the lease is in flight returns its
// error and changes nothing.
func (l *RedlockLease) Renew(ctx context.Context, ttl time.Duration) (bool, error) {
	if err := l.g.validRedlockTTL(ttl); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	select {
	case l.op <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer func() { <-l.op }()
	g := l.g
	l.mu.Lock()
	held, left := l.state == stateHeld, time.Until(l.deadline)
	l.mu.Unlock()
	if !held {
		return false, nil
	}
	if left <= 0 {
		g.m.add(ctx, g.m.renew, "redlock", "expired-locally")
		l.end("the estimate ran out before the renewal")
		return false, nil
	}
	n := len(g.nodes)
	ms := ttl.Milliseconds()
	start := time.Now()
	f := g.fanOut(l.allNodes(), 0, nil, func(ctx context.Context, _ int, c redis.UniversalClient) nodeResult {
		v, err := evalScript(ctx, c, scriptLeaseRenew, true, []string{l.key}, l.ownerArg, ms).Int64()
		switch {
		case err != nil:
			return nodeResult{out: nodeFailed, err: serverError(err)}
		case v == 1:
			return nodeResult{out: nodeConfirmed}
		}
		return nodeResult{out: nodeContended}
	})
	t := newTally(n)
	if !g.gather(ctx, f, t, g.majority) {
		g.m.add(ctx, g.m.renew, "redlock", "cancelled")
		l.end("the renewal's context ended")
		return false, fmt.Errorf("prim: redlock renew %q ended the lease: %w", l.key, ctx.Err())
	}
	elapsed := time.Since(start)
	drift := g.DriftAllowance(ttl)
	validity := ttl - elapsed - drift
	if t.confirmed >= g.quorum && validity > 0 {
		l.mu.Lock()
		l.deadline = start.Add(ttl - drift)
		l.movedLocked(&l.deadline)
		l.mu.Unlock()
		g.m.add(ctx, g.m.renew, "redlock", "renewed")
		return true, nil
	}
	var err *RedlockError
	if t.confirmed >= g.quorum {
		err = g.failure("renew", l.key, t, elapsed, validity, ErrValidityExpired)
	} else {
		err = g.failure("renew", l.key, t, elapsed, validity, nil)
	}
	l.end(err.Error())
	if err.reason == ErrNotAcquired {
		g.m.add(ctx, g.m.renew, "redlock", "not-owned")
		return false, nil
	}
	g.m.add(ctx, g.m.renew, "redlock", "no-quorum")
	return false, err
}

// end ends the lease after a renewal that no quorum confirmed: not owned from
// now on, and its token removed best-effort from every node in the
// background.
func (l *RedlockLease) end(why string) {
	l.stop()
	l.g.logger.Warn("prim: redlock lease ended; its token is removed best-effort from every node", "key", l.key, "why", why)
	l.g.goCleanup(func() { l.releaseOn(l.allNodes(), 0, "ended lease") })
}

func (l *RedlockLease) allNodes() []int {
	out := make([]int, len(l.g.nodes))
	for i := range out {
		out[i] = i
	}
	return out
}

// releaseOn sends the owner-checked release (the release script: removed,
// absent or another owner's — each is an answer) to nodes in parallel, each
// bounded by the node timeout; a node whose acquisition is still in flight is
// sent it after that acquisition answers or times out, so it does not
// overtake it. It returns the answers once `need` nodes confirmed or can no
// longer, or (need 0) once every node answered or timed out. Nodes it could
// not reach keep the token until it expires: that is logged.
func (l *RedlockLease) releaseOn(nodes []int, need int, why string) *tally {
	g := l.g
	var extra time.Duration
	for _, i := range nodes {
		select {
		case <-l.inflight[i]:
		default:
			extra = max(extra, time.Until(l.acqDeadline))
		}
	}
	wait := func(i int) {
		select {
		case <-l.inflight[i]:
			return
		default:
		}
		if d := time.Until(l.acqDeadline); d > 0 {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-l.inflight[i]:
			case <-t.C:
			}
		}
	}
	f := g.fanOut(nodes, extra, wait, func(ctx context.Context, _ int, c redis.UniversalClient) nodeResult {
		_, err := evalScript(ctx, c, scriptLeaseRelease, false, []string{l.key}, l.ownerArg).Int64()
		if err != nil {
			return nodeResult{out: nodeFailed, err: serverError(err)}
		}
		return nodeResult{out: nodeConfirmed}
	})
	t := newTally(len(g.nodes))
	var decided func(*tally) bool
	if need > 0 {
		decided = func(t *tally) bool { return t.confirmed >= need || t.failed > len(nodes)-need }
	}
	g.gather(context.Background(), f, t, decided)
	if need == 0 && t.failed > 0 {
		g.logger.Warn("prim: redlock clean-up did not reach every node; the token stays there until it expires",
			"key", l.key, "why", why, "failed", t.failed, "err", errors.Join(t.errs...))
	}
	return t
}

// Release removes the lease's token from every node (owner-checked, in
// parallel, each node bounded by the node timeout) and returns true once a
// majority answered — removed, already absent or another owner's: in each case
// this token is gone there; the other nodes' answers are not waited for. The
// handle stops owning at once (StateReleased, Done closed) whatever the
// outcome. false, with a *RedlockError matching ErrNoQuorum: no majority
// answered; the handle keeps its token, so calling Release again retries.
// After a Release that returned true, Release returns true without I/O.
//
// ctx only bounds the wait for a concurrent Renew: once started the release
// runs on every node whatever ctx does. If ctx ends while waiting, the release
// stays queued and runs when the renewal finishes, and Release returns false
// with an error matching ErrReleasePending.
func (l *RedlockLease) Release(ctx context.Context) (bool, error) {
	if l.isCleaned() {
		return true, nil
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	select {
	case l.op <- struct{}{}:
	case <-ctx.Done():
		l.stop()
		l.g.goCleanup(func() {
			l.op <- struct{}{}
			defer func() { <-l.op }()
			_, _ = l.releaseQuorum(context.Background())
		})
		return false, fmt.Errorf("%w: %w", ErrReleasePending, ctx.Err())
	}
	defer func() { <-l.op }()
	return l.releaseQuorum(ctx)
}

// isOver reports an attempt that failed or a lease that ended.
func (l *RedlockLease) isOver() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state != stateHeld
}

func (l *RedlockLease) isCleaned() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cleaned
}

// releaseQuorum runs one release on every node; the caller holds the op slot.
func (l *RedlockLease) releaseQuorum(ctx context.Context) (bool, error) {
	if l.isCleaned() {
		return true, nil
	}
	l.stop()
	g := l.g
	start := time.Now()
	t := l.releaseOn(l.allNodes(), g.quorum, "release")
	if t.confirmed >= g.quorum {
		l.mu.Lock()
		l.cleaned = true
		l.mu.Unlock()
		g.m.add(ctx, g.m.release, "redlock", "released")
		return true, nil
	}
	g.m.add(ctx, g.m.release, "redlock", "no-quorum")
	err := g.failure("release", l.key, t, time.Since(start), 0, ErrNoQuorum)
	g.logger.WarnContext(ctx, "prim: redlock release reached no quorum; the token stays on the others until it expires (Release retries)",
		"key", l.key, "err", err)
	return false, err
}

// Close makes one best-effort release (as Release, waiting at most the node
// timeout for a concurrent renewal, after which the release stays queued) and
// ignores its outcome: it always returns nil. It is idempotent. Call Release
// to learn whether a quorum answered, and to retry.
func (l *RedlockLease) Close() error {
	l.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), l.g.nodeTimeout)
		defer cancel()
		_, _ = l.Release(ctx)
	})
	return nil
}

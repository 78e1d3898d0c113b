package prim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// How prim sends a script, with the client as users have it (go-redis defaults:
// MaxRetries 3, ContextTimeoutEnabled false).
//
// Resends. go-redis resends a command whose reply was lost (EOF, read timeout)
// up to MaxRetries times. A resent script runs twice if the first run executed,
// so every script prim sends through the caller's client is either
//   - idempotent for its owner token, so a resend returns the true outcome: the
//     fenced acquisition recognises its own lease (the lease value carries the
//     owner token and the fencing token it was granted) and answers the same
//     token, the hash-field acquisition recognises its own field; renew and
//     verify are idempotent by nature; or
//   - sent with resends off (a command whose NoRetry reports true, which go-redis
//     honours on every client type): release, whose second run could not tell
//     "I removed it" from "it was gone", so a lost reply is ErrUncertain.
//
// Scripts on dedicated connections (renewal, hash-field acquisition) are never
// resent either: go-redis fails the retry of a redis.Conn whose connection broke.
//
// Deadlines. With ContextTimeoutEnabled false, go-redis bounds a command already
// written by its ReadTimeout (3s by default, times the retries), not by the
// caller's context. bounded runs the command on its own goroutine and returns at
// the context's end, so every prim call returns by its caller's deadline; what
// the command did is then settled in the background (see the callers).

// noRetryCmd is a command go-redis never resends once written.
type noRetryCmd struct{ *redis.Cmd }

// NoRetry implements redis.Cmder.
func (noRetryCmd) NoRetry() bool { return true }

// processor is what scripts run on: the caller's client (any UniversalClient,
// which routes and follows redirections) or a dedicated *redis.Conn.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// evalScript runs s with EVALSHA, falling back to EVAL when the server does not
// have it cached (NOSCRIPT: a definite "not executed"). With resend false go-redis
// never sends either command twice.
func evalScript(ctx context.Context, p processor, s *luaScript, resend bool, keys []string, args ...any) *redis.Cmd {
	cmd := scriptCmd(ctx, p, "evalsha", s.Hash(), resend, keys, args)
	if err := cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		cmd = scriptCmd(ctx, p, "eval", s.Source(), resend, keys, args)
	}
	return cmd
}

func scriptCmd(ctx context.Context, p processor, name, script string, resend bool, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, script, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	cmd := redis.NewCmd(ctx, a...)
	if resend {
		_ = p.Process(ctx, cmd)
	} else {
		_ = p.Process(ctx, noRetryCmd{cmd})
	}
	return cmd
}

// bounded runs f and returns its result, or ctx's error as soon as ctx ends
// (whichever comes first). When ctx wins, f goes on in the background and late,
// if not nil, receives its result when it finishes: the caller has already been
// told the outcome is uncertain, late settles it. A context that can never end
// costs no goroutine.
func bounded[T any](ctx context.Context, f func(context.Context) T, late func(T)) (T, error) {
	return boundedOn(nil, ctx, f, late)
}

// boundedOn is bounded whose late settlement, when there is one, counts as a
// background clean-up of bg (WaitCleanups waits for it).
func boundedOn[T any](bg *cleanups, ctx context.Context, f func(context.Context) T, late func(T)) (T, error) {
	if ctx.Done() == nil {
		return f(ctx), nil
	}
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, err // nothing sent
	}
	ch := make(chan T, 1)
	go func() { ch <- f(ctx) }()
	select {
	case v := <-ch:
		return v, nil
	case <-ctx.Done():
		select {
		case v := <-ch: // finished at the same instant: its answer stands
			return v, nil
		default:
		}
		bg.add()
		go func() {
			defer bg.done()
			v := <-ch
			if late != nil {
				late(v)
			}
		}()
		var zero T
		return zero, ctx.Err()
	}
}

// notSent is the error of a call whose context ended before it sent
// anything (nil while ctx is live): the context's error, never ErrUncertain,
// since nothing was written (issue 31: a cancelled call counted as an
// uncertain outcome, logged a Warn and started a clean-up for nothing).
func notSent(ctx context.Context, what string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("prim: %s: nothing sent: %w", what, err)
	}
	return nil
}

// cleanups counts the background clean-ups in progress of a Coordinator and
// the views made from it (WaitCleanups). A nil *cleanups counts nothing.
type cleanups struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n falls to 0; a new one when n leaves 0
}

func (b *cleanups) add() {
	if b == nil {
		return
	}
	b.mu.Lock()
	if b.n == 0 {
		b.idle = make(chan struct{})
	}
	b.n++
	b.mu.Unlock()
}

func (b *cleanups) done() {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.n--
	if b.n == 0 {
		close(b.idle)
	}
	b.mu.Unlock()
}

// wait returns nil once no clean-up is in progress, or ctx's error.
func (b *cleanups) wait(ctx context.Context) error {
	if b == nil {
		return nil
	}
	for {
		b.mu.Lock()
		n, idle := b.n, b.idle
		b.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return fmt.Errorf("prim: %d background clean-up(s) still in progress: %w", n, ctx.Err())
		}
	}
}

// goCleanup runs f in the background as one of c's clean-ups.
func (c *Coordinator) goCleanup(f func()) {
	c.bg.add()
	go func() {
		defer c.bg.done()
		f()
	}()
}

// WaitCleanups waits until the background clean-ups of this Coordinator and
// of every view WithPrefix made from it have finished, each either confirmed
// or given up (a semaphore permit's owner release retried for the clean-up
// window, WithCleanupWindow; the fence and owner-checked release that follow
// an uncertain outcome; a release queued behind another operation). It returns
// nil when none is left, or an error wrapping ctx's once ctx ends first; the
// clean-ups then go on. A clean-up that gave up may leave its last command
// on the wire: it is not waited for beyond the step's bound. Call it at shutdown, after closing the handles and
// before the process exits, so that a release Close left to the background
// (a permit without expiry stays until one succeeds) is not lost with the
// process. Close does not wait for them.
func (c *Coordinator) WaitCleanups(ctx context.Context) error { return c.bg.wait(ctx) }

// uncertain reports whether err leaves the outcome of a command sent at most
// once (resends off, or a dedicated connection) unknown: anything but a reply
// from the server (a Redis error reply is definitive), redis.Nil, or a failure
// to get a connection at all — pool timeout, closed client, refused or failed
// dial — when nothing was sent.
//
// A command go-redis may have sent more than once must not use it: go-redis
// returns its last attempt's error, and an earlier attempt may have run (see
// tryFenced's cmdResult.outcomeUnknown).
func uncertain(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, redis.ErrPoolTimeout) ||
		errors.Is(err, redis.ErrClosed) || dialFailed(err) {
		return false
	}
	var re redis.Error
	return !errors.As(err, &re)
}

// dialFailed reports whether err is a failure to open a connection (connection
// refused, no route, DNS, a dial timeout): go-redis returns the dialer's
// *net.OpError with Op "dial", and for such an attempt nothing was written.
func dialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// ---- the server's refusals ---------------------------------------------------

// ErrServerRefused is the class of error replies that mean the server did not
// execute the operation (or, for a script, stopped it before its first write):
// permission, read-only replica, out of memory, a failed persistence
// (MISCONF), a redirection, a cluster or server not ready. The error matches
// ErrServerRefused and, where one applies, a narrower sentinel below; errors.As
// with *RefusedError gives the server's code and message.
var ErrServerRefused = errors.New("prim: the server refused the command")

// The refusal classes; each matches ErrServerRefused with errors.Is as well.
var (
	// ErrNoPermission: the ACL user may not run a command (NOPERM) or is not
	// authenticated (NOAUTH).
	ErrNoPermission = refusalClass("no permission (ACL)")
	// ErrReadOnly: the command reached a read-only replica (READONLY).
	ErrReadOnly = refusalClass("read-only replica")
	// ErrOutOfMemory: maxmemory is reached and the policy refuses writes (OOM).
	ErrOutOfMemory = refusalClass("out of memory")
	// ErrPersistenceFailure: the server refuses writes because it cannot
	// persist (MISCONF).
	ErrPersistenceFailure = refusalClass("writes refused: persistence failing")
	// ErrRedirected: a Cluster redirection (MOVED, ASK) or a cluster that cannot
	// serve the slot (CLUSTERDOWN, TRYAGAIN).
	ErrRedirected = refusalClass("redirected or cluster not ready")
)

type refusal struct{ msg string }

func refusalClass(msg string) error       { return &refusal{msg: msg} }
func (e *refusal) Error() string          { return "prim: server refused: " + e.msg }
func (e *refusal) Is(target error) bool   { return target == ErrServerRefused }
func refusedBy(code string) (error, bool) { c, ok := refusalCodes[code]; return c, ok }

var refusalCodes = map[string]error{
	"NOPERM":      ErrNoPermission,
	"NOAUTH":      ErrNoPermission,
	"READONLY":    ErrReadOnly,
	"OOM":         ErrOutOfMemory,
	"MISCONF":     ErrPersistenceFailure,
	"MOVED":       ErrRedirected,
	"ASK":         ErrRedirected,
	"CLUSTERDOWN": ErrRedirected,
	"TRYAGAIN":    ErrRedirected,
	"MASTERDOWN":  ErrServerRefused,
	"LOADING":     ErrServerRefused,
	"BUSY":        ErrServerRefused,
	"NOREPLICAS":  ErrServerRefused,
}

// RefusedError is a server error reply that refused an operation.
type RefusedError struct {
	Code  string // the reply's error code, e.g. "NOPERM"
	Reply string // the server's whole message
	class error
	err   error
}

func (e *RefusedError) Error() string { return "prim: server refused: " + e.Reply }

// Is matches ErrServerRefused and the class of the code.
func (e *RefusedError) Is(target error) bool {
	return target == ErrServerRefused || (e.class != nil && target == e.class)
}

// Unwrap returns the go-redis error.
func (e *RefusedError) Unwrap() error { return e.err }

// serverError types a Redis error reply: a refusal becomes a *RefusedError,
// WRONGTYPE matches ErrWrongType; anything else is returned unchanged.
func serverError(err error) error {
	var re redis.Error
	if err == nil || !errors.As(err, &re) {
		return err
	}
	msg := re.Error()
	code, _, _ := strings.Cut(msg, " ")
	// A script's error may arrive prefixed ("ERR Error running script … NOPERM …"
	// on old servers): look for a known code anywhere at a word start.
	if _, ok := refusalCodes[code]; !ok {
		for c := range refusalCodes {
			if strings.Contains(msg, " "+c+" ") || strings.Contains(msg, "-"+c+" ") {
				code = c
				break
			}
		}
	}
	if strings.Contains(msg, "ACL failure in script") || strings.Contains(msg, "no permissions to run") ||
		strings.Contains(msg, "user executing the script can't run") {
		code = "NOPERM" // how Redis reports a command a script's user may not run
	}
	if code == "WRONGTYPE" {
		return fmt.Errorf("%w: %w", ErrWrongType, err)
	}
	if class, ok := refusedBy(code); ok {
		return &RefusedError{Code: code, Reply: msg, class: class, err: err}
	}
	return err
}

// retryPolicy is the client's resend policy (go-redis's MaxRetries and
// retry back-off), which prim follows where it resends a script itself.
type retryPolicy struct {
	max      int           // resends after the first attempt; 0: none
	min, cap time.Duration // back-off bounds; min 0: no back-off
}

// retryPolicyOf reads the policy from the client's options, which go-redis
// has already normalised (-1 to 0, 0 to its defaults), with go-redis's
// defaults (3 resends, 10ms to 1s) for a client whose options prim cannot
// read.
func retryPolicyOf(c redis.UniversalClient) retryPolicy {
	var n int
	var minB, maxB time.Duration
	switch cl := c.(type) {
	case *redis.Client:
		o := cl.Options()
		n, minB, maxB = o.MaxRetries, o.MinRetryBackoff, o.MaxRetryBackoff
	case *redis.ClusterClient:
		o := cl.Options()
		n, minB, maxB = o.MaxRetries, o.MinRetryBackoff, o.MaxRetryBackoff
	case *redis.Ring:
		o := cl.Options()
		n, minB, maxB = o.MaxRetries, o.MinRetryBackoff, o.MaxRetryBackoff
	default:
		return retryPolicy{max: 3, min: 10 * time.Millisecond, cap: time.Second}
	}
	return retryPolicy{max: max(n, 0), min: max(minB, 0), cap: max(maxB, 0)}
}

// backoff is the pause before resend number attempt (1, 2, …), as go-redis
// computes it: min<<attempt with jitter from min, capped.
func (p retryPolicy) backoff(attempt int) time.Duration {
	if p.min <= 0 || attempt <= 0 {
		return 0
	}
	d := p.min << min(attempt, 30)
	if d < p.min {
		return p.cap
	}
	d = p.min + rand.N(d)
	if d > p.cap || d < p.min {
		d = p.cap
	}
	return d
}

// sleepCtx waits d or until ctx ends; false when ctx ended.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

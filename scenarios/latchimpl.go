package scenarios

import (
	"context"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
)

// Countdown latch implementations: the latch family drives them through
// LatchImpl, as the ratelimit family drives its limiters through
// LimiterImpl. prim is the implementation; scenarios/mutants registers
// deliberately broken ones (RegisterLatchImpl), which only the latch
// scenarios run.

// LatchImpl adapts one countdown latch implementation to the latch workload.
type LatchImpl interface {
	Name() string
	// Latches returns one process's latches on its client c (one
	// coordinator, as a service would have), logging to log. The process
	// closes it when its workload ends.
	Latches(c redis.UniversalClient, log *slog.Logger) LatchClient
}

// LatchClient is one process's latches. Its errors follow prim's: an
// existing latch on Create matches prim.ErrLatchExists, a missing one on
// Join prim.ErrNotFound, an outcome the caller cannot know prim.ErrUncertain.
type LatchClient interface {
	// Create creates a latch generation of count signals at key.
	Create(ctx context.Context, key string, count int64) (Latch, error)
	// Reset creates or replaces the latch at key with a new generation.
	Reset(ctx context.Context, key string, count int64) (Latch, error)
	// Join returns the current generation of the latch at key.
	Join(ctx context.Context, key string) (Latch, error)
	// Close ends the process's waits and frees what they hold.
	Close()
}

// Latch is one generation of a latch of a LatchClient.
type Latch interface {
	// Key is the latch key as stored on the server (a user deletes it with
	// DEL; the workload does).
	Key() string
	// Generation is the generation's unique id.
	Generation() string
	// CountDown signals the generation once: the remaining count, -1 when
	// the generation was replaced or deleted, an error matching
	// prim.ErrLatchCompleted when it had already reached zero.
	CountDown(ctx context.Context) (int64, error)
	// Wait waits for the generation to reach zero (true) or be replaced or
	// deleted (false); when ctx ends first, its error matches ctx's.
	Wait(ctx context.Context) (bool, error)
}

var latchImpls = map[string]LatchImpl{}

// RegisterLatchImpl adds a countdown latch implementation under its Name, for
// the latch scenarios: scenarios/mutants registers its deliberately broken
// ones this way.
func RegisterLatchImpl(l LatchImpl) { latchImpls[l.Name()] = l }

// LatchMutants lists the registered countdown latch implementations (the
// mutants), by name.
func LatchMutants() []string {
	return registered(latchImpls)
}

// lookupLatch returns the named countdown latch implementation.
func lookupLatch(name string) (LatchImpl, bool) {
	switch name {
	case "", "prim":
		return PrimLatches(), true
	}
	l, ok := latchImpls[name]
	return l, ok
}

// PrimLatches is prim's countdown latch implementation (a mutant wraps it and
// breaks one operation).
func PrimLatches() LatchImpl { return primLatchImpl{} }

// PrimCountdownLatch returns the prim latch behind a Latch of the prim
// implementation, or nil.
func PrimCountdownLatch(l Latch) *prim.CountdownLatch {
	if p, ok := l.(primLatch); ok {
		return p.CountdownLatch
	}
	return nil
}

type primLatchImpl struct{}

func (primLatchImpl) Name() string { return "prim" }
func (primLatchImpl) Latches(c redis.UniversalClient, log *slog.Logger) LatchClient {
	var opts []prim.Option
	if log != nil {
		opts = append(opts, prim.WithLogger(log))
	}
	return primLatches{prim.New(c, opts...)}
}

type primLatches struct{ c *prim.Coordinator }

func (p primLatches) Create(ctx context.Context, key string, count int64) (Latch, error) {
	return wrapPrimLatch(p.c.CreateCountdownLatch(ctx, key, count))
}

func (p primLatches) Reset(ctx context.Context, key string, count int64) (Latch, error) {
	return wrapPrimLatch(p.c.ResetCountdownLatch(ctx, key, count))
}

func (p primLatches) Join(ctx context.Context, key string) (Latch, error) {
	return wrapPrimLatch(p.c.JoinCountdownLatch(ctx, key))
}

func (p primLatches) Close() { p.c.Close() }

func wrapPrimLatch(l *prim.CountdownLatch, err error) (Latch, error) {
	if err != nil {
		return nil, err
	}
	return primLatch{l}, nil
}

type primLatch struct{ *prim.CountdownLatch }

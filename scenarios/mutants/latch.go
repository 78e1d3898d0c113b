package mutants

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/scenarios"
)

// Countdown latch mutants, run by the latch scenarios
// (scenarios.LatchImpl): each is prim's latch with one operation broken.

func init() {
	scenarios.RegisterLatchImpl(LatchIgnoresGeneration{})
	scenarios.RegisterLatchImpl(LatchWaitWithoutReread{})
	scenarios.RegisterLatchImpl(LatchCountDownAppliesTwice{})
}

// LatchIgnoresGeneration is prim's countdown latch whose count-down ignores
// the generation it signals: it decrements whatever generation the key holds
// (never below zero, -1 only when the key is gone). A late signal of a
// replaced generation then decrements the new one, which opens before its
// own participants signalled: latch/reset-race must FAIL it.
type LatchIgnoresGeneration struct{}

// Name implements scenarios.LatchImpl.
func (LatchIgnoresGeneration) Name() string { return "mutant-latch-decrements-replaced-generation" }

// Latches implements scenarios.LatchImpl: prim's, with the count-down
// replaced.
func (LatchIgnoresGeneration) Latches(c redis.UniversalClient, log *slog.Logger) scenarios.LatchClient {
	return genBlindClient{LatchClient: scenarios.PrimLatches().Latches(c, log), c: c}
}

type genBlindClient struct {
	scenarios.LatchClient
	c redis.UniversalClient
}

func (g genBlindClient) wrap(l scenarios.Latch, err error) (scenarios.Latch, error) {
	if err != nil {
		return nil, err
	}
	return genBlindLatch{Latch: l, c: g.c}, nil
}

func (g genBlindClient) Create(ctx context.Context, key string, count int64) (scenarios.Latch, error) {
	return g.wrap(g.LatchClient.Create(ctx, key, count))
}

func (g genBlindClient) Reset(ctx context.Context, key string, count int64) (scenarios.Latch, error) {
	return g.wrap(g.LatchClient.Reset(ctx, key, count))
}

func (g genBlindClient) Join(ctx context.Context, key string) (scenarios.Latch, error) {
	return g.wrap(g.LatchClient.Join(ctx, key))
}

type genBlindLatch struct {
	scenarios.Latch
	c redis.UniversalClient
}

// genBlindCountDown is prim's count-down script without the generation
// check: -1 only when no latch is there.
var genBlindCountDown = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'gen', 'count')
if not v[1] then return -1 end
local n = tonumber(v[2])
if not n or n <= 0 then return -2 end
return redis.call('HINCRBY', KEYS[1], 'count', -1)`)

func (l genBlindLatch) CountDown(ctx context.Context) (int64, error) {
	n, err := genBlindCountDown.Run(ctx, l.c, []string{l.Key()}).Int64()
	switch {
	case err != nil:
		return 0, fmt.Errorf("%w: %w", prim.ErrUncertain, err)
	case n == -2:
		return 0, fmt.Errorf("%w: %q", prim.ErrLatchCompleted, l.Key())
	}
	return n, nil
}

// LatchWaitWithoutReread is prim's countdown latch whose Wait reads the
// latch once and then only every 10 seconds: a waiter that trusts a
// notification to come and never re-reads without one, as if every
// notification were lost. A waiter whose generation reaches zero after its
// first read answers long after the wake bound, or not at all: the latch
// checker's lost-completion rule must FAIL it in latch/baseline.
type LatchWaitWithoutReread struct{}

// Name implements scenarios.LatchImpl.
func (LatchWaitWithoutReread) Name() string { return "mutant-latch-wait-without-reread" }

// Latches implements scenarios.LatchImpl: prim's, with the wait replaced.
func (LatchWaitWithoutReread) Latches(c redis.UniversalClient, log *slog.Logger) scenarios.LatchClient {
	return deafClient{scenarios.PrimLatches().Latches(c, log)}
}

type deafClient struct{ scenarios.LatchClient }

func (d deafClient) wrap(l scenarios.Latch, err error) (scenarios.Latch, error) {
	if err != nil {
		return nil, err
	}
	return deafLatch{l}, nil
}

func (d deafClient) Create(ctx context.Context, key string, count int64) (scenarios.Latch, error) {
	return d.wrap(d.LatchClient.Create(ctx, key, count))
}

func (d deafClient) Reset(ctx context.Context, key string, count int64) (scenarios.Latch, error) {
	return d.wrap(d.LatchClient.Reset(ctx, key, count))
}

func (d deafClient) Join(ctx context.Context, key string) (scenarios.Latch, error) {
	return d.wrap(d.LatchClient.Join(ctx, key))
}

type deafLatch struct{ scenarios.Latch }

func (l deafLatch) Wait(ctx context.Context) (bool, error) {
	pl := scenarios.PrimCountdownLatch(l.Latch)
	for {
		n, err := pl.Count(ctx)
		switch {
		case err != nil:
			return false, err
		case n == -1:
			return false, nil
		case n == 0:
			return true, nil
		}
		t := time.NewTimer(10 * time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, fmt.Errorf("waiting for latch %q: %w", l.Key(), ctx.Err())
		case <-t.C:
		}
	}
}

// LatchCountDownAppliesTwice is prim's countdown latch whose count-down can
// apply twice: a client that resends a signal whose reply it judged too
// slow (here: every other signal of the client, whatever the reply's delay,
// so that it shows in every run) and answers with the resend's reply. The
// signal counts twice: the generation reaches zero before its participants
// all signalled, and the answer is a remaining count more decrements below
// the initial count than signals were invoked. latch/baseline must FAIL it
// with latch-decremented-twice ("decremented more than once"), never a
// hazard: no lost write lowers a count.
type LatchCountDownAppliesTwice struct{}

// Name implements scenarios.LatchImpl.
func (LatchCountDownAppliesTwice) Name() string { return "mutant-latch-count-down-applies-twice" }

// Latches implements scenarios.LatchImpl: prim's, with the count-down
// resent.
func (LatchCountDownAppliesTwice) Latches(c redis.UniversalClient, log *slog.Logger) scenarios.LatchClient {
	return twiceClient{LatchClient: scenarios.PrimLatches().Latches(c, log), resend: new(atomic.Bool)}
}

type twiceClient struct {
	scenarios.LatchClient
	resend *atomic.Bool // flips at each signal: every other one is resent
}

func (c twiceClient) wrap(l scenarios.Latch, err error) (scenarios.Latch, error) {
	if err != nil {
		return nil, err
	}
	return twiceLatch{Latch: l, resend: c.resend}, nil
}

func (c twiceClient) Create(ctx context.Context, key string, count int64) (scenarios.Latch, error) {
	return c.wrap(c.LatchClient.Create(ctx, key, count))
}

func (c twiceClient) Reset(ctx context.Context, key string, count int64) (scenarios.Latch, error) {
	return c.wrap(c.LatchClient.Reset(ctx, key, count))
}

func (c twiceClient) Join(ctx context.Context, key string) (scenarios.Latch, error) {
	return c.wrap(c.LatchClient.Join(ctx, key))
}

type twiceLatch struct {
	scenarios.Latch
	resend *atomic.Bool
}

// CountDown sends prim's signal and, every other time, sends it again and
// answers the resend's reply (a completed generation: the first reply).
func (l twiceLatch) CountDown(ctx context.Context) (int64, error) {
	n, err := l.Latch.CountDown(ctx)
	if err != nil || n < 1 || !l.resend.Load() {
		l.resend.Store(!l.resend.Load())
		return n, err
	}
	l.resend.Store(false)
	if m, err := l.Latch.CountDown(ctx); err == nil {
		return m, nil
	} else if !errors.Is(err, prim.ErrLatchCompleted) {
		return 0, err
	}
	return n, nil
}

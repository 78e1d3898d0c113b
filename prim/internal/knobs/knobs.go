// Package knobs holds prim's internal timing and behaviour settings that tests
// change: package prim reads them, and the tests of the
// prim/internal/servertest module set them (an internal package, so no service
// importing prim can).
package knobs

import (
	"sync/atomic"
	"time"
)

// WatcherIdle is how long a watcher nobody waits on keeps its connections
// (nanoseconds).
var WatcherIdle atomic.Int64

// KeepAliveEvery is the period of watchers' tracking-connection check
// (nanoseconds), read when a watcher is made.
var KeepAliveEvery atomic.Int64

// WakeEveryWaiter restores the landed wake-up, in which every waiter of a key
// is woken by each invalidation, for benchmarks that compare it with the queue.
var WakeEveryWaiter atomic.Bool

// SetWatcherIdle sets WatcherIdle and returns the function that restores it.
func SetWatcherIdle(d time.Duration) (restore func()) {
	old := WatcherIdle.Swap(int64(d))
	return func() { WatcherIdle.Store(old) }
}

// SetKeepAliveEvery sets KeepAliveEvery and returns the function that restores
// it.
func SetKeepAliveEvery(d time.Duration) (restore func()) {
	old := KeepAliveEvery.Swap(int64(d))
	return func() { KeepAliveEvery.Store(old) }
}

// SetWakeEveryWaiter sets WakeEveryWaiter and returns the function that
// restores it.
func SetWakeEveryWaiter(on bool) (restore func()) {
	old := WakeEveryWaiter.Swap(on)
	return func() { WakeEveryWaiter.Store(old) }
}

// CapClockOffset shifts the clock of prim's per-node capability record
// (nanoseconds added to the wall clock): tests advance it past the five
// minutes after which a node that answered "unknown command" is probed again.
var CapClockOffset atomic.Int64

// ForceFallback makes Coordinators created while it is set use the scripts
// for every operation, as on a server without the fast commands (benchmarks
// compare the two paths on one server).
var ForceFallback atomic.Bool

// AdvanceCapClock moves the capability record's clock forward by d and
// returns the function that restores it.
func AdvanceCapClock(d time.Duration) (restore func()) {
	old := CapClockOffset.Add(int64(d)) - int64(d)
	return func() { CapClockOffset.Store(old) }
}

// SetForceFallback sets ForceFallback and returns the function that restores
// it.
func SetForceFallback(on bool) (restore func()) {
	old := ForceFallback.Swap(on)
	return func() { ForceFallback.Store(old) }
}

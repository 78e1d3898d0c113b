package prim

import "time"

// SetWatcherIdleForTest sets how long a watcher nobody waits on lives, and
// returns the function that restores it.
func SetWatcherIdleForTest(d time.Duration) (restore func()) {
	old := watcherIdle.Swap(int64(d))
	return func() { watcherIdle.Store(old) }
}

// SetWakeEveryWaiterForTest restores the landed wake-up (every waiter of a key
// woken by each invalidation) while on is true, for benchmarks that compare it
// with the queue; it returns the function that restores the setting.
func SetWakeEveryWaiterForTest(on bool) (restore func()) {
	old := wakeEveryWaiter.Swap(on)
	return func() { wakeEveryWaiter.Store(old) }
}

// SetKeepAliveEveryForTest sets the period of watchers' tracking-connection
// check (for watchers made afterwards), and returns the function that
// restores it.
func SetKeepAliveEveryForTest(d time.Duration) (restore func()) {
	old := keepAliveEvery.Swap(int64(d))
	return func() { keepAliveEvery.Store(old) }
}

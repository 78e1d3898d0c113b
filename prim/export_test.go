package prim

import "time"

// SetWatcherIdleForTest sets how long a watcher nobody waits on lives, and
// returns the function that restores it.
func SetWatcherIdleForTest(d time.Duration) (restore func()) {
	old := watcherIdle.Swap(int64(d))
	return func() { watcherIdle.Store(old) }
}

package prim

import (
	"sync"
	"time"
)

// doneTimer is the Done channel of a held lease (a handle, a Redlock lease):
// closed at the lease's local deadline, or when the lease ends earlier
// (released, lost, uncertain). A renewal moves the deadline; the timer, when
// it fires early, re-arms itself for the rest. Its fields are guarded by the
// owner's mutex, which the owner passes with the deadline it guards.
type doneTimer struct {
	done  chan struct{}
	ended bool        // done is closed
	timer *time.Timer // closes done at the deadline, once armed
}

func newDoneTimer() doneTimer { return doneTimer{done: make(chan struct{})} }

// armLocked starts the timer for the deadline *at, guarded by mu (held by
// the caller), unless it runs already or the lease has ended.
func (d *doneTimer) armLocked(mu *sync.Mutex, at *time.Time) {
	if d.ended || d.timer != nil {
		return
	}
	d.timer = time.AfterFunc(time.Until(*at), func() {
		mu.Lock()
		defer mu.Unlock()
		if d.ended {
			return
		}
		if left := time.Until(*at); left > 0 { // renewed meanwhile
			d.timer.Reset(left)
			return
		}
		d.endLocked()
	})
}

// endLocked closes done (once) and stops the timer; the owner's mutex held.
func (d *doneTimer) endLocked() {
	if d.ended {
		return
	}
	d.ended = true
	close(d.done)
	if d.timer != nil {
		d.timer.Stop()
	}
}

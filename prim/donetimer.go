package prim

import (
	"sync"
	"time"
)

// doneTimer is the Done channel of a held lease (a handle, a Redlock lease):
// closed at the lease's local deadline, or when the lease ends earlier
// (released, lost, uncertain). A renewal moves the deadline, either way: a
// longer one is caught when the timer fires early (it re-arms itself for the
// rest), a shorter one is applied at once (movedLocked), so Done never stays
// open past the local estimate of the lease's end. Its fields are guarded by the
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

// movedLocked follows a change of the deadline *at (the owner's mutex held):
// an armed timer is set to fire at the new deadline, earlier or later than
// the one it was armed for. Without it a renewal for less than what was left
// (a permit without expiry renewed with a ttl, a 20 s lease renewed for
// 400 ms) left Done open until the old deadline while the key was gone.
func (d *doneTimer) movedLocked(at *time.Time) {
	if d.ended || d.timer == nil {
		return
	}
	d.timer.Reset(max(0, time.Until(*at)))
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

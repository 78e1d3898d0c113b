package scenarios

import (
	"fmt"
	"time"
)

// Schedules and waits stated against the lease. A scenario whose summary
// says "more than a ttl later", "longer than a lease" or "1.5× the ttl"
// times its faults from the run's ttl (Nemesis gets it), and says, in
// Scenario.Needs, which runs are too short for that: those start nothing
// and are UNKNOWN, naming the --duration (or --ttl) that would do, rather
// than quietly testing something else (a node back inside a live lease, a
// pause shorter than one, a stop that never ends within the run).

// ScheduleMargin is the end of a run of d that no nemesis event is
// scheduled in: a tenth of the run, at least 300ms and at most 2s (500ms
// of a 5s run). Every event of a schedule, the last heal included, is due
// by d − ScheduleMargin(d) (Scenario.Schedule builds it in that window),
// so that an event a loaded machine runs late, or one that takes a while
// (a restart, a failover's confirmation), still happens while the clients
// run, and the run ends with a healthy tail. The run itself waits (bounded,
// InFlightGrace) for an event still running at its end before it stops the
// clients: a scheduled fault that did not happen is UNKNOWN only when it
// could not happen, never for the harness's own lateness.
func ScheduleMargin(d time.Duration) time.Duration {
	return min(max(d/10, 300*time.Millisecond), 2*time.Second)
}

// scheduleWindow is how much of a run of d its nemesis schedule may fill
// (d less ScheduleMargin(d); never negative).
func scheduleWindow(d time.Duration) time.Duration { return max(d-ScheduleMargin(d), 0) }

// durationFor is the shortest --duration, to the next 100ms, whose
// schedule window (scheduleWindow) is w or more.
func durationFor(w time.Duration) time.Duration {
	d := (w + 100*time.Millisecond - 1).Truncate(100 * time.Millisecond)
	for scheduleWindow(d) < w {
		d += 100 * time.Millisecond
	}
	return d
}

// needDuration returns a Scenario.Needs that requires a run of least(ttl)
// or more (least grows with the ttl): a shorter one is refused with what
// (what the ttl asks of the run), the --duration that would do at its ttl
// and, when there is one, the longest --ttl that would do at its duration.
// It is for what the workload does (a holder's stop that must end within
// the run); needScheduled is for what the nemesis schedule does.
func needDuration(what string, least func(ttl time.Duration) time.Duration) func(d, ttl time.Duration) string {
	return needWithin(what, least, func(d time.Duration) time.Duration { return d },
		func(w time.Duration) time.Duration {
			return (w + 100*time.Millisecond - 1).Truncate(100 * time.Millisecond)
		})
}

// needScheduled is needDuration for what the nemesis schedule must fit:
// least(ttl) is compared with the run's schedule window (its duration less
// ScheduleMargin), and the --duration named is one whose window fits it.
func needScheduled(what string, least func(ttl time.Duration) time.Duration) func(d, ttl time.Duration) string {
	return needWithin(what, least, scheduleWindow, durationFor)
}

// needWithin is needDuration and needScheduled: window is the part of a run
// of d that least(ttl) must fit in, and durationFor the shortest --duration
// (to 100ms) whose window is a given length.
func needWithin(what string, least func(ttl time.Duration) time.Duration, window, durationFor func(time.Duration) time.Duration) func(d, ttl time.Duration) string {
	return func(d, ttl time.Duration) string {
		need := least(ttl)
		if window(d) >= need {
			return ""
		}
		why := fmt.Sprintf("%s: at --ttl %v that needs --duration %v or more, not %v", what, ttl, durationFor(need), d)
		if t := longestTTL(window(d), least); t > 0 {
			why += fmt.Sprintf(" (or --ttl %v or less at --duration %v)", t, d)
		}
		return why
	}
}

// longestTTL is the longest ttl, to the millisecond (--ttl's unit and
// least), for which a window of w is long enough (least(ttl) <= w, least
// growing with the ttl); 0 when even 1ms is too long.
func longestTTL(w time.Duration, least func(ttl time.Duration) time.Duration) time.Duration {
	lo, hi := int64(0), int64(w/time.Millisecond) // lo fits (0: none yet); hi+1 does not
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if least(time.Duration(mid)*time.Millisecond) <= w {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return time.Duration(lo) * time.Millisecond
}

// redlockRestartAfter is how long redlock/node-loss keeps r1 down: more
// than a ttl, the Redlock rule for a node restarted without persistence,
// plus a margin for the drift allowance: twice what any implementation run
// here declares (1% of the ttl and 2ms), the checkers' 20ms, and 20ms of
// timer slack.
func redlockRestartAfter(ttl time.Duration) time.Duration {
	return ttl + 2*(ttl/100+2*time.Millisecond) + 40*time.Millisecond
}

// nodeLossSchedule is when redlock/node-loss kills r1 (a third of the way
// in) and starts it again: two thirds of the way in, or later when that is
// less than redlockRestartAfter(ttl) after the kill.
func nodeLossSchedule(d, ttl time.Duration) (kill, restart time.Duration) {
	kill = d / 3
	return kill, kill + max(d/3, redlockRestartAfter(ttl))
}

// nodeLossNeeds: the restart must leave a sixth of the run after it (the
// acquisitions on the node back empty): d/3 + redlockRestartAfter(ttl) <=
// 5d/6, that is d >= 2 × redlockRestartAfter(ttl).
var nodeLossNeeds = needScheduled("r1 is started again more than a ttl (plus the drift allowance) after the kill at a third of the run, "+
	"with a sixth of the run left after it", func(ttl time.Duration) time.Duration { return 2 * redlockRestartAfter(ttl) })

// pauseLongerThanLease is the pause-primary scenarios' window: the server
// stopped for hold, longer than a lease (800ms at most ttls, a ttl and a
// tenth plus 100ms above 636ms), one pause every gap (± gap/2), which leaves
// at least 1.2s between pauses.
func pauseLongerThanLease(ttl time.Duration) (gap, hold time.Duration) {
	hold = max(800*time.Millisecond, ttl+ttl/10+100*time.Millisecond)
	return max(2*time.Second, hold+1200*time.Millisecond), hold
}

// pauseLongerThanLeaseNeeds: one pause (its first falls before gap) fits
// in the run, whatever the seed.
var pauseLongerThanLeaseNeeds = needScheduled("the server is stopped for longer than a lease, at least once", func(ttl time.Duration) time.Duration {
	gap, hold := pauseLongerThanLease(ttl)
	return gap + hold
})

// stallNeeds is the Needs of a scenario whose holders stop for 1.5× the
// ttl (a GC pause) before they write, renew or release: a stop begun in the
// first half of the run must end within it, or no stale holder comes back
// and the run tests nothing its summary states.
var stallNeeds = needDuration("holders stop for 1.5× the ttl before they use the lease again, and a stop begun in the run's first half must end within it",
	func(ttl time.Duration) time.Duration { return 3 * ttl })

// slowBeyondLease is fenced-lock/slow-beyond-lease's latency on each way
// of a client link: 0.6 ± 0.2 of the ttl (300ms ± 100ms at the default
// 500ms), so that a reply comes 0.8 to 1.6 ttls after its request: most
// grants after the lease they grant has ended.
func slowBeyondLease(ttl time.Duration) (latency, jitter time.Duration) {
	return ttl * 3 / 5, ttl / 5
}

// The ttls fenced-lock/slow-beyond-lease can run at: above the longest, its
// slowest replies (1.6 ttls) would not come within go-redis's 3s timeout
// with 0.6s to spare (grants would time out instead of arriving late);
// below the shortest, the latency (the proxy's unit is the millisecond)
// would round to a few milliseconds or none.
const (
	slowBeyondLeaseMaxTTL = 1500 * time.Millisecond
	slowBeyondLeaseMinTTL = 10 * time.Millisecond
)

func slowBeyondLeaseNeeds(_, ttl time.Duration) string {
	lat, jit := slowBeyondLease(ttl)
	switch {
	case ttl > slowBeyondLeaseMaxTTL:
		return fmt.Sprintf("replies come 0.8 to 1.6 ttls late (%v ± %v each way at --ttl %v) and must arrive within go-redis's 3s "+
			"timeout to be grants after their lease: needs --ttl %v or less", lat, jit, ttl, slowBeyondLeaseMaxTTL)
	case ttl < slowBeyondLeaseMinTTL:
		return fmt.Sprintf("replies come 0.8 to 1.6 ttls late, in whole milliseconds (%v ± %v each way at --ttl %v): needs --ttl %v or more",
			lat.Truncate(time.Millisecond), jit.Truncate(time.Millisecond), ttl, slowBeyondLeaseMinTTL)
	}
	return ""
}

// redlockMinTTL is the shortest lease the redlock family runs: a Redlock
// validity is the ttl less the time the nodes took and the drift allowance
// (2ms and 1% of the ttl for prim), and the holder writes only while a tenth
// of the ttl is left, so below it (at --ttl 1ms every acquisition) a lease is
// refused for want of validity, and the progress checker FAILs a run that
// says nothing of the implementation.
const redlockMinTTL = 20 * time.Millisecond

func redlockTTLNeeds(_, ttl time.Duration) string {
	if ttl >= redlockMinTTL {
		return ""
	}
	return fmt.Sprintf("a Redlock lease of %v has little or no validity left after the drift allowance (2ms and 1%% of the ttl) "+
		"and the nodes' round trips, so acquisitions are refused whatever the implementation: needs --ttl %v or more", ttl, redlockMinTTL)
}

// allNeeds is a Scenario.Needs that refuses a run any of needs (nil ones
// skipped) refuses, with the first reason.
func allNeeds(needs ...func(d, ttl time.Duration) string) func(d, ttl time.Duration) string {
	return func(d, ttl time.Duration) string {
		for _, n := range needs {
			if n == nil {
				continue
			}
			if why := n(d, ttl); why != "" {
				return why
			}
		}
		return ""
	}
}

// redlockLatencyMinTTL is the shortest lease redlock/latency runs: an
// acquisition through its round trip (2 × redlockLatency) must keep validity
// to claim, or none succeeds under the latency and redlock-validity judges
// only the healthy ends of the run, where the elapsed time is nothing (a
// PASS that checked nothing the summary states): three round trips.
const redlockLatencyMinTTL = 6 * redlockLatency

func redlockLatencyNeeds(_, ttl time.Duration) string {
	if ttl >= redlockLatencyMinTTL {
		return ""
	}
	return fmt.Sprintf("acquisitions through a %v round trip must keep validity to claim (a lease of %v keeps little or none "+
		"after it and the drift allowance): needs --ttl %v or more", 2*redlockLatency, ttl, redlockLatencyMinTTL)
}

// fitting is evs when every event is due before d (the schedule window),
// else none: a schedule of fixed offsets (a cut, then a failover 1s
// later, then the heal) that a short run cannot hold whole injects nothing,
// and the run is UNKNOWN saying that no fault was scheduled and a longer
// --duration is needed, rather than cutting a fault short or leaving it
// unhealed.
func fitting(d time.Duration, evs []Event) []Event {
	for _, ev := range evs {
		if ev.At >= d {
			return nil
		}
	}
	return evs
}

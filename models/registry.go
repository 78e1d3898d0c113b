package models

import (
	"fmt"
	"strings"

	"github.com/coordtorture/coordtorture/history"
)

// Checker is one property of the registry.
type Checker struct {
	// Name is the property's name, as given to fencecheck --check.
	Name string
	// Doc says in a few lines what is checked and from which operations.
	Doc string
	// Applies reports whether the history has operations this checker reads
	// (never, for a scenario's own check: it runs when a header or --check
	// names it).
	Applies func(h *history.History) bool
	// Own names the scenarios whose own check this is ("" for a general
	// property).
	Own string
	// Check judges the history.
	Check func(h *history.History, o Options) Result
}

func hasOp(h *history.History, pred func(*history.Operation) bool) bool {
	for k := range h.Ops {
		if pred(&h.Ops[k]) {
			return true
		}
	}
	return false
}

func hasF(fs ...string) func(h *history.History) bool {
	return func(h *history.History) bool {
		return hasOp(h, func(op *history.Operation) bool {
			for _, f := range fs {
				if op.F == f {
					return true
				}
			}
			return false
		})
	}
}

// never applies: a scenario's own check, run when a header or --check
// names it.
func never(*history.History) bool { return false }

// Checkers returns the registry, in the order fencecheck runs them.
func Checkers() []Checker {
	return []Checker{
		{
			Name: "fenced-resource",
			Doc: "write: replays the writes in the resource's order (seq, else real time) and reports every\n" +
				"stale write accepted (token below an accepted one), every current write rejected, every token\n" +
				"accepted from two owners, and every write (without owner) whose process was never given its token.",
			Applies: hasF(history.FWrite),
			Check:   CheckFencedResource,
		},
		{
			Name: "token-order",
			Doc: "acquire, acquire_wait with token: tokens positive, unique, increasing in real-time order;\n" +
				"a sort+sweep decides the monotonic (or --dense-tokens) counter model per key, info acquisitions\n" +
				"may consume one; porcupine also decides (and draws) keys of at most 5000 acquisitions.",
			Applies: func(h *history.History) bool {
				return hasOp(h, func(op *history.Operation) bool { return isTokenAcquire(op.F) && op.Token != 0 })
			},
			Check: CheckTokenOrder,
		},
		{
			Name: "exclusion",
			Doc: "acquire, acquire_wait, renew, release: no two holders of a lock or lease (key, field) with\n" +
				"overlapping validity windows [return, min(release invoke, invoke + ttl - drift)).",
			Applies: hasF(history.FAcquire, history.FAcquireWait),
			Check:   CheckExclusion,
		},
		{
			Name: "lease-protocol",
			Doc: "acquire, acquire_wait, renew, verify, release with owner: one lease state per lock; no grant or\n" +
				"proof (ok renew, release \"released\", verify true) inside another owner's certain span, none after\n" +
				"the lease certainly ended (released twice, renewed after expiry), no \"not held\" inside its own;\n" +
				"acquire_read, acquire_write, sem_acquire (each permit): the last two rules, per owner.",
			Applies: hasF(history.FAcquire, history.FAcquireWait, history.FAcquireRead, history.FAcquireWrite,
				history.FAcquireReadWait, history.FAcquireWriteWait, history.FSemAcquire, history.FSemAcquireWait),
			Check: CheckLeaseProtocol,
		},
		{
			Name: "no-phantom-owner",
			Doc: "sample, acquire, acquire_wait with owner: every owner a sample saw the lease hold belongs to an\n" +
				"acquisition that may have happened (ok or info); not to one that answered fail, not to none.",
			Applies: hasF(history.FSample),
			Check:   CheckNoPhantomOwner,
		},
		{
			Name:    "rw-exclusion",
			Doc:     "acquire_read, acquire_write (+_wait): many readers or one writer over validity windows.",
			Applies: hasF(history.FAcquireRead, history.FAcquireReadWait, history.FAcquireWrite, history.FAcquireWriteWait),
			Check:   CheckReadWrite,
		},
		{
			Name: "semaphore",
			Doc: "sem_acquire (+_wait) with n and capacity: while a permit's window is open, no more permits' windows are\n" +
				"open than the capacity its own acquisition recorded (or --capacity); a key with none recorded: UNKNOWN.",
			Applies: hasF(history.FSemAcquire, history.FSemAcquireWait),
			Check:   CheckSemaphore,
		},
		{
			Name: "latch",
			Doc: "latch_*: Wait true only after the count reached 0 in that generation, false only if replaced;\n" +
				"no underflow, one decrement per count-down; signals to a replaced generation return -1; a wait that\n" +
				"ended unanswered (fail) did not outlive --wake-bound after its generation reached 0 or was replaced.",
			Applies: func(h *history.History) bool {
				return hasOp(h, func(op *history.Operation) bool { return isLatchOp(op.F) })
			},
			Check: CheckLatch,
		},
		{
			Name: "rate-limit",
			Doc: "allow, allow_wait (algo, limit, window_ms, segments, burst, rate, period_ms): fixed <= 2*limit\n" +
				"in any span < window; sliding <= limit in any span < window (timestamps rounded forward);\n" +
				"bucket (continuous refill) <= burst + rate*span/period; nothing granted: nothing to check.",
			Applies: hasF(history.FAllow, history.FAllowWait),
			Check:   CheckRateLimit,
		},
		{
			Name: "liveness",
			Doc: "acquire_wait: once a lock is free (released, or expired), someone acquires it within\n" +
				"--wake-bound; with --lost-notifications, sleepers only by the lease's expiry + bound.",
			Applies: hasF(history.FAcquireWait),
			Check:   CheckLiveness,
		},
		{
			Name: "progress",
			Doc: "acquire, acquire_wait, acquire_read, acquire_write, renew, verify, release, allow, allow_wait, sem_acquire(_wait),\n" +
				"latch_* (but delete), nemesis: in each healthy period (before the first fault, from --recover-bound after each heal) at\n" +
				"least half of each kind is answered (ok, or fail without an error); a server refusal (MOVED, OOM...) or info is not an answer.",
			Applies: hasProgressOps,
			Check:   CheckProgress,
		},
		{
			Name: "redlock-validity",
			Doc: "acquire ok with count (claimed validity, µs), ttl_ms, drift_us (declared drift allowance, µs):\n" +
				"each claim at most ttl - drift allowance, and at most ttl - drift allowance - (return - invoke) + 40ms.",
			Applies: func(h *history.History) bool {
				return hasOp(h, func(op *history.Operation) bool {
					return isTokenAcquire(op.F) && op.Type == history.OK && op.Count != 0
				})
			},
			Check: CheckRedlockValidity,
		},
		{
			Name: "stale-write-shown",
			Doc: "write (redlock/pause-client's, chosen by its header or --check): the unfenced resource accepting\n" +
				"stale writes is PASS, shown; none is UNKNOWN; any other fenced-resource violation FAIL.",
			Applies: never,
			Own:     "redlock/pause-client",
			Check:   CheckStaleWriteShown,
		},
		{
			Name: "completion-cut-off",
			Doc: "latch_count_down, nemesis (latch/lost-notifications'): a count reached 0 inside a proven cut of\n" +
				"the waiters (PASS), else UNKNOWN.",
			Applies: never,
			Own:     "latch/lost-notifications",
			Check:   CheckCompletionCutOff,
		},
		{
			Name: "no-expiry-kept",
			Doc: "sem_acquire without ttl never released, and the header's reads of the server after the run\n" +
				"(semaphore/no-expiry-crash'): each crashed holder's permit still held, without deadline.",
			Applies: never,
			Own:     "semaphore/no-expiry-crash",
			Check:   CheckNoExpiryKept,
		},
		{
			Name: "refused-untouched",
			Doc: "acquire, and the header's reads of the servers after the run (hash-lease/old-server's): every\n" +
				"acquisition refused naming hash-field expiration and 7.4, the hash never created.",
			Applies: never,
			Own:     "hash-lease/old-server",
			Check:   CheckRefusedUntouched,
		},
		{
			Name:    "leaks",
			Doc:     "leak_scan: the final state read after every TTL elapsed lists nothing (count 0, no value).",
			Applies: hasF(history.FLeakScan),
			Check:   CheckLeaks,
		},
	}
}

// Lookup returns the checker with that name.
func Lookup(name string) (Checker, bool) {
	for _, c := range Checkers() {
		if c.Name == name {
			return c, true
		}
	}
	return Checker{}, false
}

// Applicable returns the checkers that apply to the operations of h.
func Applicable(h *history.History) []Checker {
	var out []Checker
	for _, c := range Checkers() {
		if c.Applies(h) {
			out = append(out, c)
		}
	}
	return out
}

// Select returns the named checkers (comma-separated names, or "all"), or
// the applicable ones when names is empty.
func Select(h *history.History, names string) ([]Checker, error) {
	names = strings.TrimSpace(names)
	if names == "" {
		return Applicable(h), nil
	}
	if names == "all" {
		return Checkers(), nil
	}
	var out []Checker
	for _, n := range strings.Split(names, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		c, ok := Lookup(n)
		if !ok {
			return nil, fmt.Errorf("models: unknown checker %q (have %s)", n, strings.Join(Names(), ", "))
		}
		out = append(out, c)
	}
	return out, nil
}

// Names lists the checkers' names.
func Names() []string {
	var out []string
	for _, c := range Checkers() {
		out = append(out, c.Name)
	}
	return out
}

// Run runs checkers on h.
func Run(h *history.History, checkers []Checker, o Options) []Result {
	out := make([]Result, 0, len(checkers))
	for _, c := range checkers {
		out = append(out, c.Check(h, o))
	}
	return out
}

// Worst is the worst verdict of results (FAIL over UNKNOWN over PASS).
func Worst(results []Result) Verdict {
	w := Pass
	for _, r := range results {
		if r.Verdict == Fail {
			return Fail
		}
		if r.Verdict == Unknown {
			w = Unknown
		}
	}
	return w
}

package preflight

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// guarantees decides the closing summary from what the checks found.
func (p *run) guarantees() {
	g := func(holds bool, text, yes, no, scenario string) {
		reason := yes
		if !holds {
			reason = no
		}
		p.r.Guarantees = append(p.r.Guarantees, Guarantee{Guarantee: text, Holds: holds, Reason: reason, Scenario: scenario})
	}
	unchecked := func(text, why, scenario string) {
		p.r.Guarantees = append(p.r.Guarantees, Guarantee{Guarantee: text, Unchecked: true, Reason: why, Scenario: scenario})
	}
	// Only the guarantees of the primitives in use (--primitives), each
	// tied to a scenario of theirs.
	memory := "fencing tokens and leases survive memory pressure"
	if !p.fenced() {
		var kept []string
		if p.usesAny(HashLease, RWLease, Semaphore, Latch, Redlock) {
			kept = append(kept, "leases, permits and latches")
		}
		if p.uses(RateLimiters) {
			kept = append(kept, "rate-limit state")
		}
		verb := " survive memory pressure"
		if len(kept) == 1 && p.uses(RateLimiters) {
			verb = " survives memory pressure"
		}
		memory = strings.Join(kept, " and ") + verb
	}
	evictionSc := p.scenarioFor(evictionScenarios)
	if p.facts.memUnknown {
		unchecked(memory, "the eviction policy could not be read", evictionSc)
	} else {
		g(!p.facts.evicting && !p.facts.evictingNoLimit, memory,
			"noeviction: nothing is evicted", "evicting policy: a counter or lease can be evicted", evictionSc)
	}
	persisted := !p.facts.noPersistence && !p.facts.rdbOnly
	if p.fenced() {
		if p.facts.diskUnknown {
			unchecked("fencing tokens never regress across a restart", "the persistence settings could not be read", "fenced-lock/kill-restart-noaof")
		} else {
			g(persisted, "fencing tokens never regress across a restart",
				"AOF: a restart reloads the counters", "no AOF: a restart loses the counters, tokens may regress", "fenced-lock/kill-restart-noaof")
		}
	}
	if !p.fenced() && p.usesAny(HashLease, RWLease, Semaphore, Latch, Redlock) {
		const lasts = "leases, permits and latches survive a restart"
		if sc := p.scenarioFor(restartScenarios); p.facts.diskUnknown {
			unchecked(lasts, "the persistence settings could not be read", sc)
		} else {
			g(persisted, lasts, "AOF: a restart reloads them", "no AOF: a restart loses them (a second holder, permits over capacity)", sc)
		}
	}
	if p.uses(RateLimiters) {
		if p.facts.diskUnknown {
			unchecked("rate limits hold across a restart", "the persistence settings could not be read", "ratelimit/fixed/kill-restart-noaof")
		} else {
			g(persisted, "rate limits hold across a restart",
				"AOF: a restart reloads the limiters' state", "no AOF: a restart gives permits back", "ratelimit/fixed/kill-restart-noaof")
		}
	}
	leases := p.usesAny(FencedLock, Waiting, HashLease, RWLease, Semaphore, Latch)
	switch {
	case p.facts.replUnknown && p.facts.replicas == 0:
		if p.fenced() {
			unchecked("fencing tokens never regress on failover", "the replication could not be read", p.failoverScenario())
		}
	case p.facts.replicas > 0:
		if p.fenced() {
			g(false, "fencing tokens never regress on failover", "",
				"asynchronous replication: a promoted replica can lack the last tokens", p.failoverScenario())
		}
		if leases {
			g(false, "one holder at a time across a failover", "",
				"asynchronous replication: a promoted replica can lack a live lease", p.scenarioFor(leaseFailoverScenarios))
		}
		if p.uses(RateLimiters) && !leases {
			g(false, "rate limits hold across a failover", "",
				"asynchronous replication: a promoted replica can lack the last grants", "ratelimit/fixed/failover-forced")
		}
	case p.fenced():
		g(true, "fencing tokens never regress on failover",
			"no connected replica: no failover (a lost server is downtime, not a regression)", "", p.failoverScenario())
	}
	if fencingSc := p.scenarioFor(fencingScenarios); fencingSc != "" {
		if p.facts.aclChecked {
			g(!p.facts.aclKillDenied, "uncertain renewals and acquisitions are fenced (CLIENT KILL)", "CLIENT KILL allowed",
				"CLIENT KILL denied: a lost reply's command may still run later", fencingSc)
		} else {
			unchecked("uncertain renewals and acquisitions are fenced (CLIENT KILL)", "the ACL could not be checked (no ACL DRYRUN)", fencingSc)
		}
	}
	if trackingSc := p.scenarioFor(trackingScenarios); trackingSc != "" {
		if p.caps.tracking == unknown {
			unchecked("waiters wake on invalidations, not polling", "CLIENT TRACKING could not be probed", trackingSc)
		} else {
			g(p.caps.tracking == present && !p.facts.waitDenied, "waiters wake on invalidations, not polling",
				"CLIENT TRACKING and the invalidation channel are usable", "no tracking or no permission: waiting polls", trackingSc)
		}
	}
	if p.fenced() {
		g(true, "a paused holder's stale write is refused by a resource that checks fencing tokens",
			"no server setting can give it: the resource must compare tokens", "", "fenced-lock/pause-client")
	}
}

// WriteText writes the human report: one line per check (status, name,
// reason; the fix and the scenario on the next lines), then the guarantees
// and a count.
func (r *Report) WriteText(w io.Writer) error {
	user := r.User
	if r.SentinelUser != "" {
		user += ", sentinel user " + r.SentinelUser
	}
	fmt.Fprintf(w, "coordtorture preflight: %s (%s %s, %s, user %s)\n\n", r.Target, r.Server, r.Version, r.Topology, user)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range r.Checks {
		fmt.Fprintf(tw, "%-4s\t%s\t%s\n", c.Status, c.Name, c.Reason)
		if c.Fix != "" {
			fmt.Fprintf(tw, "\t\t→ %s\n", c.Fix)
		}
		if c.Scenario != "" && c.Status != OK {
			fmt.Fprintf(tw, "\t\t  see coordtorture run %s\n", c.Scenario)
		}
	}
	tw.Flush()
	fmt.Fprintln(w, "\nGuarantees on this deployment:")
	for _, g := range r.Guarantees {
		mark := "holds  "
		switch {
		case g.Unchecked:
			mark = "UNKNOWN"
		case !g.Holds:
			mark = "AT RISK"
		}
		see := ""
		if g.Scenario != "" {
			see = " — see " + g.Scenario
		}
		fmt.Fprintf(w, "  %s %s: %s%s\n", mark, g.Guarantee, g.Reason, see)
	}
	verdict := "no FAIL"
	if r.Failed() {
		verdict = "FAIL"
	}
	_, err := fmt.Fprintf(w, "\n%d OK, %d WARN, %d FAIL: %s\n", r.Count(OK), r.Count(Warn), r.Count(Fail), verdict)
	return err
}

// WriteJSON writes the report as one JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(r)
}

// ExitStatus is 1 when any check is FAIL, 0 otherwise.
func (r *Report) ExitStatus() int {
	if r.Failed() {
		return 1
	}
	return 0
}

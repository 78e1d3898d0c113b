package preflight

import (
	"encoding/json"
	"fmt"
	"io"
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
	if p.facts.memUnknown {
		unchecked("fencing tokens and leases survive memory pressure", "the eviction policy could not be read", "fenced-lock/eviction")
	} else {
		g(!p.facts.evicting && !p.facts.evictingNoLimit, "fencing tokens and leases survive memory pressure",
			"noeviction: nothing is evicted", "evicting policy: a counter or lease can be evicted", "fenced-lock/eviction")
	}
	persisted := !p.facts.noPersistence && !p.facts.rdbOnly
	if p.facts.diskUnknown {
		unchecked("fencing tokens never regress across a restart", "the persistence settings could not be read", "fenced-lock/kill-restart-noaof")
		unchecked("rate limits hold across a restart", "the persistence settings could not be read", "ratelimit/fixed/kill-restart-noaof")
	} else {
		g(persisted, "fencing tokens never regress across a restart",
			"AOF: a restart reloads the counters", "no AOF: a restart loses the counters, tokens may regress", "fenced-lock/kill-restart-noaof")
		g(persisted, "rate limits hold across a restart",
			"AOF: a restart reloads the limiters' state", "no AOF: a restart gives permits back", "ratelimit/fixed/kill-restart-noaof")
	}
	if p.facts.replUnknown && p.facts.replicas == 0 {
		unchecked("fencing tokens never regress on failover", "the replication could not be read", p.failoverScenario())
	} else if p.facts.replicas > 0 {
		g(false, "fencing tokens never regress on failover", "",
			"asynchronous replication: a promoted replica can lack the last tokens", p.failoverScenario())
		g(false, "one holder at a time across a failover", "",
			"asynchronous replication: a promoted replica can lack a live lease", "semaphore/failover-forced")
	} else {
		g(true, "fencing tokens never regress on failover",
			"no connected replica: no failover (a lost server is downtime, not a regression)", "", p.failoverScenario())
	}
	if p.facts.aclChecked {
		g(!p.facts.aclKillDenied, "uncertain renewals and acquisitions are fenced (CLIENT KILL)", "CLIENT KILL allowed",
			"CLIENT KILL denied: a lost reply's command may still run later", "fenced-lock/lose-replies")
	} else {
		unchecked("uncertain renewals and acquisitions are fenced (CLIENT KILL)", "the ACL could not be checked (no ACL DRYRUN)", "fenced-lock/lose-replies")
	}
	if p.caps.tracking == unknown {
		unchecked("waiters wake on invalidations, not polling", "CLIENT TRACKING could not be probed", "waiting-lock/lost-notifications")
	} else {
		g(p.caps.tracking == present && !p.facts.waitDenied, "waiters wake on invalidations, not polling",
			"CLIENT TRACKING and the invalidation channel are usable", "no tracking or no permission: waiting polls", "waiting-lock/lost-notifications")
	}
	g(true, "a paused holder's stale write is refused by a resource that checks fencing tokens",
		"no server setting can give it: the resource must compare tokens", "", "fenced-lock/pause-client")
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
		fmt.Fprintf(w, "  %s %s: %s — see %s\n", mark, g.Guarantee, g.Reason, g.Scenario)
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

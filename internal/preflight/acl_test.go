package preflight

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coordtorture/coordtorture/prim"
	"github.com/coordtorture/coordtorture/testbed"
)

// primRules is, per preflight primitive, prim's documented ACL rules for it
// (prim/acl.go): the required ones and the optional ones of newer servers.
func primRules(name string) (required []string, optional []string) {
	switch name {
	case FencedLock:
		return []string{prim.ACLFencedLock}, []string{prim.ACLFencedLockRelease, prim.ACLCluster}
	case Waiting:
		// The watcher's commands, and the fenced lock's key read (PTTL).
		return []string{prim.ACLFencedLock}, []string{prim.ACLWaiting, prim.ACLCluster}
	case HashLease:
		return []string{prim.ACLHashLease}, []string{prim.ACLHashLeaseHSETEX, prim.ACLCluster}
	case RWLease:
		return []string{prim.ACLRWLease}, []string{prim.ACLCluster}
	case Semaphore:
		return []string{prim.ACLSemaphore}, []string{prim.ACLCluster}
	case Latch:
		return []string{prim.ACLCountdownLatch}, []string{prim.ACLWaiting, prim.ACLCluster}
	case RateLimiters:
		return []string{prim.ACLFixedWindow, prim.ACLSlidingWindow, prim.ACLTokenBucket}, []string{prim.ACLFixedWindowINCREX, prim.ACLCluster}
	case Redlock:
		return []string{prim.ACLRedlock}, nil
	}
	return nil, nil
}

// ruleName is the ACL rule that allows the command of args: "+get",
// "+client|kill".
func ruleName(args []any) string {
	return "+" + strings.ToLower(strings.ReplaceAll(cmdName(args), " ", "|"))
}

func ruleSet(rules ...string) map[string]bool {
	s := map[string]bool{}
	for _, r := range rules {
		for _, f := range strings.Fields(r) {
			if strings.HasPrefix(f, "+") {
				s[f] = true
			}
		}
	}
	return s
}

// listsOf is every command preflight checks for the primitive, on a cluster
// of a server that has every optional command.
func listsOf(name string) []aclCmd {
	p := &run{o: Options{Keys: []string{"k"}}, r: &Report{Topology: "cluster"},
		caps: caps{lua: present, tracking: present, hfe: present, delex: present, setIfeq: present, increx: present}}
	return p.aclCommands(name, "k")
}

// TestACLListsMatchPrimRules: preflight's command lists and prim's documented
// rules cannot drift apart. Each command preflight requires is in the
// primitive's required rule and each it marks optional in an optional one;
// each command of the rules is one preflight checks (HSETEX aside: its
// denial costs nothing, the script writes HSET and HPEXPIRE instead).
func TestACLListsMatchPrimRules(t *testing.T) {
	for _, name := range Primitives() {
		req, opt := primRules(name)
		if req == nil {
			t.Errorf("%s: no prim rule", name)
			continue
		}
		reqs, all := ruleSet(req...), ruleSet(append(req, opt...)...)
		checked := map[string]bool{}
		for _, c := range listsOf(name) {
			r := ruleName(c.args)
			checked[r] = true
			switch {
			case !all[r]:
				t.Errorf("%s: preflight checks %s, which prim's rules do not allow", name, r)
			case !c.optional && !reqs[r]:
				t.Errorf("%s: preflight requires %s, which prim's rules have as optional", name, r)
			case c.optional && reqs[r] && name != Waiting:
				t.Errorf("%s: preflight has %s as optional, which prim's rule requires", name, r)
			}
		}
		for r := range all {
			if !checked[r] && r != "+hsetex" && !(name == Waiting && reqs[r]) {
				t.Errorf("%s: prim's rules allow %s, which preflight does not check", name, r)
			}
		}
	}
}

// TestACLRulesAllowPreflightLists: on a real server of each build, a user
// created with exactly prim's rules for a primitive (those the server
// accepts) passes ACL DRYRUN for every command preflight checks for it.
func TestACLRulesAllowPreflightLists(t *testing.T) {
	for _, b := range testbed.Matrix() {
		t.Run(b, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			admin := testbed.Standalone(t, b).Node("n1").Admin()
			knows := func(cmd string) bool {
				v, err := admin.Do(ctx, "COMMAND", "INFO", cmd).Slice()
				return err == nil && len(v) == 1 && v[0] != nil
			}
			for i, name := range Primitives() {
				if name == HashLease && !knows("hpttl") {
					continue // no hash leases on this server
				}
				req, opt := primRules(name)
				rules := append([]string{}, req...)
				for _, o := range opt {
					if knows(strings.TrimPrefix(strings.Fields(o)[0], "+")) {
						rules = append(rules, o)
					}
				}
				user := fmt.Sprintf("u%d", i)
				args := []any{"ACL", "SETUSER", user, "reset", "on", ">pw", "resetchannels", "~k", "~k:*"}
				for _, f := range strings.Fields(strings.Join(rules, " ")) {
					args = append(args, f)
				}
				if err := admin.Do(ctx, args...).Err(); err != nil {
					t.Fatalf("%s: ACL SETUSER with prim's rules: %v", name, err)
				}
				for _, c := range listsOf(name) {
					if !knows(strings.ToLower(fmt.Sprint(c.args[0]))) {
						continue // a command of newer servers
					}
					if c.optional && !all(rules, ruleName(c.args)) {
						continue
					}
					v, err := admin.Do(ctx, append([]any{"ACL", "DRYRUN", user}, c.args...)...).Text()
					if err != nil || v != "OK" {
						t.Errorf("%s: ACL DRYRUN %v as a user with prim's rules: %q %v", name, c.args, v, err)
					}
				}
			}
		})
	}
}

// all reports whether the rules name r.
func all(rules []string, r string) bool { return ruleSet(rules...)[r] }

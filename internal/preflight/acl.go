package preflight

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// aclCmd is one command a primitive sends, as ACL DRYRUN checks it: the
// command with sample arguments on the service's key.
type aclCmd struct {
	args []any
	// optional: the primitive works without it (a fast path with a
	// fallback, or waiting that falls back to polling): a WARN, not a FAIL.
	optional bool
	// needs: the capability without which prim never sends it.
	needs *tristate
	// effect: what an optional command's denial costs.
	effect string
}

// aclCommands lists, per primitive, the commands prim sends (prim/doc.go's
// ACL permissions and prim/scripts/*.lua's redis.call): the scripts' own
// commands are checked one by one, since DRYRUN of EVAL checks only EVAL.
func (p *run) aclCommands(prim string) []aclCmd {
	k := p.o.Key
	fence := "{" + k + "}:fence"
	lease := "{" + k + "}:lease"
	req := func(a ...any) aclCmd { return aclCmd{args: a} }
	opt := func(a ...any) aclCmd { return aclCmd{args: a, optional: true} }
	scripts := func(keys ...any) []aclCmd {
		n := len(keys)
		return []aclCmd{req(append([]any{"EVALSHA", strings.Repeat("0", 40), n}, keys...)...),
			req(append([]any{"EVAL", "return 1", n}, keys...)...)}
	}
	fencing := []aclCmd{req("CLIENT", "INFO"), req("CLIENT", "KILL", "ID", 1)}
	if p.r.Topology == "cluster" {
		// A dedicated connection follows an ASK redirection (a slot migrating).
		fencing = append(fencing, aclCmd{args: []any{"ASKING"}, optional: true, effect: "operations on a migrating slot fail"})
	}
	var cs []aclCmd
	switch prim {
	case FencedLock:
		cs = append(scripts(lease, fence), req("GET", lease), req("INCR", fence), req("PTTL", lease),
			req("SET", lease, "v", "PX", 1000), req("PEXPIRE", lease, 1000), req("DEL", lease))
		cs = append(cs, fencing...)
		cs = append(cs, aclCmd{args: []any{"DELEX", lease, "IFEQ", "v"}, optional: true, needs: &p.caps.delex})
	case Waiting:
		cs = []aclCmd{opt("CLIENT", "ID"), opt("CLIENT", "TRACKING", "ON", "REDIRECT", 1), opt("SUBSCRIBE", "__redis__:invalidate"),
			opt("PING"), opt("PTTL", lease)}
	case HashLease:
		cs = append(scripts(k), req("PTTL", k), req("HGET", k, "f"), req("HSET", k, "f", "v"), req("HDEL", k, "f"),
			aclCmd{args: []any{"HPTTL", k, "FIELDS", 1, "f"}, needs: &p.caps.hfe},
			aclCmd{args: []any{"HPEXPIRE", k, 1000, "FIELDS", 1, "f"}, needs: &p.caps.hfe})
		cs = append(cs, fencing...)
	case RWLease:
		cs = append(scripts(k), req("TIME"), req("TYPE", k), req("ZREMRANGEBYSCORE", k, 0, 1), req("ZCARD", k),
			req("ZRANGE", k, 0, -1), req("ZADD", k, 1, "m"), req("ZSCORE", k, "m"), req("ZREM", k, "m"), req("PEXPIREAT", k, 1))
		cs = append(cs, fencing...)
	case Semaphore:
		cs = append(scripts(k), req("TIME"), req("TYPE", k), req("ZREMRANGEBYSCORE", k, 0, 1), req("ZCARD", k),
			req("ZRANGE", k, 0, -1), req("ZRANGEBYSCORE", k, 0, 1), req("ZADD", k, 1, "m"), req("ZSCORE", k, "m"),
			req("ZREM", k, "m"), req("PEXPIREAT", k, 1), req("PERSIST", k), req("DEL", k))
		cs = append(cs, fencing...)
	case Latch:
		cs = append(scripts(k), req("TYPE", k), req("HGET", k, "f"), req("HSET", k, "f", "v"), req("HMGET", k, "f"),
			req("HINCRBY", k, "f", 1), opt("CLIENT", "ID"), opt("CLIENT", "TRACKING", "ON", "REDIRECT", 1),
			opt("SUBSCRIBE", "__redis__:invalidate"), opt("PING"))
	case RateLimiters:
		cs = append(scripts(k), req("TIME"), req("GET", k), req("SET", k, "1", "PX", 1000), req("INCRBY", k, 1),
			req("PEXPIRE", k, 1000), req("PTTL", k), req("EXISTS", k), req("HMGET", k, "f"), req("HSET", k, "f", "v"),
			req("HDEL", k, "f"), req("HGETALL", k), req("HINCRBY", k, "f", 1), req("PEXPIREAT", k, 1),
			aclCmd{args: []any{"INCREX", k, "BYINT", 1}, optional: true, needs: &p.caps.increx})
	case Redlock:
		cs = append(scripts(k), req("SET", k, "v", "NX", "PX", 1000), req("GET", k), req("PEXPIRE", k, 1000), req("DEL", k))
	}
	return cs
}

// checkACL runs ACL DRYRUN for every command of every primitive in use, as
// the connected user, on the primary (every primary of a cluster answers for
// the same users only when their ACLs are kept alike: the first is asked).
func (p *run) checkACL(ctx context.Context) {
	n := p.nodes[0]
	user := p.r.User
	cctx, cancel := p.ctx(ctx)
	defer cancel()
	// Can DRYRUN be used at all?
	err := n.Do(cctx, "ACL", "DRYRUN", user, "PING").Err()
	if err != nil {
		why := err.Error()
		switch {
		case noperm(err):
			why = "this user may not run ACL DRYRUN (" + err.Error() + ")"
		case strings.Contains(strings.ToLower(why), "unknown subcommand"), lacks(err, false):
			why = "the server has no ACL DRYRUN (Redis 7+ / Valkey)"
		}
		for _, prim := range Primitives() {
			if !p.uses(prim) {
				continue
			}
			p.add(Check{Name: "acl/" + prim, Status: Warn, Reason: "not checked: " + why,
				Fix: "as an admin: ACL DRYRUN <user> <command>…, or compare the user's rules with go doc ./prim (ACL permissions)"})
		}
		return
	}
	p.facts.aclChecked = true
	for _, prim := range Primitives() {
		if !p.uses(prim) {
			continue
		}
		var denied, deniedOpt, skipped, effects []string
		// One pipeline per primitive: a round trip, not one per command.
		var cs []aclCmd
		var cmds []*redis.Cmd
		dctx, dcancel := p.ctx(ctx)
		_, _ = n.Pipelined(dctx, func(pl redis.Pipeliner) error {
			for _, c := range p.aclCommands(prim) {
				if c.needs != nil && *c.needs != present {
					continue // prim never sends it to this server
				}
				cs = append(cs, c)
				cmds = append(cmds, pl.Do(dctx, append([]any{"ACL", "DRYRUN", user}, c.args...)...))
			}
			return nil
		})
		dcancel()
		for i, c := range cs {
			v, err := cmds[i].Text()
			name := cmdName(c.args)
			switch {
			case err != nil && strings.Contains(err.Error(), "not found") && !strings.Contains(err.Error(), "User"):
				skipped = append(skipped, name) // the server does not know it
			case err != nil:
				var re redis.Error
				if !errors.As(err, &re) || strings.Contains(err.Error(), "User") {
					p.add(Check{Name: "acl/" + prim, Status: Warn, Reason: "ACL DRYRUN failed: " + err.Error(), Fix: "rerun preflight"})
					return
				}
				skipped = append(skipped, name+" ("+err.Error()+")")
			case v != "OK":
				if c.optional {
					deniedOpt = append(deniedOpt, name)
					effects = append(effects, effectOf(prim, c))
				} else {
					denied = append(denied, name)
				}
			}
		}
		denied, deniedOpt = dedupe(denied), dedupe(deniedOpt)
		for _, d := range denied {
			if d == "CLIENT KILL" {
				p.facts.aclKillDenied = true
			}
		}
		if (prim == Waiting || prim == Latch) && len(deniedOpt) > 0 {
			p.facts.waitDenied = true
		}
		rule := fmt.Sprintf("user %q on %s", user, p.o.Key)
		if skipped = dedupe(skipped); len(skipped) > 0 {
			rule += " (not checked, the server refused the dry run: " + strings.Join(skipped, ", ") + ")"
		}
		switch {
		case len(denied) > 0:
			reason := rule + ": denied " + strings.Join(denied, ", ")
			if len(deniedOpt) > 0 {
				reason += "; and (optional) " + strings.Join(deniedOpt, ", ")
			}
			fix := "grant " + aclRule(append(denied, deniedOpt...))
			sc := ""
			if contains(denied, "CLIENT KILL") || contains(denied, "CLIENT INFO") {
				reason += " (uncertain commands cannot be fenced)"
				sc = "fenced-lock/lose-replies"
			}
			p.add(Check{Name: "acl/" + prim, Status: Fail, Reason: reason, Fix: fix, Scenario: sc})
		case len(deniedOpt) > 0:
			what := strings.Join(dedupe(effects), "; ")
			p.add(Check{Name: "acl/" + prim, Status: Warn, Reason: rule + ": denied " + strings.Join(deniedOpt, ", ") + ": " + what,
				Fix: "grant " + aclRule(deniedOpt)})
		default:
			p.add(Check{Name: "acl/" + prim, Status: OK, Reason: rule + ": every command allowed"})
		}
	}
}

// effectOf says what the denial of an optional command costs.
func effectOf(prim string, c aclCmd) string {
	switch {
	case c.effect != "":
		return c.effect
	case prim == Waiting || prim == Latch:
		return "waiting falls back to polling"
	}
	return "a fast path is lost (the fallback runs, after a refused command each time)"
}

func cmdName(args []any) string {
	name := strings.ToUpper(fmt.Sprint(args[0]))
	if (name == "CLIENT" || name == "ACL") && len(args) > 1 {
		name += " " + strings.ToUpper(fmt.Sprint(args[1]))
	}
	return name
}

func dedupe(s []string) []string {
	var out []string
	for _, x := range s {
		if !contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

func contains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

// aclRule writes the ACL SETUSER rules that grant the commands.
func aclRule(names []string) string {
	var rules []string
	for _, n := range names {
		r := "+" + strings.ToLower(strings.ReplaceAll(n, " ", "|"))
		if n == "SUBSCRIBE" {
			r += " &__redis__:invalidate"
		}
		if !contains(rules, r) {
			rules = append(rules, r)
		}
	}
	return strings.Join(rules, " ")
}

package preflight

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
func (p *run) aclCommands(prim, k string) []aclCmd {
	lease, fence := k, counterKey(k)
	req := func(a ...any) aclCmd { return aclCmd{args: a} }
	opt := func(a ...any) aclCmd { return aclCmd{args: a, optional: true} }
	scripts := func(keys ...any) []aclCmd {
		n := len(keys)
		return []aclCmd{req(append([]any{"EVALSHA", strings.Repeat("0", 40), n}, keys...)...),
			req(append([]any{"EVAL", "return 1", n}, keys...)...)}
	}
	fencing := []aclCmd{req("CLIENT", "INFO"), req("CLIENT", "KILL", "ID", 1)}
	// The watcher's keep-alive: refused, it checks with CLIENT ID instead
	// (and says so once); waiters still wake on invalidations.
	ping := aclCmd{args: []any{"PING"}, optional: true, effect: pingEffect}
	var cs []aclCmd
	switch prim {
	case FencedLock:
		cs = append(scripts(lease, fence), req("GET", lease), req("INCR", fence), req("PTTL", lease),
			req("SET", lease, "v", "PX", 1000), req("PEXPIRE", lease, 1000), req("DEL", lease))
		cs = append(cs, fencing...)
		cs = append(cs, aclCmd{args: []any{"DELEX", lease, "IFEQ", "v"}, optional: true, needs: &p.caps.delex})
	case Waiting:
		cs = []aclCmd{opt("CLIENT", "ID"), opt("CLIENT", "TRACKING", "ON", "REDIRECT", 1), opt("SUBSCRIBE", "__redis__:invalidate"),
			ping, opt("PTTL", lease)}
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
			opt("SUBSCRIBE", "__redis__:invalidate"), ping)
	case RateLimiters:
		cs = append(scripts(k), req("TIME"), req("GET", k), req("SET", k, "1", "PX", 1000), req("INCRBY", k, 1),
			req("PEXPIRE", k, 1000), req("PTTL", k), req("EXISTS", k), req("HMGET", k, "f"), req("HSET", k, "f", "v"),
			req("HDEL", k, "f"), req("HGETALL", k), req("HINCRBY", k, "f", 1), req("PEXPIREAT", k, 1),
			aclCmd{args: []any{"INCREX", k, "BYINT", 1}, optional: true, needs: &p.caps.increx})
	case Redlock:
		cs = append(scripts(k), req("SET", k, "v", "NX", "PX", 1000), req("GET", k), req("PEXPIRE", k, 1000), req("DEL", k))
	}
	if p.r.Topology == "cluster" && prim != Redlock {
		// go-redis's cluster client, and prim's dedicated connections,
		// follow an ASK redirection (a slot migrating) with ASKING.
		cs = append(cs, aclCmd{args: []any{"ASKING"}, optional: true, effect: "operations on a migrating slot fail"})
	}
	return cs
}

// checkACL checks, for every command of every primitive in use, whether the
// connected user may run it on the service's key, on the primary, or on every
// primary of a cluster (each node keeps its own ACL: a denial on some of them
// names them). It asks ACL DRYRUN; when the user may not
// run it (a service's least-privilege user usually may not) or the server has
// none, it queues each command instead in a transaction it then discards
// (MULTI … DISCARD): the server checks a command, its keys and its channels
// against the user's ACL when it queues it, and runs none of them.
func (p *run) checkACL(ctx context.Context) {
	n := p.nodes[0]
	user := p.r.User
	cctx, cancel := p.ctx(ctx)
	defer cancel()
	ask, how := p.dryRun, ""
	// Can DRYRUN be used at all?
	if err := n.Do(cctx, "ACL", "DRYRUN", user, "PING").Err(); err != nil {
		why := err.Error()
		switch {
		case noperm(err):
			why = "this user may not run ACL DRYRUN (" + err.Error() + ")"
		case strings.Contains(strings.ToLower(why), "unknown subcommand"), lacks(err, false):
			why = "the server has no ACL DRYRUN (Redis 7+ / Valkey)"
		}
		if qerr := p.canQueue(ctx); qerr != nil {
			for _, prim := range Primitives() {
				if !p.uses(prim) {
					continue
				}
				p.add(Check{Name: "acl/" + prim, Status: Warn, Reason: "not checked: " + why + ", and commands cannot be queued in MULTI either (" + qerr.Error() + ")",
					Fix: "as an admin: ACL DRYRUN <user> <command>…, or compare the user's rules with go doc ./prim (ACL permissions)"})
			}
			return
		}
		ask, how = p.queued, " (checked by queueing each command in a discarded MULTI, where each denial adds an ACL LOG entry: "+why+")"
	}
	p.facts.aclChecked = true
prims:
	for _, prim := range Primitives() {
		if !p.uses(prim) {
			continue
		}
		var denied, deniedOpt, skipped, effects []string
		// Every primary is asked (a cluster's nodes keep their own ACLs); a
		// denial on some of them only names them.
		on := map[string][]string{}
		keyed := map[string][]string{}
		var scoped, unscoped []string // denied for the key or channel, or the command itself
		answered := 0                 // commands the server said allowed or denied
		for _, node := range p.nodes {
			for _, key := range p.o.Keys {
				cs, answers := ask(ctx, node, prim, key)
				for i, c := range cs {
					v, err := answers[i].Text()
					name := cmdName(c.args)
					if err == nil {
						answered++
					}
					switch {
					case err != nil && strings.Contains(err.Error(), "not found") && !strings.Contains(err.Error(), "User"):
						skipped = append(skipped, name) // the server does not know it
					case err != nil:
						var re redis.Error
						if !errors.As(err, &re) || strings.Contains(err.Error(), "User") {
							// This primitive is not checked (a node whose ACL denies
							// DRYRUN or MULTI, a lost reply); the others still are.
							p.add(Check{Name: "acl/" + prim, Status: Warn, Reason: "not checked: " + err.Error(),
								Fix: "check the user's ACL on every node (ACL DRYRUN as an admin)"})
							p.facts.aclChecked = false
							continue prims
						}
						skipped = append(skipped, name+" ("+err.Error()+")")
					case v != "OK":
						// "… to access a key / the 'k' key / a channel …" is about
						// the keys or channels, "… to run the 'x' command" about the
						// command (the user's name, which the text may carry, left out).
						if l := strings.ToLower(strings.Replace(v, "User "+user+" ", "", 1)); strings.Contains(l, "to access") {
							scoped = append(scoped, name)
						} else {
							unscoped = append(unscoped, name)
						}
						if !contains(on[name], node.Options().Addr) {
							on[name] = append(on[name], node.Options().Addr)
						}
						if !contains(keyed[name], key) {
							keyed[name] = append(keyed[name], key)
						}
						if c.optional {
							deniedOpt = append(deniedOpt, name)
							effects = append(effects, effectOf(prim, c))
						} else {
							denied = append(denied, name)
						}
					}
				}
			}
		}
		// where names each denied command with the keys and nodes it was
		// denied for, when not all of them; said once before the list when
		// every command shares it.
		where := func(names []string) []string {
			names = dedupe(names)
			ats := make([]string, len(names))
			for i, n := range names {
				var at []string
				if len(p.o.Keys) > 1 && len(keyed[n]) < len(p.o.Keys) {
					at = append(at, "for "+strings.Join(keyed[n], ", "))
				}
				if len(p.nodes) > 1 && len(on[n]) < len(p.nodes) {
					at = append(at, "on "+strings.Join(on[n], ", "))
				}
				ats[i] = strings.Join(at, "; ")
			}
			out := slices.Clone(names)
			if len(names) > 1 && ats[0] != "" && !slices.ContainsFunc(ats, func(a string) bool { return a != ats[0] }) {
				out[0] = "(" + ats[0] + ") " + out[0]
				return out
			}
			for i := range out {
				if ats[i] != "" {
					out[i] += " (" + ats[i] + ")"
				}
			}
			return out
		}
		denied, deniedOpt = dedupe(denied), dedupe(deniedOpt)
		deniedAt, deniedOptAt := where(denied), where(deniedOpt)
		for _, d := range denied {
			if d == "CLIENT KILL" {
				p.facts.aclKillDenied = true
			}
		}
		if (prim == Waiting || prim == Latch) && slices.ContainsFunc(deniedOpt, func(n string) bool { return n != "PING" }) {
			p.facts.waitDenied = true // waiting polls (a refused PING costs only a Warn)
		}
		keys := slices.Clone(p.o.Keys)
		if prim == FencedLock {
			for i, k := range keys {
				keys[i] = k + " (counter " + counterKey(k) + ")"
			}
		}
		rule := fmt.Sprintf("user %q on %s", user, strings.Join(keys, ", "))
		if skipped = dedupe(skipped); len(skipped) > 0 {
			rule += " (not checked, the server refused the check: " + strings.Join(skipped, ", ") + ")"
		}
		rule += how
		switch {
		case answered == 0:
			// Every command skipped (a node that knows none of them, or
			// refused every check): nothing was checked, which is no OK.
			p.add(Check{Name: "acl/" + prim, Status: Warn, Reason: rule + ": not checked", Fix: "check the user's ACL on every node (ACL DRYRUN as an admin)"})
			p.facts.aclChecked = false
		case len(denied) > 0:
			reason := rule + ": denied " + strings.Join(deniedAt, ", ")
			if len(deniedOpt) > 0 {
				reason += "; and (optional) " + strings.Join(deniedOptAt, ", ")
			}
			fix := p.aclFix(append(denied, deniedOpt...), scoped, unscoped)
			sc := ""
			if contains(denied, "CLIENT KILL") || contains(denied, "CLIENT INFO") {
				reason += " (uncertain commands cannot be fenced)"
				sc = "fenced-lock/lose-replies"
			}
			p.add(Check{Name: "acl/" + prim, Status: Fail, Reason: reason, Fix: fix, Scenario: sc})
		case len(deniedOpt) > 0:
			what := strings.Join(dedupe(effects), "; ")
			p.add(Check{Name: "acl/" + prim, Status: Warn, Reason: rule + ": denied " + strings.Join(deniedOptAt, ", ") + ": " + what,
				Fix: p.aclFix(deniedOpt, scoped, unscoped)})
		default:
			p.add(Check{Name: "acl/" + prim, Status: OK, Reason: rule + ": every command allowed"})
		}
	}
}

// pingEffect is what a refused PING costs waiting and latches.
const pingEffect = "the invalidation watcher's keep-alive checks its connection with CLIENT ID instead (one Warn in the service's log); waiters still wake on invalidations"

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

// aclAnswer is the server's answer about one command: Text() "OK" when
// allowed, another text (the denial) when not, or an error when the check
// itself failed.
type aclAnswer interface{ Text() (string, error) }

// commandsFor lists the commands of prim that prim sends to this server.
func (p *run) commandsFor(prim, key string) []aclCmd {
	var cs []aclCmd
	for _, c := range p.aclCommands(prim, key) {
		if c.needs != nil && *c.needs != present {
			continue // prim never sends it to this server
		}
		cs = append(cs, c)
	}
	return cs
}

// dryRun asks ACL DRYRUN about every command of prim, in one pipeline (a
// round trip, not one per command).
func (p *run) dryRun(ctx context.Context, n *redis.Client, prim, key string) ([]aclCmd, []aclAnswer) {
	cs := p.commandsFor(prim, key)
	out := make([]aclAnswer, len(cs))
	dctx, cancel := p.ctx(ctx)
	defer cancel()
	_, _ = n.Pipelined(dctx, func(pl redis.Pipeliner) error {
		for i, c := range cs {
			out[i] = pl.Do(dctx, append([]any{"ACL", "DRYRUN", p.r.User}, c.args...)...)
		}
		return nil
	})
	return cs, out
}

// canQueue reports whether this user can open a transaction and discard it
// (the queued check's frame) on every primary: each node keeps its own ACL.
// MULTI and DISCARD are harmless alone.
func (p *run) canQueue(ctx context.Context) error {
	for _, n := range p.nodes {
		qctx, cancel := p.ctx(ctx)
		conn := n.Conn()
		var multi, discard *redis.Cmd
		_, _ = conn.Pipelined(qctx, func(pl redis.Pipeliner) error {
			multi, discard = pl.Do(qctx, "MULTI"), pl.Do(qctx, "DISCARD")
			return nil
		})
		conn.Close()
		cancel()
		err := multi.Err()
		if err == nil {
			err = discard.Err()
		}
		if err != nil {
			if len(p.nodes) > 1 {
				return fmt.Errorf("on %s: %w", n.Options().Addr, err)
			}
			return err
		}
	}
	return nil
}

// queued checks every command of prim by queueing it in a transaction that
// is then discarded: QUEUED means the ACL allows the command with its keys
// and channels (a cluster node's MOVED or ASK, which comes after the ACL
// check, too); NOPERM that it does not. Nothing queued runs: MULTI goes
// alone first, and only once this node has opened the transaction are the
// commands sent (a node whose ACL refuses MULTI would run them at once; each
// node keeps its own ACL), then DISCARD. It runs on a client of its own with
// one connection, closed after, without resends, so a connection never goes
// back to a pool inside a transaction.
func (p *run) queued(ctx context.Context, n *redis.Client, prim, key string) ([]aclCmd, []aclAnswer) {
	cs := p.commandsFor(prim, key)
	out := make([]aclAnswer, len(cs))
	qctx, cancel := p.ctx(ctx)
	defer cancel()
	o := *n.Options()
	o.PoolSize, o.MinIdleConns, o.MaxIdleConns, o.MaxRetries = 1, 0, 0, -1
	c := redis.NewClient(&o)
	defer c.Close()
	conn := c.Conn()
	defer conn.Close()
	fail := func(err error) ([]aclCmd, []aclAnswer) {
		for i := range out {
			out[i] = notChecked{err}
		}
		return cs, out
	}
	if v, err := conn.Do(qctx, "MULTI").Text(); err != nil || v != "OK" {
		return fail(fmt.Errorf("commands cannot be queued on %s (MULTI: %q, %v)", o.Addr, v, err))
	}
	cmds := make([]*redis.Cmd, len(cs))
	var discard *redis.Cmd
	_, _ = conn.Pipelined(qctx, func(pl redis.Pipeliner) error {
		for i, c := range cs {
			cmds[i] = pl.Do(qctx, c.args...)
		}
		discard = pl.Do(qctx, "DISCARD")
		return nil
	})
	if v, err := discard.Text(); err != nil || v != "OK" {
		return fail(fmt.Errorf("the transaction on %s was not discarded (DISCARD: %q, %v)", o.Addr, v, err))
	}
	for i, c := range cmds {
		out[i] = queuedAnswer{c}
	}
	return cs, out
}

// notChecked is the answer for every command of a check that could not run.
type notChecked struct{ err error }

func (n notChecked) Text() (string, error) { return "", n.err }

// queuedAnswer reads a queued command's reply as DRYRUN's.
type queuedAnswer struct{ c *redis.Cmd }

func (q queuedAnswer) Text() (string, error) {
	v, err := q.c.Text()
	switch {
	case err == nil && v == "QUEUED":
		return "OK", nil
	case err == nil:
		return "", fmt.Errorf("unexpected reply %q to a queued command", v)
	case noperm(err):
		return err.Error(), nil
	}
	msg := err.Error()
	for _, redirect := range []string{"MOVED ", "ASK ", "CROSSSLOT", "TRYAGAIN"} {
		if strings.HasPrefix(msg, redirect) {
			return "OK", nil // the cluster redirects after the ACL allowed it
		}
	}
	if lacks(err, false) {
		return "", errors.New("command not found") // as DRYRUN says it
	}
	return "", err
}

// aclFix says what to grant: the commands denied as such, and key (or
// channel) patterns for those denied only for the keys or channels checked.
func (p *run) aclFix(names, scoped, unscoped []string) string {
	var cmds []string
	keys, chans := false, false
	for _, n := range names {
		switch {
		case contains(unscoped, n):
			cmds = append(cmds, n)
		case contains(scoped, n) && n == "SUBSCRIBE":
			chans = true
		case contains(scoped, n):
			keys = true
		}
	}
	var parts []string
	if len(cmds) > 0 {
		parts = append(parts, "grant "+aclRule(cmds))
	}
	if keys {
		parts = append(parts, "add key patterns (~…) covering "+strings.Join(p.o.Keys, ", ")+
			" and the keys derived from them (a fenced lock's counter: a trailing :lease becomes :fence, else :fence is appended)")
	}
	if chans {
		parts = append(parts, "grant the channel &__redis__:invalidate")
	}
	return strings.Join(parts, "; ")
}

// counterKey is the fencing counter checked beside a fenced lock's lease key
// k: prim's documented pair is {name}:lease and {name}:fence, so a trailing
// ":lease" becomes ":fence"; any other key gets ":fence" appended. The key as
// given is the lease's (or the hash's, the semaphore's…).
func counterKey(k string) string {
	if base, ok := strings.CutSuffix(k, ":lease"); ok {
		return base + ":fence"
	}
	return k + ":fence"
}

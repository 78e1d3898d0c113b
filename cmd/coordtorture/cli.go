package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coordtorture/coordtorture/internal/tlsopt"
	"github.com/coordtorture/coordtorture/reports"
	"github.com/coordtorture/coordtorture/scenarios"
	"github.com/coordtorture/coordtorture/testbed"
)

const usage = `coordtorture — torture Redis/Valkey coordination primitives with real faults.

Usage:
  coordtorture list [PATTERN…]           scenarios, what they do, what must hold
  coordtorture run [flags] [PATTERN…]    run scenarios (default: all)
  coordtorture matrix [flags] [PATTERN…] run them on every fetched server build
  coordtorture replay [flags] DIR        re-run, from their seeds, the failures of the run in DIR
  coordtorture preflight --addr …        read-only checks of a deployment, in seconds
  coordtorture COMMAND --help            a command's arguments and flags

PATTERN is a scenario's name (fenced-lock/baseline), a family (fenced-lock), a
fault (baseline) or a glob ('*/pause-*'); flags and patterns may come in any
order, and a pattern that matches no scenario is an error. PATTERN@IMPL[+IMPL…]
runs what PATTERN selects with those of --impl's implementations only
(fenced-lock/black-hole@prim beside --impl all: prim alone on that scenario);
one whose IMPLs are none of --impl's runs nothing, and says so ("skipped: …").

Each run writes DIR/summary.txt, report.json, junit.xml, index.html, prim.log (what
the primitives logged) and histories/*.jsonl.gz (gzip-compressed JSONL; check them
again with fencecheck: each starts with a header of the run's expectations and
options, so fencecheck reaches the run's verdicts). A DIR (--out) that holds an
earlier report (report.json) has that report's files removed first, so that it
holds one run's: those named above, histories/*.jsonl.gz and viz/*.html; any
other file stays. A DIR without report.json is written into as it is.
` + exitText + `
Providers: "local" (default) starts the servers itself (make servers fetches them)
and injects faults. "docker" does the same with every server in a container of
its own (--image, default the build's local image: make images builds them) on a
network of the run's; everything it creates is labelled and removed at the end.
"external" runs the fault-free workloads against a deployment
you already have (--addr; the password is read from $COORDTORTURE_PASSWORD, and
with --master-name the sentinels' from $COORDTORTURE_SENTINEL_PASSWORD): keys
carry a random "coordtorture:<run>:" prefix and are deleted afterwards.
`

const exitText = `Exit status (the run's overall verdict, the one summary.txt, junit.xml and
report.json state): 0 when every must-hold property held (HAZARD is a documented
hazard observed, with evidence; N/A a property with nothing to check), 1 on FAIL,
2 on UNKNOWN, on a usage error, when the run could not start, or when it was
interrupted (the first Ctrl-C stops it and writes the report of what ran; a
second ends it at once, with no report). With prim beside
other implementations (--impl all) only prim's verdicts decide it: the peer
libraries and the mutants run beside it for comparison, and their FAILs (no
fencing tokens; deliberate bugs) are expected findings.
`

const runUsage = `Usage: coordtorture run [flags] [PATTERN…]

Runs the scenarios the patterns select (default: all of them) with each
implementation of --impl, on one server build, and writes a report directory
(--out). PATTERN is a scenario's name (fenced-lock/baseline), a family
(fenced-lock), a fault (baseline) or a glob ('*/pause-*'; quote it); flags and
patterns may come in any order, and a pattern that matches no scenario is an
error (coordtorture list shows them).

` + exitText + `
Flags:
`

const matrixUsage = `Usage: coordtorture matrix [flags] [PATTERN…]

Runs the scenarios the patterns select (default: all of them) on every fetched
server build (make servers fetches them), local servers only. PATTERN as for
run; flags and patterns may come in any order.

` + exitText + `
Flags:
`

const replayUsage = `Usage: coordtorture replay [flags] DIR

Re-runs, from their seeds, durations, client counts and leases (--ttl), the scenarios of the run
in DIR (its report.json) that set that run's verdict to FAIL or UNKNOWN: prim's
when prim ran beside peers or mutants, which are shown for comparison and are
skipped unless --all is given. It prints each seed it replays. Nothing to
replay exits 0, unless the run was interrupted: the scenarios it did not reach
are not replayed (run its command again), and with nothing else to replay the
exit status is the interrupted run's, 2. --ttl given here overrides the run's
lease (reports written before it was recorded have none: give it again);
report.json does not record --hardened-client: give it again if the run had it.

` + exitText + `
Flags:
`

const listUsage = `Usage: coordtorture list [PATTERN…]

Lists the scenarios the patterns select (default: all of them): their topology,
what they do and the properties checked (each must hold, or may show the hazard
the scenario is about), within 120 columns. PATTERN as for run. No flags.
`

// Flag groups: which command takes which flag.
const (
	forRun = 1 << iota
	forMatrix
	forReplay
)

type runFlags struct {
	server, serverBin, provider, impl, out string
	image                                  string
	addr, masterName, user, sentinelUser   string
	cluster                                bool
	tls                                    tlsopt.Options
	duration, ttl                          time.Duration
	hardened                               bool
	clients                                int
	seed                                   int64
	replayAll                              bool
	parallel                               int
}

// defaultParallel is --parallel's default: a run at a time for every two
// cores (one on two cores). A run is itself concurrent (eight clients, up
// to seven server processes, their proxies, the nemesis and the checkers)
// and bound by time (250ms client timeouts, 100ms Redlock node timeouts,
// the progress checker's rates): one run per two cores leaves each run about
// the machine a lone run has, so its verdict is the one it would reach
// alone. More (--parallel N) is for machines with cores to spare. With
// --provider external the default is one whatever the cores (runCmd): every
// run goes to the one deployment.
func defaultParallel() int { return max(1, numCPU()/2) }

// numCPU is runtime.NumCPU (a test sets more cores).
var numCPU = runtime.NumCPU

// register registers on fs the flags that apply to cmd (run, matrix or
// replay), and only those.
func (f *runFlags) register(fs *flag.FlagSet, cmd string) {
	which := map[string]int{"run": forRun, "matrix": forMatrix, "replay": forReplay}[cmd]
	all := forRun | forMatrix | forReplay
	str := func(groups int, p *string, name, value, help string) {
		if groups&which != 0 {
			fs.StringVar(p, name, value, help)
		} else {
			*p = value
		}
	}
	boolean := func(groups int, p *bool, name, help string) {
		if groups&which != 0 {
			fs.BoolVar(p, name, false, help)
		}
	}
	dur := func(groups int, p *time.Duration, name string, value time.Duration, help string) {
		*p = value
		if groups&which != 0 {
			fs.DurationVar(p, name, value, help)
		}
	}
	str(forRun, &f.server, "server", testbed.DefaultBuild, "server build: "+strings.Join(testbed.KnownBuilds(), ", ")+" (make servers fetches them)")
	str(forRun, &f.serverBin, "server-bin", "", "run this redis-server/valkey-server binary instead of a fetched build")
	str(forRun|forReplay, &f.provider, "provider", "local", "where servers run: local (processes on 127.0.0.1, with faults), docker (containers, with faults; make images) or external (--addr)")
	str(forRun|forReplay, &f.image, "image", "", "docker: the server image (default: the build's local image, coordtorture/redis:8.0 for redis-8.0)")
	str(forRun|forReplay, &f.addr, "addr", "", "external: host:port[,host:port…] of the deployment (several = cluster; sentinels with --master-name)")
	str(forRun|forReplay, &f.masterName, "master-name", "", "external: Sentinel master name (--addr lists the sentinels)")
	boolean(forRun|forReplay, &f.cluster, "cluster", "external: --addr is a cluster (needed when it is a single address)")
	str(forRun|forReplay, &f.user, "user", "", "external: ACL user name (password from $COORDTORTURE_PASSWORD)")
	str(forRun|forReplay, &f.sentinelUser, "sentinel-user", "", "external, with --master-name: the sentinels' ACL user (password from $COORDTORTURE_SENTINEL_PASSWORD, required with it: go-redis authenticates only with a password; neither set: their default user, no AUTH); --user is never sent to the sentinels")
	if which&(forRun|forReplay) != 0 {
		f.tls.Register(fs) // external: --tls, --tls-ca, --tls-cert, --tls-key, --tls-server-name, --tls-insecure
	}
	str(forRun|forMatrix, &f.impl, "impl", "prim", "implementation(s) under test, comma-separated, or all (prim and the peers; each runs the scenarios that apply to it): prim, "+strings.Join(scenarios.Peers, ", ")+
		" (locks; redsync also runs the redlock scenarios on their independent sets), "+strings.Join(scenarios.LimiterPeers, ", ")+" (rate limiters), or a deliberately broken one the checkers must catch: "+
		strings.Join(scenarios.AllMutants(), ", "))
	str(all, &f.out, "out", "", "output directory (default runs/<time>); an earlier report there (report.json) has its files removed first, other files stay")
	dur(forRun|forMatrix, &f.duration, "duration", 10*time.Second, "workload duration per scenario")
	dur(all, &f.ttl, "ttl", 500*time.Millisecond, "lock lease duration")
	f.clients = 8
	if which&(forRun|forMatrix) != 0 {
		fs.IntVar(&f.clients, "clients", 8, "concurrent client processes (at least 1)")
		fs.Int64Var(&f.seed, "seed", 0, "seed for the nemesis and workload (default: from the clock, printed)")
	}
	boolean(all, &f.hardened, "hardened-client", "give the clients no retries (MaxRetries -1); by default they keep go-redis's defaults (MaxRetries 3), as a user's client has them")
	f.parallel = 1
	if which&(forRun|forMatrix|forReplay) != 0 {
		fs.IntVar(&f.parallel, "parallel", defaultParallel(), "scenario runs at a time (each has its own servers, addresses and proxies); the default is one for every two cores (one on two cores), and one with --provider external, whose runs all go to the one deployment (N given: N runs share it at once)")
	}
	boolean(forReplay, &f.replayAll, "all", "replay every scenario that failed (FAIL or UNKNOWN), the comparison's peers' and mutants' too")
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		fmt.Fprint(stdout, "\nRun flags (coordtorture run --help):\n")
		printFlags(stdout, "run")
		return 0
	case "list":
		return list(args[1:], stdout, stderr)
	case "run", "matrix", "replay":
		return runCmd(args[0], args[1:], stdout, stderr)
	case "preflight":
		return preflightCmd(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "coordtorture: unknown command %q\n\n%s", args[0], usage)
	return 2
}

func printFlags(w io.Writer, cmd string) {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(w)
	(&runFlags{}).register(fs, cmd)
	fs.PrintDefaults()
}

// parseArgs parses flags wherever they are among the positional arguments
// (the flag package stops at the first positional one), and returns the
// positional ones in order; "--" ends the flags. help reports -h/--help. A
// parse error is returned for the caller to print once.
func parseArgs(fs *flag.FlagSet, args []string) (pos []string, help bool, err error) {
	fs.SetOutput(io.Discard) // the caller prints the error, once
	fs.Usage = func() {}
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, true, nil
			}
			return nil, false, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, false, nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), false, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// implRestrictions splits patterns of the form PATTERN@IMPL[+IMPL…] (the
// scenarios PATTERN selects run only those of --impl's implementations) into
// the bare patterns and, by scenario name, the implementations allowed; a
// scenario that some pattern selects without @ has no entry (every
// implementation of --impl runs it).
func implRestrictions(positional []string) ([]string, map[string]map[string]bool, error) {
	patterns := make([]string, len(positional))
	only := map[string]map[string]bool{}
	free := map[string]bool{}
	for i, p := range positional {
		pat, impls, restricted := strings.Cut(p, "@")
		patterns[i] = pat
		ss, err := scenarios.Match([]string{pat})
		if err != nil {
			continue // selectScenarios says so, with the others
		}
		for _, s := range ss {
			if !restricted {
				free[s.Name] = true
				continue
			}
			if only[s.Name] == nil {
				only[s.Name] = map[string]bool{}
			}
			for _, impl := range strings.Split(impls, "+") {
				if err := scenarios.ValidImpl(impl); err != nil {
					return nil, nil, fmt.Errorf("%s: %w", p, err)
				}
				only[s.Name][impl] = true
			}
		}
	}
	for name := range free {
		delete(only, name)
	}
	return patterns, only, nil
}

// skippedRestrictions says on stderr which PATTERN@IMPL arguments name no
// implementation of --impl (implFlag; impls its list): they run nothing —
// make torture TORTURE_IMPL=redislock gives its suite's X@prim patterns —
// and how many of the scenarios they select run for none of --impl's
// implementations on that account (those another pattern selects too still
// run). One line for the patterns naming the same implementations (the
// first few named, the rest counted). Not an error: the rest of the
// selection runs, and nothing left to run is said as such.
func skippedRestrictions(stderr io.Writer, positional []string, only map[string]map[string]bool, impls []string, implFlag string) {
	var order []string // the IMPL parts, in order of first appearance
	pats := map[string][]string{}
	dropped := map[string]int{}
	for _, p := range positional {
		pat, named, restricted := strings.Cut(p, "@")
		if !restricted || slices.ContainsFunc(strings.Split(named, "+"), func(i string) bool { return slices.Contains(impls, i) }) {
			continue
		}
		ss, err := scenarios.Match([]string{pat})
		if err != nil {
			continue
		}
		if pats[named] == nil {
			order = append(order, named)
		}
		pats[named] = append(pats[named], p)
		for _, s := range ss {
			if o := only[s.Name]; o != nil && !slices.ContainsFunc(impls, func(i string) bool { return o[i] }) {
				dropped[named]++
			}
		}
	}
	for _, named := range order {
		ps := pats[named]
		shown := strings.Join(ps, ", ")
		if len(ps) > skippedShown {
			shown = fmt.Sprintf("%s and %d more", strings.Join(ps[:skippedShown], ", "), len(ps)-skippedShown)
		}
		fmt.Fprintf(stderr, "coordtorture: skipped: %s (%s not in --impl %s): %s not run\n", shown, named, implFlag, plural(dropped[named], "scenario"))
	}
}

// selectScenarios returns the scenarios the patterns match (all for none),
// in list order; every pattern must match one.
func selectScenarios(patterns []string) ([]*scenarios.Scenario, error) {
	var bad []string
	for _, p := range patterns {
		if _, err := scenarios.Match([]string{p}); err != nil {
			if strings.Contains(err.Error(), "bad pattern") {
				return nil, err
			}
			bad = append(bad, p)
		}
	}
	switch len(bad) {
	case 0:
		return scenarios.Match(patterns)
	case 1:
		return nil, fmt.Errorf("no scenario matches %q%s; coordtorture list shows them", bad[0], suggest(bad[0]))
	}
	q := make([]string, len(bad))
	for i, b := range bad {
		q[i] = strconv.Quote(b) + suggest(b)
	}
	return nil, fmt.Errorf("no scenario matches %s; coordtorture list shows them", strings.Join(q, ", "))
}

// suggest is ": did you mean X?" for the scenario name closest to a
// misspelled pattern, "" when none is close.
func suggest(p string) string {
	best, dist := "", 4
	for _, s := range scenarios.All() {
		for _, name := range []string{s.Name, path.Dir(s.Name), path.Base(s.Name)} {
			if d := editDistance(p, name); d < dist {
				best, dist = name, d
			}
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func list(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("list", flag.ContinueOnError)
	patterns, help, err := parseArgs(fs, args)
	if help {
		fmt.Fprint(stdout, listUsage)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "coordtorture list: %v (see coordtorture list --help)\n", err)
		return 2
	}
	ss, err := selectScenarios(patterns)
	if err != nil {
		fmt.Fprintln(stderr, "coordtorture list:", err)
		return 2
	}
	writeList(stdout, ss)
	return 0
}

func runCmd(cmd string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	var f runFlags
	f.register(fs, cmd)
	positional, help, err := parseArgs(fs, args)
	if help {
		fmt.Fprint(stdout, map[string]string{"run": runUsage, "matrix": matrixUsage, "replay": replayUsage}[cmd])
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		if cmd != "matrix" {
			fmt.Fprint(stdout, "\n"+tlsHelp)
		}
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "coordtorture %s: %v (see coordtorture %s --help)\n", cmd, err, cmd)
		return 2
	}
	replayAll := f.replayAll
	if f.clients < 1 {
		fmt.Fprintf(stderr, "coordtorture %s: --clients %d: at least 1 client is needed\n", cmd, f.clients)
		return 2
	}
	if f.parallel < 1 {
		fmt.Fprintf(stderr, "coordtorture %s: --parallel %d: at least 1\n", cmd, f.parallel)
		return 2
	}
	if f.duration <= 0 {
		fmt.Fprintf(stderr, "coordtorture %s: --duration %v: must be positive\n", cmd, f.duration)
		return 2
	}
	if f.ttl < time.Millisecond {
		fmt.Fprintf(stderr, "coordtorture %s: --ttl %v: must be 1ms or more\n", cmd, f.ttl)
		return 2
	}
	var ext *scenarios.External
	var dock *scenarios.Docker
	if f.image != "" && f.provider != "docker" {
		fmt.Fprintln(stderr, "coordtorture: --image needs --provider docker")
		return 2
	}
	switch f.provider {
	case "local", "docker":
		if f.addr != "" || f.masterName != "" || f.cluster || f.user != "" || f.sentinelUser != "" || f.tls.Enabled() {
			fmt.Fprintln(stderr, "coordtorture: --addr, --master-name, --cluster, --user, --sentinel-user and --tls… need --provider external")
			return 2
		}
		if f.provider == "docker" {
			if f.serverBin != "" {
				fmt.Fprintln(stderr, "coordtorture: --server-bin is a local binary; with --provider docker use --image")
				return 2
			}
			dock = &scenarios.Docker{Image: f.image}
		}
	case "external":
		if f.addr == "" {
			fmt.Fprintln(stderr, "coordtorture: --provider external needs --addr host:port[,host:port…]")
			return 2
		}
		if f.masterName == "" && f.sentinelUser != "" {
			fmt.Fprintln(stderr, "coordtorture: --sentinel-user needs --master-name (the sentinels' addresses in --addr)")
			return 2
		}
		tc, ok := tlsConfig(f.tls, cmd, stderr)
		if !ok {
			return 2
		}
		ext = &scenarios.External{Addrs: strings.Split(f.addr, ","), MasterName: f.masterName, Cluster: f.cluster,
			Username: f.user, Password: os.Getenv("COORDTORTURE_PASSWORD"), SentinelUsername: f.sentinelUser,
			SentinelPassword: os.Getenv("COORDTORTURE_SENTINEL_PASSWORD"), TLS: tc != nil, TLSConfig: tc}
	default:
		fmt.Fprintf(stderr, "coordtorture: unknown provider %q (local, docker, external)\n", f.provider)
		return 2
	}
	parallelGiven := false
	fs.Visit(func(fl *flag.Flag) { parallelGiven = parallelGiven || fl.Name == "parallel" })
	if ext != nil && !parallelGiven {
		// Every run goes to the one deployment: runs at the same time would
		// share its server processes (and their CPU), which the progress
		// checker's rates do not expect. --parallel N asks for it.
		f.parallel = 1
	}
	impls := strings.Split(f.impl, ",")
	if f.impl == "all" {
		impls = scenarios.EveryImpl()
	}
	for _, i := range impls {
		if err := scenarios.ValidImpl(i); err != nil {
			fmt.Fprintln(stderr, "coordtorture:", err)
			return 2
		}
	}
	if f.serverBin != "" {
		os.Setenv(testbed.EnvServerBin, f.serverBin)
		f.server = testbed.CustomBuild
	}
	type job struct {
		s        *scenarios.Scenario
		build    string
		seed     int64
		impl     string
		duration time.Duration
		clients  int
		ttl      time.Duration
	}
	var jobs []job
	ttlGiven := false // --ttl on the command line: a replay uses it over the run's
	fs.Visit(func(fl *flag.Flag) { ttlGiven = ttlGiven || fl.Name == "ttl" })
	// A replay keeps the rule of the run it replays: what was a comparison
	// there (the peers and mutants beside prim) is one in the replay.
	var decidedBy []string
	seed := f.seed
	if seed == 0 {
		seed = time.Now().UnixNano() % 1_000_000_007
	}
	switch cmd {
	case "replay":
		if len(positional) != 1 {
			fmt.Fprintf(stderr, "coordtorture replay: takes one run directory, got %d arguments (see coordtorture replay --help)\n", len(positional))
			return 2
		}
		var prev reports.Run
		b, err := os.ReadFile(filepath.Join(positional[0], "report.json"))
		if err == nil {
			err = json.Unmarshal(b, &prev)
		}
		if err != nil {
			fmt.Fprintf(stderr, "coordtorture replay: reading %s: %v\n", positional[0], err)
			return 2
		}
		skipped := 0
		decidedBy = prev.Deciding()
		for _, o := range prev.Outcomes {
			if o.Verdict != scenarios.Fail && o.Verdict != scenarios.Unknown {
				continue
			}
			if !prev.Decides(o.Impl) && !replayAll {
				// Beside prim, the peers' FAILs are expected findings (no
				// fencing), and the mutants' FAILs the checkers catching
				// them: they did not set the run's verdict.
				skipped++
				continue
			}
			ss, err := scenarios.Match([]string{o.Scenario})
			if err != nil {
				fmt.Fprintln(stderr, "coordtorture:", err)
				return 2
			}
			if o.Provider == "external" && ext == nil {
				fmt.Fprintf(stderr, "coordtorture: %s ran on an external deployment (%s); replay it with --provider external --addr …\n", o.Scenario, o.Target)
				return 2
			}
			ttl := f.ttl
			if o.TTL > 0 && !ttlGiven {
				ttl = o.TTL // the run's own lease: its schedule depends on it
			}
			jobs = append(jobs, job{ss[0], o.Build, o.Seed, o.Impl, o.Duration, o.Clients, ttl})
		}
		if prev.Interrupted {
			// Its command again is what covers the scenarios it did not
			// reach: which ones those were, report.json does not say.
			interrupted := fmt.Sprintf("that run was interrupted (overall %s, exit status %d): the scenarios it did not reach are not replayed; run its command again: %s",
				prev.Overall(), prev.Overall().ExitStatus(), prev.Command)
			if len(jobs) == 0 {
				fmt.Fprintln(stdout, "nothing to replay of what finished:", interrupted)
				return prev.Overall().ExitStatus()
			}
			fmt.Fprintln(stdout, "coordtorture:", interrupted)
		}
		if len(jobs) == 0 {
			if skipped > 0 {
				fmt.Fprintf(stdout, "nothing to replay: no scenario of that run failed for %s, which set its verdict (%s of the comparison's peers or mutants skipped: --all replays them)\n",
					strings.Join(prev.Deciding(), ", "), plural(skipped, "failure"))
				return 0
			}
			fmt.Fprintln(stdout, "nothing to replay: no scenario of that run FAILed or was UNKNOWN")
			return 0
		}
		// The banner states the seeds the replay uses, not a fresh one.
		seed = jobs[0].seed
		if slices.ContainsFunc(jobs, func(j job) bool { return j.seed != seed }) {
			seed = 0
		}
		if skipped > 0 {
			fmt.Fprintf(stdout, "coordtorture: replaying prim's failures; %s of the comparison's peers or mutants skipped (--all replays them)\n", plural(skipped, "failure"))
		}
	default:
		patterns, only, err := implRestrictions(positional)
		if err != nil {
			fmt.Fprintf(stderr, "coordtorture %s: %v\n", cmd, err)
			return 2
		}
		ss, err := selectScenarios(patterns)
		if err != nil {
			fmt.Fprintf(stderr, "coordtorture %s: %v\n", cmd, err)
			return 2
		}
		skippedRestrictions(stderr, positional, only, impls, f.impl)
		if ext != nil {
			if ss = keepRunnable(stderr, ss, patterns, func(s *scenarios.Scenario) error { return s.Runnable(true) },
				"faults or own topology: local only", "on an external deployment"); ss == nil {
				return 2
			}
		}
		if dock != nil {
			if ss = keepRunnable(stderr, ss, patterns, func(s *scenarios.Scenario) error {
				if s.MovesClock() {
					return fmt.Errorf("%s moves a server's clock (a host library): it runs only with --provider local", s.Name)
				}
				return nil
			}, "it moves a server's clock: local only", "in containers"); ss == nil {
				return 2
			}
		}
		builds := []string{f.server}
		if ext != nil {
			builds = []string{"external"}
		}
		if cmd == "matrix" {
			builds = nil
			for _, b := range testbed.KnownBuilds() {
				if _, err := testbed.LookupBuild(b); err == nil {
					builds = append(builds, b)
				} else {
					fmt.Fprintf(stderr, "coordtorture: skipping %s: %v\n", b, err)
				}
			}
		}
		unsupported := 0
		for _, b := range builds {
			if _, err := testbed.LookupBuild(b); err != nil && ext == nil {
				fmt.Fprintf(stderr, "coordtorture: %v\n", err)
				return 2
			}
			for _, s := range ss {
				for _, impl := range impls {
					if o := only[s.Name]; o != nil && !o[impl] {
						continue // its patterns name other implementations (PATTERN@IMPL)
					}
					if !s.Supports(impl) {
						if len(impls) == 1 && len(ss) == 1 {
							fmt.Fprintf(stderr, "coordtorture: %s does not run on %s (it runs on %s)\n", s.Name, impl, strings.Join(s.Impls, ", "))
							return 2
						}
						unsupported++ // each implementation runs where it applies
						continue
					}
					if s.Topo.Build != "" && ext == nil {
						// A scenario pinned to a build runs once, on that build.
						if _, err := testbed.LookupBuild(s.Topo.Build); err != nil {
							fmt.Fprintf(stderr, "coordtorture: %s runs on %s: %v\n", s.Name, s.Topo.Build, err)
							return 2
						}
						if b != builds[0] {
							continue
						}
						jobs = append(jobs, job{s, s.Topo.Build, seed, impl, f.duration, f.clients, f.ttl})
						continue
					}
					jobs = append(jobs, job{s, b, seed, impl, f.duration, f.clients, f.ttl})
				}
			}
		}
		if len(jobs) == 0 {
			fmt.Fprintf(stderr, "coordtorture: none of the selected scenarios runs on %s\n", f.impl)
			return 2
		}
		if unsupported > 0 && len(impls) == 1 {
			fmt.Fprintf(stderr, "coordtorture: %s of the selection skipped: not applicable to %s\n", plural(unsupported, "scenario run"), f.impl)
		}
	}
	if ext != nil {
		// One connection first: a transport mismatch is said at once, not
		// as every scenario's error.
		desc, ok := probeTransport(ext.Addrs[0], ext.TLSConfig, cmd, stderr)
		if !ok {
			return 2
		}
		if desc != "" {
			fmt.Fprintf(stdout, "coordtorture: external deployment %s: %s\n", f.addr, desc)
		}
	}
	out := f.out
	if out == "" {
		out = filepath.Join("runs", time.Now().Format("20060102-150405"))
	}
	// An --out that holds an earlier report (runs/latest of make torture)
	// gets this run's alone: the earlier one's files go first, so that no
	// history of it is left beside this run's (fencecheck RUN/histories/*
	// would judge them as this run's). Other files stay; a directory with
	// no report.json is written into as it is.
	if had, err := reports.ClearPrevious(out); err != nil {
		fmt.Fprintf(stderr, "coordtorture: removing the earlier report in %s: %v\n", out, err)
		return 2
	} else if had {
		fmt.Fprintf(stdout, "coordtorture: %s held an earlier report: its files (report.json, summary.txt, junit.xml, index.html, prim.log, histories/, viz/) were removed\n", out)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		fmt.Fprintf(stderr, "coordtorture: %v\n", err)
		return 2
	}
	logFile, err := os.Create(filepath.Join(out, "prim.log"))
	if err != nil {
		fmt.Fprintf(stderr, "coordtorture: %v\n", err)
		return 2
	}
	defer logFile.Close()
	logger := slog.New(slog.NewTextHandler(logFile, nil))
	// The first SIGINT or SIGTERM (SIGHUP: the terminal went away) stops
	// the run: the scenario running closes its servers, and the report of
	// what ran is written, overall UNKNOWN (exit status 2). A second one
	// kills at once (the servers die with the process: PDEATHSIG).
	testbed.CallerHandlesSignals()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	context.AfterFunc(ctx, stop)
	tty := isTerminal(stdout)
	rep := &reports.Run{Started: time.Now(), Command: "coordtorture " + cmd + " " + strings.Join(args, " "), DecidedBy: decidedBy}
	seedText := fmt.Sprintf("seed %d", seed)
	if seed == 0 {
		seedText = "each run's own seed"
	}
	if cmd == "replay" {
		fmt.Fprintf(stdout, "coordtorture: replaying %s, each with its own seed, duration, clients and ttl → %s\n", plural(len(jobs), "scenario run"), out)
	} else {
		fmt.Fprintf(stdout, "coordtorture: %s, %v each, %d clients, %s → %s\n", plural(len(jobs), "scenario run"), f.duration, f.clients, seedText, out)
	}
	if f.parallel > 1 && len(jobs) > 1 {
		fmt.Fprintf(stdout, "coordtorture: %d runs at a time\n", min(f.parallel, len(jobs)))
	}
	// Each job has its own servers (their own loopback addresses), proxies,
	// clients and implementation: runs at the same time share nothing but
	// the machine. A registered mutant is one instance, so two runs of one
	// never overlap.
	var (
		outMu   sync.Mutex // the terminal, the progress bar
		results = make([]*scenarios.Outcome, len(jobs))
		slots   = make(chan struct{}, f.parallel)
		running sync.WaitGroup
		shared  = map[string]*sync.Mutex{}
	)
	for _, impl := range impls {
		if !slices.Contains(scenarios.EveryImpl(), impl) {
			shared[impl] = new(sync.Mutex)
		}
	}
	bar := tty && f.parallel == 1 // a progress bar only when one run at a time has the line
	runJob := func(i int, j job) {
		label := fmt.Sprintf("[%d/%d] %s [%s, %s]", i+1, len(jobs), j.s.Name, j.impl, j.build)
		if cmd == "replay" {
			label += fmt.Sprintf(" seed %d, %v, %d clients", j.seed, j.duration, j.clients)
		}
		var progress func(el, total time.Duration)
		switch {
		case bar:
			progress = func(el, total time.Duration) {
				n := int(20 * el / total)
				outMu.Lock()
				fmt.Fprintf(stdout, "\r%s [%s%s] %v/%v", label, strings.Repeat("#", min(n, 20)), strings.Repeat(".", max(0, 20-n)), el.Round(time.Second), total)
				outMu.Unlock()
			}
		case !tty:
			progress = func(el, total time.Duration) {
				outMu.Lock()
				fmt.Fprintf(stdout, "%s %v/%v\n", label, el.Round(time.Second), total)
				outMu.Unlock()
			}
		}
		if !bar {
			outMu.Lock()
			fmt.Fprintf(stdout, "%s starting\n", label)
			outMu.Unlock()
		}
		if mu := shared[j.impl]; mu != nil {
			mu.Lock()
			defer mu.Unlock()
		}
		o, err := scenarios.Run(ctx, j.s, scenarios.Config{Build: j.build, Duration: j.duration, Clients: j.clients,
			Seed: j.seed, Impl: j.impl, TTL: j.ttl, Hardened: f.hardened, Progress: progress, External: ext, Docker: dock,
			Logger: logger.With("scenario", j.s.Name, "impl", j.impl, "server", j.build)})
		if err != nil {
			o = &scenarios.Outcome{Scenario: j.s.Name, Build: j.build, Impl: j.impl, Seed: j.seed, Clients: j.clients,
				Duration: j.duration, TTL: j.ttl, Verdict: scenarios.Unknown, Error: err.Error()}
		}
		done := reports.CountCompleted(o).String()
		switch {
		case o.NotRun():
			done = "not run: see below" // too short for what it states against the ttl
		case o.Error != "":
			done = "the run went wrong: see below"
		case o.Unsupported != "":
			done = "not run: the server lacks what it needs, see below"
		}
		outMu.Lock()
		if bar {
			fmt.Fprint(stdout, "\r\033[K")
		}
		fmt.Fprintf(stdout, "%s %s (%s)\n", label, o.Verdict, done)
		outMu.Unlock()
		results[i] = o
	}
	for i, j := range jobs {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		running.Add(1)
		go func() {
			defer running.Done()
			defer func() { <-slots }()
			runJob(i, j)
		}()
	}
	running.Wait()
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "coordtorture: interrupted; writing what ran")
	}
	// The report lists the runs in the jobs' order, whatever order they ended in.
	for _, o := range results {
		if o != nil {
			rep.Outcomes = append(rep.Outcomes, o)
		}
	}
	rep.Interrupted = ctx.Err() != nil
	if err := reports.WriteDir(out, rep); err != nil {
		fmt.Fprintf(stderr, "coordtorture: writing %s: %v\n", out, err)
		return 2
	}
	fmt.Fprintf(stdout, "\nreport: %s (summary.txt has every piece of evidence)\n", out)
	// The verdict table and the overall verdict last, where the eye ends.
	reports.WriteTerminalSummary(stdout, rep)
	// The one overall verdict (prim's beside peers and mutants) sets the
	// exit status, as every surface of the report states it.
	return rep.Overall().ExitStatus()
}

// plural is "1 failure", "2 failures".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// skippedShown is how many of the scenarios keepRunnable leaves out its one
// line names; the rest are counted.
const skippedShown = 4

// keepRunnable keeps the scenarios of ss that runnable accepts where the run
// goes (an external deployment, containers): those left out are said on one
// line of stderr, with why, how many and the first few names; a single
// scenario named on the command line that cannot run there is an error (its
// reason), and so is a selection with nothing left. It returns nil when the
// run must stop (exit 2).
func keepRunnable(stderr io.Writer, ss []*scenarios.Scenario, positional []string, runnable func(*scenarios.Scenario) error, why, where string) []*scenarios.Scenario {
	var keep []*scenarios.Scenario
	var skipped []string
	for _, s := range ss {
		if err := runnable(s); err != nil {
			if len(positional) == 1 && positional[0] == s.Name {
				fmt.Fprintln(stderr, "coordtorture:", err)
				return nil
			}
			skipped = append(skipped, s.Name)
			continue
		}
		keep = append(keep, s)
	}
	switch n := len(skipped); {
	case n == 1:
		fmt.Fprintf(stderr, "coordtorture: skipping %s (%s)\n", skipped[0], why)
	case n > skippedShown:
		fmt.Fprintf(stderr, "coordtorture: skipping %d scenarios (%s): %s and %d more\n", n, why, strings.Join(skipped[:skippedShown], ", "), n-skippedShown)
	case n > 1:
		fmt.Fprintf(stderr, "coordtorture: skipping %d scenarios (%s): %s\n", n, why, strings.Join(skipped, ", "))
	}
	if len(keep) == 0 {
		fmt.Fprintf(stderr, "coordtorture: no scenario of that selection runs %s (see coordtorture list)\n", where)
		return nil
	}
	return keep
}

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
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/coordtorture/coordtorture/reports"
	"github.com/coordtorture/coordtorture/scenarios"
	"github.com/coordtorture/coordtorture/testbed"
)

const usage = `coordtorture — torture Redis/Valkey coordination primitives with real faults.

Usage:
  coordtorture list                      scenarios, what they do, what must hold
  coordtorture run [flags] [PATTERN…]    run scenarios (default: all); PATTERN is a name,
                                         a family ("fenced-lock") or a glob ("*/pause-*")
  coordtorture matrix [flags] [PATTERN…] run them on every fetched server build
  coordtorture replay [flags] DIR        re-run, from their seeds, the scenarios of a run that
                                         failed for prim (FAIL or UNKNOWN of impl prim); --all
                                         also re-runs the peers' and mutants' failures

Each run writes DIR/summary.txt, report.json, junit.xml, index.html, prim.log (what
the primitives logged) and histories/*.jsonl (check them again with fencecheck: each
starts with a header of the run's expectations and options, so fencecheck reaches the
run's verdicts).
Exit status: 0 when every must-hold property held (HAZARD is a documented hazard
observed, with evidence), 1 on FAIL, 2 on UNKNOWN or when the run could not start.
With --impl all only prim's verdicts decide it: the peer libraries run beside it for
comparison, and their FAILs (no fencing tokens) are expected findings.

Providers: "local" (default) starts the servers itself (make servers fetches them)
and injects faults. "external" runs the fault-free workloads against a deployment
you already have (--addr; the password is read from $COORDTORTURE_PASSWORD): keys
carry a random "coordtorture:<run>:" prefix and are deleted afterwards.

Run flags:
`

const replayUsage = `Usage: coordtorture replay [flags] DIR

Re-runs, from their seeds, durations and client counts, the scenarios of the run
in DIR (its report.json) that failed for prim: a FAIL or UNKNOWN verdict of impl
prim. The peer libraries' and the mutants' failures are expected findings and are
skipped unless --all is given. Nothing to replay exits 0.

Flags:
`

type runFlags struct {
	server, serverBin, provider, impl, out string
	addr, masterName, user                 string
	cluster, tls                           bool
	duration, ttl                          time.Duration
	hardened                               bool
	clients                                int
	seed                                   int64
}

func (f *runFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.server, "server", testbed.DefaultBuild, "server build: "+strings.Join(testbed.KnownBuilds(), ", ")+" (make servers fetches them)")
	fs.StringVar(&f.serverBin, "server-bin", "", "run this redis-server/valkey-server binary instead of a fetched build")
	fs.StringVar(&f.provider, "provider", "local", "where servers run: local (processes on 127.0.0.1, with faults) or external (--addr)")
	fs.StringVar(&f.addr, "addr", "", "external: host:port[,host:port…] of the deployment (several = cluster; sentinels with --master-name)")
	fs.StringVar(&f.masterName, "master-name", "", "external: Sentinel master name (--addr lists the sentinels)")
	fs.BoolVar(&f.cluster, "cluster", false, "external: --addr is a cluster (needed when it is a single address)")
	fs.StringVar(&f.user, "user", "", "external: ACL user name (password from $COORDTORTURE_PASSWORD)")
	fs.BoolVar(&f.tls, "tls", false, "external: connect with TLS")
	fs.StringVar(&f.impl, "impl", "prim", "implementation(s) under test, comma-separated, or all (prim and the peers; each runs the scenarios that apply to it): prim, "+strings.Join(scenarios.Peers, ", ")+
		", or a deliberately broken one the checkers must catch: "+strings.Join(scenarios.Mutants(), ", "))
	fs.StringVar(&f.out, "out", "", "output directory (default runs/<time>)")
	fs.DurationVar(&f.duration, "duration", 10*time.Second, "workload duration per scenario")
	fs.DurationVar(&f.ttl, "ttl", 500*time.Millisecond, "lock lease duration")
	fs.IntVar(&f.clients, "clients", 8, "concurrent client processes")
	fs.BoolVar(&f.hardened, "hardened-client", false, "give the clients no retries (MaxRetries -1); by default they keep go-redis's defaults (MaxRetries 3), as a user's client has them")
	fs.Int64Var(&f.seed, "seed", 0, "seed for the nemesis and workload (default: from the clock, printed)")
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		printFlags(stderr)
		return 2
	}
	switch args[0] {
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		printFlags(stdout)
		return 0
	case "list":
		return list(stdout)
	case "run", "matrix", "replay":
		return runCmd(args[0], args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "coordtorture: unknown command %q (see coordtorture help)\n", args[0])
	return 2
}

func printFlags(w io.Writer) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(w)
	(&runFlags{}).register(fs)
	fs.PrintDefaults()
}

func list(w io.Writer) int {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tTOPOLOGY\tPROPERTIES\tDESCRIPTION")
	for _, s := range scenarios.All() {
		var ps []string
		for _, p := range s.Properties {
			mark := "must hold"
			if p.Expect == scenarios.MayHazard {
				mark = "may show hazard"
			}
			ps = append(ps, p.Checker+" ("+mark+")")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Name, s.Topo, strings.Join(ps, ", "), s.Summary)
	}
	tw.Flush()
	return 0
}

func runCmd(cmd string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f runFlags
	f.register(fs)
	var replayAll bool
	if cmd == "replay" {
		fs.BoolVar(&replayAll, "all", false, "replay every scenario that failed (FAIL or UNKNOWN), the peers' and mutants' too; by default only prim's")
		fs.Usage = func() {
			fmt.Fprint(fs.Output(), replayUsage)
			fs.PrintDefaults()
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return 0
		}
		return 2
	}
	var ext *scenarios.External
	switch f.provider {
	case "local":
		if f.addr != "" || f.masterName != "" || f.cluster || f.user != "" || f.tls {
			fmt.Fprintln(stderr, "coordtorture: --addr, --master-name, --cluster, --user and --tls need --provider external")
			return 2
		}
	case "external":
		if f.addr == "" {
			fmt.Fprintln(stderr, "coordtorture: --provider external needs --addr host:port[,host:port…]")
			return 2
		}
		if cmd == "matrix" {
			fmt.Fprintln(stderr, "coordtorture: matrix runs on local server builds; use run --provider external")
			return 2
		}
		ext = &scenarios.External{Addrs: strings.Split(f.addr, ","), MasterName: f.masterName, Cluster: f.cluster,
			Username: f.user, Password: os.Getenv("COORDTORTURE_PASSWORD"), TLS: f.tls}
	default:
		fmt.Fprintf(stderr, "coordtorture: unknown provider %q (local, external; docker is not available yet)\n", f.provider)
		return 2
	}
	impls := strings.Split(f.impl, ",")
	if f.impl == "all" {
		impls = scenarios.AllImpls()
	}
	for _, i := range impls {
		if _, err := scenarios.NewImpl(i); err != nil {
			fmt.Fprintln(stderr, "coordtorture:", err)
			return 2
		}
	}
	if f.serverBin != "" {
		os.Setenv(testbed.EnvServerBin, f.serverBin)
		f.server = testbed.CustomBuild
	}
	if f.duration <= 0 || f.ttl < time.Millisecond || f.clients < 1 {
		fmt.Fprintln(stderr, "coordtorture: --duration and --ttl must be positive and --clients at least 1")
		return 2
	}
	type job struct {
		s     *scenarios.Scenario
		build string
		seed  int64
		impl  string
	}
	var jobs []job
	seed := f.seed
	if seed == 0 {
		seed = time.Now().UnixNano() % 1_000_000_007
	}
	switch cmd {
	case "replay":
		if fs.NArg() != 1 {
			fmt.Fprintln(stderr, "coordtorture: replay takes one run directory")
			return 2
		}
		var prev reports.Run
		b, err := os.ReadFile(filepath.Join(fs.Arg(0), "report.json"))
		if err == nil {
			err = json.Unmarshal(b, &prev)
		}
		if err != nil {
			fmt.Fprintf(stderr, "coordtorture: reading %s: %v\n", fs.Arg(0), err)
			return 2
		}
		skipped := 0
		for _, o := range prev.Outcomes {
			if o.Verdict == scenarios.Pass || o.Verdict == scenarios.Hazard {
				continue
			}
			if o.Impl != "prim" && !replayAll {
				// The peers' FAILs are expected findings (no fencing), and
				// the mutants' FAILs are the checkers catching them.
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
			jobs = append(jobs, job{ss[0], o.Build, o.Seed, o.Impl})
			f.duration, f.clients = o.Duration, o.Clients
		}
		if len(jobs) == 0 {
			if skipped > 0 {
				fmt.Fprintf(stdout, "nothing to replay: no scenario of that run failed for prim (%d failure(s) of peers or mutants skipped: --all replays them)\n", skipped)
				return 0
			}
			fmt.Fprintln(stdout, "nothing to replay: every scenario of that run passed")
			return 0
		}
		// The banner states the seeds the replay uses, not a fresh one.
		seed = jobs[0].seed
		if slices.ContainsFunc(jobs, func(j job) bool { return j.seed != seed }) {
			seed = 0
		}
		if skipped > 0 {
			fmt.Fprintf(stdout, "coordtorture: replaying prim's failures; %d failure(s) of peers or mutants skipped (--all replays them)\n", skipped)
		}
	default:
		ss, err := scenarios.Match(fs.Args())
		if err != nil {
			fmt.Fprintln(stderr, "coordtorture:", err)
			return 2
		}
		if ext != nil {
			var keep []*scenarios.Scenario
			for _, s := range ss {
				if err := s.Runnable(true); err != nil {
					if len(fs.Args()) > 0 && fs.Args()[0] == s.Name && fs.NArg() == 1 {
						fmt.Fprintln(stderr, "coordtorture:", err)
						return 2
					}
					fmt.Fprintf(stderr, "coordtorture: skipping %s (faults or own topology: local only)\n", s.Name)
					continue
				}
				keep = append(keep, s)
			}
			if len(keep) == 0 {
				fmt.Fprintln(stderr, "coordtorture: no scenario of that selection runs on an external deployment (see coordtorture list)")
				return 2
			}
			ss = keep
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
						jobs = append(jobs, job{s, s.Topo.Build, seed, impl})
						continue
					}
					jobs = append(jobs, job{s, b, seed, impl})
				}
			}
		}
		if len(jobs) == 0 {
			fmt.Fprintf(stderr, "coordtorture: none of the selected scenarios runs on %s\n", f.impl)
			return 2
		}
		if unsupported > 0 && len(impls) == 1 {
			fmt.Fprintf(stderr, "coordtorture: %d selected scenario run(s) do not apply to %s and are skipped\n", unsupported, f.impl)
		}
	}
	out := f.out
	if out == "" {
		out = filepath.Join("runs", time.Now().Format("20060102-150405"))
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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tty := isTerminal(stdout)
	rep := &reports.Run{Started: time.Now(), Command: "coordtorture " + cmd + " " + strings.Join(args, " ")}
	seedText := fmt.Sprintf("seed %d", seed)
	if seed == 0 {
		seedText = "each run's own seed"
	}
	fmt.Fprintf(stdout, "coordtorture: %d scenario run(s), %v each, %d clients, %s → %s\n", len(jobs), f.duration, f.clients, seedText, out)
	for i, j := range jobs {
		label := fmt.Sprintf("[%d/%d] %s [%s, %s]", i+1, len(jobs), j.s.Name, j.impl, j.build)
		progress := func(el, total time.Duration) {
			if tty {
				n := int(20 * el / total)
				fmt.Fprintf(stdout, "\r%s [%s%s] %v/%v", label, strings.Repeat("#", min(n, 20)), strings.Repeat(".", max(0, 20-n)), el.Round(time.Second), total)
			} else {
				fmt.Fprintf(stdout, "%s %v/%v\n", label, el.Round(time.Second), total)
			}
		}
		if !tty {
			fmt.Fprintf(stdout, "%s starting\n", label)
		}
		o, err := scenarios.Run(ctx, j.s, scenarios.Config{Build: j.build, Duration: f.duration, Clients: f.clients,
			Seed: j.seed, Impl: j.impl, TTL: f.ttl, Hardened: f.hardened, Progress: progress, External: ext,
			Logger: logger.With("scenario", j.s.Name, "impl", j.impl, "server", j.build)})
		if err != nil {
			o = &scenarios.Outcome{Scenario: j.s.Name, Build: j.build, Impl: j.impl, Seed: j.seed, Clients: f.clients,
				Duration: f.duration, Verdict: scenarios.Unknown, Error: err.Error()}
		}
		if tty {
			fmt.Fprint(stdout, "\r\033[K")
		}
		fmt.Fprintf(stdout, "%s %s (%d ops)\n", label, o.Verdict, o.Ops)
		if o.Error != "" {
			fmt.Fprintf(stderr, "  %s\n", firstLines(o.Error, 8))
		}
		rep.Outcomes = append(rep.Outcomes, o)
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "coordtorture: interrupted; writing what ran")
			break
		}
	}
	if err := reports.WriteDir(out, rep); err != nil {
		fmt.Fprintf(stderr, "coordtorture: writing %s: %v\n", out, err)
		return 2
	}
	fmt.Fprintln(stdout)
	reports.WriteSummary(stdout, rep)
	fmt.Fprintf(stdout, "report: %s\n", out)
	verdict := rep.Verdict()
	mixed := false
	for _, j := range jobs {
		mixed = mixed || j.impl != jobs[0].impl
	}
	// A replay --all of prim beside others exits as the --impl all run did.
	if f.impl == "all" || cmd == "replay" && mixed && slices.ContainsFunc(jobs, func(j job) bool { return j.impl == "prim" }) {
		// The peers run beside prim to show what breaks for them (they have
		// no fencing tokens); their FAILs are findings, not the exit status.
		verdict = rep.VerdictOf("prim")
		fmt.Fprintf(stdout, "exit status from prim's verdicts (%s); the peer libraries' verdicts above are for comparison\n", verdict)
	}
	switch verdict {
	case scenarios.Fail:
		return 1
	case scenarios.Unknown:
		return 2
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return 2
	}
	return 0
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n  ")
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/coordtorture/coordtorture/internal/preflight"
	"github.com/coordtorture/coordtorture/internal/tlsopt"
)

const preflightUsage = `Usage: coordtorture preflight --addr host:port[,host:port…] [--master-name NAME | --cluster]
                            [--user NAME] [--sentinel-user NAME] [--tls…] [--json] [--primitives LIST]
                            [--key KEY[,KEY…]] [--write-probe]

Checks, read-only and in seconds, whether a Redis or Valkey deployment is
configured so the coordination primitives can be safe on it (the password is
read from $COORDTORTURE_PASSWORD, as for run --provider external; with
--master-name the sentinels are asked as --sentinel-user, password from
$COORDTORTURE_SENTINEL_PASSWORD, or as their default user). It writes
nothing: it reads INFO and CONFIG, runs a script that only reads TIME, and
probes the fast commands (HPTTL, DELEX … IFEQ, SET … IFEQ) on the first --key
(so that the user's key patterns allow them; without --key, a random key that
does not exist), in forms that cannot create or change it. --primitives
narrows every section to the primitives named: the capabilities they need,
the checks and guarantees that concern them, the scenarios named. Several
addresses without --cluster or --master-name are taken as a Cluster's nodes
(the server line says so; standalone servers are an error saying it).

One line per check, OK, WARN or FAIL, with the reason, what to change (→) and
the harness scenario that shows the hazard:
  server                   kind and version (Redis 7.0+ or Valkey 8+)
  tls                      TLS version and how the server's certificate was
                           verified; WARN for plaintext or --tls-insecure
  capability/…             what the server answers to Lua+TIME, CLIENT TRACKING,
                           hash-field expiry, DELEX, SET IFEQ, INCREX
  primitive/…              per primitive: whether what it needs exists and
                           the user may run it (a refused EVAL/EVALSHA, or
                           hash-field expiry for hash-lease: FAIL)
  maxmemory-policy         an evicting policy: FAIL with fenced locks (eviction
                           can drop fencing counters), WARN otherwise
  persistence              appendonly/appendfsync; none: WARN (tokens may
                           regress after a restart)
  replication              role, replicas, lag, min-replicas-to-write
  sentinel                 with --master-name: master known, SENTINEL CKQUORUM
  acl/sentinel             with --master-name: whether --sentinel-user (else
                           the sentinels' default user) may ask each
                           sentinel what go-redis's failover client asks (the
                           primary's address, the other sentinels, the
                           failover announcements' channels)
  cluster                  with --cluster: cluster_state, all 16384 slots
  clock                    server TIME against this machine's clock
  tracking-table-max-keys, busy-reply-threshold (lua-time-limit)
  acl/…                    whether the user may run every command each
                           primitive sends, on each --key (one per key pattern
                           of the user's), on every primary: ACL DRYRUN, or,
                           when the user may not run it, each command queued
                           in a MULTI that is discarded (never run; a denied
                           one is logged in ACL LOG); WARN when neither can be
                           used
  write-probe/…            with --write-probe only: each primitive run once
                           through prim on probe keys, then the keys deleted
Then which guarantees hold on this deployment, each with its scenario
(coordtorture list shows them; coordtorture run SCENARIO shows the hazard).

Exit status: 0 when no check is FAIL, 1 when one is, 2 on a usage error or
when the deployment cannot be reached.

Flags:
`

func preflightCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("preflight", flag.ContinueOnError)
	var (
		addr, masterName, user, sentUser string
		prims, key                       string
		cluster, asJSON, probe           bool
		tlsOpts                          tlsopt.Options
		timeout, clockWarn               time.Duration
	)
	fs.StringVar(&addr, "addr", "", "host:port[,host:port…] of the deployment (several = cluster; the sentinels with --master-name)")
	fs.StringVar(&masterName, "master-name", "", "Sentinel master name (--addr lists the sentinels)")
	fs.BoolVar(&cluster, "cluster", false, "--addr is a cluster (needed when it is a single address)")
	fs.StringVar(&user, "user", "", "ACL user name (password from $COORDTORTURE_PASSWORD)")
	fs.StringVar(&sentUser, "sentinel-user", "", "with --master-name: the sentinels' ACL user (password from $COORDTORTURE_SENTINEL_PASSWORD, required with it: go-redis authenticates only with a password; neither set: the sentinels' default user, no AUTH); --user is never sent to them, as go-redis's failover client does with SentinelUsername")
	tlsOpts.Register(fs)
	fs.BoolVar(&asJSON, "json", false, "write the report as JSON")
	fs.BoolVar(&probe, "write-probe", false, "also run each primitive once on keys under a random coordtorture:preflight:probe:… prefix, and delete them (the only mode that writes)")
	fs.StringVar(&prims, "primitives", "", "comma-separated primitives the service uses (default all): "+strings.Join(preflight.Primitives(), ", "))
	fs.StringVar(&key, "key", "", "keys of the service's, comma-separated, one per key pattern of its ACL user, so the ACL checks match those patterns (default coordtorture:preflight)")
	fs.DurationVar(&timeout, "timeout", 2*time.Second, "bound of each command")
	fs.DurationVar(&clockWarn, "clock-warn", 100*time.Millisecond, "WARN above this client-versus-server clock offset")
	pos, help, err := parseArgs(fs, args)
	if help {
		fmt.Fprint(stdout, preflightUsage)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		fmt.Fprint(stdout, "\n"+tlsHelp)
		return 0
	}
	if err == nil && len(pos) > 0 {
		err = fmt.Errorf("unexpected arguments %q", pos)
	}
	if err == nil && addr == "" {
		err = errors.New("--addr is required")
	}
	if err == nil && masterName == "" && sentUser != "" {
		err = errors.New("--sentinel-user needs --master-name (the sentinels' addresses in --addr)")
	}
	if err != nil {
		fmt.Fprintf(stderr, "coordtorture preflight: %v (see coordtorture preflight --help)\n", err)
		return 2
	}
	tc, ok := tlsConfig(tlsOpts, "preflight", stderr)
	if !ok {
		return 2
	}
	o := preflight.Options{Addrs: strings.Split(addr, ","), MasterName: masterName, Cluster: cluster, Username: user,
		Password: os.Getenv("COORDTORTURE_PASSWORD"), SentinelUsername: sentUser, SentinelPassword: os.Getenv("COORDTORTURE_SENTINEL_PASSWORD"), TLS: tc != nil, TLSConfig: tc, Keys: strings.Split(key, ","), Timeout: timeout, ClockWarn: clockWarn, WriteProbe: probe}
	if prims != "" {
		o.Primitives = strings.Split(prims, ",")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := preflight.Run(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "coordtorture preflight: %s\n", strings.TrimPrefix(err.Error(), "preflight: "))
		return 2
	}
	if asJSON {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "coordtorture preflight: %s\n", strings.TrimPrefix(err.Error(), "preflight: "))
		return 2
	}
	return rep.ExitStatus()
}

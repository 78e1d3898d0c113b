// Command coordtorture runs coordination primitives against real Redis and
// Valkey servers while injecting faults, records every operation and checks the
// histories. Run `coordtorture help` for the commands.
package main

import (
	"context"
	"os"

	"github.com/redis/go-redis/v9"

	// The deliberately broken implementations (--impl mutant-…), so a user can
	// see the checkers catch them.
	_ "github.com/coordtorture/coordtorture/scenarios/mutants"
)

// quiet drops go-redis's own log lines (sentinel master switches, reconnects):
// during a torture run they are expected by the thousand, and the history and
// the report say what happened.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func main() {
	redis.SetLogger(quiet{})
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Command coordtorture runs coordination primitives against real Redis and
// Valkey servers while injecting faults, records every operation and checks the
// histories. Run `coordtorture help` for the commands.
package main

import (
	"os"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

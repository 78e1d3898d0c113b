// Package servertest holds prim's tests and benchmarks against real servers
// under faults, replication and Cluster (the harness's testbed), and beside the
// peer libraries redislock and redsync. It is a module of its own, nested in
// prim's directory, so that what these tests need (toxiproxy, rapid, the peer
// libraries) is never a requirement of the prim module and never joins the
// module graph of a service that imports prim; being under prim/, it may use
// prim's internal knobs. It has no code of its own.
package servertest

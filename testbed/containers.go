package testbed

import (
	"context"
	"errors"
	"sync"
	"syscall"
)

// Containers runs a topology's servers in containers instead of local
// processes: the docker provider (package testbed/docker, on
// testcontainers-go) implements it. It lives outside this package so that
// importing testbed brings no container library into a module's build
// (prim/internal/servertest imports testbed).
type Containers interface {
	// Network makes the topology's network and what it needs to run its
	// servers: the image is the build's (a matrix name) unless the provider
	// was given one.
	Network(ctx context.Context, build string) (ContainerNetwork, error)
}

// ContainerNetwork is one topology's network of containers.
type ContainerNetwork interface {
	// Gateway is the host's own address on the network, which the
	// containers reach: the switchboard listens there and servers announce it.
	Gateway() string
	// AllocIP returns a free address on the network for a server.
	AllocIP() string
	// Image is the image the servers run.
	Image() string
	// Run is the network's run id (what its resources are labelled with).
	Run() string
	// Server makes the container-backed server of one node (not started).
	Server(node, ip, label string) ContainerServer
	// Close removes every container, volume and network of the topology.
	Close() error
}

// ContainerServer is one node's server in a container.
type ContainerServer interface {
	// Start runs the server (a new container each time, on the node's
	// volume at /data): conf is written to /data/server.conf before it
	// starts, unless keep is set and it was written before (a sentinel
	// rewrites its own); argv is the container's command.
	Start(conf []byte, keep bool, argv []string) error
	Exited() (bool, error)
	// Signal: SIGSTOP pauses the container, SIGCONT unpauses it, another
	// signal goes to the server.
	Signal(s syscall.Signal) error
	// Kill sends SIGKILL and waits until the container has stopped.
	Kill()
	Pid() int
	LogTail(n int) string
	LastLogLine(substr string) string
	StartupError(cause error) error
	Label() string
	// Disconnect takes the container off the network; Connect puts it back
	// with its address.
	Disconnect(ctx context.Context) error
	Connect(ctx context.Context) error
}

// WithContainers runs the topology's servers in containers (the docker
// provider: testbed/docker.Provider). Every Topology method works the same,
// but for a clock offset (the shim is a host library: ErrNotInContainers);
// Disconnect and Reconnect work only here.
func WithContainers(c Containers) Option { return func(cfg *config) { cfg.containers = c } }

// ErrNotInContainers is returned for a fault the container provider cannot
// inject (a clock offset).
var ErrNotInContainers = errors.New("testbed: not available with servers in containers")

// ctrServer adapts a ContainerServer to the node's server interface.
type ctrServer struct {
	ContainerServer
	conf []byte
	keep bool
	argv []string
}

func (c *ctrServer) start() error                     { return c.Start(c.conf, c.keep, c.argv) }
func (c *ctrServer) exited() (bool, error)            { return c.Exited() }
func (c *ctrServer) signal(s syscall.Signal) error    { return c.Signal(s) }
func (c *ctrServer) kill()                            { c.Kill() }
func (c *ctrServer) pid() int                         { return c.Pid() }
func (c *ctrServer) logTail(n int) string             { return c.LogTail(n) }
func (c *ctrServer) lastLogLine(substr string) string { return c.LastLogLine(substr) }
func (c *ctrServer) startupError(cause error) error   { return c.StartupError(cause) }
func (c *ctrServer) label() string                    { return c.Label() }

// The live container networks, closed by KillAll (the SIGINT/SIGTERM path).
var (
	liveNetsMu sync.Mutex
	liveNets   = map[ContainerNetwork]struct{}{}
)

func trackNet(n ContainerNetwork, live bool) {
	liveNetsMu.Lock()
	defer liveNetsMu.Unlock()
	if live {
		liveNets[n] = struct{}{}
	} else {
		delete(liveNets, n)
	}
}

func closeAllNets() {
	liveNetsMu.Lock()
	nets := make([]ContainerNetwork, 0, len(liveNets))
	for n := range liveNets {
		nets = append(nets, n)
	}
	liveNetsMu.Unlock()
	var wg sync.WaitGroup
	for _, n := range nets {
		wg.Add(1)
		go func() { defer wg.Done(); _ = n.Close(); trackNet(n, false) }()
	}
	wg.Wait()
}

// ContainerRun is the run id the topology's container resources are
// labelled with ("" for local processes).
func (t *Topology) ContainerRun() string {
	if t.ctr == nil {
		return ""
	}
	return t.ctr.Run()
}

// InContainers reports whether the topology's servers run in containers.
func (t *Topology) InContainers() bool { return t.ctr != nil }

// AnnounceHost is the host every server announces and every announced
// address is on: 127.0.0.1, or the container network's gateway.
func (t *Topology) AnnounceHost() string { return t.announce }

// Package docker is the docker provider of the testbed, on testcontainers-go:
// Provider runs a topology's servers in containers (testbed.WithContainers).
// It is a package of its own so that importing testbed brings no container
// library into a module's build.
package docker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	mcontainer "github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	tcnetwork "github.com/testcontainers/testcontainers-go/network"

	"github.com/coordtorture/coordtorture/testbed"
)

// The docker provider (Provider): every server of a topology runs in a
// container of its own on a user-defined network of the topology's, with a
// static address there. The switchboard listens on the network's gateway
// (the host's own address on that bridge, which the containers reach), so
// every link — client, replication, sentinel, cluster bus — goes through its
// own toxiproxy proxy exactly as with local processes, and the servers
// announce gateway:<proxy port>. On top of the link faults, a node's
// container can be paused (docker pause: the cgroup freezer), killed (SIGKILL)
// and started again (a new container on the node's volume, so its data
// directory persists as a local node's does), and disconnected from the
// network (Topology.Disconnect, Reconnect).
//
// Clean-up is the provider's own (Ryuk, testcontainers' reaper, cannot be
// pulled where no registry is reachable, and is turned off): everything it
// creates carries the labels coordtorture.run (the topology's run id) and
// coordtorture.pid (this process); Close removes a topology's containers,
// volumes and network, testbed.KillAll (the SIGINT/SIGTERM path) every live
// topology's, and the first docker topology of a process sweeps what
// processes no longer alive left behind (Sweep).

// Labels the docker provider puts on every container, volume and network.
const (
	LabelRun  = "coordtorture.run"
	LabelPid  = "coordtorture.pid"
	LabelHost = "coordtorture.host" // the host name: a sweep judges only its own host's pids
)

func hostName() string { h, _ := os.Hostname(); return h }

// ErrNoDocker is returned by a docker topology when no Docker engine is
// reachable.
var ErrNoDocker = errors.New("testbed/docker: no Docker engine reachable")

// Provider runs the topology's servers in containers of image ("": the
// build's local image, coordtorture/redis:8.0 for redis-8.0; see `make
// images`) instead of local processes. Every Topology method works the same
// but a clock offset (testbed.ErrNotInContainers); Topology.Disconnect and
// Reconnect work only here.
func Provider(image string) testbed.Option {
	return testbed.WithContainers(provider{image: image})
}

type provider struct{ image string }

func (p provider) Network(ctx context.Context, build string) (testbed.ContainerNetwork, error) {
	image := p.image
	if image == "" {
		image = ImageOf(build)
	}
	return newDockerEnv(ctx, image)
}

// ImageOf is the local image of a build: coordtorture/redis:8.0 for redis-8.0
// (scripts/build-images.sh makes them).
func ImageOf(build string) string {
	flavor, version, _ := strings.Cut(build, "-")
	return "coordtorture/" + flavor + ":" + version
}

// Available reports whether a Docker engine answers (nil) or why not.
func Available(ctx context.Context) error {
	cli, err := dockerClient(ctx)
	if err != nil {
		return err
	}
	if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
		return fmt.Errorf("%w: %v", ErrNoDocker, err)
	}
	return nil
}

var (
	dockerOnce sync.Once
	dockerCli  *testcontainers.DockerClient
	dockerErr  error
	sweepOnce  sync.Once
)

func dockerClient(ctx context.Context) (*testcontainers.DockerClient, error) {
	dockerOnce.Do(func() {
		// Before testcontainers' first call: its reaper image cannot be pulled.
		if os.Getenv("TESTCONTAINERS_RYUK_DISABLED") == "" {
			os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
		}
		tclog.SetDefault(tclog.NewNoopLogger())
		dockerCli, dockerErr = testcontainers.NewDockerClientWithOpts(ctx)
		if dockerErr != nil {
			dockerErr = fmt.Errorf("%w: %v", ErrNoDocker, dockerErr)
		}
	})
	return dockerCli, dockerErr
}

// dockerEnv is one topology's network and labels.
type dockerEnv struct {
	cli     *testcontainers.DockerClient
	run     string
	image   string
	net     *testcontainers.DockerNetwork
	subnet  netip.Prefix
	gateway string

	mu     sync.Mutex
	nextIP netip.Addr
	ctrs   map[*container]struct{}
	vols   []string
	closed bool
}

func (e *dockerEnv) labels() map[string]string {
	return map[string]string{LabelRun: e.run, LabelPid: strconv.Itoa(os.Getpid()), LabelHost: hostName()}
}

// newDockerEnv makes the topology's network on a random /24 of 10.0.0.0/8
// (another one when the engine says it overlaps one in use).
func newDockerEnv(ctx context.Context, image string) (*dockerEnv, error) {
	cli, err := dockerClient(ctx)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(pctx, client.PingOptions{}); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDocker, err)
	}
	sweepOnce.Do(func() { Sweep(ctx) })
	var id [6]byte
	_, _ = rand.Read(id[:])
	e := &dockerEnv{cli: cli, run: "coordtorture-" + hex.EncodeToString(id[:]), image: image, ctrs: map[*container]struct{}{}}
	var lastErr error
	for range 20 {
		a, _ := rand.Int(rand.Reader, big.NewInt(200))
		b, _ := rand.Int(rand.Reader, big.NewInt(256))
		e.subnet = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(50 + a.Int64()), byte(b.Int64()), 0}), 24)
		gw := e.subnet.Addr().Next()
		e.net, lastErr = tcnetwork.New(ctx, tcnetwork.WithLabels(e.labels()), tcnetwork.WithIPAM(&network.IPAM{
			Driver: "default", Config: []network.IPAMConfig{{Subnet: e.subnet, Gateway: gw}},
		}))
		if lastErr == nil {
			e.gateway = gw.String()
			e.nextIP = gw.Next()
			return e, nil
		}
		if !strings.Contains(lastErr.Error(), "overlap") {
			break
		}
	}
	return nil, fmt.Errorf("testbed: docker network: %w", lastErr)
}

// Gateway is the host's address on the network.
func (e *dockerEnv) Gateway() string { return e.gateway }

// Image is the servers' image.
func (e *dockerEnv) Image() string { return e.image }

// Run is the run id every resource is labelled with.
func (e *dockerEnv) Run() string { return e.run }

// Server makes a node's container-backed server.
func (e *dockerEnv) Server(node, ip, label string) testbed.ContainerServer {
	return &container{env: e, name: label, node: node, ip: ip}
}

// AllocIP hands out the network's next address.
func (e *dockerEnv) AllocIP() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	ip := e.nextIP
	e.nextIP = ip.Next()
	return ip.String()
}

// volume makes a labelled volume for a node's data directory.
func (e *dockerEnv) volume(ctx context.Context, node string) (string, error) {
	name := e.run + "-" + node
	if _, err := e.cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: name, Labels: e.labels()}); err != nil {
		return "", fmt.Errorf("testbed: volume for %s: %w", node, err)
	}
	e.mu.Lock()
	e.vols = append(e.vols, name)
	e.mu.Unlock()
	return name, nil
}

// Close removes the env's containers, volumes and network.
func (e *dockerEnv) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	ctrs := make([]*container, 0, len(e.ctrs))
	for c := range e.ctrs {
		ctrs = append(ctrs, c)
	}
	e.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range ctrs {
		wg.Add(1)
		go func() { defer wg.Done(); c.remove() }()
	}
	wg.Wait()
	// The label sweep catches anything the list above missed (a container
	// created while closing).
	return removeLabelled(context.Background(), e.cli, LabelRun+"="+e.run)
}

// removeLabelled removes every container, volume and network with all the
// labels (key=value), in that order.
func removeLabelled(ctx context.Context, cli *testcontainers.DockerClient, labels ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	f := make(client.Filters).Add("label", labels...)
	var errs []error
	cs, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	errs = append(errs, err)
	for _, c := range cs.Items {
		_, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		errs = append(errs, ignoreNotFound(err))
	}
	vs, err := cli.VolumeList(ctx, client.VolumeListOptions{Filters: f})
	errs = append(errs, err)
	for _, v := range vs.Items {
		_, err := cli.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{Force: true})
		errs = append(errs, ignoreNotFound(err))
	}
	ns, err := cli.NetworkList(ctx, client.NetworkListOptions{Filters: f})
	errs = append(errs, err)
	for _, n := range ns.Items {
		_, err := cli.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{})
		errs = append(errs, ignoreNotFound(err))
	}
	return errors.Join(errs...)
}

func ignoreNotFound(err error) error {
	if err != nil && strings.Contains(strings.ToLower(err.Error()), "no such") || err != nil && strings.Contains(err.Error(), "not found") {
		return nil
	}
	return err
}

// Sweep removes the containers, volumes and networks of docker
// topologies whose process is no longer alive (the coordtorture.pid label;
// only those of this host, coordtorture.host, whose pids it can tell), as a
// killed run leaves them. The first docker topology of a process calls
// it; it does nothing when no engine is reachable.
func Sweep(ctx context.Context) {
	cli, err := dockerClient(ctx)
	if err != nil {
		return
	}
	f := make(client.Filters).Add("label", LabelPid).Add("label", LabelHost+"="+hostName())
	dead := map[string]bool{}
	check := func(labels map[string]string) {
		p := labels[LabelPid]
		if _, seen := dead[p]; seen {
			return
		}
		pid, err := strconv.Atoi(p)
		dead[p] = err != nil || pid <= 0 || syscall.Kill(pid, 0) == syscall.ESRCH
	}
	if cs, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f}); err == nil {
		for _, c := range cs.Items {
			check(c.Labels)
		}
	}
	if vs, err := cli.VolumeList(ctx, client.VolumeListOptions{Filters: f}); err == nil {
		for _, v := range vs.Items {
			check(v.Labels)
		}
	}
	if ns, err := cli.NetworkList(ctx, client.NetworkListOptions{Filters: f}); err == nil {
		for _, n := range ns.Items {
			check(n.Labels)
		}
	}
	for p, isDead := range dead {
		if isDead {
			_ = removeLabelled(ctx, cli, LabelPid+"="+p, LabelHost+"="+hostName())
		}
	}
}

// container is one node's server in a container (testbed.ContainerServer). Each start makes a new container (its command
// line may differ: a replica's primary, persistence), on the node's volume.
type container struct {
	env    *dockerEnv
	name   string // for messages: "redis-8.0 n1 (10.x.y.z)"
	node   string
	ip     string
	volume string
	argv   []string // the last start's command

	mu      sync.Mutex
	ctr     *testcontainers.DockerContainer
	started bool
	logs    string // the logs of the last container, kept when it is replaced
}

// Label names the server in messages.
func (c *container) Label() string { return c.name }

// Start makes and starts a new container for the node (see
// testbed.ContainerServer).
func (c *container) Start(conf []byte, keep bool, argv []string) error {
	c.argv = argv
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c.mu.Lock()
	old := c.ctr
	first := !c.started
	c.mu.Unlock()
	if old != nil {
		c.saveLogs(ctx, old)
		_, _ = c.env.cli.ContainerRemove(ctx, old.GetContainerID(), client.ContainerRemoveOptions{Force: true})
	}
	if c.volume == "" {
		v, err := c.env.volume(ctx, c.node)
		if err != nil {
			return err
		}
		c.volume = v
	}
	ip, err := netip.ParseAddr(c.ip)
	if err != nil {
		return err
	}
	netName := c.env.net.Name
	opts := []testcontainers.ContainerCustomizer{
		testcontainers.WithCmd(c.argv...),
		testcontainers.WithLabels(c.env.labels()),
		testcontainers.WithLabels(map[string]string{"coordtorture.node": c.node}),
		testcontainers.WithMounts(testcontainers.VolumeMount(c.volume, "/data")),
		tcnetwork.WithNetworkName(nil, netName),
		testcontainers.WithEndpointSettingsModifier(func(m map[string]*network.EndpointSettings) {
			es := m[netName]
			if es == nil {
				es = &network.EndpointSettings{}
				m[netName] = es
			}
			es.IPAMConfig = &network.EndpointIPAMConfig{IPv4Address: ip}
		}),
		testcontainers.WithLogger(tclog.NewNoopLogger()),
	}
	if first || !keep {
		opts = append(opts, testcontainers.WithFiles(testcontainers.ContainerFile{
			Reader: bytes.NewReader(conf), ContainerFilePath: "/data/server.conf", FileMode: 0o666,
		}))
	}
	ctr, err := testcontainers.Run(ctx, c.env.image, opts...)
	if ctr != nil {
		c.env.mu.Lock()
		c.env.ctrs[c] = struct{}{}
		c.env.mu.Unlock()
		c.mu.Lock()
		c.ctr = ctr
		c.started = true
		c.mu.Unlock()
	}
	if err != nil {
		return fmt.Errorf("testbed: %s: docker run %s %s: %w", c.name, c.env.image, strings.Join(c.argv, " "), err)
	}
	return nil
}

func (c *container) current() *testcontainers.DockerContainer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ctr
}

func (c *container) state(ctx context.Context) (*mcontainer.State, error) {
	ctr := c.current()
	if ctr == nil {
		return nil, errors.New("never started")
	}
	r, err := c.env.cli.ContainerInspect(ctx, ctr.GetContainerID(), client.ContainerInspectOptions{})
	if err != nil {
		return nil, err
	}
	return r.Container.State, nil
}

// Exited reports whether the container has stopped, and how.
func (c *container) Exited() (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.state(ctx)
	if err != nil {
		return true, err
	}
	if st.Running || st.Paused {
		return false, nil
	}
	return true, fmt.Errorf("container %s, exit code %d", st.Status, st.ExitCode)
}

// Signal: SIGSTOP pauses the container, SIGCONT unpauses it, any other
// signal is sent to its process 1 (the server).
func (c *container) Signal(s syscall.Signal) error {
	ctr := c.current()
	if ctr == nil {
		return fmt.Errorf("testbed: %s is not running", c.name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	switch s {
	case syscall.SIGSTOP:
		_, err = c.env.cli.ContainerPause(ctx, ctr.GetContainerID(), client.ContainerPauseOptions{})
	case syscall.SIGCONT:
		_, err = c.env.cli.ContainerUnpause(ctx, ctr.GetContainerID(), client.ContainerUnpauseOptions{})
	default:
		_, err = c.env.cli.ContainerKill(ctx, ctr.GetContainerID(), client.ContainerKillOptions{Signal: strconv.Itoa(int(s))})
	}
	if err != nil {
		return fmt.Errorf("testbed: %s: %w", c.name, err)
	}
	return nil
}

// Kill sends SIGKILL (unpausing first: the engine refuses to kill a paused
// container) and waits until the container has stopped (bounded).
func (c *container) Kill() {
	ctr := c.current()
	if ctr == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id := ctr.GetContainerID()
	if st, err := c.state(ctx); err == nil && st.Paused {
		_, _ = c.env.cli.ContainerUnpause(ctx, id, client.ContainerUnpauseOptions{})
	}
	_, _ = c.env.cli.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "KILL"})
	for ctx.Err() == nil {
		if st, err := c.state(ctx); err != nil || !st.Running {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// remove kills and removes the container (Close).
func (c *container) remove() {
	ctr := c.current()
	if ctr == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = c.env.cli.ContainerRemove(ctx, ctr.GetContainerID(), client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
}

// Pid is the server's process id on the host (0 when not running).
func (c *container) Pid() int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.state(ctx)
	if err != nil || !st.Running {
		return 0
	}
	return st.Pid
}

func (c *container) saveLogs(ctx context.Context, ctr *testcontainers.DockerContainer) {
	text := c.readLogs(ctx, ctr, "all")
	c.mu.Lock()
	c.logs += text
	c.mu.Unlock()
}

func (c *container) readLogs(ctx context.Context, ctr *testcontainers.DockerContainer, tail string) string {
	rc, err := c.env.cli.ContainerLogs(ctx, ctr.GetContainerID(), client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: tail})
	if err != nil {
		return ""
	}
	defer rc.Close()
	var b bytes.Buffer
	if _, err := stdcopy.StdCopy(&b, &b, io.LimitReader(rc, 8<<20)); err != nil {
		return b.String()
	}
	return b.String()
}

func (c *container) allLogs() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.mu.Lock()
	text := c.logs
	c.mu.Unlock()
	if ctr := c.current(); ctr != nil {
		text += c.readLogs(ctx, ctr, "all")
	}
	return text
}

// LogTail is the last n lines of the node's containers' output.
func (c *container) LogTail(n int) string {
	text := strings.TrimRight(c.allLogs(), "\n")
	if text == "" {
		return "(log empty)"
	}
	lines := strings.Split(text, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprintf("--- container log (last %d lines)\n%s\n", len(lines), strings.Join(lines, "\n"))
}

// LastLogLine is the last line of the output that contains substr.
func (c *container) LastLogLine(substr string) string {
	lines := strings.Split(c.allLogs(), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], substr) {
			return strings.TrimSpace(lines[i])
		}
	}
	return ""
}

// StartupError describes a server that did not come up.
func (c *container) StartupError(cause error) error {
	return &testbed.StartError{Server: c.name, Command: "docker run " + c.env.image + " " + strings.Join(c.argv, " "), Log: c.LogTail(20), Err: cause}
}

// Disconnect takes the container off the topology's network.
func (c *container) Disconnect(ctx context.Context) error {
	ctr := c.current()
	if ctr == nil {
		return fmt.Errorf("testbed: %s is not running", c.name)
	}
	_, err := c.env.cli.NetworkDisconnect(ctx, c.env.net.ID, client.NetworkDisconnectOptions{Container: ctr.GetContainerID(), Force: true})
	return err
}

// Connect puts the container back on the network with its address.
func (c *container) Connect(ctx context.Context) error {
	ctr := c.current()
	if ctr == nil {
		return fmt.Errorf("testbed: %s is not running", c.name)
	}
	ip, err := netip.ParseAddr(c.ip)
	if err != nil {
		return err
	}
	_, err = c.env.cli.NetworkConnect(ctx, c.env.net.ID, client.NetworkConnectOptions{Container: ctr.GetContainerID(),
		EndpointConfig: &network.EndpointSettings{IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: ip}}})
	return err
}

package testbed

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
)

// The docker provider (WithDocker): every server of a topology runs in a
// container of its own on a user-defined network of the topology's, with a
// static address there. The switchboard listens on the network's gateway
// (the host's own address on that bridge, which the containers reach), so
// every link — client, replication, sentinel, cluster bus — goes through its
// own toxiproxy proxy exactly as with local processes, and the servers
// announce gateway:<proxy port>. On top of the link faults, a node's
// container can be paused (docker pause: the cgroup freezer), killed (SIGKILL)
// and started again (a new container on the node's volume, so its data
// directory persists as a local node's does), and disconnected from the
// network (Disconnect, Reconnect).
//
// Clean-up is the provider's own (Ryuk, testcontainers' reaper, cannot be
// pulled where no registry is reachable, and is turned off): everything it
// creates carries the labels coordtorture.run (the topology's run id) and
// coordtorture.pid (this process); Close removes a topology's containers,
// volumes and network, KillAll (the SIGINT/SIGTERM path) every live
// topology's, and the first docker topology of a process sweeps what
// processes no longer alive left behind.

// Labels the docker provider puts on every container, volume and network.
const (
	LabelRun  = "coordtorture.run"
	LabelPid  = "coordtorture.pid"
	LabelHost = "coordtorture.host" // the host name: a sweep judges only its own host's pids
)

func hostName() string { h, _ := os.Hostname(); return h }

// ErrNoDocker is returned by a WithDocker topology when no Docker engine is
// reachable.
var ErrNoDocker = errors.New("testbed: no Docker engine reachable")

// ErrNotOnDocker is returned for a fault the docker provider cannot inject
// (a clock offset: the shim is a host library).
var ErrNotOnDocker = errors.New("testbed: not available on the docker provider")

// WithDocker runs the topology's servers in containers of image ("": the
// build's local image, coordtorture/redis:8.0 for redis-8.0; see `make
// images`) instead of local processes. Every Topology method works the same;
// Disconnect and Reconnect work only here.
func WithDocker(image string) Option {
	return func(c *config) { c.docker = true; c.image = image }
}

// ImageOf is the local image of a build: coordtorture/redis:8.0 for redis-8.0
// (scripts/build-images.sh makes them).
func ImageOf(build string) string {
	flavor, version, _ := strings.Cut(build, "-")
	return "coordtorture/" + flavor + ":" + version
}

// DockerAvailable reports whether a Docker engine answers (nil) or why not.
func DockerAvailable(ctx context.Context) error {
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
	liveEnvsMu sync.Mutex
	liveEnvs   = map[*dockerEnv]struct{}{}
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
	spawner() // the SIGINT/SIGTERM handler (KillAll), unless the caller handles signals
	cli, err := dockerClient(ctx)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(pctx, client.PingOptions{}); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDocker, err)
	}
	sweepOnce.Do(func() { SweepDocker(ctx) })
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
			liveEnvsMu.Lock()
			liveEnvs[e] = struct{}{}
			liveEnvsMu.Unlock()
			return e, nil
		}
		if !strings.Contains(lastErr.Error(), "overlap") {
			break
		}
	}
	return nil, fmt.Errorf("testbed: docker network: %w", lastErr)
}

func (e *dockerEnv) allocIP() string {
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

// close removes the env's containers, volumes and network.
func (e *dockerEnv) close() error {
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
	liveEnvsMu.Lock()
	delete(liveEnvs, e)
	liveEnvsMu.Unlock()
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

// SweepDocker removes the containers, volumes and networks of docker
// topologies whose process is no longer alive (the coordtorture.pid label;
// only those of this host, coordtorture.host, whose pids it can tell), as a
// killed run leaves them. The first docker topology of a process calls
// it; it does nothing when no engine is reachable.
func SweepDocker(ctx context.Context) {
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

// killAllDocker removes every live docker topology's resources (KillAll).
func killAllDocker() {
	liveEnvsMu.Lock()
	envs := make([]*dockerEnv, 0, len(liveEnvs))
	for e := range liveEnvs {
		envs = append(envs, e)
	}
	liveEnvsMu.Unlock()
	for _, e := range envs {
		_ = e.close()
	}
}

// container is one node's server in a container: the docker provider's
// counterpart of process. Each start makes a new container (its command
// line may differ: a replica's primary, persistence), on the node's volume.
type container struct {
	env    *dockerEnv
	name   string // for messages: "redis-8.0 n1 (10.x.y.z)"
	node   string
	ip     string
	volume string
	conf   []byte // the configuration file written before each start
	keep   bool   // write conf only at the first start (sentinels rewrite theirs)
	argv   []string

	mu      sync.Mutex
	ctr     *testcontainers.DockerContainer
	started bool
	logs    string // the logs of the last container, kept when it is replaced
}

func (c *container) label() string { return c.name }

func (c *container) start() error {
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
	if first || !c.keep {
		opts = append(opts, testcontainers.WithFiles(testcontainers.ContainerFile{
			Reader: bytes.NewReader(c.conf), ContainerFilePath: "/data/server.conf", FileMode: 0o666,
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

func (c *container) exited() (bool, error) {
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

// signal: SIGSTOP pauses the container, SIGCONT unpauses it, any other
// signal is sent to its process 1 (the server).
func (c *container) signal(s syscall.Signal) error {
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

// kill sends SIGKILL (unpausing first: the engine refuses to kill a paused
// container) and waits until the container has stopped (bounded).
func (c *container) kill() {
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

func (c *container) pid() int {
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

func (c *container) logTail(n int) string {
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

func (c *container) lastLogLine(substr string) string {
	lines := strings.Split(c.allLogs(), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], substr) {
			return strings.TrimSpace(lines[i])
		}
	}
	return ""
}

func (c *container) startupError(cause error) error {
	return &StartError{Server: c.name, Command: "docker run " + c.env.image + " " + strings.Join(c.argv, " "), Log: c.logTail(20), Err: cause}
}

// disconnect takes the container off the topology's network; connect puts it
// back with its address.
func (c *container) disconnect(ctx context.Context) error {
	ctr := c.current()
	if ctr == nil {
		return fmt.Errorf("testbed: %s is not running", c.name)
	}
	_, err := c.env.cli.NetworkDisconnect(ctx, c.env.net.ID, client.NetworkDisconnectOptions{Container: ctr.GetContainerID(), Force: true})
	return err
}

func (c *container) connect(ctx context.Context) error {
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

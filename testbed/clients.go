package testbed

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClientOption configures a client made by Topology.Client.
type ClientOption func(*clientConfig)

type clientConfig struct {
	peer     string
	protocol int
	timeout  time.Duration
	modify   func(*redis.UniversalOptions)
}

// AsPeer makes the client dial from its own loopback address under the given peer
// name, so its links ("c1→n1") can be cut or slowed apart from other clients'.
// Without it a client is the shared peer "client".
func AsPeer(name string) ClientOption { return func(c *clientConfig) { c.peer = name } }

// WithProtocol selects RESP2 (2) or RESP3 (3, go-redis's default).
func WithProtocol(p int) ClientOption { return func(c *clientConfig) { c.protocol = p } }

// WithTimeout sets the client's dial, read and write timeouts.
func WithTimeout(d time.Duration) ClientOption { return func(c *clientConfig) { c.timeout = d } }

// WithOptions edits the go-redis options before the client is made.
func WithOptions(f func(*redis.UniversalOptions)) ClientOption {
	return func(c *clientConfig) { c.modify = f }
}

// peerIP registers a client peer and returns its source address.
func (t *Topology) peerIP(name string) string {
	if name == "" {
		name = ClientPeer
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if ip, ok := t.peers[name]; ok {
		return ip
	}
	ip := allocIP()
	t.peers[name] = ip
	t.sb.addPeer(name, ip)
	return ip
}

// ClientPeers lists the client peer names in use ("client" and every AsPeer name).
func (t *Topology) ClientPeers() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	peers := sortedKeys(t.peers)
	if _, ok := t.peers[ClientPeer]; !ok {
		peers = append([]string{ClientPeer}, peers...)
	}
	return peers
}

// PeerDialer returns the TCP dialer of the named client peer ("" is
// ClientPeer): connections from the peer's own source address, which the
// proxies accept, without TLS even on a WithTLS topology (for a program that
// does its own handshake over it).
func (t *Topology) PeerDialer(name string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(t.peerIP(name))}, Timeout: t.cfg.clientTimeout}
	return d.DialContext
}

func (t *Topology) universalOptions(opts []ClientOption) (*redis.UniversalOptions, *clientConfig) {
	cc := &clientConfig{protocol: 3, timeout: t.cfg.clientTimeout}
	for _, o := range opts {
		o(cc)
	}
	ip := t.peerIP(cc.peer)
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: cc.timeout}
	dial := d.DialContext
	tc := t.TLSConfig()
	if tc != nil {
		// go-redis applies TLSConfig only in its own dialer: this one does the
		// handshake itself (the server name is the address's host).
		dial = (&tls.Dialer{NetDialer: d, Config: tc}).DialContext
	}
	uo := &redis.UniversalOptions{
		Protocol:     cc.protocol,
		DialTimeout:  cc.timeout,
		ReadTimeout:  cc.timeout,
		WriteTimeout: cc.timeout,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dial(ctx, network, addr)
		},
		TLSConfig:       tc,
		DisableIdentity: true,
	}
	return uo, cc
}

// Client returns a go-redis client for the whole topology, connected only through
// proxies: a plain client for standalone (and for the primary of a replicated
// topology without sentinels), a Sentinel failover client for a replicated
// topology with sentinels, a cluster client for a cluster. An independent set has
// no single client: use NodeClient for each node. Closed by Topology.Close.
func (t *Topology) Client(opts ...ClientOption) (redis.UniversalClient, error) {
	uo, cc := t.universalOptions(opts)
	var c redis.UniversalClient
	switch {
	case t.Kind == KindCluster:
		for _, n := range t.nodes {
			uo.Addrs = append(uo.Addrs, n.Addr)
		}
		if cc.modify != nil {
			cc.modify(uo)
		}
		c = redis.NewClusterClient(uo.Cluster())
	case t.Kind == KindReplicated && len(t.sentinels) > 0:
		for _, s := range t.sentinels {
			uo.Addrs = append(uo.Addrs, s.Addr)
		}
		uo.MasterName = MasterName
		if cc.modify != nil {
			cc.modify(uo)
		}
		c = redis.NewFailoverClient(uo.Failover())
	case t.Kind == KindIndependent && len(t.nodes) > 1:
		return nil, fmt.Errorf("testbed: an independent set has no single client; use NodeClient per node")
	default:
		p := t.nodes[0]
		if t.Kind == KindReplicated {
			var err error
			if p, err = t.Primary(context.Background()); err != nil {
				return nil, err
			}
		}
		uo.Addrs = []string{p.Addr}
		if cc.modify != nil {
			cc.modify(uo)
		}
		c = redis.NewClient(uo.Simple())
	}
	t.track(c)
	return c, nil
}

// NodeClient returns a plain client to one node through its proxied address.
func (t *Topology) NodeClient(name string, opts ...ClientOption) (*redis.Client, error) {
	n := t.Node(name)
	if n == nil {
		return nil, fmt.Errorf("testbed: no node %q", name)
	}
	uo, cc := t.universalOptions(opts)
	uo.Addrs = []string{n.Addr}
	if cc.modify != nil {
		cc.modify(uo)
	}
	c := redis.NewClient(uo.Simple())
	t.track(c)
	return c, nil
}

func (t *Topology) track(c interface{ Close() error }) {
	t.mu.Lock()
	t.clients = append(t.clients, c)
	t.mu.Unlock()
}

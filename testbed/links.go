package testbed

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
	zlog "github.com/rs/zerolog/log"
)

// toxiproxy's toxics log through zerolog's global logger at trace level; the
// harness has its own reporting, so that logger is silenced once.
var quietToxiproxy sync.Once

// The switchboard gives every endpoint (a server's client port or cluster bus) one
// announced address on 127.0.0.1. A connection to it is routed by its source
// address (every server binds its own loopback address, every named client dials
// from its own) to the toxiproxy proxy of that one link, "src→dst", whose upstream is
// the endpoint's real address. So every link, client or internal, is its own proxy
// and can be cut, slowed or reset alone; links are made on first use and faults set
// on a pair of peers apply to links made later too.
type switchboard struct {
	srv *toxiproxy.ApiServer
	// listenIP is where announced addresses listen: 127.0.0.1, or the docker
	// network's gateway, which the containers reach (WithContainers).
	listenIP string

	mu        sync.Mutex
	peers     map[string]string    // source IP -> peer name
	endpoints map[string]*endpoint // endpoint name -> endpoint
	links     map[string]*Link     // link name -> link
	cut       map[[2]string]bool   // partitioned peer pairs (from, to), by peer name
	closed    bool
	logf      func(string, ...any)
}

type endpoint struct {
	name     string // "n1" or "n1.bus"
	peer     string // the peer that owns it ("n1")
	upstream string // the real address
	ln       net.Listener
	wg       sync.WaitGroup
}

func newSwitchboard(logf func(string, ...any)) *switchboard {
	quietToxiproxy.Do(func() { zlog.Logger = zerolog.Nop() })
	return &switchboard{
		srv:       toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop()),
		listenIP:  "127.0.0.1",
		peers:     map[string]string{},
		endpoints: map[string]*endpoint{},
		links:     map[string]*Link{},
		cut:       map[[2]string]bool{},
		logf:      logf,
	}
}

// ClientPeer is the peer name of the test process's default clients. It dials
// from a loopback address of its own, like every peer: a connection from any
// address the switchboard does not know (127.0.0.1 included) is refused, so
// nothing can slip past a partition by arriving from an unexpected address.
const ClientPeer = "client"

func (s *switchboard) addPeer(name, ip string) {
	s.mu.Lock()
	s.peers[ip] = name
	s.mu.Unlock()
}

// expose creates the announced address of an endpoint. The upstream may change
// later (a restarted server keeps its address, so it does not here).
func (s *switchboard) expose(name, peer, upstream string) (string, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(s.listenIP, "0"))
	if err != nil {
		return "", fmt.Errorf("testbed: switchboard for %s: %w", name, err)
	}
	ep := &endpoint{name: name, peer: peer, upstream: upstream, ln: ln}
	s.mu.Lock()
	s.endpoints[name] = ep
	s.mu.Unlock()
	ep.wg.Add(1)
	go s.serve(ep)
	return ln.Addr().String(), nil
}

func (s *switchboard) serve(ep *endpoint) {
	defer ep.wg.Done()
	for {
		c, err := ep.ln.Accept()
		if err != nil {
			return
		}
		go s.route(ep, c)
	}
}

func (s *switchboard) route(ep *endpoint, c net.Conn) {
	ip, _, _ := net.SplitHostPort(c.RemoteAddr().String())
	s.mu.Lock()
	from, ok := s.peers[ip]
	s.mu.Unlock()
	if !ok {
		s.logf("testbed: switchboard: connection to %s from unknown address %s refused", ep.name, ip)
		c.Close()
		return
	}
	l, err := s.link(from, ep.name)
	if err != nil {
		s.logf("testbed: %v", err)
		c.Close()
		return
	}
	up, err := net.DialTimeout("tcp", l.addr, 5*time.Second)
	if err != nil {
		c.Close() // a refused link (Link.Refuse) ends here: the peer sees a closed connection
		return
	}
	pipe(c, up)
}

func pipe(a, b net.Conn) {
	var once sync.Once
	closeBoth := func() { a.Close(); b.Close() }
	go func() { _, _ = io.Copy(a, b); once.Do(closeBoth) }()
	_, _ = io.Copy(b, a)
	once.Do(closeBoth)
}

// link returns the link from peer `from` to endpoint `to`, creating it on first use.
func (s *switchboard) link(from, to string) (*Link, error) {
	name := from + "→" + to
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.links[name]; ok {
		return l, nil
	}
	if s.closed {
		return nil, fmt.Errorf("switchboard closed")
	}
	ep, ok := s.endpoints[to]
	if !ok {
		return nil, fmt.Errorf("testbed: no endpoint %q (link %s)", to, name)
	}
	p := toxiproxy.NewProxy(s.srv, name, "127.0.0.1:0", ep.upstream)
	if err := s.srv.Collection.Add(p, true); err != nil {
		return nil, fmt.Errorf("testbed: proxy %s: %w", name, err)
	}
	// Start has returned, so Listen holds the bound address; a restart (Heal after
	// Refuse) binds the same one again, and toxiproxy rewrites the field then.
	l := &Link{Name: name, From: from, To: to, ToPeer: ep.peer, proxy: p, addr: p.Listen}
	s.links[name] = l
	if s.cut[[2]string{from, ep.peer}] {
		if err := l.Partition(); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// setCut marks the pair from→to partitioned (or healed) and applies it to every
// existing link between them.
func (s *switchboard) setCut(from, to string, cut bool) error {
	s.mu.Lock()
	if cut {
		s.cut[[2]string{from, to}] = true
	} else {
		delete(s.cut, [2]string{from, to})
	}
	var ls []*Link
	for _, l := range s.links {
		if l.From == from && l.ToPeer == to {
			ls = append(ls, l)
		}
	}
	s.mu.Unlock()
	for _, l := range ls {
		var err error
		if cut {
			err = l.Partition()
		} else {
			err = l.Heal()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// touchesCut reports whether any partition involves peer.
func (s *switchboard) touchesCut(peer string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.cut {
		if k[0] == peer || k[1] == peer {
			return true
		}
	}
	return false
}

func (s *switchboard) allLinks() []*Link {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Link, 0, len(s.links))
	for _, k := range sortedKeys(s.links) {
		out = append(out, s.links[k])
	}
	return out
}

func (s *switchboard) close() {
	s.mu.Lock()
	s.closed = true
	eps := s.endpoints
	s.mu.Unlock()
	for _, ep := range eps {
		ep.ln.Close()
		ep.wg.Wait()
	}
	_ = s.srv.Collection.Clear()
}

// Link is one proxied connection path from a peer to an endpoint, e.g.
// "client→n1", "n2→n1" (replication), "s1→n1" (sentinel), "n1→n2.bus" (cluster bus).
type Link struct {
	Name   string
	From   string // peer name of the connecting side
	To     string // endpoint name
	ToPeer string // peer owning the endpoint

	mu      sync.Mutex
	proxy   *toxiproxy.Proxy
	addr    string // the proxy's listen address
	n       int
	refused bool
}

// toxic adds one toxic; stream is "upstream" (towards the endpoint) or "downstream".
func (l *Link) toxic(typ, stream string, attrs string) error {
	l.mu.Lock()
	l.n++
	name := fmt.Sprintf("%s-%s-%d", typ, stream, l.n)
	l.mu.Unlock()
	js := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":{%s}}`, name, typ, stream, attrs)
	if _, err := l.proxy.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		return fmt.Errorf("testbed: %s: add %s toxic: %w", l.Name, typ, err)
	}
	return nil
}

// Partition silently drops everything on the link in both directions: connections
// stay open and peers see no reply until their own timeouts fire.
func (l *Link) Partition() error {
	if err := l.toxic("timeout", "upstream", `"timeout":0`); err != nil {
		return err
	}
	return l.toxic("timeout", "downstream", `"timeout":0`)
}

// LoseReplies lets requests through but drops every reply: commands execute while
// the client learns nothing. This is how operations with unknown outcome are made.
func (l *Link) LoseReplies() error { return l.toxic("timeout", "downstream", `"timeout":0`) }

// BlackHole drops data both ways and closes the connection after timeout.
func (l *Link) BlackHole(timeout time.Duration) error {
	ms := fmt.Sprintf(`"timeout":%d`, max(1, timeout.Milliseconds()))
	if err := l.toxic("timeout", "upstream", ms); err != nil {
		return err
	}
	return l.toxic("timeout", "downstream", ms)
}

// Latency delays data in both directions by latency ± jitter (each way).
func (l *Link) Latency(latency, jitter time.Duration) error {
	a := fmt.Sprintf(`"latency":%d,"jitter":%d`, latency.Milliseconds(), jitter.Milliseconds())
	if err := l.toxic("latency", "upstream", a); err != nil {
		return err
	}
	return l.toxic("latency", "downstream", a)
}

// Bandwidth limits both directions to kbps kilobytes per second.
func (l *Link) Bandwidth(kbps int64) error {
	a := fmt.Sprintf(`"rate":%d`, kbps)
	if err := l.toxic("bandwidth", "upstream", a); err != nil {
		return err
	}
	return l.toxic("bandwidth", "downstream", a)
}

// ResetPeer resets connections (TCP RST) once data arrives, after the delay.
func (l *Link) ResetPeer(after time.Duration) error {
	return l.toxic("reset_peer", "upstream", fmt.Sprintf(`"timeout":%d`, after.Milliseconds()))
}

// Refuse closes the link's listener and every connection on it: peers see refused
// or closed connections rather than silence. Heal reopens it.
func (l *Link) Refuse() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.proxy.Stop()
	l.refused = true
	return nil
}

// Heal removes every toxic from the link and reopens it if refused. Connections
// open through a partition are closed by the removal (toxiproxy closes them), so
// peers reconnect.
func (l *Link) Heal() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() {
		l.proxy.Toxics.ResetToxics(ctx) // can block under traffic: bounded below
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("testbed: %s: removing toxics did not finish in 5s", l.Name)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refused {
		if err := l.proxy.Start(); err != nil {
			return fmt.Errorf("testbed: %s: reopen: %w", l.Name, err)
		}
		l.refused = false
	}
	return nil
}

// Toxics lists the names of the toxics on the link.
func (l *Link) Toxics() []string {
	var out []string
	for _, t := range l.proxy.Toxics.GetToxicArray() {
		out = append(out, fmt.Sprintf("%v", t))
	}
	return out
}

package servertest_test

import (
	"bytes"
	"net"
	"sync"
	"testing"
	"time"
)

// holdProxy is an in-test TCP proxy in front of one server that can hold or
// drop one direction of chosen connections, where toxiproxy's links act on
// every connection of a peer: a stalled reply (hold the server's bytes), a
// stalled request (hold the client's), a silent Pub/Sub connection (drop the
// server's bytes on the connection that sent SUBSCRIBE) while the others go
// on. It listens on 127.0.0.1 only and closes everything at the test's end.
type holdProxy struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu       sync.Mutex
	conns    []*proxyConn
	triggers []trigger
	fires    int           // chunks that set off a trigger
	late     time.Duration // DelayCloses: how late a server's close reaches its client
}

// trigger is a rule armed by StallWhen: a chunk a client sends that holds
// every one of words turns its connection's switch (fault) on before the
// chunk goes on.
type trigger struct {
	words []string
	fault fault
}

// fault is what a trigger does to the connection that set it off.
type fault int

const (
	stallReply   fault = iota // hold the server's bytes: the command ran, its reply is late
	stallRequest              // hold the client's bytes, this chunk first: the command has not reached the server
	silentReply               // drop the server's bytes: the connection stays open and says nothing
)

func (f fault) String() string {
	return [...]string{stallReply: "reply", stallRequest: "request", silentReply: "silent"}[f]
}

// apply turns fault's switch on (pc.mu held).
func (pc *proxyConn) apply(f fault) {
	switch f {
	case stallReply:
		pc.holdDown = true
	case stallRequest:
		pc.holdUp = true
	case silentReply:
		pc.dropDown = true
	}
}

// proxyConn is one client connection through the proxy.
type proxyConn struct {
	p              *holdProxy
	client, server net.Conn

	mu   sync.Mutex
	sent bytes.Buffer // the first 64 KiB the client sent
	// holdUp / holdDown: bytes of that direction are held (not forwarded)
	// while set; dropUp / dropDown: discarded.
	holdUp, holdDown, dropUp, dropDown bool
	cond                               *sync.Cond
}

func newHoldProxy(t testing.TB, target string) *holdProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{t: t, ln: ln, target: target}
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's address, for a client's Addr.
func (p *holdProxy) Addr() string { return p.ln.Addr().String() }

func (p *holdProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		pc := &proxyConn{p: p, client: c, server: s}
		pc.cond = sync.NewCond(&pc.mu)
		p.mu.Lock()
		p.conns = append(p.conns, pc)
		p.mu.Unlock()
		go pc.pump(c, s, true)
		go pc.pump(s, c, false)
	}
}

// pump copies one direction, honouring the hold and drop switches.
func (pc *proxyConn) pump(from, to net.Conn, up bool) {
	defer from.Close()
	defer to.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			var faults []fault
			if up {
				faults = pc.p.fired(buf[:n])
			}
			pc.mu.Lock()
			if up && pc.sent.Len() < 64<<10 {
				pc.sent.Write(buf[:n])
			}
			for _, f := range faults {
				pc.apply(f)
			}
			for (up && pc.holdUp) || (!up && pc.holdDown) {
				pc.cond.Wait()
			}
			drop := (up && pc.dropUp) || (!up && pc.dropDown)
			pc.mu.Unlock()
			if !drop {
				if _, werr := to.Write(buf[:n]); werr != nil {
					if up { // the server's end is gone
						pc.p.closeLate()
					}
					return
				}
			}
		}
		if err != nil {
			if !up { // the server closed
				pc.p.closeLate()
			}
			return
		}
	}
}

// DelayCloses makes the proxy pass a server's close (its FIN, or a reset) to
// the client d late, from now on: a loaded proxy or a network in between
// delivers the server's bytes in order but is slow to relay the end of the
// connection, so for d the client still takes a connection the server killed
// for alive (go-redis's pool checks a connection's health by what its socket
// has received).
func (p *holdProxy) DelayCloses(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.late = d
}

// closeLate waits DelayCloses' delay before a server's close goes on to its
// client.
func (p *holdProxy) closeLate() {
	p.mu.Lock()
	late := p.late
	p.mu.Unlock()
	time.Sleep(late)
}

// set changes the connection's switches (f runs with its mutex held).
func (pc *proxyConn) set(f func(pc *proxyConn)) {
	pc.mu.Lock()
	f(pc)
	pc.cond.Broadcast()
	pc.mu.Unlock()
}

// HoldReplies holds the server's bytes on pc (a stalled reply) until Release.
func (pc *proxyConn) HoldReplies() { pc.set(func(pc *proxyConn) { pc.holdDown = true }) }

// HoldRequests holds the client's bytes on pc (a stalled request).
func (pc *proxyConn) HoldRequests() { pc.set(func(pc *proxyConn) { pc.holdUp = true }) }

// DropReplies discards the server's bytes on pc: the connection stays open
// and silent.
func (pc *proxyConn) DropReplies() { pc.set(func(pc *proxyConn) { pc.dropDown = true }) }

// Release lets both directions through again (held bytes are delivered).
func (pc *proxyConn) Release() {
	pc.set(func(pc *proxyConn) { pc.holdUp, pc.holdDown, pc.dropUp, pc.dropDown = false, false, false, false })
}

// StallWhen arms the proxy: from now until ReleaseAll, a chunk that a client
// sends holding every one of words (case-insensitive; a command with its key,
// e.g. "evalsha" and the key) turns f on for its connection before the chunk
// goes on. The connection is chosen by the very command, not by guessing
// which pooled connection the client will use next.
func (p *holdProxy) StallWhen(f fault, words ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.triggers = append(p.triggers, trigger{words: words, fault: f})
}

// fired returns the faults of the armed triggers that chunk sets off (called
// before the connection's own mutex is taken).
func (p *holdProxy) fired(chunk []byte) []fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	var faults []fault
	low := bytes.ToLower(chunk)
	for _, tr := range p.triggers {
		all := true
		for _, w := range tr.words {
			all = all && bytes.Contains(low, bytes.ToLower([]byte(w)))
		}
		if all {
			faults = append(faults, tr.fault)
			p.fires++
		}
	}
	return faults
}

// Fires is the number of times a chunk set off an armed trigger.
func (p *holdProxy) Fires() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fires
}

// waitFired reports whether a chunk set off an armed trigger within d: a
// command the client has written may still be on its way through the proxy
// (a loaded machine schedules the proxy's goroutines late).
func (p *holdProxy) waitFired(d time.Duration) bool {
	for deadline := time.Now().Add(d); p.Fires() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// ReleaseAll disarms every trigger and releases every connection (held bytes
// are delivered, as a network that recovers would).
func (p *holdProxy) ReleaseAll() {
	p.mu.Lock()
	p.triggers = nil
	conns := append([]*proxyConn(nil), p.conns...)
	p.mu.Unlock()
	for _, pc := range conns {
		pc.Release()
	}
}

func (pc *proxyConn) sentContains(s string) bool {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return bytes.Contains(bytes.ToLower(pc.sent.Bytes()), bytes.ToLower([]byte(s)))
}

// Sent returns the connections whose client has sent s (case-insensitive),
// in the order they were accepted.
func (p *holdProxy) Sent(s string) []*proxyConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*proxyConn
	for _, pc := range p.conns {
		if pc.sentContains(s) {
			out = append(out, pc)
		}
	}
	return out
}

// Accepted is the number of connections the proxy has accepted.
func (p *holdProxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// waitSent waits (up to 15 s) for a connection that sent s.
func (p *holdProxy) waitSent(s string) []*proxyConn {
	p.t.Helper()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if cs := p.Sent(s); len(cs) > 0 {
			return cs
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("no connection through the proxy sent %q", s)
		}
	}
}

func (p *holdProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pc := range p.conns {
		pc.Release()
		pc.client.Close()
		pc.server.Close()
	}
}

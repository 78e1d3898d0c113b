package prim

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// ---- dedicated connections for fencing uncertain commands --------------------

// fenceConn is a dedicated connection whose identity on the server is known, so
// a command left uncertain on it can be fenced: CLIENT KILL from another
// connection guarantees it has either run already or never will.
//
// The identity is the triple CLIENT INFO reports: the connection's id, its
// address as the server sees it (addr) and the server's own address on it
// (laddr). An id alone is not enough: ids restart with the server process, so
// after a restart or a failover "ID n" can name an unrelated connection. Every
// filter of CLIENT KILL must match, so only this connection can.
//
// Each use takes a connection from the client's pool (which drops connections
// that died while idle) and asks its identity anew: one extra round trip, paid
// only by operations that can be fenced (renewals, hash-field acquisitions), so
// a connection that broke while idle never turns a healthy renewal into an
// uncertain one.
type fenceConn struct {
	conn  *redis.Conn
	id    int64
	addr  string // the client's address as the server sees it ("" if unknown)
	laddr string // the server's address on this connection ("" if unknown)
	node  *redis.Client
}

type fencePool struct {
	client redis.UniversalClient
	// first holds, per node client, the gate of its first dedicated
	// connection (see firstConn).
	first sync.Map // *redis.Client -> *firstGate
}

func newFencePool(c redis.UniversalClient) *fencePool { return &fencePool{client: c} }

// firstGate lets one dedicated connection of a node be opened at a time until
// one of them has had a reply. go-redis v9.23's Conn() shares the client's
// *Options with the client but not the lock that guards them, and a
// connection's set-up writes them once when the server refuses the
// maintenance-notifications handshake (redis-8.0, valkey-8.1 over RESP3): two
// first connections set up at once are a data race inside go-redis. After one
// reply the options are settled (nothing writes them again) and connections
// open freely.
type firstGate struct {
	mu   sync.Mutex
	done atomic.Bool
}

// nodeFor returns the client for the node that serves key.
func (p *fencePool) nodeFor(ctx context.Context, key string) (*redis.Client, error) {
	switch c := p.client.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	default:
		return nil, fmt.Errorf("%w: %T", ErrUnsupportedClient, p.client)
	}
}

// nodeAt returns the cluster's client for the node at addr (from a MOVED or ASK
// reply), and asks the cluster client to reload its slot map.
func (p *fencePool) nodeAt(ctx context.Context, addr string) (*redis.Client, error) {
	cc, ok := p.client.(*redis.ClusterClient)
	if !ok {
		return nil, fmt.Errorf("prim: redirected to %s by a server that is not in a cluster", addr)
	}
	cc.ReloadState(ctx)
	var found *redis.Client
	var mu sync.Mutex
	_ = cc.ForEachShard(ctx, func(_ context.Context, n *redis.Client) error {
		if n.Options().Addr == addr {
			mu.Lock()
			found = n
			mu.Unlock()
		}
		return nil
	})
	if found == nil {
		return nil, fmt.Errorf("prim: redirected to %s, a node the cluster client does not know yet", addr)
	}
	return found, nil
}

func (p *fencePool) get(ctx context.Context, key string) (*fenceConn, error) {
	node, err := p.nodeFor(ctx, key)
	if err != nil {
		return nil, err
	}
	return p.on(ctx, node)
}

// on takes a dedicated connection to node and reads its identity.
func (p *fencePool) on(ctx context.Context, node *redis.Client) (*fenceConn, error) {
	g, _ := p.first.LoadOrStore(node, &firstGate{})
	if gate := g.(*firstGate); !gate.done.Load() {
		gate.mu.Lock()
		defer gate.mu.Unlock()
		fc, err := p.open(ctx, node)
		if err == nil || errorReply(err) {
			gate.done.Store(true) // the server answered: the set-up ran
		}
		return fc, err
	}
	return p.open(ctx, node)
}

// open opens a dedicated connection to node and learns its identity.
func (p *fencePool) open(ctx context.Context, node *redis.Client) (*fenceConn, error) {
	conn := node.Conn()
	fc := &fenceConn{conn: conn, node: node}
	info, err := conn.Do(ctx, "CLIENT", "INFO").Text()
	if err == nil {
		fc.id, fc.addr, fc.laddr = parseClientInfo(info)
		if fc.id == 0 {
			err = fmt.Errorf("prim: CLIENT INFO without an id: %q", info)
		}
	} else if isUnknownCommand(err) {
		// Before Redis 6.2: the id alone (see fence).
		fc.id, err = conn.ClientID(ctx).Result()
	}
	if err != nil {
		_ = conn.Close()
		return nil, serverError(err)
	}
	return fc, nil
}

// run runs a script on a dedicated connection to the node that serves key,
// following Cluster redirections: MOVED and ASK are definite "not executed", so
// the script is sent again on a connection to the node named (ASKING first for
// ASK), and the cluster client reloads its slot map. It returns the connection
// the script's last send used (nil if none was made: the script was not sent).
func (p *fencePool) run(ctx context.Context, key string, s *luaScript, keys []string, args ...any) (*fenceConn, *redis.Cmd, error) {
	return p.runWith(ctx, key, func(ctx context.Context, fc *fenceConn) *redis.Cmd {
		return evalScript(ctx, fc.conn, s, false, keys, args...)
	})
}

// runWith is run with what is sent on the connection given by send, which
// sends at most once (resends off) and returns the command whose answer
// stands (a MOVED or ASK answer is followed as run says).
func (p *fencePool) runWith(ctx context.Context, key string, send func(context.Context, *fenceConn) *redis.Cmd) (*fenceConn, *redis.Cmd, error) {
	var node *redis.Client // nil: the node that serves key
	asking := false
	for redirects := 0; ; redirects++ {
		var fc *fenceConn
		var err error
		if node == nil {
			fc, err = p.get(ctx, key)
		} else {
			fc, err = p.on(ctx, node)
		}
		if err != nil {
			return nil, nil, err
		}
		if asking {
			if err := fc.conn.Do(ctx, "ASKING").Err(); err != nil {
				_ = fc.conn.Close()
				return nil, nil, serverError(err)
			}
		}
		if err := ctx.Err(); err != nil {
			p.put(fc) // not sent
			return nil, nil, err
		}
		cmd := send(ctx, fc)
		err = cmd.Err()
		movedAddr, moved := redis.IsMovedError(err)
		askAddr, ask := redis.IsAskError(err)
		if (!moved && !ask) || redirects >= 3 {
			return fc, cmd, nil
		}
		p.put(fc)
		addr := movedAddr
		if ask {
			addr = askAddr
		}
		if node, err = p.nodeAt(ctx, addr); err != nil {
			return nil, cmd, nil // the redirection itself is the answer
		}
		asking = ask
	}
}

// put hands a connection whose last command completed back to the pool.
func (p *fencePool) put(fc *fenceConn) { _ = fc.conn.Close() }

// errNotFenced: the fence could not be confirmed.
var errNotFenced = errors.New("prim: the uncertain command's connection could not be fenced")

// fence closes the connection on the server with CLIENT KILL, sent from another
// connection to the same node. It returns nil only when the server says the
// connection is gone: it killed it (reply 1), or the same server (same address
// on its side) has no such connection any more (reply 0). Once it returns nil,
// whatever was sent on fc has either executed or never will.
//
// Once the connection is confirmed gone it is dropped from the client's pool
// in the background (discard); until then it is closed before fence returns.
func (c *Coordinator) fence(ctx context.Context, fc *fenceConn) error {
	fenced := false
	defer func() {
		if fenced {
			go fc.discard()
		} else {
			_ = fc.conn.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cleanup)
	defer cancel()
	args := []any{"CLIENT", "KILL", "ID", fc.id}
	if fc.addr != "" {
		args = append(args, "ADDR", fc.addr)
	}
	if fc.laddr != "" {
		args = append(args, "LADDR", fc.laddr)
	}
	var info, kill *redis.Cmd
	_, err := fc.node.Pipelined(ctx, func(p redis.Pipeliner) error {
		if fc.laddr != "" {
			info = p.Do(ctx, "CLIENT", "INFO")
		}
		kill = p.Do(ctx, args...)
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w: CLIENT KILL: %w", errNotFenced, serverError(err))
	}
	n, err := kill.Int64()
	if err != nil {
		return fmt.Errorf("%w: CLIENT KILL: %w", errNotFenced, serverError(err))
	}
	if n >= 1 {
		fenced = true
		return nil
	}
	// Nothing matched. That proves the connection gone only if the kill ran on
	// the server that held it: the same server address on both connections.
	if fc.laddr == "" {
		return fmt.Errorf("%w: no connection matched id %d on a server that cannot be told apart from another", errNotFenced, fc.id)
	}
	text, _ := info.Text()
	_, _, laddr := parseClientInfo(text)
	if laddr != fc.laddr {
		return fmt.Errorf("%w: the kill reached the server at %s, the connection was on %s", errNotFenced, laddr, fc.laddr)
	}
	fenced = true
	return nil
}

// discard keeps a connection the server has closed out of the client's pool,
// then closes it. go-redis puts a Conn's connection back on Close unless a
// command on it met a network error, and takes a pooled connection for alive
// until its socket has seen the close: a proxy or a loaded network in between
// relays the server's close late, and the pool handed the dead connection to
// the next command (the owner-checked release that follows a fence met EOF,
// and the lease stayed for its ttl). A PING on it fails (EOF or reset) once
// the close arrives and marks it bad, so Close drops it. It runs in its own
// goroutine, after the fence: the connection stays out of the pool meanwhile,
// so nothing waits on it, and the goroutine ends when the close arrives or at
// go-redis's read timeout (with ReadTimeout -1, when the operating system
// gives the dead connection up).
func (fc *fenceConn) discard() {
	defer fc.conn.Close()
	ctx := context.Background()
	_ = fc.conn.Process(ctx, noRetryCmd{redis.NewCmd(ctx, "PING")})
}

// parseClientInfo reads id, addr and laddr from a CLIENT INFO / CLIENT LIST line.
func parseClientInfo(s string) (id int64, addr, laddr string) {
	for _, f := range strings.Fields(s) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			continue
		}
		switch k {
		case "id":
			id, _ = strconv.ParseInt(v, 10, 64)
		case "addr":
			addr = v
		case "laddr":
			laddr = v
		}
	}
	return id, addr, laddr
}

func isUnknownCommand(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	m := strings.ToLower(re.Error())
	return strings.Contains(m, "unknown command") || strings.Contains(m, "unknown subcommand")
}

// cleanupCtx is the context of a background clean-up step.
func (c *Coordinator) cleanupCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), c.cleanup)
}

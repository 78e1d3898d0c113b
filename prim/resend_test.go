package prim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
)

// serverReply is a Redis error reply as go-redis returns it.
type serverReply string

func (e serverReply) Error() string { return string(e) }
func (serverReply) RedisError()     {}

// The fenced acquisition's classification of its attempts (pure logic; the
// real-server behaviour is servertest's TestResendRefusedAfterLostReply and
// TestConnectionRefusedIsDefinite).
func TestAcquisitionOutcome(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: errTimeout{}}
	readOnly := serverReply("READONLY You can't write against a read only replica.")
	noPerm := serverReply("NOPERM User u has no permissions to run the 'evalsha' command")
	for _, c := range []struct {
		err           error
		resend        bool // worth sending again after a first, single attempt
		onceUncertain bool // outcome unknown after that single attempt
	}{
		{nil, false, false},
		{redis.Nil, false, false},
		{dial, false, false},
		{fmt.Errorf("wrapped: %w", dial), false, false},
		{redis.ErrPoolTimeout, false, false},
		{redis.ErrClosed, false, false},
		{noPerm, false, false},
		{readOnly, true, false},
		{serverReply("LOADING Redis is loading the dataset in memory"), true, false},
		{serverReply("TRYAGAIN Multiple keys request during rehashing of slot"), true, false},
		{io.EOF, true, true},
		{timeout, true, true},
		{context.DeadlineExceeded, false, true}, // written, then the context ended: not resent, unknown
	} {
		if got := worthResending(c.err); got != c.resend {
			t.Errorf("worthResending(%v) = %v, want %v", c.err, got, c.resend)
		}
		if got := (cmdResult{err: c.err}).outcomeUnknown(); got != c.onceUncertain {
			t.Errorf("sent once, outcomeUnknown(%v) = %v, want %v", c.err, got, c.onceUncertain)
		}
		// Through go-redis's resends, any error but redis.Nil is unknown: an
		// earlier attempt may have run (a READONLY, a pool timeout or a failed
		// dial of the last one says nothing of it).
		want := c.err != nil && !errors.Is(c.err, redis.Nil)
		if got := (cmdResult{err: c.err, resent: true}).outcomeUnknown(); got != want {
			t.Errorf("resent, outcomeUnknown(%v) = %v, want %v", c.err, got, want)
		}
	}
}

type errTimeout struct{}

func (errTimeout) Error() string   { return "i/o timeout" }
func (errTimeout) Timeout() bool   { return true }
func (errTimeout) Temporary() bool { return true }

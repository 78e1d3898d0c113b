package prim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

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
		// After an attempt that got no reply, any error of a later attempt
		// but redis.Nil leaves it unknown: the lost one may have run (a
		// READONLY, a pool timeout or a failed dial of the last one says
		// nothing of it).
		want := c.err != nil && !errors.Is(c.err, redis.Nil)
		if got := (cmdResult{err: c.err, written: true}).outcomeUnknown(); got != want {
			t.Errorf("after a lost reply, outcomeUnknown(%v) = %v, want %v", c.err, got, want)
		}
	}
}

type errTimeout struct{}

func (errTimeout) Error() string   { return "i/o timeout" }
func (errTimeout) Timeout() bool   { return true }
func (errTimeout) Temporary() bool { return true }

// prim's own resends follow the client's options as go-redis reads them.
func TestRetryPolicy(t *testing.T) {
	def := retryPolicy{3, 10 * time.Millisecond, time.Second}
	for _, c := range []struct {
		c    redis.UniversalClient
		want retryPolicy
	}{
		{redis.NewClient(&redis.Options{}), def},
		{redis.NewClient(&redis.Options{MaxRetries: -1}), retryPolicy{0, def.min, def.cap}},
		{redis.NewClient(&redis.Options{MaxRetries: 5, MinRetryBackoff: time.Millisecond, MaxRetryBackoff: 4 * time.Millisecond}), retryPolicy{5, time.Millisecond, 4 * time.Millisecond}},
		{redis.NewClient(&redis.Options{MinRetryBackoff: -1}), retryPolicy{3, 0, def.cap}},
		{redis.NewClusterClient(&redis.ClusterOptions{MaxRetries: 7}), retryPolicy{7, def.min, def.cap}},
		{redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}, MaxRetries: -1}), retryPolicy{0, def.min, def.cap}},
	} {
		got := retryPolicyOf(c.c)
		c.c.Close()
		if got != c.want {
			t.Errorf("%T: %+v, want %+v", c.c, got, c.want)
		}
	}
	p := def
	for attempt := 1; attempt <= 30; attempt++ {
		if d := p.backoff(attempt); d < p.min || d > p.cap {
			t.Errorf("backoff(%d) = %v, outside [%v, %v]", attempt, d, p.min, p.cap)
		}
	}
	if d := (retryPolicy{3, 0, 0}).backoff(2); d != 0 {
		t.Errorf("no back-off: %v", d)
	}
}

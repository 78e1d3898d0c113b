package scenarios

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/coordtorture/coordtorture/prim"
)

// replyError is a server error reply as go-redis returns it (redis.Error).
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// A server reply that means "not executed" is a definite failure; the same
// reply behind an uncertain outcome, or any other error, is not.
func TestNotExecuted(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{replyError("MOVED 12539 127.0.0.1:7002"), true},
		{fmt.Errorf("prim: acquire: %w", replyError("ASK 12539 127.0.0.1:7002")), true},
		{replyError("READONLY You can't write against a read only replica."), true},
		{replyError("OOM command not allowed when used memory > 'maxmemory'."), true},
		{replyError("NOPERM User u has no permissions to run the 'evalsha' command"), true},
		{replyError("NOSCRIPT No matching script."), true},
		{fmt.Errorf("%w: %w", prim.ErrUncertain, replyError("MOVED 1 127.0.0.1:7000")), false},
		{fmt.Errorf("%w: %w", ErrUncertain, replyError("MOVED 1 127.0.0.1:7000")), false},
		{replyError("ERR something else"), false},
		{errors.New("MOVED 1 127.0.0.1:7000"), false}, // not a server reply
		{context.DeadlineExceeded, false},
		{nil, false},
	}
	for _, c := range cases {
		if got := NotExecuted(c.err); got != c.want {
			t.Errorf("NotExecuted(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

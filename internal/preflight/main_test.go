package preflight

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// TestMain drops go-redis's own log lines (the Sentinel client's master
// lookups, the unreachable deployment's dial errors).
func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	os.Exit(m.Run())
}

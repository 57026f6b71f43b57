// Package clienttest tests the Go client's module (clients/go: packages client and
// httplimit) against an in-process sluice node; it holds tests only.
package clienttest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	client "github.com/sluice-rl/sluice/clients/go"
	"github.com/sluice-rl/sluice/server"
	"github.com/sluice-rl/sluice/testsupport/testkit"
	"github.com/sluice-rl/sluice/testsupport/testnode"
)

// t0 is a midnight UTC, a multiple of every window in the tests.
const t0 = int64(20000*86400) * int64(time.Second)

// sluice is a real single-node sluice running in the test process.
type sluice struct {
	node   *server.Node
	clock  *testkit.Clock
	frozen bool
	rdb    *redis.Client
}

// client returns a client of the node whose clock is the server's.
func (s *sluice) client(settings ...client.Setting) *client.Client {
	return s.clientOn(s.rdb, settings...)
}

// clientOn is client through doer.
func (s *sluice) clientOn(doer client.Doer, settings ...client.Setting) *client.Client {
	now := time.Now
	if s.frozen {
		now = func() time.Time { return time.Unix(0, s.clock.Now()) }
	}
	// A deadline a loaded machine meets (the default, 50 ms, is the
	// product's; a -race build beside two CPU hogs passed it by): these
	// tests are of what the client does with answers. A test's own
	// Timeout comes after, and wins.
	return client.New(doer, append([]client.Setting{client.Clock(now), client.Timeout(5 * time.Second)}, settings...)...)
}

// startSluice opens a node (server and one-node Raft cluster) on loopback
// ports chosen by the OS with a fresh data directory, waits until Raft is
// ready and returns it with a go-redis client.
func startSluice(t *testing.T) *sluice { return startSluiceClock(t, true) }

// startSluiceClock is startSluice; with frozen false the server keeps
// its own, real, time.
func startSluiceClock(t *testing.T, frozen bool) *sluice {
	t.Helper()
	clk := testkit.NewClock(t0)
	o := testnode.Options{}
	if frozen {
		o.Clock = clk
	}
	n := testnode.Start(t, o)
	rdb := redis.NewClient(&redis.Options{Addr: n.Server.RespAddr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	return &sluice{node: n, clock: clk, frozen: frozen, rdb: rdb}
}

// set configures a budget node with RL.BUDGET SET.
func (s *sluice) set(t *testing.T, path string, args ...any) {
	t.Helper()
	v, err := s.rdb.Do(context.Background(), append([]any{"RL.BUDGET", "SET", path}, args...)...).Result()
	if err != nil || v != "OK" {
		t.Fatalf("RL.BUDGET SET %s %v: %v %v", path, args, v, err)
	}
}

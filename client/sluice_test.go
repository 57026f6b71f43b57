package client

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-rl/sluice/raftfsm"
	"github.com/sluice-rl/sluice/server"
)

// testClock is the in-process server's time source. It stands still
// unless a test advances it, so every number in a reply is exact however
// slow the machine is.
type testClock struct{ ns atomic.Int64 }

func (c *testClock) Now() int64              { return c.ns.Load() }
func (c *testClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// t0 is a midnight UTC, a multiple of every window in the tests.
const t0 = int64(20000*86400) * int64(time.Second)

// sluice is a real single-node sluice running in the test process.
type sluice struct {
	node  *server.Node
	clock *testClock
	rdb   *redis.Client
}

// startSluice opens a node (server and one-node Raft cluster) on loopback
// ports chosen by the OS with a fresh data directory, waits until Raft is
// ready and returns it with a go-redis client.
func startSluice(t *testing.T) *sluice {
	t.Helper()
	cfg, err := server.Load(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RespAddr, cfg.HTTPAddr, cfg.RaftAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	clk := &testClock{}
	clk.ns.Store(t0)
	n, err := server.OpenWith(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), server.NodeHooks{
		Now:  clk.Now,
		Raft: raftfsm.FastTiming,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	deadline := time.Now().Add(20 * time.Second)
	for !n.Raft.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("sluice: Raft not ready within 20s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	rdb := redis.NewClient(&redis.Options{Addr: n.Server.RespAddr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	return &sluice{node: n, clock: clk, rdb: rdb}
}

// set configures a budget node with RL.BUDGET SET.
func (s *sluice) set(t *testing.T, path string, args ...any) {
	t.Helper()
	v, err := s.rdb.Do(context.Background(), append([]any{"RL.BUDGET", "SET", path}, args...)...).Result()
	if err != nil || v != "OK" {
		t.Fatalf("RL.BUDGET SET %s %v: %v %v", path, args, v, err)
	}
}

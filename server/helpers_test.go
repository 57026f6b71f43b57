package server

import (
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/resptest"
	"github.com/sluice-rl/sluice/raftfsm"
)

// startServer runs an in-process node (server and one-node Raft cluster)
// on loopback ports chosen by the OS, and waits until it is ready.
func startServer(t *testing.T, mutate func(*Config)) *Server {
	return startNode(t, mutate).Server
}

func startNode(t *testing.T, mutate func(*Config)) *Node { return startNodeHook(t, mutate, nil) }

func startNodeHook(t *testing.T, mutate func(*Config), hook func(*raftfsm.Options)) *Node {
	t.Helper()
	cfg, err := Load(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RespAddr, cfg.HTTPAddr, cfg.RaftAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	if mutate != nil {
		mutate(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	clk := &clock{}
	// Fixed from the start: a sweep that began on another clock could
	// forget buckets made later on this one.
	clk.ns.Store(t0)
	n, err := OpenWith(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), NodeHooks{Now: clk.Now, Raft: func(o *raftfsm.Options) {
		raftfsm.FastTiming(o)
		if hook != nil {
			hook(o)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	clocks.Store(n.Server, clk)
	if cfg.Join == "" {
		waitFor(t, n.Raft.Ready)
	}
	return n
}

type exchange struct {
	cmd  []string
	want string
}

// script sends each command on one connection and checks its reply.
func script(t *testing.T, c *resptest.Client, steps []exchange) {
	t.Helper()
	for i, st := range steps {
		if got := c.Do(st.cmd...); got != st.want {
			t.Fatalf("step %d %q:\n got %s\nwant %s", i, st.cmd, got, st.want)
		}
	}
}

func cmd(args ...string) []string { return args }

// clock is the test servers' time source: a fixed timeline from t0.
type clock struct{ ns atomic.Int64 }

var clocks sync.Map // *Server → *clock

// t0 is midnight UTC, a multiple of every window in the tests.
const t0 = int64(19676*86400) * int64(time.Second)

func (c *clock) Now() int64              { return c.ns.Load() }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// fixClock returns s's clock, set back to t0.
func fixClock(s *Server) *clock {
	v, _ := clocks.Load(s)
	c := v.(*clock)
	c.ns.Store(t0)
	return c
}

package server

import (
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/raftfsm"
	"github.com/sluice-rl/sluice/testsupport/resptest"
	"github.com/sluice-rl/sluice/testsupport/testkit"
	"github.com/sluice-rl/sluice/testsupport/testraft"
)

// startServer runs an in-process node (server and one-node Raft cluster)
// on loopback ports chosen by the OS, and waits until it is ready.
func startServer(t *testing.T, mutate func(*Config)) *Server {
	return startNode(t, mutate).Server
}

func startNode(t *testing.T, mutate func(*Config)) *Node { return startNodeHook(t, mutate, nil) }

func startNodeHook(t *testing.T, mutate func(*Config), hook func(*raftfsm.Options)) *Node {
	t.Helper()
	// The clock is fixed from the start: a sweep begun on another clock
	// could forget buckets made later on this one.
	clk := testkit.NewClock(t0)
	n := startTestNode(t, testNode{Config: mutate, Raft: hook, Clock: clk})
	clocks.Store(n.Server, clk)
	return n
}

// testNode describes a node for startTestNode.
type testNode struct {
	// Config adjusts the settings (after the loopback defaults).
	Config func(*Config)
	// Raft adjusts the Raft options (after testraft.FastTiming).
	Raft func(*raftfsm.Options)
	// Clock, if set, is the node's time source; else real time.
	Clock *testkit.Clock
}

// startTestNode runs a node in the test process as testsupport/testnode.Start
// does (which these tests cannot import: it imports server): loopback
// ports the OS picks, a fresh data dir, fast Raft timing, logs discarded;
// unless the node joins another, it waits until the node is ready. The
// node stops when the test ends.
func startTestNode(t testing.TB, o testNode) *Node {
	t.Helper()
	cfg, err := Load(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RespAddr, cfg.HTTPAddr, cfg.RaftAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	if o.Config != nil {
		o.Config(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	hooks := NodeHooks{Raft: func(ro *raftfsm.Options) {
		testraft.FastTiming(ro)
		if o.Raft != nil {
			o.Raft(ro)
		}
	}}
	if o.Clock != nil {
		hooks.Now = o.Clock.Now
	}
	n, err := OpenWith(cfg.WithDefaults(), slog.New(slog.NewTextHandler(io.Discard, nil)), hooks)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	if cfg.Join == "" {
		testkit.WaitFor(t, 20*time.Second, "the node to be ready", n.Raft.Ready)
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

var clocks sync.Map // *Server → *testkit.Clock

// t0 is midnight UTC, a multiple of every window in the tests.
const t0 = int64(19676*86400) * int64(time.Second)

// fixClock returns s's clock, set back to t0.
func fixClock(s *Server) *testkit.Clock {
	v, _ := clocks.Load(s)
	c := v.(*testkit.Clock)
	c.Set(t0)
	return c
}

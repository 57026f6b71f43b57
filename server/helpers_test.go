package server

import (
	"sync"
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
	// The clock is fixed from the start: a sweep begun on another clock
	// could forget buckets made later on this one.
	clk := NewTestClock(t0)
	n := StartTestNode(t, TestNode{Config: mutate, Raft: hook, Clock: clk})
	clocks.Store(n.Server, clk)
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

var clocks sync.Map // *Server → *TestClock

// t0 is midnight UTC, a multiple of every window in the tests.
const t0 = int64(19676*86400) * int64(time.Second)

// fixClock returns s's clock, set back to t0.
func fixClock(s *Server) *TestClock {
	v, _ := clocks.Load(s)
	c := v.(*TestClock)
	c.Set(t0)
	return c
}

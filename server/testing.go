package server

import (
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/raftfsm"
)

// TestClock is a settable time source for tests: replies that depend on
// time are exact however slow the machine is.
type TestClock struct{ ns atomic.Int64 }

// NewTestClock returns a clock standing at ns (Unix nanoseconds).
func NewTestClock(ns int64) *TestClock {
	c := &TestClock{}
	c.ns.Store(ns)
	return c
}

// Now returns the clock's time.
func (c *TestClock) Now() int64 { return c.ns.Load() }

// Set moves the clock to ns.
func (c *TestClock) Set(ns int64) { c.ns.Store(ns) }

// Advance moves the clock forward by d.
func (c *TestClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// TestNode describes a node for StartTestNode.
type TestNode struct {
	// Config adjusts the settings (after the loopback defaults).
	Config func(*Config)
	// Raft adjusts the Raft options (after raftfsm.FastTiming).
	Raft func(*raftfsm.Options)
	// Clock, if set, is the node's time source; else real time.
	Clock *TestClock
}

// StartTestNode runs a node in the test process: RESP, HTTP and Raft on
// loopback ports the OS picks, a fresh data dir, fast Raft timing, logs
// discarded. Unless the node joins another, it waits until the node has
// elected itself and applied its log. The node stops when the test ends.
func StartTestNode(t testing.TB, o TestNode) *Node {
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
		raftfsm.FastTiming(ro)
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
		raftfsm.WaitFor(t, 20*time.Second, "the node to be ready", n.Raft.Ready)
	}
	return n
}

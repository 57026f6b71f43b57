// Package testnode starts sluice nodes (RESP, HTTP and Raft) inside a test
// process, for tests of packages that drive a real node: client,
// httplimit, deploy. Only tests import it. server's own tests start nodes
// with the same steps in server/helpers_test.go, since they cannot import
// a package that imports server.
package testnode

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/raftfsm"
	"github.com/sluice-rl/sluice/server"
	"github.com/sluice-rl/sluice/testsupport/testkit"
	"github.com/sluice-rl/sluice/testsupport/testraft"
)

// Options describes a node for Start.
type Options struct {
	// Config adjusts the settings (after the loopback defaults).
	Config func(*server.Config)
	// Raft adjusts the Raft options (after testraft.FastTiming).
	Raft func(*raftfsm.Options)
	// Clock, if set, is the node's time source; else real time.
	Clock *testkit.Clock
}

// Start runs a node in the test process: RESP, HTTP and Raft on loopback
// ports the OS picks, a fresh data dir, fast Raft timing, logs discarded.
// Unless the node joins another, it waits until the node has elected
// itself and applied its log. The node stops when the test ends.
func Start(t testing.TB, o Options) *server.Node {
	t.Helper()
	cfg, err := server.Load(nil, func(string) string { return "" }, io.Discard)
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
	hooks := server.NodeHooks{Raft: func(ro *raftfsm.Options) {
		testraft.FastTiming(ro)
		if o.Raft != nil {
			o.Raft(ro)
		}
	}}
	if o.Clock != nil {
		hooks.Now = o.Clock.Now
	}
	n, err := server.OpenWith(cfg.WithDefaults(), slog.New(slog.NewTextHandler(io.Discard, nil)), hooks)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	if cfg.Join == "" {
		testkit.WaitFor(t, 20*time.Second, "the node to be ready", n.Raft.Ready)
	}
	return n
}

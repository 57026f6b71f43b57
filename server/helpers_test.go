package server

import (
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/resptest"
)

// startServer runs an in-process node on loopback ports chosen by the OS.
func startServer(t *testing.T, mutate func(*Config)) *Server {
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
	s, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s
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

// clock is a settable time source for replies that depend on time.
type clock struct{ ns atomic.Int64 }

// t0 is midnight UTC, a multiple of every window in the tests.
const t0 = int64(19676*86400) * int64(time.Second)

func (c *clock) Now() int64              { return c.ns.Load() }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// fixClock makes s answer on a fixed timeline starting at t0.
func fixClock(s *Server) *clock {
	c := &clock{}
	c.ns.Store(t0)
	s.env.Now = c.Now
	return c
}

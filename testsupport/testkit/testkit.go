// Package testkit holds the small helpers that tests across the module
// share: polling for a condition, a settable clock, building the binary
// for the packages that drive it, and waiting for a Raft leader or an
// applied index.
//
// It imports no sluice package, so that raftfsm and server can use it in
// their own (internal) tests without an import cycle. Only tests import it:
// the shipped binary does not link the testing package.
package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// WaitFor polls cond every 10ms until it holds, failing the test after d.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Clock is a settable time source for tests: replies that depend on time
// are exact however slow the machine is.
type Clock struct{ ns atomic.Int64 }

// NewClock returns a clock standing at ns (Unix nanoseconds).
func NewClock(ns int64) *Clock {
	c := &Clock{}
	c.ns.Store(ns)
	return c
}

// Now returns the clock's time.
func (c *Clock) Now() int64 { return c.ns.Load() }

// Set moves the clock to ns.
func (c *Clock) Set(ns int64) { c.ns.Store(ns) }

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// Member is what WaitForLeader needs of a Raft node (a *raftfsm.Node).
type Member interface {
	ID() string
	IsLeader() bool
	Leader() (id, respAddr string, ok bool)
}

// WaitForLeader waits until exactly one of nodes leads and every other
// node knows it, and returns the leader.
func WaitForLeader[N Member](t testing.TB, nodes ...N) N {
	t.Helper()
	leader := -1
	WaitFor(t, 10*time.Second, "a leader", func() bool {
		leader = -1
		for i, n := range nodes {
			if n.IsLeader() {
				if leader >= 0 {
					return false
				}
				leader = i
			}
		}
		if leader < 0 {
			return false
		}
		for _, n := range nodes {
			if id, _, ok := n.Leader(); !ok || id != nodes[leader].ID() {
				return false
			}
		}
		return true
	})
	return nodes[leader]
}

// Applier is the state machine of a Raft node (a *raftfsm.FSM).
type Applier interface{ Applied() uint64 }

// Replica is what WaitForApplied needs of a Raft node (a *raftfsm.Node).
type Replica[A Applier] interface{ FSM() A }

// WaitForApplied waits until the state machine of every node has applied
// index.
func WaitForApplied[N Replica[A], A Applier](t testing.TB, index uint64, nodes ...N) {
	t.Helper()
	WaitFor(t, 10*time.Second, fmt.Sprintf("index %d applied everywhere", index), func() bool {
		for _, n := range nodes {
			if n.FSM().Applied() < index {
				return false
			}
		}
		return true
	})
}

// MainWithBinary is a TestMain for packages that drive the real binary:
// it builds ./cmd/sluice (the package is one folder below the module's
// root) with the testclock tag (SLUICE_TEST_CLOCK then sets the clock
// limits are decided at; see CONTRIBUTING.md) into a temporary folder, sets *bin to its path, runs the tests,
// removes the folder and exits with the tests' status.
func MainWithBinary(m *testing.M, bin *string) {
	dir, err := os.MkdirTemp("", "sluice-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*bin = filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-tags", "testclock", "-o", *bin, "../cmd/sluice")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building sluice:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// LeastAllocsPerRun is testing.AllocsPerRun(runs, f) taken up to five
// times, the least of them: AllocsPerRun counts every allocation of the
// process, and a goroutine beside the test (a node's periodic sync, the
// runtime) that allocates while f runs would be counted as f's. A call
// that allocates allocates in every attempt.
func LeastAllocsPerRun(runs int, f func()) float64 {
	least := testing.AllocsPerRun(runs, f)
	for i := 1; i < 5 && least > 0; i++ {
		least = min(least, testing.AllocsPerRun(runs, f))
	}
	return least
}

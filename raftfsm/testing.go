package raftfsm

import (
	"fmt"
	"testing"
	"time"
)

// FastTiming shortens Raft's timeouts for in-process test clusters on
// loopback, where elections should take tens of milliseconds.
func FastTiming(o *Options) {
	o.HeartbeatTimeout = 150 * time.Millisecond
	o.ElectionTimeout = 150 * time.Millisecond
	o.LeaderLeaseTimeout = 100 * time.Millisecond
	// Generous: a busy machine under the race detector applies a large
	// IMPORT slowly, and a write must not fail for that.
	o.ApplyTimeout = 10 * time.Second
}

// TestOptions returns options for node i of an in-process test cluster:
// loopback with an OS-chosen Raft port, a fresh data dir, fast timing.
func TestOptions(t testing.TB, i int) Options {
	o := Options{ID: fmt.Sprintf("n%d", i), RaftAddr: "127.0.0.1:0", RespAddr: fmt.Sprintf("127.0.0.1:%d", 1+i),
		DataDir: t.TempDir()}
	FastTiming(&o)
	return o
}

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

// WaitForLeader waits until exactly one of nodes leads and every other
// running node knows it, and returns the leader.
func WaitForLeader(t testing.TB, nodes ...*Node) *Node {
	t.Helper()
	var leader *Node
	WaitFor(t, 10*time.Second, "a leader", func() bool {
		leader = nil
		for _, n := range nodes {
			if n.IsLeader() {
				if leader != nil {
					return false
				}
				leader = n
			}
		}
		if leader == nil {
			return false
		}
		for _, n := range nodes {
			if id, _, ok := n.Leader(); !ok || id != leader.ID() {
				return false
			}
		}
		return true
	})
	return leader
}

// WaitForApplied waits until every node has applied index.
func WaitForApplied(t testing.TB, index uint64, nodes ...*Node) {
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

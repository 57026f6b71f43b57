package raftfsm

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/testsupport/testkit"
)

// A member is unreachable once its probes have failed without a break for
// the given time, counted from the first failed round; one answer clears
// it; a member no longer probed is forgotten.
func TestReachCountsAnUnbrokenRunOfFailures(t *testing.T) {
	var r reach
	t0 := time.Unix(1000, 0)
	after := 2 * time.Second
	r.record(t0, map[string]bool{"a": true, "b": false})
	for _, c := range []struct {
		at   time.Duration
		id   string
		want bool
	}{{0, "a", false}, {0, "b", false}, {1999 * time.Millisecond, "b", false}, {2 * time.Second, "b", true}} {
		if got := r.unreachable(c.id, t0.Add(c.at), after); got != c.want {
			t.Errorf("%s at +%v: unreachable %v, want %v", c.id, c.at, got, c.want)
		}
	}
	// Another failed round does not move the start of the run.
	r.record(t0.Add(time.Second), map[string]bool{"a": true, "b": false})
	if !r.unreachable("b", t0.Add(2*time.Second), after) {
		t.Error("a second failed round restarted the count")
	}
	// One answer clears it; the next failure starts a new run.
	r.record(t0.Add(3*time.Second), map[string]bool{"a": true, "b": true})
	r.record(t0.Add(4*time.Second), map[string]bool{"a": true, "b": false})
	if r.unreachable("b", t0.Add(5*time.Second), after) {
		t.Error("a failure after an answer counts the failures before it")
	}
	// Out of the configuration: forgotten.
	r.record(t0.Add(5*time.Second), map[string]bool{"a": false})
	if r.unreachable("b", t0.Add(time.Hour), after) {
		t.Error("a member no longer probed is still unreachable")
	}
}

// Every node, followers too, sees a stopped member as unreachable, and as
// reachable again once it runs.
func TestEveryNodeSeesAStoppedMemberUnreachable(t *testing.T) {
	nodes, opts := cluster(t, 3, func(o *Options) {
		o.ProbeInterval = 50 * time.Millisecond
		o.UnreachableAfter = 200 * time.Millisecond
	})
	unreachable := func(on *Node, id string) bool {
		vs, err := on.Voters()
		if err != nil {
			return false
		}
		for _, v := range vs {
			if v.ID == id {
				return v.Unreachable
			}
		}
		return false
	}
	testkit.WaitFor(t, 10*time.Second, "every member reachable", func() bool {
		for _, n := range nodes {
			for _, o := range opts {
				if unreachable(n, o.ID) {
					return false
				}
			}
		}
		return true
	})
	leader := testkit.WaitForLeader(t, nodes...)
	gone := 0
	for i, n := range nodes {
		if n != leader {
			gone = i
		}
	}
	nodes[gone].Shutdown()
	memNodes.CompareAndDelete(opts[gone].RespAddr, nodes[gone])
	for i, n := range nodes {
		if i == gone {
			continue
		}
		testkit.WaitFor(t, 10*time.Second, opts[i].ID+" to see "+opts[gone].ID+" unreachable", func() bool {
			return unreachable(n, opts[gone].ID)
		})
		if unreachable(n, opts[i].ID) {
			t.Fatalf("%s reports itself unreachable", opts[i].ID)
		}
	}
	open(t, opts[gone])
	for i, n := range nodes {
		if i == gone {
			continue
		}
		testkit.WaitFor(t, 10*time.Second, opts[i].ID+" to see "+opts[gone].ID+" again", func() bool {
			return !unreachable(n, opts[gone].ID)
		})
	}
}

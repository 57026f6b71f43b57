package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	sl "github.com/sluice-rl/sluice/clients/go"
)

// A Go client given the three nodes of a cluster keeps deciding when one
// is killed: no call is decided by the failure policy, neither from a
// client that knew the node alive nor from one created after it died;
// and a client given one node learns the others from RL.CLUSTER NODES.
func TestGoClientKeepsDecidingWithANodeKilled(t *testing.T) {
	ms, peerList := staticMembers(t, 3)
	for _, m := range ms {
		m.start(t, peerList)
	}
	l := leader(t, ms)
	if got := do(t, l.c, "RL.BUDGET", "SET", "api", "RATE", "100000", "SCOPE", "user"); got != "OK" {
		t.Fatalf("RL.BUDGET SET: %v", got)
	}
	v := budgetVersion(t, l.c, "api")
	eventually(t, 10*time.Second, "the budget on every node", func() bool {
		for _, m := range ms {
			if budgetVersion(t, m.c, "api") != v {
				return false
			}
		}
		return true
	})
	var all []string
	for _, m := range ms {
		all = append(all, m.resp)
	}
	slices.Sort(all)

	// Given one node, the client learns all three.
	one, err := sl.NewNodes(sl.NodesConfig{Addrs: []string{ms[1].resp}})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	eventually(t, 10*time.Second, "the members from RL.CLUSTER NODES", func() bool { return slices.Equal(one.Addrs(), all) })

	nodes, err := sl.NewNodes(sl.NodesConfig{Addrs: all})
	if err != nil {
		t.Fatal(err)
	}
	defer nodes.Close()
	// FailClosed: a call the cluster did not answer shows as a refusal
	// whose Source is fail_closed. A loaded machine must not turn into
	// timeouts: a generous deadline (a refused connection is immediate).
	settings := []sl.Setting{sl.OnFailure(sl.FailClosed), sl.Timeout(2 * time.Second)}
	c := sl.New(nodes, settings...)
	ctx := context.Background()
	calls, refused := 0, 0
	// Every call is decided by a node (or by the denial cache, repeating a
	// node's refusal): a refusal is the cluster's answer, such as a node
	// that has lost a key's owner a moment ago asking for a millisecond.
	decided := func(what string, d sl.Decision, err error) {
		t.Helper()
		if err != nil || d.Source != sl.SourceServer && d.Source != sl.SourceCache {
			t.Fatalf("%s: %+v %v", what, d, err)
		}
		if !d.Allowed {
			refused++
		}
		calls++
	}
	check := func(c *sl.Client, what string) {
		t.Helper()
		for i := 0; i < 60; i++ {
			d, err := c.AcquireInline(ctx, fmt.Sprint("k", i), sl.Limit{Rate: 100000})
			decided(fmt.Sprintf("%s, inline k%d", what, i), d, err)
			d, err = c.Acquire(ctx, "api", sl.Key(fmt.Sprint("u", i)))
			decided(fmt.Sprintf("%s, api u%d", what, i), d, err)
			if err == nil && d.Limit != 100000 {
				t.Fatalf("%s, api u%d: %+v", what, i, d)
			}
		}
	}
	check(c, "all three up")

	victim := ms[0]
	victim.p.kill9()
	start := time.Now()
	for time.Since(start) < 2*time.Second {
		check(c, "one killed")
	}
	// A client created after the node died: its first call to each key
	// whose first choice is the dead node meets a refused connection.
	fresh, err := sl.NewNodes(sl.NodesConfig{Addrs: all})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	check(sl.New(fresh, settings...), "a fresh client, one killed")
	t.Logf("%d calls decided by the nodes (%d of them refusals), none by the failure policy", calls, refused)

	// Given only the killed node, whose port now refuses, each call is
	// decided by the failure policy at once (the median of 20 under 5 ms;
	// no breaker, so every call dials), not at the 2 s deadline.
	dead, err := sl.NewNodes(sl.NodesConfig{Addrs: []string{victim.resp}, Static: true})
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	dc := sl.New(dead, sl.OnFailure(sl.FailClosed), sl.Timeout(2*time.Second), sl.BreakerFailures(0))
	var took []time.Duration
	for i := 0; i < 20; i++ {
		start := time.Now()
		d, err := dc.AcquireInline(ctx, "k", sl.Limit{Rate: 10})
		took = append(took, time.Since(start))
		if err != nil || d.Source != sl.SourceFailClosed {
			t.Fatalf("the killed node, call %d: %+v %v", i, d, err)
		}
	}
	slices.Sort(took)
	t.Logf("a refused port: median %v, slowest %v of 20 calls", took[10], took[19])
	if took[10] >= 5*time.Millisecond {
		t.Fatalf("a refused port: median %v of %v, want under 5 ms", took[10], took)
	}
	if refused > calls/10 {
		t.Fatalf("%d of %d calls refused under a limit of 100000/s", refused, calls)
	}
}

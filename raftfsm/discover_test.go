package raftfsm

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/testsupport/testkit"
)

// discovered is Options.Discover over a fixed list of RESP addresses,
// counting its calls.
type discovered struct {
	mu    sync.Mutex
	addrs []string
	calls atomic.Int64
}

func (d *discovered) resolve(context.Context) ([]string, error) {
	d.calls.Add(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.addrs), nil
}

func (d *discovered) set(addrs []string) {
	d.mu.Lock()
	d.addrs = addrs
	d.mu.Unlock()
}

// discoveryOptions lays out size nodes that find each other through d.
func discoveryOptions(t *testing.T, size int, d *discovered) []Options {
	var opts []Options
	for i := 0; i < size; i++ {
		o := testOptions(t, i)
		o.Remote, o.Discover, o.BootstrapExpect = memRemote{}, d.resolve, 3
		// hashicorp/raft's own timing: a busy machine's pauses do not
		// start elections while nodes join one by one.
		o.HeartbeatTimeout, o.ElectionTimeout, o.LeaderLeaseTimeout = 0, 0, 0
		opts = append(opts, o)
	}
	return opts
}

// oneCluster waits until every node holds the same configuration of ids.
func oneCluster(t *testing.T, nodes []*Node, ids ...string) {
	t.Helper()
	testkit.WaitFor(t, 60*time.Second, fmt.Sprintf("one cluster of %v", ids), func() bool {
		for _, n := range nodes {
			servers, err := n.Servers()
			var got []string
			for _, s := range servers {
				got = append(got, string(s.ID))
			}
			slices.Sort(got)
			if err != nil || !slices.Equal(got, ids) {
				return false
			}
		}
		return true
	})
	testkit.WaitForLeader(t, nodes...)
}

// A new cluster found by discovery: nobody bootstraps before
// BootstrapExpect nodes answer; then one cluster forms (the lowest id
// bootstraps, the others join it); a node restarted on its data rejoins
// as itself, and a new node joins the running cluster.
func TestDiscoveryFormsOneCluster(t *testing.T) {
	d := &discovered{}
	opts := discoveryOptions(t, 4, d)
	addrs := []string{opts[0].RespAddr, opts[1].RespAddr, opts[2].RespAddr}
	d.set(addrs) // n3 is not in the "DNS" yet
	nodes := []*Node{open(t, opts[1]), open(t, opts[2])}
	// Two of three: both look several times and neither bootstraps.
	testkit.WaitFor(t, 30*time.Second, "several looks", func() bool { return d.calls.Load() >= 6 })
	for _, n := range nodes {
		if n.inCluster() {
			t.Fatalf("%s has a configuration with 2 of 3 expected nodes", n.ID())
		}
	}
	nodes = append(nodes, open(t, opts[0]))
	oneCluster(t, nodes, "n0", "n1", "n2")

	// n1 restarts on its data: same id, no second member.
	nodes[0].Shutdown()
	memNodes.Delete(opts[1].RespAddr)
	opts[1].RaftAddr = nodes[0].opts.RaftAddr
	nodes[0] = open(t, opts[1])
	oneCluster(t, nodes, "n0", "n1", "n2")

	// A node added later (a StatefulSet scaled up) joins.
	d.set(append(addrs, opts[3].RespAddr))
	nodes = append(nodes, open(t, opts[3]))
	oneCluster(t, nodes, "n0", "n1", "n2", "n3")
}

package robust

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// TestCutOffNodeKeepsLimiting cuts one node of a running cluster off from
// its peers (each node in its own network namespace; blackhole routes to
// the peers inside the cut node's namespace, so the test still reaches
// it) and drives a key whose bucket another node owns. The cut node keeps
// answering every call, and admits what docs/cluster.md states: for a
// bucket whose owner it cannot reach, its own local bucket — at most one
// burst plus the rate over the time cut off — plus the lease it held when
// the cut came (at most one burst) and one credit (⌈burst / N⌉) each time
// it tries the owner again (once a second); and it keeps admitting at
// about the rate (it limits, it does not refuse everything).
func TestCutOffNodeKeepsLimiting(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-process cluster in network namespaces; skipped under -short")
	}
	c := newCluster(t, needNetLab(t))
	c.startAll()
	if _, err := c.leader(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	cut := c.nodes[2]
	ctx := context.Background()
	// A key the cut node does not own.
	const rate, burst = 20, 20
	acquire := func(key string) ([]any, error) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		v, err := cut.client.Do(cctx, "RL.ACQUIRE", key, "RATE", rate, "BURST", burst).Slice()
		return v, err
	}
	// Owners are a rendezvous hash of the key over the member ids; the
	// engine computes it the same way on every node.
	owners := engine.New(engine.Options{Shards: 1})
	owners.SetOwners(cut.id, []string{c.nodes[0].id, c.nodes[1].id, cut.id})
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("cut-%d", i); func() bool { _, self := owners.Owner(engine.SpaceInline, []byte(k)); return !self }() {
			key = k
		}
	}
	// Warm up: the cut node holds a lease for the key when the cut comes.
	for i := 0; i < 5; i++ {
		if _, err := acquire(key); err != nil {
			t.Fatal(err)
		}
	}
	for _, peer := range c.nodes[:2] {
		if err := ipCmd("-n", cut.ns, "route", "add", "blackhole", strings.Split(peer.raft, ":")[0]+"/32"); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, peer := range c.nodes[:2] {
			ipCmd("-n", cut.ns, "route", "del", "blackhole", strings.Split(peer.raft, ":")[0]+"/32")
		}
	})
	start := time.Now()
	admitted, calls := 0, 0
	for time.Since(start) < 4*time.Second {
		v, err := acquire(key)
		if err != nil {
			t.Fatalf("call %d on the cut-off node after %v: %v", calls, time.Since(start).Round(time.Millisecond), err)
		}
		calls++
		if v[0].(int64) == 1 {
			admitted++
		}
		time.Sleep(5 * time.Millisecond) // about 200 calls a second: ten times the rate
	}
	elapsed := time.Since(start).Seconds()
	// It really was cut off: it has not heard its peers for about as long.
	info, err := clusterInfo(ctx, cut.client)
	if err != nil {
		t.Fatal(err)
	}
	if lag, _ := strconv.Atoi(info["sync_lag_ms"]); lag < 2000 {
		t.Fatalf("the node still hears its peers (sync_lag_ms %q): the cut did not take", info["sync_lag_ms"])
	}
	credit := (burst + 2) / 3 // ⌈burst / N⌉
	most := 2*burst + int(rate*elapsed+0.5) + credit*(int(elapsed)+1)
	least := int(rate * elapsed / 2)
	t.Logf("cut off for %.1fs: %d calls, %d admitted (bound %d, at least %d)", elapsed, calls, admitted, most, least)
	if admitted > most {
		t.Errorf("the cut-off node admitted %d in %.1fs; the documented bound is %d (burst + rate × time + one burst held + a credit a second)", admitted, elapsed, most)
	}
	if admitted < least {
		t.Errorf("the cut-off node admitted only %d in %.1fs at a rate of %d/s: it stopped limiting and refused", admitted, elapsed, rate)
	}
}

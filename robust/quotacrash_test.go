package robust

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// acquireQuota sends RL.ACQUIRE key RATE 1000000 QUOTA quota PER day (the
// rate never limits: the quota does) and reports whether it was admitted.
func acquireQuota(c *redis.Client, key string, quota int) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := c.Do(ctx, "RL.ACQUIRE", key, "RATE", 1000000, "QUOTA", quota, "PER", "day").Slice()
	if err != nil {
		return false, err
	}
	if len(v) == 0 {
		return false, fmt.Errorf("RL.ACQUIRE: empty reply")
	}
	allowed, _ := v[0].(int64)
	return allowed == 1, nil
}

// TestQuotaAfterCrash admits 20 calls against a quota of 100 a day on one
// node, kills it with SIGKILL, restarts it on its data and calls it at once
// (as soon as it answers PING, before /readyz), 100 times, then 40 times
// spread over all three nodes. The units the node's previous life had
// reserved were that life's to admit, and it may have: docs/cluster.md
// ("Calendar quotas in a cluster") promises the cluster never admits more
// than the quota. Ten rounds, the crashed node taking turns.
func TestQuotaAfterCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-process cluster and kills its nodes; skipped under -short")
	}
	c := newCluster(t, nil)
	c.startAll()
	const quota = 100
	for round := 1; round <= 10; round++ {
		key := fmt.Sprintf("crashq/r%d", round)
		x := c.nodes[round%3]
		// The first call waits for the node's first units (a reservation
		// through Raft, which a fresh cluster on a loaded machine can take
		// longer to commit than one call waits): refusals meanwhile hold
		// nothing.
		before := 0
		for deadline := time.Now().Add(30 * time.Second); before == 0 && time.Now().Before(deadline); {
			ok, err := acquireQuota(x.client, key, quota)
			if err != nil {
				t.Fatalf("round %d: first call on %s: %v", round, x.id, err)
			}
			if ok {
				before++
			} else {
				time.Sleep(20 * time.Millisecond)
			}
		}
		for i := 1; i < 20; i++ {
			ok, err := acquireQuota(x.client, key, quota)
			if err != nil {
				t.Fatalf("round %d: call %d on %s: %v", round, i, x.id, err)
			}
			if ok {
				before++
			}
		}
		x.kill()
		if err := x.start(t, c.bin); err != nil {
			t.Fatal(err)
		}
		after, spread, errs := 0, 0, 0
		for i := 0; i < 140; i++ {
			n := x
			if i >= 100 {
				n = c.nodes[i%3]
			}
			ok, err := acquireQuota(n.client, key, quota)
			switch {
			case err != nil:
				errs++
			case ok && n == x && i < 100:
				after++
			case ok:
				spread++
			}
		}
		total := before + after + spread
		t.Logf("round %d: %s admitted %d, was killed and restarted, then admitted %d at once; %d more spread over the nodes; %d in all of %d (%d errors)",
			round, x.id, before, after, spread, total, quota, errs)
		if total > quota {
			t.Errorf("round %d: the cluster admitted %d calls against a quota of %d", round, total, quota)
		}
		if before == 0 || after+spread == 0 {
			t.Errorf("round %d: %d admitted before the crash, %d after: the quota refused everything", round, before, after+spread)
		}
		if _, err := c.leader(60 * time.Second); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
}

// TestQuotaUnderKills drives a quota of 500 a day from all three nodes at
// once while a follower, then the leader, then all three nodes are killed
// with SIGKILL and restarted on their data; then it drives on until every
// node refuses. The cluster must never have admitted more than 500.
func TestQuotaUnderKills(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-process cluster and kills its nodes; skipped under -short")
	}
	c := newCluster(t, nil)
	c.startAll()
	const quota, key = 500, "killq"
	var admitted, errs atomic.Int64
	refusedInARow := make([]atomic.Int64, len(c.nodes))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ok, err := acquireQuota(n.client, key, quota)
				switch {
				case err != nil:
					errs.Add(1)
					refusedInARow[n.idx].Store(0)
					time.Sleep(20 * time.Millisecond) // pacing while the node is down
				case ok:
					admitted.Add(1)
					refusedInARow[n.idx].Store(0)
				default:
					refusedInARow[n.idx].Add(1)
				}
				time.Sleep(2 * time.Millisecond) // pacing: the kills come while units are being admitted
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	restart := func(ns ...*node) {
		for _, n := range ns {
			n.kill()
		}
		for _, n := range ns {
			if err := n.start(t, c.bin); err != nil {
				t.Fatal(err)
			}
		}
	}
	for phase, what := range []string{"a follower", "the leader", "all three nodes"} {
		waitFor(t, 60*time.Second, func() bool { return admitted.Load() >= int64(100*(phase+1)) })
		l, err := c.leader(60 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		switch phase {
		case 0:
			restart(c.nodes[(l.idx+1)%3])
		case 1:
			restart(l)
		case 2:
			restart(c.nodes...)
		}
		t.Logf("killed and restarted %s at %d admitted", what, admitted.Load())
	}
	// Until every node refuses: the quota is spent, or held by lives that
	// are gone (it comes back when the period ends).
	waitFor(t, 60*time.Second, func() bool {
		for i := range refusedInARow {
			if refusedInARow[i].Load() < 50 {
				return false
			}
		}
		return true
	})
	t.Logf("quota %d a day: %d admitted in all (%d calls failed while nodes were down)", quota, admitted.Load(), errs.Load())
	if got := admitted.Load(); got > quota {
		t.Errorf("the cluster admitted %d calls against a quota of %d", got, quota)
	}
}

// TestQuotaRollingKill spends about 200 of a quota of 600 a day over the
// three nodes, then kills each node in turn with SIGKILL (after 30 more
// calls, so that it holds units) and restarts it on its data, then calls
// in turn until every node refuses. A restarted node gives back what its
// previous life held past the spend mark it had written (docs/cluster.md,
// "Calendar quotas in a cluster": a crash strands at most max(1,
// limit/600) units of a counter, 1 of 600; the promise is at most 2): at
// least 594 are admitted, never more than 600.
func TestQuotaRollingKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-process cluster and kills its nodes; skipped under -short")
	}
	c := newCluster(t, nil)
	c.startAll()
	const quota, key = 600, "rollq"
	admitted, errs := 0, 0
	call := func(i int) bool {
		ok, err := acquireQuota(c.nodes[i%3].client, key, quota)
		if err != nil {
			errs++
		}
		if ok {
			admitted++
		}
		return ok
	}
	spread := func(n int) {
		deadline := time.Now().Add(60 * time.Second)
		for i := 0; admitted < n; i++ {
			if !call(i) && time.Now().After(deadline) {
				t.Fatalf("%d admitted, %d wanted: the quota refuses", admitted, n)
			}
		}
	}
	spread(200)
	for _, x := range c.nodes {
		spread(admitted + 30)
		x.kill()
		if err := x.start(t, c.bin); err != nil {
			t.Fatal(err)
		}
		if _, err := c.leader(60 * time.Second); err != nil {
			t.Fatal(err)
		}
		t.Logf("killed and restarted %s at %d admitted", x.id, admitted)
	}
	// In turn until the quota is spent, or every node has refused 10
	// times in a row and nothing was admitted for 5 s (units given back by
	// the restarts and by idle nodes have come back by then).
	refused, last := 0, time.Now()
	for i := 0; admitted < quota && (refused < 30 || time.Since(last) < 5*time.Second); i++ {
		if call(i) {
			refused, last = 0, time.Now()
		} else {
			refused++
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Past the quota: nothing more, on any node.
	for i := 0; i < 30; i++ {
		call(i)
	}
	t.Logf("QUOTA %d a day, every node killed and restarted: %d admitted (%d calls failed)", quota, admitted, errs)
	if admitted > quota {
		t.Errorf("the cluster admitted %d calls against a quota of %d", admitted, quota)
	}
	if admitted < quota-6 {
		t.Errorf("%d of %d admitted: three crashes stranded %d units, more than 2 each", admitted, quota, quota-admitted)
	}
}

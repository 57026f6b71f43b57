package robust

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestWritesDuringLeaderKill kills the leader with SIGKILL and at once sends
// a write to a follower: the write must wait for the new leader and answer
// OK rather than TRYAGAIN (docs/cluster.md, "Writes"). Three rounds, the
// old leader restarted in between.
func TestWritesDuringLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-process cluster; skipped under -short")
	}
	c := newCluster(t, nil)
	c.startAll()
	var paths []string
	for round := 1; round <= 3; round++ {
		l, err := c.leader(60 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var f *node
		for _, n := range c.nodes {
			if n != l {
				f = n
				break
			}
		}
		path := fmt.Sprintf("leaderkill/r%d", round)
		paths = append(paths, path)
		l.kill()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		start := time.Now()
		err = f.client.Do(ctx, "RL.BUDGET", "SET", path, "RATE", round).Err()
		cancel()
		if err != nil {
			t.Errorf("round %d: SET via follower %s right after kill -9 of leader %s: %v (after %v)",
				round, f.id, l.id, err, time.Since(start).Round(time.Millisecond))
		} else {
			t.Logf("round %d: leader %s killed; SET via %s answered OK after %v", round, l.id, f.id, time.Since(start).Round(time.Millisecond))
		}
		if err := l.start(t, c.bin); err != nil {
			t.Fatal(err)
		}
		if _, err := c.converged(60*time.Second, paths); err != nil {
			t.Fatalf("round %d: after restarting %s: %v", round, l.id, err)
		}
	}
}

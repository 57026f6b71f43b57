package robust

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// shortApply is the --apply-timeout of TestRaftCutFollowerReadsItsWrites:
// its faults must outlast it, and ten rounds of them stay short.
const shortApply = 2 * time.Second

// TestRaftCutFollowerReadsItsWrites drops only the Raft traffic of one
// follower (iptables on its Raft port, inside its network namespace) and
// leaves its RESP port open, then writes through it for longer than
// --apply-timeout. Its forwards reach the leader, which commits them with
// the other follower, but the cut node cannot apply them: docs/cluster.md
// promises read-your-writes on the node that took the write, so every write
// it answers OK must read back on it at once (RL.BUDGET GET), and every
// other write must get an error reply, not silence. Ten rounds; at least
// one of them must see a write committed but not applied here, or the test
// did not test what it means to.
func TestRaftCutFollowerReadsItsWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-process cluster in network namespaces; skipped under -short")
	}
	lab := needNetLab(t)
	if ok, why := probeIPTables(lab); !ok {
		missingTool(t, why)
	}
	c := newClusterApply(t, lab, shortApply)
	c.startAll()
	var paths []string
	notApplied := 0
	for round := 1; round <= 10; round++ {
		l, err := c.leader(60 * time.Second)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		f := c.nodes[(l.idx+1+round%2)%3]
		if err := lab.raftCut(f, true); err != nil {
			t.Fatal(err)
		}
		cutAt := time.Now()
		ok, failed := 0, map[string]int{}
		for i := 1; time.Since(cutAt) < c.apply+time.Second; i++ {
			path := fmt.Sprintf("raftcut/r%d/w%d", round, i)
			paths = append(paths, path)
			ctx, cancel := context.WithTimeout(context.Background(), 3*c.apply)
			err := f.client.Do(ctx, "RL.BUDGET", "SET", path, "RATE", i).Err()
			cancel()
			var rerr redis.Error
			switch {
			case err == nil:
				ok++
				v, _, gerr := readPath(context.Background(), f.client, path, false)
				if gerr != nil || v != int64(i) {
					t.Errorf("round %d: %s answered OK to SET %s RATE %d, then GET on it read %d (err %v)", round, f.id, path, i, v, gerr)
				}
			case errors.As(err, &rerr):
				msg := err.Error()
				if strings.Contains(msg, "has not applied it") {
					notApplied++
				}
				if f := strings.Fields(msg); len(f) > 3 {
					msg = strings.Join(f[:3], " ")
				}
				failed[msg]++
			default:
				t.Errorf("round %d: SET %s via the Raft-cut %s got no reply: %v", round, path, f.id, err)
			}
		}
		if err := lab.raftCut(f, false); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: %s Raft-cut for %v: %d OK (each read back), errors %v", round, f.id, time.Since(cutAt).Round(time.Millisecond), ok, failed)
		if _, err := c.converged(60*time.Second, paths); err != nil {
			t.Fatalf("round %d: after healing: %v", round, err)
		}
	}
	if notApplied == 0 {
		t.Errorf("no write was answered \"committed … not applied\": the cut never caught a write the leader committed without this node")
	}
}

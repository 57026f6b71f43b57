package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"
)

// nodeRows returns RL.CLUSTER NODES as id → its five fields.
func nodeRows(m *member) (map[string][]string, error) {
	rows, err := m.c.Do(context.Background(), "RL.CLUSTER", "NODES").Slice()
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, r := range rows {
		f, ok := r.([]any)
		if !ok || len(f) < 5 {
			return nil, fmt.Errorf("RL.CLUSTER NODES row %v", r)
		}
		var s []string
		for _, v := range f {
			s = append(s, fmt.Sprint(v))
		}
		out[s[0]] = s
	}
	return out, nil
}

// TestMoveANode follows docs/cluster.md's procedure to move a node, four
// times, alternating a new address and the same one: RL.CLUSTER LEAVE on
// another member, stop the node, delete its data directory, start it with
// --join. Each round the cluster has three voters again on every node,
// the moved node is ready, a write through it is answered OK and read on
// the others, and it answers RL.ACQUIRE.
func TestMoveANode(t *testing.T) {
	ms, _ := threeNodes(t)
	ctx := context.Background()
	for round := 0; round < 4; round++ {
		l := leader(t, ms)
		var mv *member
		var others []*member
		for _, m := range ms {
			if m != l && mv == nil {
				mv = m
			} else {
				others = append(others, m)
			}
		}
		if got := do(t, l.c, "RL.CLUSTER", "LEAVE", mv.id); got != "OK" {
			t.Fatalf("round %d: LEAVE %s: %v", round, mv.id, got)
		}
		if err := mv.p.stop(); err != nil {
			t.Fatalf("round %d: stopping %s: %v", round, mv.id, err)
		}
		if err := os.RemoveAll(mv.dir); err != nil {
			t.Fatal(err)
		}
		where := "the same address"
		if round%2 == 0 {
			where = "a new address"
			mv.resp, mv.raft = "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
			mv.c = client(t, mv.resp)
		}
		mv.p = start(t, "--node-id", mv.id, "--resp-addr", mv.resp, "--raft-addr", mv.raft, "--http-addr", "127.0.0.1:0",
			"--data-dir", mv.dir, "--join", others[round%2].resp)
		eventually(t, 60*time.Second, fmt.Sprintf("round %d (%s): three voters, %s at its addresses, on every node", round, where, mv.id), func() bool {
			for _, m := range ms {
				rows, err := nodeRows(m)
				if err != nil || len(rows) != 3 {
					return false
				}
				for _, r := range rows {
					if r[3] != "voter" {
						return false
					}
				}
				if r := rows[mv.id]; r == nil || r[1] != mv.resp || r[2] != mv.raft {
					return false
				}
			}
			return true
		})
		eventually(t, 30*time.Second, fmt.Sprintf("round %d: %s ready", round, mv.id), func() bool {
			return readyz(t, mv.p.HTTP) == http.StatusOK
		})
		if role := mv.info(t)["role"]; role == "removed" {
			t.Fatalf("round %d: the moved node reports itself removed", round)
		}
		path := fmt.Sprintf("moved/r%d", round)
		if got, err := mv.c.Do(ctx, "RL.BUDGET", "SET", path, "RATE", "100").Result(); err != nil || got != "OK" {
			t.Fatalf("round %d: write through the moved node: %v %v", round, got, err)
		}
		for _, m := range others {
			eventually(t, 10*time.Second, fmt.Sprintf("round %d: %s on %s", round, path, m.id), func() bool {
				return budgetVersion(t, m.c, path) != 0
			})
		}
		if err := mv.c.Do(ctx, "RL.ACQUIRE", path).Err(); err != nil {
			t.Fatalf("round %d: RL.ACQUIRE on the moved node: %v", round, err)
		}
		t.Logf("round %d: %s moved to %s (resp %s, raft %s), rejoined via %s", round, mv.id, where, mv.resp, mv.raft, others[round%2].id)
	}
}

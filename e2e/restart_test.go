package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A node killed (kill -9) while a budget is lowered, with 300 more entries
// written while it is down, restarts on its data directory: from its first
// answered PING, every limiting call it answers is decided with the tree
// the cluster has now — it admits at most the lowered limit — or is
// answered LOADING (TRYAGAIN tolerated); never from the tree it had before
// it stopped. Three rounds, a different node each (the leader among them
// when it falls to it).
func TestRestartedNodeNeverDecidesFromAnOlderTree(t *testing.T) {
	ms, peerList := threeNodes(t)
	ctx := context.Background()
	const low = 5
	for round := 0; round < 3; round++ {
		victim := ms[round]
		var alive []*member
		for _, m := range ms {
			if m != victim {
				alive = append(alive, m)
			}
		}
		path := fmt.Sprintf("acme/r%d", round)
		// Before the kill: the path admits 1000 an hour, on every node.
		if got := do(t, alive[0].c, "RL.BUDGET", "SET", path, "RATE", "1000", "PER", "hour"); got != "OK" {
			t.Fatalf("SET %s: %v", path, got)
		}
		eventually(t, 20*time.Second, "the victim to apply "+path, func() bool { return budgetVersion(t, victim.c, path) != 0 })

		victim.p.kill9()
		// 300 entries the victim misses, the lowering of its path among
		// them (in the middle), sent by four writers to the survivors.
		var wg sync.WaitGroup
		var failed atomic.Value
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				c := alive[w%2].c
				for i := 0; i < 75; i++ {
					args := []any{"RL.BUDGET", "SET", fmt.Sprintf("fill/r%d/w%d/%d", round, w, i), "RATE", 10 + i}
					if w == 0 && i == 37 {
						args = []any{"RL.BUDGET", "SET", path, "RATE", low, "PER", "hour"}
					}
					if err := c.Do(ctx, args...).Err(); err != nil {
						failed.Store(fmt.Sprintf("%v: %v", args, err))
						return
					}
				}
			}(w)
		}
		wg.Wait()
		if f := failed.Load(); f != nil {
			t.Fatalf("round %d: write while %s was down: %v", round, victim.id, f)
		}

		victim.startWith(t, peerList)
		raw := redis.NewClient(&redis.Options{Addr: victim.resp, MaxRetries: -1, ReadTimeout: 10 * time.Second})
		eventually(t, 30*time.Second, victim.id+" to answer PING", func() bool { return raw.Ping(ctx).Err() == nil })
		// From the first answered PING: eight callers on the restarted node
		// alone, until 200 calls have been decided there.
		var admitted, decided, loading atomic.Int64
		var bad atomic.Value
		deadline := time.Now().Add(60 * time.Second)
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for decided.Load() < 200 && time.Now().Before(deadline) && bad.Load() == nil {
					r, err := raw.Do(ctx, "RL.ACQUIRE", path).Slice()
					switch {
					case err != nil && strings.HasPrefix(err.Error(), "LOADING "):
						loading.Add(1)
					case err != nil && strings.HasPrefix(err.Error(), "TRYAGAIN "):
					case err != nil:
						bad.Store(err.Error())
					default:
						decided.Add(1)
						if r[0] == int64(1) {
							admitted.Add(1)
						}
					}
				}
			}()
		}
		wg.Wait()
		raw.Close()
		if b := bad.Load(); b != nil {
			t.Fatalf("round %d: RL.ACQUIRE on the restarted %s: %v", round, victim.id, b)
		}
		t.Logf("round %d: %s restarted: %d decided (%d admitted), %d answered LOADING", round, victim.id, decided.Load(), admitted.Load(), loading.Load())
		if decided.Load() < 200 {
			t.Fatalf("round %d: the restarted %s decided %d calls in 60 s (%d LOADING)", round, victim.id, decided.Load(), loading.Load())
		}
		if admitted.Load() > low {
			t.Fatalf("round %d: the restarted %s admitted %d on %s, lowered to %d an hour while it was down: it decided from an older tree",
				round, victim.id, admitted.Load(), path, low)
		}
		if admitted.Load() == 0 {
			t.Fatalf("round %d: the restarted %s admitted nothing of %d", round, victim.id, low)
		}
	}
}

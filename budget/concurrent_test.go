package budget

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/sluice-rl/sluice/engine"
)

// levelLeft returns the tokens left in each bucket a call to path for
// subject charges, root first, as peeks of the buckets themselves.
func levelLeft(t *testing.T, tr *Tree, s *engine.Store, path, subject string) []int64 {
	t.Helper()
	var (
		ch charges
		sc Scratch
	)
	if err := tr.charge(t0, &Call{Path: []byte(path), Subject: []byte(subject)}, &sc, &ch, 0, nil); err != nil {
		t.Fatal(err)
	}
	out := make([]int64, ch.n)
	for i := range out {
		out[i] = s.Acquire(t0, ch.reqs[i], 0, true).Remaining
	}
	return out
}

// TestConcurrentHierarchyIsExact runs 64 goroutines, each a user of the
// 3-level enforcing hierarchy system → system/p → system/p/t (scope user),
// against a store of the default size and one of a single shard, all
// calls at one instant (no refill). With one-token calls exactly the
// tightest level's capacity is admitted, whichever level that is; with
// costs of 1 to 9 every level has given out exactly the admitted calls'
// tokens: none over its capacity, none to a refused call.
func TestConcurrentHierarchyIsExact(t *testing.T) {
	cases := []struct {
		name                string
		system, partner, us int64 // capacities
		costs               bool
		want                int64 // admitted tokens; -1: at most the partner's
	}{
		{"system tightest", 300, 700, 20, false, 300},
		{"partner tightest", 5000, 700, 20, false, 700},
		{"users tightest", 5000, 700, 5, false, 64 * 5},
		{"costs 1-9", 5000, 1500, 40, true, -1},
	}
	for _, c := range cases {
		for _, shards := range []int{1, 0} {
			t.Run(fmt.Sprintf("%s/shards=%d", c.name, shards), func(t *testing.T) {
				tr := buildTree(t, map[string]string{
					"system":     fmt.Sprintf(`{"sharing":"enforce","sustained":{"rate":%d,"window":"day"}}`, c.system),
					"system/p":   fmt.Sprintf(`{"sharing":"enforce","sustained":{"rate":%d,"window":"day"}}`, c.partner),
					"system/p/t": fmt.Sprintf(`{"sustained":{"rate":%d,"window":"day"},"scope":"user"}`, c.us),
				})
				s := engine.New(engine.Options{Shards: shards})
				var tokens [64]int64
				var wg sync.WaitGroup
				for g := range 64 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						var sc Scratch
						call := Call{Path: []byte("system/p/t"), Subject: fmt.Appendf(nil, "u%d", g), HasCost: true, Cost: 1}
						for i := range 50 {
							if c.costs {
								call.Cost = 1 + int64(rand.New(rand.NewPCG(uint64(g), uint64(i))).IntN(9))
							}
							o, err := tr.Acquire(s, t0, &call, &sc)
							if err != nil {
								t.Error(err)
								return
							}
							if o.Levels != 3 {
								t.Errorf("the call charged %d levels, want 3", o.Levels)
								return
							}
							if o.Allowed == 1 {
								tokens[g] += call.Cost
							}
						}
					}()
				}
				wg.Wait()
				total := int64(0)
				for g, n := range tokens {
					total += n
					if got := levelLeft(t, tr, s, "system/p/t", fmt.Sprintf("u%d", g))[2]; got != c.us-n {
						t.Errorf("user u%d: %d tokens admitted, %d left of %d", g, n, got, c.us)
					}
				}
				switch {
				case c.want >= 0 && total != c.want:
					t.Fatalf("admitted %d tokens, want exactly %d (the tightest level)", total, c.want)
				case c.want < 0 && (total > c.partner || total == 0):
					t.Fatalf("admitted %d tokens; the partner holds %d", total, c.partner)
				}
				// An enforcing parent's limit holds its children: the
				// partner's aggregate is at most the system's.
				partner := min(c.partner, c.system)
				left := levelLeft(t, tr, s, "system/p/t", "u0")
				if left[0] != c.system-total || left[1] != partner-total {
					t.Errorf("system has %d left, partner %d; want %d and %d", left[0], left[1], c.system-total, partner-total)
				}
			})
		}
	}
}

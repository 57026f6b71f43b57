package engine

import (
	"fmt"
	"testing"
	"time"
)

// TestLeasesAcrossALimitChange has two members call one key, the owner and
// a lease holder, at a fixed timeline whose limit is lowered or raised
// halfway (an operator's RL.BUDGET SET, or callers that send another
// inline limit), for every algorithm. Together they never admit more than
// one bucket given the same calls admits, plus one burst: a lease holds
// tokens granted, not a bucket, and a changed limit must not turn it into
// one (it did: raised, the holder admitted every call).
func TestLeasesAcrossALimitChange(t *testing.T) {
	for _, name := range AlgoNames() {
		algo, _ := ParseAlgo(name)
		mk := func(rate, burst int64) Limit {
			if algo.IsWindow() {
				burst = rate
			}
			l, err := NewLimit(algo, rate, time.Second, burst)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		for _, tc := range []struct {
			dir      string
			from, to Limit
		}{
			{"lowered", mk(100, 10), mk(10, 5)},
			{"raised", mk(10, 5), mk(100, 20)},
		} {
			t.Run(fmt.Sprint(name, " ", tc.dir), func(t *testing.T) {
				owner, other, key := leasePair(t)
				single := New(Options{Shards: 4})
				var by [2]int
				alone := 0
				const step = int64(time.Millisecond)
				start := int64(1e12)
				for now := start; now < start+int64(10*time.Second); now += step {
					lim := &tc.from
					if now >= start+int64(5*time.Second) {
						lim = &tc.to
					}
					// The holder calls first at even ms, the owner at odd.
					order := []int{0, 1}
					if (now/step)%2 == 0 {
						order = []int{1, 0}
					}
					for i := 0; i < 3; i++ {
						for _, k := range order {
							s := []*Store{owner, other}[k]
							if s.Acquire(now, Request{Space: SpaceInline, Key: key, Limit: lim, Cost: 1}, 0, false).Allowed {
								by[k]++
							}
							if single.Acquire(now, Request{Space: SpaceInline, Key: key, Limit: lim, Cost: 1}, 0, false).Allowed {
								alone++
							}
						}
					}
					refill(owner, other, now)
					other.Expired(now, func(space Space, k []byte, l *Limit, n int64) { owner.Return(now, space, k, l, n) })
				}
				admitted := by[0] + by[1]
				bound := alone + int(max(tc.from.Burst, tc.to.Burst))
				if admitted > bound {
					t.Fatalf("two members admitted %d (owner %d, holder %d), one bucket %d: over the bound %d", admitted, by[0], by[1], alone, bound)
				}
				if by[1] == 0 {
					t.Fatalf("the holder admitted nothing (owner %d): leases were not exercised", by[0])
				}
			})
		}
	}
}

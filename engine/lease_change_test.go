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
// one (it did: raised, the holder admitted every call). After a lowering
// they admit at most what one bucket of the new limit, full at the change
// and given the calls from then on, admits, plus the holder's share of the
// new burst (⌈burst / 2⌉): a holder keeps no more than that of what it
// held (it once spent all of it: 1000 a second lowered to 10, the two
// admitted 10 + 1000 − ε).
func TestLeasesAcrossALimitChange(t *testing.T) {
	const step = int64(time.Millisecond)
	start := int64(1e12)
	for i := range algorithms {
		algo := Algo(i)
		if algo == Quota {
			continue // a calendar quota is not leased
		}
		name := algorithms[i].name
		mk := func(rate, burst int64) Limit {
			var l Limit
			var err error
			switch {
			case algo == Cell:
				l, err = NewCellLimit(burst-1, rate, 1)
			case algo.IsWindow():
				l, err = NewLimit(algo, rate, time.Second, rate)
			default:
				l, err = NewLimit(algo, rate, time.Second, burst)
			}
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
			{"lowered far", mk(1000, 1000), mk(10, 10)},
			{"raised", mk(10, 5), mk(100, 20)},
		} {
			t.Run(fmt.Sprint(name, " ", tc.dir), func(t *testing.T) {
				owner, other, key := leasePair(t)
				single := New(Options{Shards: 4})
				fresh := New(Options{Shards: 4}) // one bucket of the new limit, full at the change
				var by, after [2]int
				alone, freshAlone := 0, 0
				change := start + int64(5500*time.Millisecond) // mid-window
				for now := start; now < start+int64(10*time.Second); now += step {
					lim := &tc.from
					if now >= change {
						lim = &tc.to
					}
					// The holder calls first at even ms, the owner at odd.
					order := []int{0, 1}
					if (now/step)%2 == 0 {
						order = []int{1, 0}
					}
					call := func(k int) {
						if []*Store{owner, other}[k].Acquire(now, Request{Space: SpaceInline, Key: key, Limit: lim, Cost: 1}, 0, false).Allowed {
							by[k]++
							if now >= change {
								after[k]++
							}
						}
						if single.Acquire(now, Request{Space: SpaceInline, Key: key, Limit: lim, Cost: 1}, 0, false).Allowed {
							alone++
						}
						if now >= change && fresh.Acquire(now, Request{Space: SpaceInline, Key: key, Limit: lim, Cost: 1}, 0, false).Allowed {
							freshAlone++
						}
					}
					// Before the change each calls once in 50 ms, and
					// the holder 300 times just before it, so that it
					// holds tokens (credit, and a grant as large as its
					// demand) when the limit changes; after it, each
					// calls 3 times a ms.
					calls := 3
					if now < change && (now/step)%50 != 0 {
						calls = 0
					} else if now < change {
						calls = 1
					}
					if now == change-step {
						for i := 0; i < 300; i++ {
							call(1)
						}
					}
					for i := 0; i < calls; i++ {
						for _, k := range order {
							call(k)
						}
					}
					refill(owner, other, now)
					other.Expired(now, func(space Space, k []byte, l *Limit, n int64) { owner.Return(now, space, k, l, n) })
				}
				t.Logf("admitted %v, after the change %v; one bucket %d, of the new limit from the change %d", by, after, alone, freshAlone)
				admitted := by[0] + by[1]
				bound := alone + int(max(tc.from.Burst, tc.to.Burst))
				if admitted > bound {
					t.Fatalf("two members admitted %d (owner %d, holder %d), one bucket %d: over the bound %d", admitted, by[0], by[1], alone, bound)
				}
				if tc.to.Burst < tc.from.Burst {
					share := int((tc.to.Burst + 1) / 2)
					if n := after[0] + after[1]; n > freshAlone+share {
						t.Fatalf("after the change two members admitted %d (owner %d, holder %d), one bucket of the new limit full at the change %d: over the bound %d", n, after[0], after[1], freshAlone, freshAlone+share)
					}
				}
				if by[1] == 0 {
					t.Fatalf("the holder admitted nothing (owner %d): leases were not exercised", by[0])
				}
			})
		}
	}
}

// A holder's request for tokens sent under the former limit, answered
// after the holder learned of a lowering, brings tokens from before the
// change: the holder takes in no more of them than its share of the new
// burst leaves, and the owner does not take back tokens returned under a
// limit its bucket no longer has (the change capped them).
func TestTokensFromBeforeALoweringAreCapped(t *testing.T) {
	owner, other, key := leasePair(t)
	old, _ := NewLimit(TokenBucket, 1000, time.Second, 1000)
	lim, _ := NewLimit(TokenBucket, 10, time.Second, 10)
	now := int64(1e12)
	call := func(s *Store, l *Limit) bool {
		return s.Acquire(now, Request{Space: SpaceInline, Key: key, Limit: l, Cost: 1}, 0, false).Allowed
	}
	// The holder spends its credit (500), is refused 100 calls, and asks
	// for the 600 it spent or was asked for.
	for i := 0; i < 600; i++ {
		call(other, &old)
	}
	var ws []Want
	other.Wants(now, func(w *Want) { w.Key = append([]byte(nil), w.Key...); ws = append(ws, *w) })
	if len(ws) != 1 || ws[0].Tokens != 600 || ws[0].Owed != 500 {
		t.Fatalf("wants %+v, want one for 600 tokens owing 500", ws)
	}
	// The limit is lowered; the holder learns it from a call (refused:
	// it holds nothing) before the owner's answer arrives.
	if call(other, &lim) {
		t.Fatal("a holder with no tokens admitted a call")
	}
	got, exp, _, left := owner.Take(now, Request{Space: ws[0].Space, Key: ws[0].Key, Limit: &ws[0].Limit, Cost: ws[0].Tokens}, ws[0].Owed)
	if got != 500 {
		t.Fatalf("the owner granted %d, want the 500 its bucket kept after the credit", got)
	}
	other.Grant(now, ws[0].Space, ws[0].Key, &ws[0].Limit, got, exp, left)
	n := 0
	for i := 0; i < 100; i++ {
		if call(other, &lim) {
			n++
		}
	}
	if share := int((lim.Burst + 1) / 2); n != share {
		t.Fatalf("the holder admitted %d of a grant made under the former limit, want its share %d", n, share)
	}
	// The owner's bucket is empty; 300 tokens returned under the former
	// limit do not go back into it, 3 returned under its own do.
	if call(owner, &lim) {
		t.Fatal("the owner admitted a call from an empty bucket")
	}
	owner.Return(now, SpaceInline, key, &old, 300)
	owner.Return(now, SpaceInline, key, &lim, 3)
	m := 0
	for i := 0; i < 100; i++ {
		if call(owner, &lim) {
			m++
		}
	}
	if m != 3 {
		t.Fatalf("the owner admitted %d after tokens came back, want the 3 returned under its limit", m)
	}
}

// Credit a holder spent under the former limit and had not yet reported
// when it learned of a lowering is not charged to the owner's bucket of
// the new limit: it would put it into debt for calls the old limit
// admitted (100 spent against a burst of 10: ten times its refill).
func TestCreditSpentBeforeALoweringIsNotCharged(t *testing.T) {
	owner, other, key := leasePair(t)
	old, _ := NewLimit(TokenBucket, 1000, time.Second, 1000)
	lim, _ := NewLimit(TokenBucket, 10, time.Second, 10)
	now := int64(1e12)
	for i := 0; i < 100; i++ {
		if !other.Acquire(now, Request{Space: SpaceInline, Key: key, Limit: &old, Cost: 1}, 0, false).Allowed {
			t.Fatal("the holder refused a call within its credit")
		}
	}
	// One call under the new limit, from the credit the holder keeps.
	if !other.Acquire(now, Request{Space: SpaceInline, Key: key, Limit: &lim, Cost: 1}, 0, false).Allowed {
		t.Fatal("the holder refused a call within the share it keeps")
	}
	refill(owner, other, now)
	n := 0
	for i := 0; i < 20; i++ {
		if owner.Acquire(now, Request{Space: SpaceInline, Key: key, Limit: &lim, Cost: 1}, 0, false).Allowed {
			n++
		}
	}
	if n != 9 {
		t.Fatalf("the owner admitted %d of its new burst of 10, want 9 (the holder's one call under it charged)", n)
	}
}

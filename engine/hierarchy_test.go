package engine

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// hierarchy is a 3-level hierarchy as the budget tree charges it: a root
// and a partner aggregate that every call shares, then the bucket of the
// call's user.
type hierarchy struct {
	root, partner, user *Limit
}

func (h hierarchy) reqs(user []byte, cost int64) []Request {
	return []Request{
		{Space: SpaceBudget, Key: []byte("system\x01"), Limit: h.root, Cost: cost},
		{Space: SpaceBudget, Key: []byte("system/p\x01"), Limit: h.partner, Cost: cost},
		{Space: SpaceBudget, Key: user, Limit: h.user, Cost: cost},
	}
}

// left returns the tokens left in a bucket, as a peek sees them.
func left(s *Store, r Request, now int64) int64 {
	r.Cost = 0
	return s.Acquire(now, r, 0, true).Remaining
}

// hammer runs calls calls of each of 64 goroutines, goroutine g acting for
// user u<g>, all at time now; cost(g, i) is the cost of call i of g. It
// returns each goroutine's admitted calls and tokens.
func hammer(s *Store, h hierarchy, now int64, calls int, cost func(g, i int) int64) (admitted, tokens [64]int64) {
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user := fmt.Appendf(nil, "system/p/t#u%d", g)
			for i := range calls {
				c := cost(g, i)
				r := s.AcquireAll(now, h.reqs(user, c), 0, false)
				if r.Allowed {
					admitted[g]++
					tokens[g] += c
				}
			}
		}()
	}
	wg.Wait()
	return admitted, tokens
}

// TestConcurrentHierarchyAdmitsExactlyTheTightestLevel runs 64 goroutines
// of one-token calls against a 3-level hierarchy with no refill, for each
// level in turn being the tightest and for stores of 1, 2, 8 and the
// default number of shards (so that levels share shards or not, and are
// locked in and out of ascending order). Exactly the tightest level's
// capacity is admitted, and every level holds exactly what the admitted
// calls took: a call refused by one level took nothing from the others.
func TestConcurrentHierarchyAdmitsExactlyTheTightestLevel(t *testing.T) {
	day := 24 * time.Hour
	cases := []struct {
		name                string
		root, partner, user int64 // bursts
		want                int64
	}{
		{"root", 300, 700, 20, 300},
		{"partner", 5000, 700, 20, 700},
		{"users", 5000, 700, 5, 64 * 5},
	}
	for _, c := range cases {
		for _, shards := range []int{1, 2, 8, 0} {
			t.Run(fmt.Sprintf("%s/shards=%d", c.name, shards), func(t *testing.T) {
				s := New(Options{Shards: shards})
				h := hierarchy{
					root:    mustLimit(t, TokenBucket, c.root, day, c.root),
					partner: mustLimit(t, SlidingWindow, c.partner, day, c.partner),
					user:    mustLimit(t, FixedWindow, c.user, day, c.user),
				}
				admitted, _ := hammer(s, h, t0, 50, func(int, int) int64 { return 1 })
				total := int64(0)
				for g, n := range admitted {
					total += n
					user := fmt.Appendf(nil, "system/p/t#u%d", g)
					if got := left(s, h.reqs(user, 0)[2], t0); got != c.user-n {
						t.Errorf("user u%d: %d admitted, %d left of %d", g, n, got, c.user)
					}
				}
				if total != c.want {
					t.Fatalf("admitted %d, want exactly %d (the tightest level)", total, c.want)
				}
				rs := h.reqs(nil, 0)
				if got := left(s, rs[0], t0); got != c.root-total {
					t.Errorf("root has %d left, want %d", got, c.root-total)
				}
				if got := left(s, rs[1], t0); got != c.partner-total {
					t.Errorf("partner has %d left, want %d", got, c.partner-total)
				}
			})
		}
	}
}

// TestConcurrentHierarchyDeniedCallsConsumeNothing is the same with costs
// of 1 to 9 drawn per call, so that calls are refused by every level while
// others still fit: each level has given out exactly the tokens of the
// admitted calls, no more (no level over its capacity) and no less
// (nothing taken by a refused call).
func TestConcurrentHierarchyDeniedCallsConsumeNothing(t *testing.T) {
	day := 24 * time.Hour
	for _, shards := range []int{1, 8, 0} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			s := New(Options{Shards: shards})
			h := hierarchy{
				root:    mustLimit(t, TokenBucket, 2000, day, 2000),
				partner: mustLimit(t, TokenBucket, 1500, day, 1500),
				user:    mustLimit(t, TokenBucket, 40, day, 40),
			}
			_, tokens := hammer(s, h, t0, 40, func(g, i int) int64 {
				return 1 + int64(rand.New(rand.NewPCG(uint64(g), uint64(i))).IntN(9))
			})
			total := int64(0)
			for g, n := range tokens {
				total += n
				user := fmt.Appendf(nil, "system/p/t#u%d", g)
				if got := left(s, h.reqs(user, 0)[2], t0); got != 40-n {
					t.Errorf("user u%d: %d tokens admitted, %d left of 40", g, n, got)
				}
			}
			if total > 1500 || total == 0 {
				t.Fatalf("admitted %d tokens; the partner holds 1500", total)
			}
			rs := h.reqs(nil, 0)
			if got := left(s, rs[0], t0); got != 2000-total {
				t.Errorf("root has %d left, want %d", got, 2000-total)
			}
			if got := left(s, rs[1], t0); got != 1500-total {
				t.Errorf("partner has %d left, want %d", got, 1500-total)
			}
		})
	}
}

// TestAcquireAllDecidesAgainAfterRelocking holds a wide level's shard while
// a two-level call locks its narrow level (the shard above) first: the call
// must let the narrow shard go to wait for the wide one, and once it has
// both again, decide the narrow level afresh. The narrow bucket's one token
// is taken by another call meanwhile, so the call is refused, and the wide
// level keeps its tokens.
func TestAcquireAllDecidesAgainAfterRelocking(t *testing.T) {
	s := New(Options{Shards: 64})
	wide := mustLimit(t, TokenBucket, 1, time.Hour, 100)
	narrow := mustLimit(t, TokenBucket, 1, time.Hour, 1)
	var wk, nk []byte
	for i := 0; wk == nil || nk == nil; i++ {
		k := fmt.Appendf(nil, "k%d", i)
		if s.hash(SpaceInline, k).shard == 3 {
			wk = k
		}
		if s.hash(SpaceInline, k).shard == 40 {
			nk = k
		}
	}
	reqs := []Request{{Key: wk, Limit: wide, Cost: 1}, {Key: nk, Limit: narrow, Cost: 1}}
	// The call decided on nk, let its shard go, and waits for wk's.
	r := acquireAroundRelock(s, 3, reqs, func() {
		if r := s.Acquire(t0, Request{Key: nk, Limit: narrow, Cost: 1}, 0, false); !r.Allowed {
			t.Errorf("the narrow bucket's token: %+v", r)
		}
	})
	if r.Allowed || r.Level != 1 {
		t.Fatalf("the call was decided on the narrow level as it was before it let go: %+v", r)
	}
	if got := left(s, reqs[0], t0); got != 100 {
		t.Errorf("wide level has %d left, want 100", got)
	}
	if got := left(s, reqs[1], t0); got != 0 {
		t.Errorf("narrow level has %d left, want 0", got)
	}
}

// A bucket found before the call let its shard go may be gone when it
// takes the shard again (swept, reset), and another bucket moved into its
// slot: the call must decide on what is there now, not write through the
// slot it saw first.
func TestAcquireAllForgetsWhatItFoundBeforeRelocking(t *testing.T) {
	s := New(Options{Shards: 64})
	wide := mustLimit(t, TokenBucket, 1, time.Hour, 100)
	narrow := mustLimit(t, TokenBucket, 1, time.Hour, 5)
	var wk, nk, other []byte
	for i := 0; wk == nil || nk == nil || other == nil; i++ {
		k := fmt.Appendf(nil, "k%d", i)
		switch sh := s.hash(SpaceInline, k).shard; {
		case sh == 3 && wk == nil:
			wk = k
		case sh == 40 && nk == nil:
			nk = k
		case sh == 40 && other == nil:
			other = k
		}
	}
	// nk first, then other: removing nk moves other into its slot.
	for _, k := range [][]byte{nk, other} {
		if r := s.Acquire(t0, Request{Key: k, Limit: narrow, Cost: 1}, 0, false); !r.Allowed {
			t.Fatal(r)
		}
	}
	reqs := []Request{{Key: wk, Limit: wide, Cost: 1}, {Key: nk, Limit: narrow, Cost: 1}}
	// The call found nk, let its shard go, and waits for wk's.
	r := acquireAroundRelock(s, 3, reqs, func() {
		if !s.Reset(SpaceInline, nk) {
			t.Error("nk was not there to reset")
		}
	})
	if !r.Allowed {
		t.Fatalf("the call: %+v", r)
	}
	if got := left(s, Request{Key: other, Limit: narrow}, t0); got != 4 {
		t.Errorf("another bucket of the shard has %d left, want 4: the call charged the slot it saw first", got)
	}
	if got := left(s, reqs[1], t0); got != 4 {
		t.Errorf("the narrow level has %d left, want 4 (a fresh bucket, one call)", got)
	}
}

// acquireAroundRelock runs AcquireAll of reqs while shard busy is held, so
// that the call lets its other shards go to wait for it (lockShard); during
// runs at that moment, then busy is let go and the call's result returned.
func acquireAroundRelock(s *Store, busy uint32, reqs []Request, during func()) Result {
	waiting := make(chan struct{})
	relockHook = func() { close(waiting) }
	defer func() { relockHook = nil }()
	s.shards[busy].mu.Lock()
	done := make(chan Result)
	go func() { done <- s.AcquireAll(t0, reqs, 0, false) }()
	<-waiting
	during()
	s.shards[busy].mu.Unlock()
	return <-done
}

// TestPeekAmongReportsTheChosenLevels peeks at a hierarchy whose tightest
// level is left out: the answer is the tightest of the chosen ones, its
// index is the one in the full list, and nothing is charged.
func TestPeekAmongReportsTheChosenLevels(t *testing.T) {
	s := New(Options{})
	mk := func(burst int64) *Limit {
		l, err := NewLimit(TokenBucket, burst, time.Hour, burst)
		if err != nil {
			t.Fatal(err)
		}
		return &l
	}
	h := hierarchy{root: mk(100), partner: mk(50), user: mk(3)}
	now := time.Unix(1_800_000_000, 0).UnixNano()
	reqs := h.reqs([]byte("system/p/t#u"), 2)
	if r := s.AcquireAll(now, reqs, 0, false); !r.Allowed || r.Level != 2 || r.Remaining != 1 {
		t.Fatalf("charge: %+v", r)
	}
	r, ok := s.PeekAmong(now, reqs, 1<<0|1<<1)
	if !ok || r.Level != 1 || r.Remaining != 48 || r.Limit != 50 {
		t.Fatalf("peek among root and partner: %+v %v, want partner (level 1) with 48 of 50", r, ok)
	}
	if r, ok := s.PeekAmong(now, reqs, 1<<0); !ok || r.Level != 0 || r.Remaining != 98 {
		t.Fatalf("peek among root: %+v %v", r, ok)
	}
	if _, ok := s.PeekAmong(now, reqs, 0); ok {
		t.Fatal("peek among none answered")
	}
	for i, want := range []int64{98, 48, 1} {
		if got := left(s, reqs[i], now); got != want {
			t.Fatalf("level %d has %d left after the peeks, want %d", i, got, want)
		}
	}
}

package engine

import (
	"math/rand"
	"testing"
	"time"
)

// t0 is midnight UTC, so windows of a second, minute, hour and day all
// start at t0.
var t0 = int64(19676 * 86400 * time.Second)

const (
	ms  = time.Millisecond
	sec = time.Second
)

type step struct {
	at        time.Duration // offset from t0
	cost      int64
	wait      time.Duration // WAIT; 0 for none
	allowed   bool
	remaining int64
	retry     time.Duration // RetryAfter; -1 for never
	reset     time.Duration // ResetAfter; -2 to skip the check
	hold      time.Duration // Wait (reservation delay)
}

func mustLimit(t testing.TB, a Algo, rate int64, per time.Duration, burst int64) *Limit {
	t.Helper()
	l, err := NewLimit(a, rate, per, burst)
	if err != nil {
		t.Fatal(err)
	}
	return &l
}

// run drives one bucket through steps on the fixed timeline.
func run(t *testing.T, l *Limit, steps []step) {
	t.Helper()
	s := New(Options{Shards: 4})
	for i, st := range steps {
		r := s.Acquire(t0+int64(st.at), Request{Key: []byte("k"), Limit: l, Cost: st.cost}, int64(st.wait), false)
		if r.Allowed != st.allowed || r.Remaining != st.remaining || r.RetryAfter != int64(st.retry) ||
			(st.reset != -2 && r.ResetAfter != int64(st.reset)) || r.Wait != int64(st.hold) {
			t.Fatalf("step %d (at %v cost %d): got allowed=%v remaining=%d retry=%v reset=%v wait=%v; want allowed=%v remaining=%d retry=%v reset=%v wait=%v",
				i, st.at, st.cost, r.Allowed, r.Remaining, time.Duration(r.RetryAfter), time.Duration(r.ResetAfter), time.Duration(r.Wait),
				st.allowed, st.remaining, st.retry, st.reset, st.hold)
		}
		if r.Limit != l.Burst {
			t.Fatalf("step %d: limit %d, want %d", i, r.Limit, l.Burst)
		}
	}
}

func TestTokenBucketFamilyBurstRefillCost(t *testing.T) {
	for _, a := range []Algo{TokenBucket, GCRA, LeakyBucket} {
		t.Run(a.String(), func(t *testing.T) {
			// 10 per second, burst 5: T = 100ms.
			run(t, mustLimit(t, a, 10, sec, 5), []step{
				{at: 0, cost: 1, allowed: true, remaining: 4, reset: 100 * ms},
				{at: 0, cost: 1, allowed: true, remaining: 3, reset: 200 * ms},
				{at: 0, cost: 3, allowed: true, remaining: 0, reset: 500 * ms},
				{at: 0, cost: 1, allowed: false, remaining: 0, retry: 100 * ms, reset: 500 * ms},
				// refill to the exact token: one nanosecond early is denied
				{at: 100*ms - 1, cost: 1, allowed: false, remaining: 0, retry: 1, reset: 400*ms + 1},
				{at: 100 * ms, cost: 1, allowed: true, remaining: 0, reset: 500 * ms},
				// COST 0 reports without consuming
				{at: 300 * ms, cost: 0, allowed: true, remaining: 2, reset: 300 * ms},
				{at: 300 * ms, cost: 2, allowed: true, remaining: 0, reset: 500 * ms},
				// COST above capacity can never be admitted
				{at: 300 * ms, cost: 6, allowed: false, remaining: 0, retry: -1, reset: 500 * ms},
				{at: 10 * sec, cost: 6, allowed: false, remaining: 5, retry: -1, reset: 0},
				// COST > 1 waits for enough tokens
				{at: 10 * sec, cost: 5, allowed: true, remaining: 0, reset: 500 * ms},
				{at: 10*sec + 150*ms, cost: 2, allowed: false, remaining: 1, retry: 50 * ms, reset: 350 * ms},
				{at: 10*sec + 200*ms, cost: 2, allowed: true, remaining: 0, reset: 500 * ms},
			})
		})
	}
}

func TestFixedWindow(t *testing.T) {
	run(t, mustLimit(t, FixedWindow, 3, sec, 3), []step{
		{at: 0, cost: 1, allowed: true, remaining: 2, reset: sec},
		{at: 10 * ms, cost: 2, allowed: true, remaining: 0, reset: 990 * ms},
		{at: 500 * ms, cost: 1, allowed: false, remaining: 0, retry: 500 * ms, reset: 500 * ms},
		{at: 500 * ms, cost: 4, allowed: false, remaining: 0, retry: -1, reset: 500 * ms},
		{at: 500 * ms, cost: 0, allowed: true, remaining: 0, reset: 500 * ms},
		{at: sec, cost: 3, allowed: true, remaining: 0, reset: sec},
		{at: 3 * sec, cost: 0, allowed: true, remaining: 3, reset: 0},
	})
}

// TestFixedWindowBoundaryDoubleBurst documents the textbook weakness: a
// client can spend a whole window's allowance at the end of one window and
// again at the start of the next, 2×RATE within a millisecond.
func TestFixedWindowBoundaryDoubleBurst(t *testing.T) {
	s := New(Options{Shards: 1})
	l := mustLimit(t, FixedWindow, 10, sec, 10)
	admitted := 0
	for _, at := range []time.Duration{999 * ms, sec} {
		for i := 0; i < 15; i++ {
			if s.Acquire(t0+int64(at), Request{Key: []byte("k"), Limit: l, Cost: 1}, 0, false).Allowed {
				admitted++
			}
		}
	}
	if admitted != 20 {
		t.Fatalf("admitted %d across the boundary, want 20 (2×RATE)", admitted)
	}
}

func TestSlidingWindowEstimate(t *testing.T) {
	// limit 10 per second. Fill window 0 with 10, then at 250ms into window 1
	// the estimate is prev×(1−0.25) + cur = 7.5 + cur.
	steps := []step{{at: 0, cost: 10, allowed: true, remaining: 0, reset: 2 * sec}}
	steps = append(steps,
		step{at: 1250 * ms, cost: 0, allowed: true, remaining: 2, reset: 750 * ms},                   // 10 − ⌈7.5⌉
		step{at: 1250 * ms, cost: 2, allowed: true, remaining: 0, reset: 1750 * ms},                  // 9.5 ≤ 10
		step{at: 1250 * ms, cost: 1, allowed: false, remaining: 0, retry: 50 * ms, reset: 1750 * ms}, // 10.5 > 10
		// at 1300ms: 10×0.7 + 2 = 9 → one more fits exactly
		step{at: 1300 * ms, cost: 1, allowed: true, remaining: 0, reset: 1700 * ms},
		step{at: 1300 * ms, cost: 1, allowed: false, remaining: 0, retry: 100 * ms, reset: 1700 * ms},
		// beyond the current window: needs prev(=3)×(1−e) + 8 ≤ 10 in window 2
		// e ≥ 1/3 of window 2: due at 2s + 333.333…ms, rounded up to the ns
		step{at: 1300 * ms, cost: 8, allowed: false, remaining: 0, retry: 1033333334, reset: 1700 * ms},
		step{at: 1300 * ms, cost: 11, allowed: false, remaining: 0, retry: -1, reset: 1700 * ms},
	)
	run(t, mustLimit(t, SlidingWindow, 10, sec, 10), steps)

	// The estimate formula, checked at many offsets against floating point.
	l := mustLimit(t, SlidingWindow, 100, sec, 100)
	for _, prev := range []int64{0, 1, 37, 100} {
		for e := int64(0); e < int64(sec); e += int64(7 * ms) {
			for cur := int64(0); cur <= 100-prev/2; cur += 13 {
				est := float64(prev)*(1-float64(e)/float64(sec)) + float64(cur)
				o := decide(l, state{a: 1, b: prev, c: cur}, true, int64(sec)+e, 1, 0)
				if want := est+1 <= 100+1e-9; o.ok != want {
					t.Fatalf("prev=%d cur=%d e=%d: ok=%v, estimate %.6f", prev, cur, e, o.ok, est)
				}
			}
		}
	}
}

func TestLeakyBucketWaitSpacesEvenly(t *testing.T) {
	l := mustLimit(t, LeakyBucket, 10, sec, 10)
	var steps []step
	for i := 0; i < 5; i++ {
		steps = append(steps, step{at: 0, cost: 1, wait: sec, allowed: true, remaining: int64(9 - i),
			reset: time.Duration(i+1) * 100 * ms, hold: time.Duration(i) * 100 * ms})
	}
	// without WAIT the same bucket is a meter: admitted at once while it has room
	steps = append(steps, step{at: 0, cost: 1, allowed: true, remaining: 4, reset: 600 * ms})
	run(t, l, steps)

	// A token bucket with WAIT spends its burst at once, then spaces the rest.
	tb := mustLimit(t, TokenBucket, 10, sec, 2)
	run(t, tb, []step{
		{at: 0, cost: 1, wait: sec, allowed: true, remaining: 1, reset: 100 * ms},
		{at: 0, cost: 1, wait: sec, allowed: true, remaining: 0, reset: 200 * ms},
		{at: 0, cost: 1, wait: sec, allowed: true, remaining: 0, reset: 300 * ms, hold: 100 * ms},
		{at: 0, cost: 1, wait: sec, allowed: true, remaining: 0, reset: 400 * ms, hold: 200 * ms},
		{at: 0, cost: 1, wait: 250 * ms, allowed: false, remaining: 0, retry: 300 * ms, reset: 400 * ms},
	})
}

func TestWaitReservesWindows(t *testing.T) {
	run(t, mustLimit(t, FixedWindow, 2, sec, 2), []step{
		{at: 900 * ms, cost: 2, allowed: true, remaining: 0, reset: 100 * ms},
		{at: 900 * ms, cost: 1, wait: 50 * ms, allowed: false, remaining: 0, retry: 100 * ms, reset: 100 * ms},
		{at: 900 * ms, cost: 1, wait: 200 * ms, allowed: true, remaining: 1, reset: 1100 * ms, hold: 100 * ms},
		// the reservation belongs to the next window: nothing more fits now
		{at: 950 * ms, cost: 1, allowed: false, remaining: 1, retry: 50 * ms, reset: 1050 * ms},
		{at: sec, cost: 1, allowed: true, remaining: 0, reset: sec},
	})
}

// TestNoDrift takes tokens greedily at random instants over a simulated
// hour: the total admitted must be exactly BURST + ⌊RATE×elapsed/WINDOW⌋.
// Samples come often enough that the bucket never caps (a full bucket
// rightly wastes refill), so any shortfall or excess is arithmetic drift.
func TestNoDrift(t *testing.T) {
	cases := []struct {
		rate  int64
		per   time.Duration
		burst int64
		span  time.Duration
	}{
		{100000, sec, 100000, time.Hour},
		{1000, sec, 1000, time.Hour},
		{3, sec, 3, time.Hour},
		{7, 3 * sec, 2, time.Hour},
		{1, 24 * time.Hour, 2, time.Hour},
		{1, 24 * time.Hour, 2, 400 * 24 * time.Hour},
		{999983, 24 * time.Hour, 1000000, time.Hour},
	}
	for _, c := range cases {
		for _, a := range []Algo{TokenBucket, GCRA, LeakyBucket} {
			l := mustLimit(t, a, c.rate, c.per, c.burst)
			s := New(Options{Shards: 1})
			rng := rand.New(rand.NewSource(1))
			var total int64
			at := int64(0)
			for at < int64(c.span) {
				now := t0 + at
				r := s.Acquire(now, Request{Key: []byte("k"), Limit: l, Cost: 0}, 0, true)
				if r.Remaining > 0 {
					if !s.Acquire(now, Request{Key: []byte("k"), Limit: l, Cost: r.Remaining}, 0, false).Allowed {
						t.Fatalf("%v %d/%v: remaining %d not admitted", a, c.rate, c.per, r.Remaining)
					}
					total += r.Remaining
				}
				at += rng.Int63n(int64(c.span)/50000 + 1)
			}
			end := t0 + int64(c.span)
			r := s.Acquire(end, Request{Key: []byte("k"), Limit: l, Cost: 0}, 0, true)
			total += r.Remaining
			// tokens accrued: ⌊rate×span/per⌋ beyond the initial burst
			want := c.burst + int64(float64(c.rate)*float64(c.span)/float64(c.per)+1e-9)
			if c.rate == 999983 { // exact: 999983×3600/86400 = 41665.958…
				want = c.burst + 41665
			}
			if total != want {
				t.Errorf("%v %d per %v burst %d over %v: admitted %d, want %d", a, c.rate, c.per, c.burst, c.span, total, want)
			}
		}
	}
}

func TestOneTokenPerDayBoundary(t *testing.T) {
	run(t, mustLimit(t, TokenBucket, 1, 24*time.Hour, 1), []step{
		{at: 0, cost: 1, allowed: true, remaining: 0, reset: 24 * time.Hour},
		{at: 24*time.Hour - 1, cost: 1, allowed: false, remaining: 0, retry: 1, reset: 1},
		{at: 24 * time.Hour, cost: 1, allowed: true, remaining: 0, reset: 24 * time.Hour},
	})
}

func TestRescale(t *testing.T) {
	s := New(Options{Shards: 1})
	key := []byte("k")
	big := mustLimit(t, TokenBucket, 10, sec, 10)
	acq := func(at time.Duration, l *Limit, cost int64) Result {
		return s.Acquire(t0+int64(at), Request{Key: key, Limit: l, Cost: cost}, 0, false)
	}
	acq(0, big, 6) // 4 left
	// A smaller capacity caps the tokens: 4 → 2.
	small := mustLimit(t, TokenBucket, 10, sec, 2)
	if r := acq(0, small, 0); r.Remaining != 2 || r.Limit != 2 {
		t.Fatalf("after shrink: %+v", r)
	}
	// A larger capacity grants nothing: 4 tokens stay 4, no free refill.
	huge := mustLimit(t, TokenBucket, 100, sec, 50)
	if r := acq(0, huge, 0); r.Remaining != 4 {
		t.Fatalf("after grow: remaining %d, want 4", r.Remaining)
	}
	if r := acq(0, huge, 4); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("taking the 4: %+v", r)
	}
	// Refill then runs at the new rate: 100/s → 1 token per 10ms.
	if r := acq(10*ms, huge, 0); r.Remaining != 1 {
		t.Fatalf("after 10ms at 100/s: remaining %d", r.Remaining)
	}
	// Across families: token bucket with 1 left → fixed window of 5: 4 used.
	fw := mustLimit(t, FixedWindow, 5, sec, 5)
	if r := acq(10*ms, fw, 0); r.Remaining != 1 {
		t.Fatalf("into fixed window: %+v", r)
	}
	if r := acq(10*ms, fw, 2); r.Allowed {
		t.Fatalf("fixed window admitted beyond the carried tokens: %+v", r)
	}
	if r := acq(10*ms, fw, 1); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("fixed window refused the carried token: %+v", r)
	}
	// And the stored limit follows the last admitted call.
	if got, _ := s.Limit(SpaceInline, key); got.Algo != FixedWindow || got.Rate != 5 {
		t.Fatalf("stored limit %+v", got)
	}
}

func TestRescaleEveryPair(t *testing.T) {
	limits := []*Limit{
		mustLimit(t, TokenBucket, 10, sec, 10), mustLimit(t, GCRA, 5, sec, 20),
		mustLimit(t, LeakyBucket, 3, sec, 3), mustLimit(t, FixedWindow, 8, sec, 8),
		mustLimit(t, SlidingWindow, 12, sec, 12),
	}
	for _, from := range limits {
		for _, to := range limits {
			s := New(Options{Shards: 1})
			key := []byte("k")
			s.Acquire(t0, Request{Key: key, Limit: from, Cost: 3}, 0, false)
			before := s.Acquire(t0, Request{Key: key, Limit: from, Cost: 0}, 0, true).Remaining
			after := s.Acquire(t0, Request{Key: key, Limit: to, Cost: 0}, 0, true).Remaining
			if want := min(before, to.Burst); after != want {
				t.Errorf("%v→%v: remaining %d → %d, want %d", from.Algo, to.Algo, before, after, want)
			}
		}
	}
}

func TestGCRAAndTokenBucketAdmitAlike(t *testing.T) {
	a := mustLimit(t, TokenBucket, 7, sec, 4)
	b := mustLimit(t, GCRA, 7, sec, 4)
	sa, sb := New(Options{Shards: 1}), New(Options{Shards: 1})
	rng := rand.New(rand.NewSource(2))
	now := t0
	for i := 0; i < 20000; i++ {
		now += rng.Int63n(int64(300 * ms))
		cost := rng.Int63n(6)
		ra := sa.Acquire(now, Request{Key: []byte("k"), Limit: a, Cost: cost}, 0, false)
		rb := sb.Acquire(now, Request{Key: []byte("k"), Limit: b, Cost: cost}, 0, false)
		if ra != rb {
			t.Fatalf("step %d: token_bucket %+v, gcra %+v", i, ra, rb)
		}
	}
}

func TestNewLimitErrors(t *testing.T) {
	cases := []struct {
		a       Algo
		rate    int64
		per     time.Duration
		burst   int64
		wantArg string
	}{
		{TokenBucket, 0, sec, 1, "RATE"},
		{TokenBucket, -5, sec, 1, "RATE"},
		{TokenBucket, MaxRate + 1, sec, 1, "RATE"},
		{TokenBucket, 1, 0, 1, "PER"},
		{TokenBucket, 1, MaxWindow + 1, 1, "PER"},
		{TokenBucket, 1, sec, 0, "BURST"},
		{TokenBucket, 1, MaxWindow, MaxBurst, "BURST"},
		{FixedWindow, 10, sec, 20, "BURST"},
		{Cell, 10, sec, 10, "ALGO"},
	}
	for _, c := range cases {
		_, err := NewLimit(c.a, c.rate, c.per, c.burst)
		ae, ok := err.(*ArgError)
		if !ok || ae.Arg != c.wantArg {
			t.Errorf("NewLimit(%v,%d,%v,%d) = %v, want an error naming %s", c.a, c.rate, c.per, c.burst, err, c.wantArg)
		}
	}
}

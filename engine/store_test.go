package engine

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

func TestCellMatchesRedisCell(t *testing.T) {
	// redis-cell's own table: max_burst 4 (limit 5), 1 per second.
	l, err := NewCellLimit(4, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		at        time.Duration
		qty       int64
		remaining int64
		reset     time.Duration
		retry     time.Duration // -1 when none
		limited   bool
	}{
		{0, 6, 5, 0, -1, true},
		{0, 1, 4, sec, -1, false},
		{0, 1, 3, 2 * sec, -1, false},
		{0, 1, 2, 3 * sec, -1, false},
		{0, 1, 1, 4 * sec, -1, false},
		{0, 1, 0, 5 * sec, -1, false},
		{0, 1, 0, 5 * sec, sec, true},
		{3000 * ms, 1, 2, 3000 * ms, -1, false},
		{3100 * ms, 1, 1, 3900 * ms, -1, false},
		{4000 * ms, 1, 1, 4000 * ms, -1, false},
		{8000 * ms, 1, 4, 1000 * ms, -1, false},
		{9500 * ms, 1, 4, 1000 * ms, -1, false},
		{9500 * ms, 0, 4, sec, -1, false},
		{9500 * ms, 2, 2, 3 * sec, -1, false},
		{9500 * ms, 5, 2, 3 * sec, 3 * sec, true},
	}
	s := New(Options{Shards: 1})
	for i, c := range cases {
		r := s.Acquire(t0+int64(c.at), Request{Key: []byte("foo"), Limit: &l, Cost: c.qty}, 0, false)
		retry := r.RetryAfter
		if r.Allowed {
			retry = -1
		}
		if r.Allowed == c.limited || r.Remaining != c.remaining || r.ResetAfter != int64(c.reset) || retry != int64(c.retry) || r.Limit != 5 {
			t.Fatalf("case %d: got %+v, want remaining=%d reset=%v retry=%v limited=%v", i, r, c.remaining, c.reset, c.retry, c.limited)
		}
	}
}

func TestAcquireAllIsAllOrNothing(t *testing.T) {
	s := New(Options{Shards: 8})
	wide := mustLimit(t, TokenBucket, 1, time.Hour, 100)
	narrow := mustLimit(t, TokenBucket, 1, time.Hour, 3)
	reqs := []Request{{Key: []byte("system"), Limit: wide, Cost: 1}, {Key: []byte("system/t"), Limit: narrow, Cost: 1}}
	for i := 0; i < 3; i++ {
		if r := s.AcquireAll(t0, reqs, 0, false); !r.Allowed || r.Level != 1 || r.Remaining != int64(2-i) {
			t.Fatalf("call %d: %+v", i, r)
		}
	}
	r := s.AcquireAll(t0, reqs, 0, false)
	if r.Allowed || r.Level != 1 || r.RetryAfter != int64(time.Hour) {
		t.Fatalf("4th call: %+v", r)
	}
	// The denied call took nothing from the wide level.
	if got := s.Acquire(t0, Request{Key: []byte("system"), Limit: wide}, 0, true).Remaining; got != 97 {
		t.Fatalf("wide level has %d, want 97", got)
	}
	// A level that can never admit wins over one that merely must wait.
	reqs[0].Cost, reqs[1].Cost = 101, 101
	if r := s.AcquireAll(t0, reqs, 0, false); r.RetryAfter != -1 {
		t.Fatalf("cost above every capacity: %+v", r)
	}
}

func TestConcurrentOneKeyAdmitsExactlyBurst(t *testing.T) {
	s := New(Options{})
	l := mustLimit(t, TokenBucket, 1, 24*time.Hour, 1000) // near-zero refill
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				if s.Acquire(time.Now().UnixNano(), Request{Key: []byte("hot"), Limit: l, Cost: 1}, 0, false).Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if admitted.Load() != 1000 {
		t.Fatalf("admitted %d, want exactly BURST=1000", admitted.Load())
	}
}

func TestConcurrentMultiLevelNoTornState(t *testing.T) {
	s := New(Options{})
	day := 24 * time.Hour
	levels := []*Limit{mustLimit(t, TokenBucket, 1, day, 5000), mustLimit(t, SlidingWindow, 700, day, 700), mustLimit(t, FixedWindow, 900, day, 900)}
	keys := [][]byte{[]byte("a"), []byte("a/b"), []byte("a/b/c")}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reqs := make([]Request, 3)
			for i := 0; i < 50; i++ {
				for j := range reqs {
					reqs[j] = Request{Key: keys[j], Limit: levels[j], Cost: 1}
				}
				if s.AcquireAll(t0, reqs, 0, false).Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if admitted.Load() != 700 {
		t.Fatalf("admitted %d, want 700 (the tightest level)", admitted.Load())
	}
	for j, want := range []int64{5000 - 700, 0, 900 - 700} {
		if got := s.Acquire(t0, Request{Key: keys[j], Limit: levels[j]}, 0, true).Remaining; got != want {
			t.Errorf("level %d has %d left, want %d", j, got, want)
		}
	}
}

func TestSweepForgetsFullBuckets(t *testing.T) {
	s := New(Options{Shards: 4})
	l := mustLimit(t, TokenBucket, 10, sec, 10)
	for i := 0; i < 10000; i++ {
		s.Acquire(t0, Request{Key: []byte(fmt.Sprintf("key:%d", i)), Limit: l, Cost: 1}, 0, false)
	}
	if s.Len() != 10000 {
		t.Fatalf("len %d", s.Len())
	}
	if n := s.Sweep(t0+int64(50*ms), 1<<20); n != 0 || s.Len() != 10000 {
		t.Fatalf("swept %d buckets that were not yet full", n)
	}
	if n := s.Sweep(t0+int64(100*ms), 1<<20); n != 10000 || s.Len() != 0 {
		t.Fatalf("swept %d, len %d; want all 10000 gone", n, s.Len())
	}
	// Forgetting lost nothing: a key comes back full.
	if r := s.Acquire(t0+int64(100*ms), Request{Key: []byte("key:1"), Limit: l, Cost: 0}, 0, true); r.Remaining != 10 {
		t.Fatalf("remaining %d after sweep", r.Remaining)
	}
	for i := range s.shards {
		if sh := &s.shards[i]; len(sh.index) != minIndex || sh.live != 0 {
			t.Fatalf("shard kept index %d, %d key bytes after emptying", len(sh.index), sh.live)
		}
	}
}

func TestMaxBucketsEvictsFullFirst(t *testing.T) {
	s := New(Options{Shards: 1, MaxBuckets: 100})
	l := mustLimit(t, TokenBucket, 1, sec, 1)
	slow := mustLimit(t, TokenBucket, 1, time.Hour, 1)
	for i := 0; i < 50; i++ {
		s.Acquire(t0, Request{Key: []byte(fmt.Sprintf("slow:%d", i)), Limit: slow, Cost: 1}, 0, false)
	}
	for i := 0; i < 50; i++ {
		s.Acquire(t0, Request{Key: []byte(fmt.Sprintf("fast:%d", i)), Limit: l, Cost: 1}, 0, false)
	}
	// Two seconds later the fast buckets are full; a flood of new keys must
	// evict them, not the slow ones, and never exceed the bound.
	now := t0 + int64(2*sec)
	for i := 0; i < 50; i++ {
		s.Acquire(now, Request{Key: []byte(fmt.Sprintf("new:%d", i)), Limit: slow, Cost: 1}, 0, false)
		if s.Len() > 100 {
			t.Fatalf("len %d above the bound", s.Len())
		}
	}
	if full, refused := s.Evictions(), s.Refusals(); full != 50 || refused != 0 {
		t.Fatalf("evictions full=%d, refusals %d, want 50/0", full, refused)
	}
	for i := 0; i < 50; i++ {
		if r := s.Acquire(now, Request{Key: []byte(fmt.Sprintf("slow:%d", i)), Limit: slow}, 0, true); r.Remaining != 0 {
			t.Fatalf("slow:%d was evicted", i)
		}
	}
	// Past the full ones, a new key is refused: no bucket that holds
	// consumption is forgotten, so every key's limit holds.
	for i := 0; i < 10; i++ {
		r := s.Acquire(now, Request{Key: []byte(fmt.Sprintf("more:%d", i)), Limit: slow, Cost: 1}, 0, false)
		if r.Allowed || !r.Refused || r.RetryAfter <= 0 {
			t.Fatalf("a new key at the bound: %+v", r)
		}
	}
	if refused := s.Refusals(); refused != 10 || s.Len() != 100 {
		t.Fatalf("refusals %d, len %d", refused, s.Len())
	}
	for i := 0; i < 50; i++ {
		for _, k := range []string{"slow:", "new:"} {
			if r := s.Acquire(now, Request{Key: []byte(fmt.Sprintf("%s%d", k, i)), Limit: slow, Cost: 1}, 0, false); r.Allowed || r.Refused {
				t.Fatalf("%s%d at its limit: %+v", k, i, r)
			}
		}
	}
	// A multi-level call that needs a new bucket is refused whole: its
	// existing level is not charged either.
	fast := mustLimit(t, TokenBucket, 10, time.Hour, 10)
	s2 := New(Options{Shards: 1, MaxBuckets: 2})
	s2.Acquire(t0, Request{Key: []byte("a"), Limit: fast, Cost: 1}, 0, false)
	s2.Acquire(t0, Request{Key: []byte("b"), Limit: fast, Cost: 1}, 0, false)
	if r := s2.AcquireAll(t0, []Request{{Key: []byte("a"), Limit: fast, Cost: 1}, {Key: []byte("c"), Limit: fast, Cost: 1}}, 0, false); !r.Refused || r.Level != 1 {
		t.Fatalf("a call with a new level at the bound: %+v", r)
	}
	if r := s2.Acquire(t0, Request{Key: []byte("a"), Limit: fast}, 0, true); r.Remaining != 9 {
		t.Fatalf("the existing level of a refused call: %d remaining, want 9", r.Remaining)
	}
	// Once a bucket is full again, a new key takes its place.
	later := now + int64(2*time.Hour)
	if r := s.Acquire(later, Request{Key: []byte("more:0"), Limit: slow, Cost: 1}, 0, false); !r.Allowed {
		t.Fatalf("a new key once buckets refilled: %+v", r)
	}
}

func TestRefundAndReset(t *testing.T) {
	s := New(Options{Shards: 2})
	key := []byte("k")
	l := mustLimit(t, TokenBucket, 10, sec, 10)
	s.Acquire(t0, Request{Key: key, Limit: l, Cost: 7}, 0, false)
	r, found := s.Refund(t0, SpaceInline, key, nil, 2)
	if !found || r.Remaining != 5 {
		t.Fatalf("refund 2: %+v found=%v", r, found)
	}
	// Capped at capacity, and a full bucket is forgotten.
	if r, _ = s.Refund(t0, SpaceInline, key, l, 100); r.Remaining != 10 || s.Len() != 0 {
		t.Fatalf("refund 100: %+v len=%d", r, s.Len())
	}
	if _, found = s.Refund(t0, SpaceInline, []byte("nobody"), nil, 1); found {
		t.Fatal("refund of a missing bucket without a limit found one")
	}
	for _, a := range []Algo{FixedWindow, SlidingWindow, GCRA, LeakyBucket} {
		l := mustLimit(t, a, 10, sec, 10)
		s.Acquire(t0, Request{Key: key, Limit: l, Cost: 6}, 0, false)
		if r, _ := s.Refund(t0, SpaceInline, key, l, 4); r.Remaining != 8 {
			t.Fatalf("%v refund: remaining %d, want 8", a, r.Remaining)
		}
		if !s.Reset(SpaceInline, key) || s.Reset(SpaceInline, key) {
			t.Fatalf("%v: reset should report 1 then 0", a)
		}
	}
	cl, _ := NewCellLimit(4, 1, 1)
	s.Acquire(t0, Request{Key: key, Limit: &cl, Cost: 3}, 0, false)
	if r, _ := s.Refund(t0, SpaceInline, key, nil, 1); r.Remaining != 3 {
		t.Fatalf("cell refund: %+v", r)
	}
}

func TestManyKeysSurviveGrowthShrinkAndCompaction(t *testing.T) {
	s := New(Options{Shards: 2})
	l := mustLimit(t, TokenBucket, 1, time.Hour, 5)
	const n = 50000
	key := func(i int) []byte { return []byte(fmt.Sprintf("user:%07d:with-a-longer-suffix", i)) }
	for i := 0; i < n; i++ {
		s.Acquire(t0, Request{Key: key(i), Limit: l, Cost: int64(i%5 + 1)}, 0, false)
	}
	// Delete four in five: forces shrinking and key-arena compaction.
	for i := 0; i < n; i++ {
		if i%5 != 0 && !s.Reset(SpaceInline, key(i)) {
			t.Fatalf("reset %d missed", i)
		}
	}
	for i := 0; i < n; i += 5 {
		if r := s.Acquire(t0, Request{Key: key(i), Limit: l}, 0, true); r.Remaining != 4 {
			t.Fatalf("key %d: remaining %d, want 4", i, r.Remaining)
		}
	}
	if s.Len() != n/5 {
		t.Fatalf("len %d", s.Len())
	}
}

func TestSpacesAreSeparate(t *testing.T) {
	s := New(Options{Shards: 1})
	l := mustLimit(t, TokenBucket, 1, time.Hour, 2)
	key := []byte("system/p/t")
	s.Acquire(t0, Request{Space: SpaceInline, Key: key, Limit: l, Cost: 2}, 0, false)
	if r := s.Acquire(t0, Request{Space: SpaceBudget, Key: key, Limit: l, Cost: 1}, 0, false); !r.Allowed {
		t.Fatalf("budget bucket shared the inline bucket's tokens: %+v", r)
	}
	if !s.Reset(SpaceBudget, key) || !s.Reset(SpaceInline, key) || s.Len() != 0 {
		t.Fatal("each space should hold its own bucket")
	}
}

func TestRefundOfAWindowReservationKeepsTheWindowFull(t *testing.T) {
	s := New(Options{Shards: 1})
	l := mustLimit(t, FixedWindow, 2, 2*sec, 2)
	key := []byte("fw")
	s.Acquire(t0, Request{Key: key, Limit: l, Cost: 2}, 0, false)
	if r := s.Acquire(t0, Request{Key: key, Limit: l, Cost: 1}, int64(3*sec), false); !r.Allowed || r.Wait != int64(2*sec) {
		t.Fatalf("reservation: %+v", r)
	}
	s.Refund(t0, SpaceInline, key, nil, 1)
	if r := s.Acquire(t0, Request{Key: key, Limit: l, Cost: 1}, 0, false); r.Allowed {
		t.Fatalf("refunding the reservation reopened the full window: %+v", r)
	}
	if r := s.Acquire(t0+int64(2*sec), Request{Key: key, Limit: l, Cost: 2}, 0, false); !r.Allowed {
		t.Fatalf("next window: %+v", r)
	}
}

func TestSyncRecordDrainConsume(t *testing.T) {
	a, b := New(Options{Shards: 4}), New(Options{Shards: 4})
	a.SetSyncing(true)
	l := mustLimit(t, TokenBucket, 1, time.Hour, 10)
	fw := mustLimit(t, FixedWindow, 10, time.Hour, 10)
	a.Acquire(t0, Request{Key: []byte("k"), Limit: l, Cost: 3}, 0, false)
	a.Acquire(t0, Request{Key: []byte("k"), Limit: l, Cost: 2}, 0, false)
	a.Acquire(t0, Request{Key: []byte("k"), Limit: l, Cost: 20}, 0, false) // denied: not recorded
	a.Acquire(t0, Request{Space: SpaceBudget, Key: []byte("w"), Limit: fw, Cost: 4}, 0, false)
	a.Acquire(t0, Request{Key: []byte("peek"), Limit: l, Cost: 4}, 0, true) // dry run: not recorded
	got := map[string]int64{}
	a.Drain(func(space Space, key []byte, lim *Limit, delta int64) {
		got[fmt.Sprintf("%d/%s/%v", space, key, lim.Algo)] = delta
		b.Consume(t0, space, key, lim, delta, 10)
	})
	if len(got) != 2 || got["0/k/token_bucket"] != 5 || got["1/w/fixed_window"] != 4 {
		t.Fatalf("drained %v", got)
	}
	if r := b.Acquire(t0, Request{Key: []byte("k"), Limit: l}, 0, true); r.Remaining != 5 {
		t.Fatalf("peer bucket has %d left, want 5", r.Remaining)
	}
	if r := b.Acquire(t0, Request{Space: SpaceBudget, Key: []byte("w"), Limit: fw}, 0, true); r.Remaining != 6 {
		t.Fatalf("peer window has %d left, want 6", r.Remaining)
	}
	// A second drain finds nothing; debt is capped.
	n := 0
	a.Drain(func(Space, []byte, *Limit, int64) { n++ })
	if n != 0 {
		t.Fatalf("%d deltas after a drain", n)
	}
	b.Consume(t0, SpaceInline, []byte("k"), l, 1000, 10)
	if r := b.Acquire(t0, Request{Key: []byte("k"), Limit: l, Cost: 1}, 0, false); r.Allowed || r.RetryAfter != int64(11*time.Hour) {
		t.Fatalf("debt beyond the cap: %+v (want 10 tokens of debt: 11h to the next token)", r)
	}
	// Off, nothing is recorded.
	a.SetSyncing(false)
	a.Acquire(t0, Request{Key: []byte("z"), Limit: l, Cost: 1}, 0, false)
	a.Drain(func(Space, []byte, *Limit, int64) { n++ })
	if n != 0 {
		t.Fatal("recorded while syncing is off")
	}
}

func TestSyncMessageRoundTrip(t *testing.T) {
	l := mustLimit(t, SlidingWindow, 60, time.Minute, 60)
	cl, _ := NewCellLimit(15, 30, 60)
	msg := []byte{SyncFormat}
	msg = AppendDelta(msg, SpaceInline, []byte("user:1"), l, 7)
	msg = AppendDelta(msg, SpaceBudget, []byte("acme/api#bob"), &cl, 3)
	var got []string
	if err := DecodeDeltas(msg, func(sp Space, key []byte, lim *Limit, d int64) {
		got = append(got, fmt.Sprintf("%d %s %v %d %d %d %d", sp, key, lim.Algo, lim.Rate, lim.Window, lim.Burst, d))
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[0 user:1 sliding_window 60 60000000000 60 7 1 acme/api#bob cell 30 60000000000 16 3]" {
		t.Fatalf("%v", got)
	}
	for _, bad := range [][]byte{msg[:len(msg)-1], msg[1:], {}, {SyncFormat, 9, 0, 1, 1, 1, 1, 1, 'k'}, {SyncFormat, 0, 0, 0, 1, 1, 1, 1, 'k'}} {
		if err := DecodeDeltas(bad, func(Space, []byte, *Limit, int64) {}); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
}

// FuzzDecodeDeltas: arbitrary sync messages never panic, and what decodes
// re-encodes to a message that decodes to the same records.
func FuzzDecodeDeltas(f *testing.F) {
	l, _ := NewLimit(TokenBucket, 10, time.Second, 10)
	f.Add(AppendDelta([]byte{SyncFormat}, SpaceInline, []byte("k"), &l, 3))
	f.Add([]byte{SyncFormat, 0, 5, 1, 1, 1, 1, 1, 'x'})
	records := func(b []byte) ([]string, []byte, error) {
		var out []string
		again := []byte{SyncFormat}
		err := DecodeDeltas(b, func(sp Space, key []byte, lim *Limit, d int64) {
			out = append(out, fmt.Sprintf("%d %q %+v %d", sp, key, *lim, d))
			again = AppendDelta(again, sp, key, lim, d)
		})
		return out, again, err
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		first, again, err := records(b)
		if err != nil {
			return
		}
		second, _, err := records(again)
		if err != nil || fmt.Sprint(first) != fmt.Sprint(second) {
			t.Fatalf("%x decodes to %v, its re-encoding to %v (%v)", b, first, second, err)
		}
	})
}

func TestQuotaCountsPerPeriodOnTopOfTheBase(t *testing.T) {
	s := New(Options{Shards: 2})
	q, err := NewQuotaLimit(10, 4)
	if err != nil {
		t.Fatal(err)
	}
	day := int64(24 * time.Hour)
	req := func(cost, base int64, start int64) Request {
		return Request{Space: SpaceQuota, Key: []byte("acme"), Limit: &q, Cost: cost, PeriodStart: start, PeriodEnd: start + day, Base: base}
	}
	pending := func() string {
		var got []string
		s.PendingQuota(func(key []byte, lim *Limit, start, end, n int64) {
			got = append(got, fmt.Sprintf("%s w%d %d %d", key, lim.Window, end-start, n))
		})
		return fmt.Sprint(got)
	}
	if r := s.Acquire(t0, req(4, 5, t0), 0, false); !r.Allowed || r.Remaining != 1 || r.ResetAfter != day {
		t.Fatalf("4 on a base of 5: %+v", r)
	}
	if r := s.Acquire(t0+1, req(2, 5, t0), 0, false); r.Allowed || r.RetryAfter != day-1 {
		t.Fatalf("2 more (11 > 10): %+v", r)
	}
	if r := s.Acquire(t0, req(11, 0, t0), 0, false); r.Allowed || r.RetryAfter != -1 {
		t.Fatalf("above the quota: %+v", r)
	}
	// The count stays until it is settled, however often it is read.
	if got, again := pending(), pending(); got != fmt.Sprintf("[acme w4 %d 4]", day) || again != got {
		t.Fatalf("pending %v then %v", got, again)
	}
	// One more admitted while 4 are being committed: settling the 4
	// leaves it.
	if r := s.Acquire(t0, req(1, 5, t0), 0, false); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("the 10th: %+v", r)
	}
	s.SettleQuota([]byte("acme"), t0, 4)
	if n := s.QuotaCount([]byte("acme"), t0); n != 1 {
		t.Fatalf("after settling 4 of 5: %d", n)
	}
	s.SettleQuota([]byte("acme"), t0, 1)
	if got := pending(); got != "[]" {
		t.Fatalf("all settled, still pending %v", got)
	}
	// Committed: the base carries the count now.
	if r := s.Acquire(t0, req(1, 10, t0), 0, false); r.Allowed {
		t.Fatalf("base 10 of 10: %+v", r)
	}
	// A refund goes below the committed base, never below zero used.
	committed := req(0, 10, t0)
	if r := s.RefundQuota(t0, &committed, 3); r.Remaining != 3 {
		t.Fatalf("refund 3: %+v", r)
	}
	if r := s.RefundQuota(t0, &committed, 100); r.Remaining != 10 || s.QuotaUsed(&committed) != 0 {
		t.Fatalf("refund all: %+v", r)
	}
	if got := pending(); got != fmt.Sprintf("[acme w4 %d -10]", day) {
		t.Fatalf("refunds pending %v", got)
	}
	// A new period starts from its own base; settled counters may be swept.
	if r := s.Acquire(t0+day, req(10, 0, t0+day), 0, false); !r.Allowed {
		t.Fatalf("next period: %+v", r)
	}
	s.SettleQuota([]byte("acme"), t0, -10) // the old period's: ignored
	s.SettleQuota([]byte("acme"), t0+day, 10)
	if n := s.Sweep(t0+day, 1<<20); n != 1 {
		t.Fatalf("swept %d settled counters", n)
	}
}

type committedCount struct{ n atomic.Int64 }

func (c *committedCount) QuotaUsed([]byte, int64, int64) int64 { return c.n.Load() }

// Counts move from the local tally to the committed total while calls
// run: no call may see a count in neither place.
func TestQuotaNeverOveradmitsWhileCountsAreSettled(t *testing.T) {
	s := New(Options{Shards: 1})
	q, _ := NewQuotaLimit(1000, 1)
	src := &committedCount{}
	s.SetQuotaSource(src)
	day := int64(24 * time.Hour)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // the apply goroutine: commit, then settle
		defer close(done)
		for {
			// Whether the callers were done is read before the counts:
			// read after, a pass that found nothing could have been
			// overtaken by every call and end without committing them.
			var stopped bool
			select {
			case <-stop:
				stopped = true
			default:
			}
			type item struct{ start, n int64 }
			var items []item
			s.PendingQuota(func(_ []byte, _ *Limit, start, _, n int64) { items = append(items, item{start, n}) })
			for _, it := range items {
				src.n.Add(it.n)
				s.SettleQuota([]byte("k"), it.start, it.n)
			}
			if stopped && len(items) == 0 {
				return
			}
		}
	}()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				r := Request{Space: SpaceQuota, Key: []byte("k"), Limit: &q, Cost: 1, PeriodStart: t0, PeriodEnd: t0 + day}
				if s.Acquire(t0, r, 0, false).Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-done
	if a, c := admitted.Load(), src.n.Load(); a > 1000 || a != c || a < 900 {
		t.Fatalf("admitted %d of a quota of 1000, committed %d", a, c)
	}
}

// TestEntryIsOneCacheLine keeps a bucket's entry, with a short key inside
// it, to one 64-byte cache line: a lookup pays one miss for the entry and
// none for the key's bytes. Pages of entries are 16 KiB allocations, so
// every entry starts on a line.
func TestEntryIsOneCacheLine(t *testing.T) {
	if n := unsafe.Sizeof(entry{}); n != 64 {
		t.Fatalf("an entry takes %d bytes, not 64", n)
	}
	if n := unsafe.Sizeof(page{}); n%4096 != 0 {
		t.Fatalf("a page of entries takes %d bytes, not a multiple of 4096", n)
	}
}

// TestKeysInsideAndOutsideTheEntry stores keys on both sides of
// inlineKey, forgets some, compacts the arena and finds each kept key
// with its own state again.
func TestKeysInsideAndOutsideTheEntry(t *testing.T) {
	s := New(Options{Shards: 1})
	slow := mustLimit(t, TokenBucket, 10, time.Hour, 10)
	fast := mustLimit(t, TokenBucket, 10, time.Millisecond, 10)
	keys := []string{"", "a", strings.Repeat("k", inlineKey-1), strings.Repeat("k", inlineKey), strings.Repeat("k", inlineKey+1), strings.Repeat("x", 300)}
	for i := 0; i < 3000; i++ {
		keys = append(keys, fmt.Sprintf("%0*d", 20+i%20, i))
	}
	lim := func(i int) *Limit {
		if i%2 == 1 {
			return fast
		}
		return slow
	}
	for i, k := range keys {
		if r := s.Acquire(t0, Request{Key: []byte(k), Limit: lim(i), Cost: int64(1 + i%5)}, 0, false); !r.Allowed {
			t.Fatalf("%q refused", k)
		}
	}
	// A second on, every odd key's bucket is full again and swept; the
	// arena's long keys among them are compacted away.
	at := t0 + int64(time.Second)
	if n := s.Sweep(at, 1<<20); n != len(keys)/2 {
		t.Fatalf("swept %d buckets, want %d", n, len(keys)/2)
	}
	s.shards[0].compactKeys()
	for i, k := range keys {
		r := s.Acquire(at, Request{Key: []byte(k), Limit: lim(i), Cost: 0}, 0, true)
		want := int64(10)
		if i%2 == 0 {
			want -= int64(1 + i%5)
		}
		if r.Remaining != want {
			t.Fatalf("%q (%d bytes): remaining %d, want %d", k, len(k), r.Remaining, want)
		}
	}
	seen := map[string]bool{}
	s.Scan(0, 1<<20, func(_ Space, key []byte, _ Algo) { seen[string(key)] = true })
	for i, k := range keys {
		if seen[k] != (i%2 == 0) {
			t.Fatalf("%q: listed %v", k, seen[k])
		}
	}
}

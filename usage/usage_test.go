package usage

import (
	"hash/maphash"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC).UnixNano() // a minute's start

// checkBound holds a summary to its promise against the true counts: every
// listed count is within [true, true+Err], Err ≤ N/Counters, and every key
// not listed has a true count ≤ Floor ≤ N/Counters.
func checkBound(t *testing.T, s Summary, truth map[string]int64) {
	t.Helper()
	bound := s.N / Counters
	if s.Floor > bound {
		t.Errorf("floor %d > N/k = %d", s.Floor, bound)
	}
	listed := map[string]bool{}
	for _, e := range s.Entries {
		listed[e.Key] = true
		tr := truth[e.Key]
		if e.Count < tr || e.Count-e.Err > tr || e.Err > bound {
			t.Fatalf("%s: count %d error %d, true %d, bound %d", e.Key, e.Count, e.Err, tr, bound)
		}
	}
	for k, n := range truth {
		if !listed[k] && n > s.Floor {
			t.Fatalf("%s counted %d times, more than the floor %d, and not listed", k, n, s.Floor)
		}
	}
}

func zipfKeys(seed uint64, keys int) func() string {
	r := rand.New(rand.NewPCG(seed, seed))
	z := rand.NewZipf(r, 1.2, 1, uint64(keys-1))
	return func() string { return "tenant-" + strconv.FormatUint(z.Uint64(), 10) }
}

func TestSketchWithinBound(t *testing.T) {
	tp := NewTop()
	next := zipfKeys(1, 100_000)
	truth := map[string]int64{}
	const n = 200_000
	for i := 0; i < n; i++ {
		k := next()
		truth[k]++
		// Three minutes of calls: three windows merged.
		tp.Record(t0+int64(i)*int64(3*time.Minute)/n, []byte(k), nil)
	}
	s := Merge(tp.Summary(t0 + int64(3*time.Minute) - 1))
	if s.N != n {
		t.Fatalf("N %d, want %d", s.N, n)
	}
	checkBound(t, s, truth)
	if tr := tp.Tracked(); tr > MaxTracked {
		t.Fatalf("%d counters, bound %d", tr, MaxTracked)
	}
}

func TestMergeOfNodesWithinBound(t *testing.T) {
	next := zipfKeys(2, 100_000)
	truth := map[string]int64{}
	var sums []Summary
	for node := 0; node < 3; node++ {
		tp := NewTop()
		for i := 0; i < 60_000; i++ {
			k := next()
			truth[k]++
			tp.Record(t0+int64(i)*int64(time.Millisecond), []byte(k), nil) // 1,000 a second: exact
		}
		sums = append(sums, tp.Summary(t0+int64(time.Minute)))
	}
	s := Merge(sums...)
	checkBound(t, s, truth)
	// The ten heaviest are listed, in an order no further from the true
	// one than the bound.
	for i := 0; i < 10; i++ {
		for j := i + 1; j < len(s.Entries); j++ {
			if truth[s.Entries[j].Key] > truth[s.Entries[i].Key]+s.N/Counters {
				t.Fatalf("%s (true %d) listed after %s (true %d)", s.Entries[j].Key, truth[s.Entries[j].Key], s.Entries[i].Key, truth[s.Entries[i].Key])
			}
		}
	}
}

func TestSubjectsAndLongKeys(t *testing.T) {
	tp := NewTop()
	long := make([]byte, 200)
	for i := range long {
		long[i] = 'a'
	}
	for i := 0; i < 3; i++ {
		tp.Record(t0, []byte("acme/api"), []byte("user-1"))
	}
	tp.Record(t0, []byte("acme/api"), []byte("user-2"))
	tp.Record(t0, []byte("acme/api"), nil)
	tp.Record(t0, long, nil)
	tp.Record(t0, append(long, 'b'), nil) // the same first 96 bytes, another key
	s := Merge(tp.Summary(t0))
	got := map[string]int64{}
	for _, e := range s.Entries {
		got[e.Key] += e.Count
	}
	cut := string(long[:MaxKeyBytes]) + "…"
	want := map[string]int64{"acme/api#user-1": 3, "acme/api#user-2": 1, "acme/api": 1, cut: 2}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%q: %d, want %d (all: %v)", k, got[k], n, got)
		}
	}
}

func TestWindowsExpire(t *testing.T) {
	tp := NewTop()
	tp.Record(t0, []byte("old"), nil)
	tp.Record(t0+int64(Windows)*Window, []byte("new"), nil)
	s := tp.Summary(t0 + int64(Windows)*Window)
	if s.N != 1 || len(s.Entries) != 1 || s.Entries[0].Key != "new" {
		t.Fatalf("after %d minutes: %+v", Windows, s)
	}
	h := tp.History(t0 + int64(Windows)*Window)
	if h[Steps-1] != 1 {
		t.Fatalf("history %v", h)
	}
}

// The index stays consistent through many evictions: every counted key is
// found again, and counts add up.
func TestSketchIndexUnderChurn(t *testing.T) {
	var s sketch
	s.reset(0)
	r := rand.New(rand.NewPCG(3, 3))
	for i := 0; i < 100_000; i++ {
		k := []byte(strconv.Itoa(int(r.Uint32() % 2000)))
		s.record(uint64(r.Uint32()%64)<<32|uint64(k[0]), k, nil, 1) // crowded hashes, long probe runs
	}
	var sum int64
	for i := int32(0); i < s.used; i++ {
		sum += s.count(i) - s.slots[i].err
		sl := &s.slots[i]
		found := false
		mask := uint64(len(s.index) - 1)
		for j := s.hashes[i] & mask; s.index[j] != 0; j = (j + 1) & mask {
			if s.index[j] == i+1 {
				found = true
				break
			}
		}
		if !found {
			t.Fatalf("slot %d (%s) not reachable from its hash", i, sl.name())
		}
		if s.heap[s.pos[i]].slot != i {
			t.Fatalf("heap position of slot %d is wrong", i)
		}
	}
	if sum > s.n {
		t.Fatalf("lower bounds sum to %d > %d calls", sum, s.n)
	}
	for p := int32(1); p < s.used; p++ {
		if s.heap[p].count < s.heap[(p-1)/2].count {
			t.Fatalf("heap place %d counts %d, below its parent's %d", p, s.heap[p].count, s.heap[(p-1)/2].count)
		}
	}
}

func TestRecordAllocatesNothing(t *testing.T) {
	r := NewRecorder()
	keys := make([][]byte, 4096)
	for i := range keys {
		keys[i] = []byte("tenant/" + strconv.Itoa(i))
	}
	sub := []byte("user-1")
	i := 0
	if n := testing.AllocsPerRun(10_000, func() {
		i++
		r.Record(t0+int64(i)*1e6, keys[i%len(keys)], sub, "tenant", i%3 == 0, nil)
	}); n != 0 {
		t.Fatalf("%.2f allocations a call", n)
	}
}

func TestCountsLastMinute(t *testing.T) {
	c := NewCounts()
	for i := 0; i < 10; i++ {
		c.Record(t0+int64(i)*int64(time.Second), "acme", i%2 == 0, nil)
	}
	if ok, no, found := c.Get(t0+int64(30*time.Second), "acme"); !found || ok != 5 || no != 5 {
		t.Fatalf("got %d %d %v", ok, no, found)
	}
	if ok, no, _ := c.Get(t0+int64(70*time.Second), "acme"); ok != 0 || no != 0 {
		t.Fatalf("a minute later: %d %d", ok, no)
	}
}

// Counts keep at most NodeCapacity nodes; idle ones give their place up.
func TestCountsBounded(t *testing.T) {
	c := NewCounts()
	for i := 0; i < 3*NodeCapacity; i++ {
		c.Record(t0, "n"+strconv.Itoa(i), true, nil)
	}
	if c.Untracked() == 0 {
		t.Fatal("every node followed beyond the capacity")
	}
	// A minute later the places are idle and taken again.
	later := t0 + int64(2*time.Minute)
	c.Record(later, "fresh", false, nil)
	if _, no, ok := c.Get(later, "fresh"); !ok || no != 1 {
		t.Fatalf("fresh node after idle ones: %d %v", no, ok)
	}
}

func BenchmarkRecord(b *testing.B) {
	r := NewRecorder()
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = []byte("tenant/" + strconv.Itoa(i))
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			r.Record(t0, keys[i&1023], nil, "tenant", true, nil)
		}
	})
}

// Below ExactPerSecond calls a second a Top records every call: 8
// goroutines sending 96 % of them within one second leave the level at 0
// and the total exact, and the next second starts exact again.
func TestTopIsExactBelowTheRate(t *testing.T) {
	tp := NewTop()
	const workers, per = 8, ExactPerSecond * 96 / 100 / 8
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			k := []byte("k" + strconv.Itoa(w))
			for i := 0; i < per; i++ {
				tp.Record(t0+int64(i)*int64(time.Second)/per, k, nil)
			}
		}(w)
	}
	wg.Wait()
	s := tp.Summary(t0 + int64(time.Second) - 1)
	if s.N != workers*per || tp.Level() != 0 {
		t.Fatalf("total %d of %d calls, level %d", s.N, workers*per, tp.Level())
	}
	for _, e := range s.Entries {
		if e.Count != per || e.Err != 0 {
			t.Errorf("%s: count %d error %d, true %d", e.Key, e.Count, e.Err, per)
		}
	}
}

// Past ExactPerSecond calls a second a Top records a sample, each sampled
// call standing for 2^level: 8 goroutines feed 250,000 calls of a Zipf
// distribution over one simulated second each (2 M calls a second in
// all). The level rises; the total is within 6 standard deviations of the
// true one; every listed key's count is within its error plus 6 standard
// deviations of the sampling (σ = √(true × 2^level)) and 6 steps of
// 2^level of its true count (a sampled count moves in whole steps: a key
// called 6 times that is sampled once counts 2^level, which no normal
// bound covers), and every key counted more than the floor plus that is
// listed. The
// next second, with twice ExactPerSecond calls, lowers the level again.
func TestSamplingKeepsTheBoundInExpectation(t *testing.T) {
	tp := NewTop()
	const workers, per = 8, 250_000
	truth := make([]map[string]int64, workers)
	var top atomic.Int32
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			next := zipfKeys(uint64(10+w), 10_000)
			tr := map[string]int64{}
			keys := map[string][]byte{}
			for i := 0; i < per; i++ {
				k := next()
				tr[k]++
				b := keys[k]
				if b == nil {
					b = []byte(k)
					keys[k] = b
				}
				tp.Record(t0+int64(i)*int64(time.Second)/per, b, nil)
				if lv := int32(tp.Level()); lv > top.Load() {
					top.Store(lv)
				}
			}
			truth[w] = tr
		}(w)
	}
	wg.Wait()
	all := map[string]int64{}
	for _, tr := range truth {
		for k, n := range tr {
			all[k] += n
		}
	}
	if top.Load() == 0 {
		t.Fatal("2 M calls a second were all recorded: no sampling")
	}
	w := float64(int64(1) << top.Load())
	s := tp.Summary(t0 + int64(time.Second) - 1)
	const n = workers * per
	if d := math.Abs(float64(s.N - n)); d > 6*math.Sqrt(n*w) {
		t.Errorf("total %d, true %d (level up to %d)", s.N, n, top.Load())
	}
	listed := map[string]bool{}
	for _, e := range s.Entries {
		listed[e.Key] = true
		tr := float64(all[e.Key])
		sigma := 6*math.Sqrt(max(tr, 1)*w) + 6*w
		if float64(e.Count) < tr-sigma || float64(e.Count-e.Err) > tr+sigma {
			t.Errorf("%s: count %d error %d, true %.0f, 6σ %.0f", e.Key, e.Count, e.Err, tr, sigma)
		}
	}
	for k, c := range all {
		if !listed[k] && float64(c) > float64(s.Floor)+6*math.Sqrt(float64(c)*w)+6*w {
			t.Errorf("%s counted %d times, over the floor %d by more than 6σ, and not listed", k, c, s.Floor)
		}
	}
	t.Logf("level up to %d; total %d of %d; floor %d; %d keys listed; heaviest %s %d (true %d)",
		top.Load(), s.N, n, s.Floor, len(s.Entries), s.Entries[0].Key, s.Entries[0].Count, all[s.Entries[0].Key])
	before := tp.Level()
	const calm = 2 * ExactPerSecond
	for i := 0; i < calm; i++ {
		tp.Record(t0+int64(time.Second)+int64(i)*int64(time.Second)/calm, []byte("calm"), nil)
	}
	tp.Record(t0+2*int64(time.Second), []byte("calm"), nil)
	if after := tp.Level(); after >= before {
		t.Errorf("a calm second after the load: level %d, was %d", after, before)
	}
}

// Calls to one node from 8 goroutines at once, across a step's end, are
// each counted once: the stripes' step-and-count words start a new step
// without losing a call, and a late call never counts in a newer step.
func TestCountsExactUnderConcurrentCalls(t *testing.T) {
	c := NewCounts()
	const workers, per = 8, 20_000
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var l *Local // half the callers keep a memo, as connections do
			if w%2 == 0 {
				l = new(Local)
			}
			for i := 0; i < per; i++ {
				// 20 s of calls: two steps and their boundary.
				c.Record(t0+int64(i)*int64(time.Millisecond), "acme/api", (i+w)%4 != 0, l)
			}
		}(w)
	}
	wg.Wait()
	ok, no, found := c.Get(t0+int64(25*time.Second), "acme/api")
	if !found || ok+no != workers*per || no != workers*per/4 {
		t.Fatalf("admitted %d refused %d of %d calls (a quarter refused)", ok, no, workers*per)
	}
	// A call for a step already past, after a newer one began in its word,
	// is not counted in the newer step.
	c.Record(t0+int64(70*time.Second), "acme/api", true, nil)
	c.Record(t0+int64(10*time.Second), "acme/api", true, nil)
	if ok, _, _ := c.Get(t0+int64(70*time.Second), "acme/api"); ok != 1 {
		t.Fatalf("admitted %d in the minute before 70 s, want 1", ok)
	}
}

// A caller's memo of a node that has since given its place up is
// dropped: the next call counts in the node's new place, not the old one.
func TestCountsMemoOfAGoneNodeIsDropped(t *testing.T) {
	c := NewCounts()
	var l Local
	c.Record(t0, "a", true, &l)
	gone := l.slot
	// Fill a's shard, then, a minute later, place new nodes in it until
	// a (idle since) has given its place up.
	sh := &c.shards[maphash.String(c.seed, "a")>>60]
	inShard := func(i *int) string {
		for ; ; *i++ {
			if p := "n" + strconv.Itoa(*i); maphash.String(c.seed, p)>>60 == maphash.String(c.seed, "a")>>60 {
				*i++
				return p
			}
		}
	}
	i := 0
	for len(*sh.table.Load()) < countSlots {
		c.Record(t0, inShard(&i), true, nil)
	}
	later := t0 + int64(2*time.Minute)
	for n := 0; (*sh.table.Load())["a"] != nil; n++ {
		if n == 100_000 {
			t.Fatal("a never gave its place up")
		}
		later += int64(time.Millisecond)
		c.Record(later, inShard(&i), true, nil)
	}
	c.Record(later, "a", false, &l)
	if l.slot == gone || !gone.gone.Load() {
		t.Fatal("the memo still holds the place a gave up")
	}
	if ok, no, found := c.Get(later, "a"); !found || ok != 0 || no != 1 {
		t.Fatalf("a in its new place: admitted %d refused %d found %v, want 0 1 true", ok, no, found)
	}
}

func BenchmarkCountsRecord(b *testing.B) {
	c := NewCounts()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var l Local
		i := int64(0)
		for pb.Next() {
			i++
			c.Record(t0+i, "acme/api", true, &l)
		}
	})
}

// A load that starts at once is sampled from its first second as in the
// seconds after: 1 M calls in one second are recorded at most
// ExactPerSecond + ExactPerSecond/4 times (climbing a level per
// ExactPerSecond/4 sampled calls from 0 recorded 2.75 × ExactPerSecond),
// and the total stays an unbiased estimate.
func TestALoadIsSampledFromItsFirstSecond(t *testing.T) {
	tp := NewTop()
	const n = 1_000_000
	for i := 0; i < n; i++ {
		tp.Record(t0+int64(i)*int64(time.Second)/n, []byte("k"+strconv.Itoa(i%1000)), nil)
	}
	recorded := tp.exact.Load() + tp.sampled.Load()
	if recorded > ExactPerSecond+ExactPerSecond/4 || tp.Level() != 8 {
		t.Fatalf("%d calls recorded of %d, level %d; want at most %d, level 8", recorded, n, tp.Level(), ExactPerSecond+ExactPerSecond/4)
	}
	s := tp.Summary(t0 + int64(time.Second) - 1)
	if d := math.Abs(float64(s.N - n)); d > 6*math.Sqrt(n*256) {
		t.Fatalf("total %d of %d", s.N, n)
	}
}

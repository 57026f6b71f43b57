package engine

import (
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

func BenchmarkAcquireSingleKey(b *testing.B) {
	for _, a := range []Algo{TokenBucket, SlidingWindow, FixedWindow} {
		b.Run(a.String(), func(b *testing.B) {
			s := New(Options{})
			l := mustLimit(b, a, 1000000, sec, 1000000)
			key := []byte("user:12345")
			now := t0
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				now += 1000
				s.Acquire(now, Request{Key: key, Limit: l, Cost: 1}, 0, false)
			}
		})
	}
}

// keys returns n distinct keys like "key:000123".
func keys(n int) [][]byte {
	ks := make([][]byte, n)
	for i := range ks {
		ks[i] = []byte(fmt.Sprintf("key:%06d", i))
	}
	return ks
}

func BenchmarkAcquire1MKeys(b *testing.B) {
	s := New(Options{})
	l := mustLimit(b, TokenBucket, 100, sec, 100)
	ks := keys(1 << 20)
	for _, k := range ks {
		s.Acquire(t0, Request{Key: k, Limit: l, Cost: 1}, 0, false)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.Acquire(t0+int64(i), Request{Key: ks[i&(1<<20-1)], Limit: l, Cost: 1}, 0, false)
	}
}

func BenchmarkAcquireParallel(b *testing.B) {
	s := New(Options{})
	l := mustLimit(b, TokenBucket, 100, sec, 100)
	ks := keys(1 << 16)
	var seq atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(1)) * 7919
		for pb.Next() {
			i++
			s.Acquire(time.Now().UnixNano(), Request{Key: ks[i&(1<<16-1)], Limit: l, Cost: 1}, 0, false)
		}
	})
}

func BenchmarkAcquireAllDepth4(b *testing.B) {
	s := New(Options{})
	l := mustLimit(b, TokenBucket, 1000000, sec, 1000000)
	reqs := []Request{
		{Key: []byte("system"), Limit: l, Cost: 1}, {Key: []byte("system/partner"), Limit: l, Cost: 1},
		{Key: []byte("system/partner/tenant"), Limit: l, Cost: 1}, {Key: []byte("system/partner/tenant#user42"), Limit: l, Cost: 1},
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.AcquireAll(t0+int64(i)*1000, reqs, 0, false)
	}
}

// TestMemoryPerBucket measures the heap a live bucket costs beyond its key's
// bytes, at one million live buckets. Run with -v to see the figure.
func TestMemoryPerBucket(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates about 100 MB; run without -short")
	}
	const n = 1_000_000
	l := mustLimit(t, TokenBucket, 100, sec, 100)
	key := make([]byte, 0, 32)
	keyBytes := 0
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := New(Options{})
	for i := 0; i < n; i++ {
		key = strconv.AppendInt(append(key[:0], "user:"...), int64(i), 10)
		keyBytes += len(key)
		s.Acquire(t0, Request{Key: key, Limit: l, Cost: 1}, 0, false)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if s.Len() != n {
		t.Fatalf("len %d", s.Len())
	}
	total := float64(after.HeapAlloc - before.HeapAlloc)
	per := (total - float64(keyBytes)) / n
	t.Logf("%d buckets: heap %.1f MB, keys %.1f MB, %.1f bytes per bucket beyond the key", n, total/1e6, float64(keyBytes)/1e6, per)
	if per > 64 {
		t.Errorf("%.1f bytes per bucket beyond the key, budget is 64", per)
	}
	runtime.KeepAlive(s)
}

// BenchmarkAcquireFromLease is a call on a node that is not the key's
// owner, spending tokens the owner granted (the lease path of every call
// in a cluster), its reply's remaining estimated from the owner's count.
func BenchmarkAcquireFromLease(b *testing.B) {
	other := New(Options{Shards: 4})
	other.SetOwners("b", []string{"a", "b"})
	var key []byte
	for i := 0; key == nil; i++ {
		if k := []byte(fmt.Sprint("k", i)); func() bool { id, self := other.Owner(SpaceInline, k); return id == "a" && !self }() {
			key = k
		}
	}
	l := mustLimit(b, TokenBucket, 1_000_000_000, sec, 1_000_000_000)
	now := t0
	other.Grant(now, SpaceInline, key, l, 1_000_000_000, now+int64(time.Hour), 500_000_000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if !other.Acquire(now, Request{Space: SpaceInline, Key: key, Limit: l, Cost: 1}, 0, false).Allowed {
			b.Fatal("the lease ran dry")
		}
	}
}

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

// TestMemoryPerBucket measures the heap a million live buckets take: a
// bucket is one 64-byte entry, which holds a key of up to 28 bytes
// itself, and a 4-byte slot of an index kept 37 to 75 % full; a longer
// key's bytes lie in the shard's arena beside it.
func TestMemoryPerBucket(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates about 150 MB; run without -short")
	}
	const n = 1_000_000
	l := mustLimit(t, TokenBucket, 100, sec, 100)
	measure := func(prefix string) (perBucket, perKey float64) {
		key := make([]byte, 0, 64)
		keyBytes := 0
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := New(Options{})
		for i := 0; i < n; i++ {
			key = strconv.AppendInt(append(key[:0], prefix...), int64(i), 10)
			keyBytes += len(key)
			s.Acquire(t0, Request{Key: key, Limit: l, Cost: 1}, 0, false)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if s.Len() != n {
			t.Fatalf("len %d", s.Len())
		}
		runtime.KeepAlive(s)
		return float64(after.HeapAlloc-before.HeapAlloc) / n, float64(keyBytes) / n
	}
	// Short keys (user:0 … user:999999, 10.9 bytes on average) live in
	// their entries: a bucket costs the same whatever its key's length.
	per, keyLen := measure("user:")
	t.Logf("keys of %.1f bytes: %.1f bytes per bucket, key included", keyLen, per)
	if per > 80 {
		t.Errorf("%.1f bytes per bucket with a %.1f-byte key inside its entry, budget is 80", per, keyLen)
	}
	// Longer keys add their bytes to the same.
	per, keyLen = measure("tenant-0123456789abcdef/route/user:")
	t.Logf("keys of %.1f bytes: %.1f bytes per bucket, %.1f beyond the key", keyLen, per, per-keyLen)
	if per-keyLen > 96 {
		t.Errorf("%.1f bytes per bucket beyond a %.1f-byte key in the arena, budget is 96", per-keyLen, keyLen)
	}
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

package engine

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// The parallel benchmarks measure how the store scales with cores. Run them
// with -cpu 1,2,4,8,16: each op is one call, so ns/op is the inverse of the
// whole store's throughput at that GOMAXPROCS, and a flat ns/op across -cpu
// means the calls serialise. Every call is admitted (the limits are far
// above what a machine can send) and allocates nothing.

// parallelSubjects is the key space of the per-call buckets: as
// redis-benchmark's -r 100000.
const parallelSubjects = 100_000

// subjectKeys returns parallelSubjects keys prefix0 … prefix99999.
func subjectKeys(prefix string) [][]byte {
	ks := make([][]byte, parallelSubjects)
	for i := range ks {
		ks[i] = strconv.AppendInt([]byte(prefix), int64(i), 10)
	}
	return ks
}

// fill creates the bucket of every key at t0, so that the timed calls
// find their buckets (the steady state of a server under load) and the
// store's one-off growth is not counted against them.
func fill(s *Store, space Space, ks [][]byte, l *Limit) {
	for _, k := range ks {
		s.Acquire(t0, Request{Space: space, Key: k, Limit: l, Cost: 1}, 0, false)
	}
}

// spread returns a start index for one RunParallel goroutine, so that the
// goroutines walk the key space from different places.
func spread(seq *atomic.Int64) int { return int(seq.Add(1)) * 7919 }

// BenchmarkParallelInline is the inline form, RL.ACQUIRE key:<n> RATE …:
// one bucket per call over 100,000 keys.
func BenchmarkParallelInline(b *testing.B) {
	s := New(Options{})
	l := mustLimit(b, TokenBucket, 1_000_000_000, sec, 1_000_000_000)
	ks := subjectKeys("key:")
	fill(s, SpaceInline, ks, l)
	var seq atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := spread(&seq)
		for pb.Next() {
			i++
			if !s.Acquire(time.Now().UnixNano(), Request{Key: ks[i%parallelSubjects], Limit: l, Cost: 1}, 0, false).Allowed {
				b.Error("denied")
				return
			}
		}
	})
}

// BenchmarkParallelHierarchy is a call to a 3-level enforcing hierarchy,
// system (enforce) → partner (enforce) → tenant (scope user), as the budget
// tree charges it: the system's and the partner's aggregate buckets, which
// every call shares, and the tenant's bucket for one of 100,000 users.
func BenchmarkParallelHierarchy(b *testing.B) {
	s := New(Options{})
	l := mustLimit(b, TokenBucket, 1_000_000_000, sec, 1_000_000_000)
	users := subjectKeys("system/p/t#u")
	root, partner := []byte("system\x01"), []byte("system/p\x01")
	fill(s, SpaceBudget, append(users, root, partner), l)
	var seq atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := spread(&seq)
		var reqs [3]Request
		for pb.Next() {
			i++
			reqs[0] = Request{Space: SpaceBudget, Key: root, Limit: l, Cost: 1}
			reqs[1] = Request{Space: SpaceBudget, Key: partner, Limit: l, Cost: 1}
			reqs[2] = Request{Space: SpaceBudget, Key: users[i%parallelSubjects], Limit: l, Cost: 1}
			if !s.AcquireAll(time.Now().UnixNano(), reqs[:], 0, false).Allowed {
				b.Error("denied")
				return
			}
		}
	})
}

// BenchmarkParallelHotKey is every call on one key: the ceiling of a
// single bucket, and of any aggregate every call shares.
func BenchmarkParallelHotKey(b *testing.B) {
	s := New(Options{})
	l := mustLimit(b, TokenBucket, 1_000_000_000, sec, 1_000_000_000)
	key := []byte("hot")
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if !s.Acquire(time.Now().UnixNano(), Request{Key: key, Limit: l, Cost: 1}, 0, false).Allowed {
				b.Error("denied")
				return
			}
		}
	})
}

package engine

import (
	"fmt"
	"testing"
	"time"
)

// A scan in small steps, with buckets forgotten and created between the
// steps, returns every bucket that lived throughout exactly once.
func TestScanVisitsLiveBucketsOnce(t *testing.T) {
	s := New(Options{Shards: 4})
	lim, _ := NewLimit(TokenBucket, 1, time.Hour, 10)
	key := func(p string, i int) []byte { return []byte(fmt.Sprintf("%s%d", p, i)) }
	for i := 0; i < 2000; i++ {
		s.Acquire(0, Request{Key: key("stay", i), Limit: &lim, Cost: 1}, 0, false)
		s.Acquire(0, Request{Key: key("go", i), Limit: &lim, Cost: 1}, 0, false)
	}
	seen := map[string]int{}
	cursor, steps := uint64(0), 0
	for {
		cursor = s.Scan(cursor, 13, func(space Space, k []byte, algo Algo) {
			if space != SpaceInline || algo != TokenBucket {
				t.Fatalf("bucket %q: space %d algo %v", k, space, algo)
			}
			seen[string(k)]++
		})
		steps++
		// Churn: forget some, create others, so that entries are freed,
		// reused and the index rehashed under the cursor.
		if steps < 1000 {
			s.Reset(SpaceInline, key("go", steps))
			s.Acquire(0, Request{Key: key("new", steps), Limit: &lim, Cost: 1}, 0, false)
		}
		if cursor == 0 {
			break
		}
	}
	for i := 0; i < 2000; i++ {
		if n := seen[string(key("stay", i))]; n != 1 {
			t.Fatalf("stay%d visited %d times", i, n)
		}
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("%s visited %d times", k, n)
		}
	}
	if algo, idle, ok := s.Inspect(SpaceInline, key("stay", 1)); !ok || algo != TokenBucket || idle != int64(time.Hour) {
		t.Fatalf("Inspect: %v %d %v", algo, idle, ok)
	}
	if _, _, ok := s.Inspect(SpaceInline, []byte("nosuch")); ok {
		t.Fatal("Inspect found a missing bucket")
	}
}

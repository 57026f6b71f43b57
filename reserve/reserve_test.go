package reserve

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

const t0 = int64(1_790_000_000) * 1e9

// open commits a hold of levels levels whose keys and names are 20 bytes
// each, as a budget plan of three levels and a quota would be.
func open(t testing.TB, s *Store, now, ttl int64, levels int, i int) (string, error) {
	h, _, _, err := s.Open(now, ttl, nil, 0)
	if err != nil {
		return "", err
	}
	lim, _ := engine.NewLimit(engine.TokenBucket, 100, time.Minute, 100)
	h.Grow(levels, levels*40)
	for l := 0; l < levels; l++ {
		key := []byte(fmt.Sprintf("tenant/%06d/level%07d", i, l))[:20]
		h.AddLevel(&engine.Request{Key: key, Limit: &lim}, key)
	}
	h.Estimate = 1
	return s.Commit(h), nil
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BytesPerLevel and BytesPerHold bound what one reservation costs
// (docs/operations.md): BytesPerHold + levels × BytesPerLevel, plus its
// keys' and names' bytes.
const (
	BytesPerHold  = 256
	BytesPerLevel = 160
)

// Reservations opened and abandoned at the cap: further ones are refused
// with ErrFull, memory stays within the documented bound, and expiry
// returns it. 20,000 by default; SLUICE_RESERVATIONS=1000000 runs it at
// the default --max-reservations (docs/operations.md gives that figure).
func TestMemoryIsBoundedAndExpiryReturnsIt(t *testing.T) {
	const levels = 4
	n := 20000
	if v := os.Getenv("SLUICE_RESERVATIONS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("SLUICE_RESERVATIONS=%q: want a positive count", v)
		}
	}
	before := heapInUse()
	s := New("n1", n, 0)
	for i := 0; i < n; i++ {
		if _, err := open(t, s, t0, int64(time.Minute), levels, i); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := open(t, s, t0, int64(time.Minute), levels, n); err != ErrFull {
		t.Fatalf("past the cap: %v", err)
	}
	held := heapInUse() - before
	bound := uint64(n * (BytesPerHold + levels*(BytesPerLevel+40)))
	t.Logf("%d reservations of %d levels: %d bytes in all, %d each (bound %d)", n, levels, held, held/uint64(n), bound/uint64(n))
	if held > bound {
		t.Fatalf("%d reservations hold %d bytes, more than the bound %d", n, held, bound)
	}
	if got := s.Expire(t0+int64(time.Minute)-1, nil); got != 0 {
		t.Fatalf("%d expired early", got)
	}
	if got := s.Expire(t0+int64(time.Minute), nil); got != n || s.Len() != 0 {
		t.Fatalf("%d expired, %d open", got, s.Len())
	}
	after := heapInUse()
	t.Logf("after expiry: %d bytes above the start", int64(after)-int64(before))
	if after > before+held/4 {
		t.Fatalf("expiry returned too little: %d bytes before, %d held, %d after", before, held, after)
	}
	if _, err := open(t, s, t0, int64(time.Minute), levels, 0); err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(s)
}

// Expiry takes the earliest first, whatever order they were opened in,
// and a renewed one moves.
func TestExpiryOrder(t *testing.T) {
	s := New("n1", 10, 0)
	var ids []string
	for _, ttl := range []int64{30, 10, 20} {
		id, _ := open(t, s, t0, ttl, 1, 0)
		ids = append(ids, id)
	}
	if ok, _ := s.Renew(ids[1], t0, 40); !ok {
		t.Fatal("renew")
	}
	var got []string
	s.Expire(t0+100, func(h *Hold) { got = append(got, s.Format(h)) })
	if fmt.Sprint(got) != fmt.Sprint([]string{ids[2], ids[0], ids[1]}) {
		t.Fatalf("order %v, want %v", got, []string{ids[2], ids[0], ids[1]})
	}
}

// Ids carry the node and an unguessable tag; one of another node is an
// error that names it, a malformed one, or one with the wrong tag, is
// simply unknown.
func TestIDs(t *testing.T) {
	s := New("node-a", 10, 41)
	s.SetTags(func() uint64 { return 0xfeedface })
	id, _ := open(t, s, t0, 10, 1, 0)
	if id != "000000000000002a00000000feedface@node-a" {
		t.Fatalf("id %q", id)
	}
	if h, err := s.Take("000000000000002a00000000feedface@node-b"); h != nil || err == nil {
		t.Fatalf("another node's id: %v %v", h, err)
	}
	for _, bad := range []string{"", "x", "zzzzzzzzzzzzzzzz00000000feedface@node-a", "000000000000002a", "000000000000002a0000000000000000@node-a"} {
		if h, err := s.Take(bad); h != nil || err != nil {
			t.Fatalf("%q: %v %v", bad, h, err)
		}
	}
	if h, _ := s.Take(id); h == nil || h.Levels[0].Key == nil {
		t.Fatal("own id")
	}
}

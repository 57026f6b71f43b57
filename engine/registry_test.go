package engine

import (
	"slices"
	"strings"
	"testing"
)

// sampleLimit returns a limit of algorithm a with capacity n (n tokens a
// second), for the registry's tests. A new algorithm needs a line here.
func sampleLimit(t *testing.T, a Algo, n int64) *Limit {
	t.Helper()
	var l Limit
	var err error
	switch {
	case a.nameable():
		l, err = NewLimit(a, n, sec, n)
	case a == Cell:
		l, err = NewCellLimit(n-1, n, 1)
	case a == Quota:
		l, err = NewQuotaLimit(n, 1)
	default:
		t.Fatalf("%v: no sample limit: add one to sampleLimit", a)
	}
	if err != nil {
		t.Fatalf("%v: %v", a, err)
	}
	return &l
}

// TestEveryAlgorithmHasEveryPath walks the registry: every algorithm has a
// name, a family, and is handled by every path that depends on the
// algorithm (parsing by name, the names list, decide, the conversions of
// a limit change, refund, a peer's consumption, idleAt, lease arithmetic
// and the sync record). Registering an algorithm and forgetting one of
// them fails here.
func TestEveryAlgorithmHasEveryPath(t *testing.T) {
	seen := map[string]bool{}
	for i := range algorithms {
		a := Algo(i)
		t.Run(a.String(), func(t *testing.T) {
			reg := &algorithms[a]
			if reg.name == "" || reg.family == nil || seen[reg.name] || a.String() != reg.name {
				t.Fatalf("registry entry %d: name %q (seen %v), family %v", i, reg.name, seen[reg.name], reg.family)
			}
			seen[reg.name] = true
			checkNaming(t, a)
			if a == Quota {
				checkQuotaPaths(t)
				return
			}
			checkBucketPaths(t, a)
			checkLeasePaths(t, a)
			checkSyncRecord(t, a)
		})
	}
}

func checkNaming(t *testing.T, a Algo) {
	name := a.String()
	got, ok := ParseAlgo(strings.ToUpper(name))
	listed := slices.Contains(AlgoNames(), name)
	_, err := NewLimit(TokenBucket, 1, sec, 1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewLimit(numAlgos, 1, sec, 1)
	quoted := err != nil && strings.Contains(err.Error(), name)
	if algorithms[a].nameable {
		if !ok || got != a || !listed || !quoted {
			t.Fatalf("nameable %s: ParseAlgo=%v,%v listed=%v in ALGO's error=%v", name, got, ok, listed, quoted)
		}
	} else if ok || listed || quoted {
		t.Fatalf("%s is not nameable, yet ParseAlgo=%v listed=%v in ALGO's error=%v", name, ok, listed, quoted)
	}
}

// checkBucketPaths drives one bucket of a through the arithmetic of its
// family, then through the store.
func checkBucketPaths(t *testing.T, a Algo) {
	l, big := sampleLimit(t, a, 10), sampleLimit(t, a, 20)
	now := t0
	if o := decide(l, state{}, false, now, l.Burst+1, 0); !o.never {
		t.Fatalf("decide: a cost above the capacity is not refused for ever: %+v", o)
	}
	o := decide(l, state{}, false, now, 1, 0)
	if !o.ok || !o.changed || o.remaining != l.Burst-1 {
		t.Fatalf("decide: one token from a full bucket: %+v", o)
	}
	one := uint64(1) << fpShift
	if u := usedFP(l, o.next, true, now); u != one {
		t.Fatalf("used: %d, want one token (%d)", u, one)
	}
	if r := decide(l, withUsed(l, one, now), true, now, 0, 0).remaining; r != l.Burst-1 {
		t.Fatalf("withUsed: one token used leaves %d", r)
	}
	// A change of limit keeps the tokens there were; a window (same
	// algorithm, same length) keeps its count instead.
	want := l.Burst - 1
	if a.IsWindow() && big.Window == l.Window {
		want = big.Burst - 1
	}
	if r := decide(big, rescale(l, big, o.next, now), true, now, 0, 0).remaining; r != want {
		t.Fatalf("rescale to twice the capacity: %d left, want %d", r, want)
	}
	if at := idleAt(l, o.next); at <= now {
		t.Fatalf("idleAt: a bucket with a token taken is idle at %d, now %d", at, now)
	}
	if at := idleAt(l, refundState(l, o.next, now, 1)); at > now {
		t.Fatalf("refund: the token given back leaves the bucket idle only at %d", at)
	}
	if r := decide(l, consumeState(l, state{}, false, now, 1, 0), true, now, 0, 0).remaining; r != l.Burst-1 {
		t.Fatalf("consume: one token leaves %d", r)
	}
	if r := decide(l, consumeState(l, o.next, true, now, 2*l.Burst, 0), true, now, 0, 0).remaining; r != 0 {
		t.Fatalf("consume: twice the capacity leaves %d", r)
	}
	s := New(Options{Shards: 4})
	key := []byte("k")
	s.SetSyncing(true)
	if res := s.Acquire(now, Request{Key: key, Limit: l, Cost: 3}, 0, false); !res.Allowed || res.Remaining != l.Burst-3 {
		t.Fatalf("store: acquire: %+v", res)
	}
	s.Charge(now, &Request{Key: key, Limit: l}, 1)
	// 4 of 10 used; under twice the capacity the 6 left carry over (a
	// window keeps its count of 4: 16 left), and the refund gives 2 back.
	if res, _ := s.Refund(now, SpaceInline, key, big, 2); res.Remaining != want-l.Burst+1+8 || res.Limit != big.Burst {
		t.Fatalf("store: refund under twice the capacity: %+v, want %d left", res, want-l.Burst+1+8)
	}
	var drained int64
	s.Drain(func(_ Space, _ []byte, _ *Limit, d int64) { drained += d })
	if drained != 4 {
		t.Fatalf("store: drained %d tokens for peers, want 4", drained)
	}
}

// checkLeasePaths checks a's lease arithmetic: when leased tokens stop
// being usable, and the credit a lease may take.
func checkLeasePaths(t *testing.T, a Algo) {
	l := sampleLimit(t, a, 10)
	now := t0 + int64(sec)/2
	end := familyOf(l).leaseEnd(l, now)
	switch {
	case a.IsWindow():
		if end != t0+int64(sec) {
			t.Fatalf("leaseEnd: window tokens leased at %d usable until %d, want the window's end", now, end)
		}
	case end != now+LeaseTTL:
		t.Fatalf("leaseEnd: %d, want now + LeaseTTL", end)
	}
	s := New(Options{Shards: 4})
	s.SetOwners("a", []string{"a", "b"})
	if c := s.credit(l); (c == 0) != a.IsWindow() {
		t.Fatalf("credit: %d (a window takes none, a rate limit some)", c)
	}
	owner := New(Options{Shards: 4})
	got, expires, _, left := owner.Take(now, Request{Key: []byte("k"), Limit: l, Cost: 4}, 0)
	if got != 4 || expires != end || left != l.Burst-4 {
		t.Fatalf("Take: got %d until %d, %d left", got, expires, left)
	}
}

// checkSyncRecord checks that a limit of a crosses a sync message intact.
func checkSyncRecord(t *testing.T, a Algo) {
	l := sampleLimit(t, a, 10)
	b := AppendDelta([]byte{SyncFormat}, SpaceInline, []byte("k"), l, 3)
	n := 0
	err := DecodeDeltas(b, func(_ Space, key []byte, got *Limit, delta int64) {
		n++
		if *got != *l || delta != 3 || string(key) != "k" {
			t.Fatalf("sync record: %+v %d %q, want %+v 3 k", *got, delta, key, *l)
		}
	})
	if err != nil || n != 1 {
		t.Fatalf("sync record: %v, %d records", err, n)
	}
}

// checkQuotaPaths checks the quota's own paths: its decision against the
// period's count, when its counter may go, and that no sync record
// carries one (quota counts reach the cluster through Raft).
func checkQuotaPaths(t *testing.T) {
	l := sampleLimit(t, Quota, 10)
	now, start, end := t0, t0-1, t0+int64(sec)
	o := quotaDecide(l, state{}, false, now, 3, start, end, 5, -1)
	if !o.ok || o.remaining != 2 || o.next != (state{a: start, b: 3, c: end}) {
		t.Fatalf("quotaDecide: %+v", o)
	}
	if at := idleAt(l, o.next); at != end {
		t.Fatalf("idleAt: an uncommitted count kept until %d, want the period's end", at)
	}
	b := AppendDelta([]byte{SyncFormat}, SpaceInline, []byte("k"), l, 3)
	if err := DecodeDeltas(b, func(Space, []byte, *Limit, int64) {}); err != ErrBadSync {
		t.Fatalf("a quota's sync record decoded: %v", err)
	}
}

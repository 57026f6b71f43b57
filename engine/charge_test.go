package engine

import (
	"testing"
	"time"
)

// TestChargeGoesIntoDebt drives every algorithm on the fixed timeline: 5
// admitted of 10, then a forced charge of 15 puts the bucket 10 tokens
// beyond empty, so the next call waits for the debt to refill as well.
func TestChargeGoesIntoDebt(t *testing.T) {
	cell, err := NewCellLimit(9, 10, 1) // burst 10, one token per 100ms
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		lim   *Limit
		retry time.Duration // of one more token right after the charge
	}{
		{mustLimit(t, TokenBucket, 10, sec, 10), 1100 * ms}, // 20 used, 9 allowed: 11 tokens at 100ms
		{mustLimit(t, GCRA, 10, sec, 10), 1100 * ms},
		{mustLimit(t, LeakyBucket, 10, sec, 10), 1100 * ms},
		{&cell, 1100 * ms},
		{mustLimit(t, FixedWindow, 10, sec, 10), 1000 * ms},   // 20 counted in this window
		{mustLimit(t, SlidingWindow, 10, sec, 10), 1550 * ms}, // 20×(1−e)+1 ≤ 10 at e = 0.55
	}
	for _, c := range cases {
		t.Run(c.lim.Algo.String(), func(t *testing.T) {
			s := New(Options{Shards: 4})
			r := Request{Key: []byte("k"), Limit: c.lim, Cost: 5}
			if got := s.Acquire(t0, r, 0, false); !got.Allowed || got.Remaining != 5 {
				t.Fatalf("first acquire: %+v", got)
			}
			s.Charge(t0, &r, 0) // nothing
			r.Cost = 1
			if got := s.Acquire(t0, r, 0, true); !got.Allowed {
				t.Fatalf("a charge of 0 took tokens: %+v", got)
			}
			s.Charge(t0, &r, 15)
			got := s.Acquire(t0, r, 0, false)
			if got.Allowed || got.Remaining != 0 || got.RetryAfter != int64(c.retry) {
				t.Fatalf("after the charge: allowed=%v remaining=%d retry=%v; want denied, 0, %v",
					got.Allowed, got.Remaining, time.Duration(got.RetryAfter), c.retry)
			}
			if got := s.Acquire(t0+int64(c.retry), r, 0, false); !got.Allowed {
				t.Fatalf("at the retry time: %+v", got)
			}
		})
	}
}

// TestChargeCreatesAndRecords: a charge on a missing bucket creates it in
// debt, and peers hear of the tokens as of an admission.
func TestChargeCreatesAndRecords(t *testing.T) {
	s := New(Options{Shards: 4})
	s.SetSyncing(true)
	l := mustLimit(t, TokenBucket, 10, sec, 10)
	r := Request{Key: []byte("k"), Limit: l}
	s.Charge(t0, &r, 30)
	var got int64
	s.Drain(func(_ Space, key []byte, _ *Limit, d int64) { got += d })
	if got != 30 {
		t.Fatalf("peers heard %d tokens, want 30", got)
	}
	r.Cost = 1
	if res := s.Acquire(t0, r, 0, false); res.Allowed || res.RetryAfter != int64(2100*ms) {
		t.Fatalf("after a charge of 30 on burst 10: %+v, want retry 2.1s", res)
	}
}

// TestChargeQuotaCountsPastTheQuota: the real total counts, even beyond
// the quota, and nothing more is admitted until the period ends.
func TestChargeQuotaCountsPastTheQuota(t *testing.T) {
	s := New(Options{Shards: 4})
	q, err := NewQuotaLimit(10, 4)
	if err != nil {
		t.Fatal(err)
	}
	day := int64(24 * time.Hour)
	r := Request{Space: SpaceQuota, Key: []byte("acme"), Limit: &q, Cost: 4, PeriodStart: t0, PeriodEnd: t0 + day}
	if res := s.Acquire(t0, r, 0, false); !res.Allowed {
		t.Fatalf("first: %+v", res)
	}
	s.Charge(t0, &r, 9)
	if used := s.QuotaUsed(&r); used != 13 {
		t.Fatalf("used %d, want 13", used)
	}
	r.Cost = 1
	if res := s.Acquire(t0+int64(time.Hour), r, 0, false); res.Allowed || res.RetryAfter != day-int64(time.Hour) {
		t.Fatalf("over the quota: %+v", res)
	}
	n := int64(0)
	s.PendingQuota(func(_ []byte, _ *Limit, _, _, c int64) { n += c })
	if n != 13 {
		t.Fatalf("pending for the cluster %d, want 13", n)
	}
}

// TestRefundWaitedReachesPeers: tokens a waited call consumed reach a
// peer's copy through the sync, and so do the tokens a refund gives back
// (a negative delta, in a record of its own kind), so the peer ends where
// the node does; a plain Refund tells no peer.
func TestRefundWaitedReachesPeers(t *testing.T) {
	lim := mustLimit(t, TokenBucket, 100, sec, 100)
	a, b := New(Options{Shards: 4}), New(Options{Shards: 4})
	a.SetSyncing(true)
	key := []byte("tpm")
	r := Request{Key: key, Limit: lim, Cost: 40}
	if got := a.Acquire(t0, r, int64(sec), false); !got.Allowed {
		t.Fatalf("acquire: %+v", got)
	}
	a.RefundWaited(t0, SpaceInline, key, lim, 15)
	sync := func() (deltas []int64) {
		var consumed, back []byte
		consumed, back = []byte{SyncFormat}, []byte{SyncFormat}
		a.Drain(func(sp Space, k []byte, l *Limit, d int64) {
			deltas = append(deltas, d)
			if d < 0 {
				back = AppendDelta(back, sp, k, l, d)
			} else {
				consumed = AppendDelta(consumed, sp, k, l, d)
			}
		})
		for _, m := range [][]byte{consumed, back} {
			if len(m) == 1 {
				continue
			}
			if err := DecodeDeltas(m, func(sp Space, k []byte, l *Limit, d int64) { b.Consume(t0, sp, k, l, d, l.Burst) }); err != nil {
				t.Fatal(err)
			}
		}
		return deltas
	}
	if d := sync(); len(d) != 1 || d[0] != 25 {
		t.Fatalf("drained %v, want the net 25 consumed", d)
	}
	one := Request{Key: key, Limit: lim, Cost: 1}
	if ra, rb := a.Acquire(t0, one, 0, true), b.Acquire(t0, one, 0, true); ra.Remaining != 74 || rb.Remaining != 74 {
		t.Fatalf("after the sync: node %d left, peer %d; want 74 (75 but the one asked) on both", ra.Remaining, rb.Remaining)
	}
	a.RefundWaited(t0, SpaceInline, key, lim, 20)
	if d := sync(); len(d) != 1 || d[0] != -20 {
		t.Fatalf("drained %v, want the 20 given back", d)
	}
	if ra, rb := a.Acquire(t0, one, 0, true), b.Acquire(t0, one, 0, true); ra.Remaining != 94 || rb.Remaining != 94 {
		t.Fatalf("after the refund's sync: node %d left, peer %d; want 94 on both", ra.Remaining, rb.Remaining)
	}
	a.Refund(t0, SpaceInline, key, lim, 5)
	if d := sync(); len(d) != 0 {
		t.Fatalf("a plain refund was sent to peers: %v", d)
	}
}

// A forced charge on a node that does not own the bucket (a reservation
// of 40 settled at 55 there, on a limit of 1000 a day) lands in the
// owner's accounting: the node is told 945 remain, and the two nodes
// together admit 945 more, not 960, for every algorithm a reservation
// can charge. (Once, the charge went to the node's own copy of the
// bucket, which reaches the owner only through the consumption sync, if
// syncing is on, and a while later: the owner kept granting the 15, and
// the node told 960.)
func TestChargeOnANonOwnerReachesTheOwner(t *testing.T) {
	for _, algo := range []Algo{TokenBucket, GCRA, LeakyBucket, FixedWindow, SlidingWindow} {
		t.Run(algo.String(), func(t *testing.T) {
			owner, other, key := leasePair(t)
			lim := *mustLimit(t, algo, 1000, 24*time.Hour, 1000)
			now := int64(t0)
			r := Request{Space: SpaceInline, Key: key, Limit: &lim, Cost: 40}
			reserved := false
			for i := 0; i < 3 && !reserved; i++ { // a window's lease has no credit: it asks first
				reserved = other.Acquire(now, r, 0, false).Allowed
				refill(owner, other, now)
			}
			if !reserved {
				t.Fatal("the reservation of 40 was refused")
			}
			other.Charge(now, &r, 15)
			peek := Request{Space: SpaceInline, Key: key, Limit: &lim}
			if got := other.Acquire(now, peek, 0, true).Remaining; got != 945 {
				t.Fatalf("after the charge the node tells %d remain, want 945 (1000 − 55)", got)
			}
			admitted := int64(0)
			one := Request{Space: SpaceInline, Key: key, Limit: &lim, Cost: 1}
			for round := 0; round < 3000; round++ {
				refill(owner, other, now)
				for _, s := range []*Store{other, owner} {
					if s.Acquire(now, one, 0, false).Allowed {
						admitted++
					}
				}
			}
			if admitted != 945 {
				t.Fatalf("the nodes admitted %d after a reservation of 40 settled at 55, want 945", admitted)
			}
		})
	}
}

// A node that has not yet heard from the owner (a reservation made from
// its credit and settled at once) tells what one bucket would: 990 left
// after 10 settled, 945 after 55, of 1000 — not its lease's count.
func TestNonOwnerRemainingBeforeTheOwnersReply(t *testing.T) {
	for _, algo := range []Algo{TokenBucket, GCRA, SlidingWindow} {
		t.Run(algo.String(), func(t *testing.T) {
			for _, c := range []struct{ actual, want int64 }{{10, 990}, {55, 945}, {40, 960}} {
				owner, other, key := leasePair(t)
				lim := *mustLimit(t, algo, 1000, 24*time.Hour, 1000)
				now := int64(t0)
				r := Request{Space: SpaceInline, Key: key, Limit: &lim, Cost: 40}
				if algo.IsWindow() {
					other.Acquire(now, r, 0, false) // no credit: it asks the owner first
					refill(owner, other, now)
				}
				res := other.Acquire(now, r, 0, false)
				if !res.Allowed || res.Remaining != 960 {
					t.Fatalf("reservation of 40: %+v, want admitted with 960 left", res)
				}
				if d := c.actual - 40; d < 0 {
					other.Refund(now, SpaceInline, key, &lim, -d)
				} else {
					other.Charge(now, &r, d)
				}
				peek := Request{Space: SpaceInline, Key: key, Limit: &lim}
				if got := other.Acquire(now, peek, 0, true).Remaining; got != c.want {
					t.Fatalf("settled at %d: the node tells %d remain, want %d", c.actual, got, c.want)
				}
				refill(owner, other, now)
				if got := other.Acquire(now, peek, 0, true).Remaining; got != c.want {
					t.Fatalf("settled at %d, after the owner's reply: the node tells %d remain, want %d", c.actual, got, c.want)
				}
				// (Tokens settled below the estimate go back to the lease,
				// a window's lease holds what it asked for besides.)
				if got := owner.Acquire(now, peek, 0, true).Remaining; !algo.IsWindow() && c.actual >= 40 && got != c.want {
					t.Fatalf("settled at %d: the owner's bucket holds %d, want %d", c.actual, got, c.want)
				}
			}
		})
	}
}

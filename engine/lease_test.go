package engine

import (
	"fmt"
	"testing"
	"time"
)

// leasePair returns two stores of a two-member cluster and a key that the
// first owns.
func leasePair(t *testing.T) (owner, other *Store, key []byte) {
	t.Helper()
	owner, other = New(Options{Shards: 4}), New(Options{Shards: 4})
	owner.SetOwners("a", []string{"a", "b"})
	other.SetOwners("b", []string{"a", "b"})
	for i := 0; ; i++ {
		k := []byte(fmt.Sprint("k", i))
		if id, self := owner.Owner(SpaceInline, k); self && id == "a" {
			if _, self := other.Owner(SpaceInline, k); self {
				t.Fatal("both stores think they own the key")
			}
			return owner, other, k
		}
	}
}

// refill runs one round of the lease protocol between other and owner at
// now, as the server does: wants go to the owner, grants come back.
func refill(owner, other *Store, now int64) {
	type req struct {
		w   Want
		key []byte
	}
	var reqs []req
	other.Wants(now, func(w *Want) { reqs = append(reqs, req{*w, append([]byte(nil), w.Key...)}) })
	for _, r := range reqs {
		got, exp, retry, left := owner.Take(now, Request{Space: r.w.Space, Key: r.key, Limit: &r.w.Limit, Cost: r.w.Tokens}, r.w.Owed)
		if got == 0 {
			exp = now + retry
		}
		other.Grant(now, r.w.Space, r.key, &r.w.Limit, got, exp, left)
	}
}

// Two nodes calling one key at a fixed timeline never admit more together
// than one exact bucket would: burst + rate × time.
func TestLeasesNeverOveradmit(t *testing.T) {
	owner, other, key := leasePair(t)
	lim, _ := NewLimit(TokenBucket, 100, time.Second, 10)
	call := func(s *Store, now int64) bool {
		return s.Acquire(now, Request{Space: SpaceInline, Key: key, Limit: &lim, Cost: 1}, 0, false).Allowed
	}
	admitted := 0
	const step = int64(time.Millisecond)
	const dur = int64(10 * time.Second)
	for now := int64(1e12); now < 1e12+dur; now += step {
		// Each node gets 3 calls per ms: 6000/s against a limit of 100/s.
		for i := 0; i < 3; i++ {
			if call(owner, now) {
				admitted++
			}
			if call(other, now) {
				admitted++
			}
		}
		refill(owner, other, now)
		other.Expired(now, func(space Space, k []byte, l *Limit, n int64) { owner.Return(now, space, k, l, n) })
	}
	ideal := 10 + 100*int(dur/int64(time.Second))
	if admitted > ideal {
		t.Fatalf("admitted %d, an exact bucket admits at most %d", admitted, ideal)
	}
	if admitted < ideal*98/100 {
		t.Fatalf("admitted %d of an ideal %d: leases lost tokens", admitted, ideal)
	}
}

// All the load on the node that does not own the key: it is served from
// leases, and gets what one exact bucket gives.
func TestLeasesServeANonOwner(t *testing.T) {
	owner, other, key := leasePair(t)
	lim, _ := NewLimit(GCRA, 1000, time.Second, 10)
	admitted := 0
	const step = int64(time.Millisecond)
	for now := int64(1e12); now < 1e12+int64(5*time.Second); now += step {
		for i := 0; i < 3; i++ {
			if other.Acquire(now, Request{Space: SpaceInline, Key: key, Limit: &lim, Cost: 1}, 0, false).Allowed {
				admitted++
			}
		}
		refill(owner, other, now)
	}
	if ideal := 10 + 5000; admitted > ideal || admitted < ideal*98/100 {
		t.Fatalf("admitted %d, ideal %d", admitted, ideal)
	}
}

// A node's first calls for a key it does not own are admitted from a
// credit (its share of the burst), which the owner then charges to its
// bucket: over both nodes, no more than one bucket's burst is admitted
// once the charge has arrived.
func TestNewLeaseCreditIsCharged(t *testing.T) {
	owner, other, key := leasePair(t)
	lim, _ := NewLimit(TokenBucket, 1, time.Hour, 10)
	now := int64(1e12)
	call := func(s *Store) bool {
		return s.Acquire(now, Request{Space: SpaceInline, Key: key, Limit: &lim, Cost: 1}, 0, false).Allowed
	}
	admitted := 0
	for i := 0; i < 8; i++ {
		if call(other) {
			admitted++
		}
	}
	if admitted != 5 {
		t.Fatalf("admitted %d from a new lease before any grant, want its credit of 5", admitted)
	}
	refill(owner, other, now) // charges the credit and grants what was asked
	for i := 0; i < 20; i++ {
		if call(owner) {
			admitted++
		}
		if call(other) {
			admitted++
		}
		refill(owner, other, now)
	}
	if admitted != 10 {
		t.Fatalf("two nodes admitted %d at one instant, one bucket holds 10", admitted)
	}
}

// A lease's unused tokens expire and go back to the owner; its credit,
// never taken from the owner, does not.
func TestExpiredLeaseGoesBack(t *testing.T) {
	owner, other, key := leasePair(t)
	lim, _ := NewLimit(TokenBucket, 1, time.Hour, 10)
	now := int64(1e12)
	for i := 0; i < 8; i++ { // the credit of 5, then three calls refused: a demand of 8
		if got := other.Acquire(now, Request{Space: SpaceInline, Key: key, Limit: &lim, Cost: 1}, 0, false).Allowed; got != (i < 5) {
			t.Fatalf("call %d admitted %v", i, got)
		}
	}
	refill(owner, other, now)
	if !other.Acquire(now, Request{Space: SpaceInline, Key: key, Limit: &lim, Cost: 1}, 0, false).Allowed {
		t.Fatal("not admitted from the granted lease")
	}
	left := owner.Acquire(now, Request{Space: SpaceInline, Key: key, Limit: &lim, Cost: 0}, 0, true).Remaining
	later := now + LeaseTTL
	back := int64(0)
	other.Expired(later, func(space Space, k []byte, l *Limit, n int64) { back += n; owner.Return(later, space, k, l, n) })
	if back == 0 {
		t.Fatal("nothing came back from the expired lease")
	}
	if got := owner.Acquire(later, Request{Space: SpaceInline, Key: key, Limit: &lim, Cost: 0}, 0, true).Remaining; got != left+back {
		t.Fatalf("owner has %d after the return, want %d", got, left+back)
	}
	// With nothing left, the next call takes no new credit so soon after
	// the last (creditEvery): it is refused, and the lease asks the owner.
	if other.Acquire(later, Request{Space: SpaceInline, Key: key, Limit: &lim, Cost: 1}, 0, false).Allowed {
		t.Fatal("a call after the lease expired was admitted from a second credit within creditEvery")
	}
	asked := false
	other.Wants(later, func(w *Want) { asked = asked || w.Tokens > 0 })
	if !asked {
		t.Fatal("the refused call did not ask the owner")
	}
	// creditEvery after the first credit, a call takes a new one, owed.
	later = now + creditEvery(&lim)
	if !other.Acquire(later, Request{Space: SpaceInline, Key: key, Limit: &lim, Cost: 1}, 0, false).Allowed {
		t.Fatal("a call long after the last credit was refused though the owner has tokens")
	}
	owed := int64(0)
	other.Wants(later, func(w *Want) { owed += w.Owed })
	if owed != 1 {
		t.Fatalf("owed %d after spending one token of a new credit, want 1", owed)
	}
}

// A call admitted from a lease is told a reset that matches the remaining
// it is told: the time the bucket takes to gain back what is missing.
func TestLeaseReplyResetMatchesRemaining(t *testing.T) {
	_, other, key := leasePair(t)
	lim, _ := NewLimit(TokenBucket, 100, time.Minute, 100)
	res := other.Acquire(1e12, Request{Space: SpaceInline, Key: key, Limit: &lim, Cost: 1}, 0, false)
	if !res.Allowed || res.Remaining != 99 {
		t.Fatalf("first call from a new lease: %+v, want allowed with 99 remaining", res)
	}
	if want := int64(600 * time.Millisecond); res.ResetAfter != want {
		t.Fatalf("reset after %v with 99 of 100 remaining at 100/minute, want %v", time.Duration(res.ResetAfter), time.Duration(want))
	}
}

// A node that is not the owner tells its clients what remains in the
// owner's bucket as of the owner's last reply, plus the tokens granted to
// it: also when that reply only settled the credit the node had spent (it
// asked for no tokens), and without counting its unspent credit, an
// advance on the owner's tokens.
func TestLeaseRemainingFollowsTheOwner(t *testing.T) {
	owner, other, key := leasePair(t)
	lim, _ := NewLimit(TokenBucket, 100, time.Minute, 100)
	now := int64(1e12)
	call := func(s *Store, cost int64) Result {
		return s.Acquire(now, Request{Space: SpaceInline, Key: key, Limit: &lim, Cost: cost}, 0, cost == 0)
	}
	if r := call(other, 1); !r.Allowed || r.Remaining != 99 {
		t.Fatalf("first call from credit: %+v", r)
	}
	owner.Acquire(now, Request{Space: SpaceInline, Key: key, Limit: &lim, Cost: 1}, 0, false)
	refill(owner, other, now) // settles the credit spent; asks for no tokens
	want := call(owner, 0).Remaining
	if want != 98 {
		t.Fatalf("owner has %d left after its call and the charged credit, want 98", want)
	}
	if got := call(other, 0).Remaining; got != want {
		t.Fatalf("the other node tells %d remain, the owner's bucket holds %d", got, want)
	}
}

package engine

import (
	"math"
	"sort"
	"sync/atomic"
)

// Token leases: in a cluster every bucket has one owner, chosen by
// rendezvous hashing of its key over the members, and only the owner's
// bucket decides how many tokens exist. The owner spends from its bucket
// directly; every other node admits from a lease: tokens the owner took
// from its bucket and granted to that node (Take), which the node spends
// locally with no round trip (the lease space of the store). A node asks
// for more before its lease runs dry (Wants) and applies what comes back
// (Grant); tokens left in a lease that expires go back to the owner
// (Expired, then Return). Since every admitted token was first taken from
// the owner's bucket, the cluster admits at most what one exact bucket
// would: its burst plus its rate over the time.

// leaseBit marks the lease space of a key space.
const leaseBit Space = 0x80

// LeaseTTL is how long granted tokens of a rate limit stay usable; unused
// ones then go back to the owner. Window and quota leases end with their
// window or period.
const LeaseTTL = int64(250e6)

// owners is the membership that ownership is computed over.
type owners struct {
	ids   []string
	seeds []uint64
	self  int // index of this node in ids, -1 if not a member
	down  []atomic.Bool
}

// SetOwners sets the members that own buckets (this node's id among them).
// With fewer than two members every bucket is this node's: no leases.
func (s *Store) SetOwners(self string, members []string) {
	if len(members) < 2 {
		s.owners.Store(nil)
		return
	}
	ids := append([]string(nil), members...)
	sort.Strings(ids)
	o := &owners{ids: ids, seeds: make([]uint64, len(ids)), self: -1, down: make([]atomic.Bool, len(ids))}
	for i, id := range ids {
		o.seeds[i] = fnv64([]byte(id), 0)
		if id == self {
			o.self = i
		}
	}
	s.owners.Store(o)
}

// SetOwnerDown marks an owner unreachable (or reachable again): while it
// is down, this node limits that owner's buckets from its own (a bounded
// local mode) instead of from leases.
func (s *Store) SetOwnerDown(id string, down bool) {
	o := s.owners.Load()
	if o == nil {
		return
	}
	for i, m := range o.ids {
		if m == id {
			o.down[i].Store(down)
		}
	}
}

// Owner returns the id of the member owning key in space and whether it
// is this node.
func (s *Store) Owner(space Space, key []byte) (id string, self bool) {
	o := s.owners.Load()
	if o == nil {
		return "", true
	}
	i := o.of(space, key)
	return o.ids[i], i == o.self
}

// OwnerDown reports whether this node marked member id unreachable
// (SetOwnerDown): its buckets, and anything else routed to it, are decided
// here meanwhile.
func (s *Store) OwnerDown(id string) bool {
	o := s.owners.Load()
	if o == nil {
		return false
	}
	for i, m := range o.ids {
		if m == id {
			return o.down[i].Load()
		}
	}
	return false
}

func (o *owners) of(space Space, key []byte) int {
	h := fnv64(key, uint64(space))
	best, bestScore := 0, uint64(0)
	for i, seed := range o.seeds {
		if sc := mix64(h ^ seed); i == 0 || sc > bestScore {
			best, bestScore = i, sc
		}
	}
	return best
}

// fnv64 is FNV-1a: the same on every node, unlike the store's seeded hash.
func fnv64(b []byte, salt uint64) uint64 {
	h := uint64(14695981039346656037) ^ salt
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

// mix64 is splitmix64's finaliser.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// route returns where r is decided: its own bucket, or (lease true) this
// node's lease of a bucket another member owns. Calls that may wait (a
// reservation) are decided locally, as are buckets of an owner marked
// down. Calendar quota counters are not leased: their counts reach the
// cluster through Raft (quota.go of the server).
func (s *Store) route(r *Request, maxWait int64) (hashed, bool) {
	o := s.owners.Load()
	if o == nil || maxWait > 0 || r.Space == SpaceQuota {
		return s.hash(r.Space, r.Key), false
	}
	i := o.of(r.Space, r.Key)
	if i == o.self || o.down[i].Load() {
		return s.hash(r.Space, r.Key), false
	}
	return s.hash(r.Space|leaseBit, r.Key), true
}

// Lease state: a = tokens granted and not spent, b = when they expire
// (ns), c = tokens asked for since the last grant (demand).

// leaseDecide evaluates a request against a lease.
func leaseDecide(l *Limit, st state, exists bool, now, cost int64) outcome {
	bal := int64(0)
	if exists && now < st.b {
		bal = st.a
	}
	o := outcome{remaining: bal, reset: refillTime(l, l.Burst-bal)}
	switch {
	case cost > l.Burst:
		o.never, o.retry = true, -1
	case cost <= bal:
		o.ok, o.changed = true, cost > 0
		o.remaining = bal - cost
		o.reset = refillTime(l, l.Burst-o.remaining)
		o.next = state{a: bal - cost, b: st.b, c: st.c + cost}
	default:
		o.retry = max(refillTime(l, cost-bal), 1)
	}
	return o
}

// refillTime estimates the ns in which l's bucket gains n tokens.
func refillTime(l *Limit, n int64) int64 {
	if n <= 0 {
		return 0
	}
	hi := float64(n) * float64(l.Window) / float64(l.Rate)
	if hi > math.MaxInt64/2 {
		return math.MaxInt64 / 2
	}
	return int64(math.Ceil(hi))
}

// evalLease decides lv from this node's lease of r's bucket, whose entry
// holds st (sh locked): from its tokens, or a credit it takes now.
func (s *Store) evalLease(sh *shard, lv *level, r *Request, now int64, st state) {
	st, lv.credit = s.leaseView(sh, lv, r, now, st)
	lv.out = leaseDecide(r.Limit, st, true, now, r.Cost)
	// What a client is told remains: the tokens granted to this node and
	// what the owner kept at its last reply (a full bucket before its
	// first), less what this node owes it that no reply has counted yet
	// (credit spent, a forced charge: the owner's bucket counts them at
	// the next request). Credit is not counted: it is an advance on the owner's
	// tokens. (Once, a lease that had not heard from the owner yet told
	// its own count, credit included: a reservation settled there just
	// after it was made answered 324 of 1000.)
	left, heard := sh.left[lv.idx]
	if !lv.exists || !heard {
		left = r.Limit.Burst
	}
	c, owed := lv.credit, int64(0) // credit held, or taken by this view
	if lv.exists {
		c, owed = c+sh.credit[lv.idx], sh.owed[lv.idx]+sh.sent[lv.idx]
	}
	if lv.out.ok {
		from := min(c, r.Cost) // spent from credit: owed
		c, owed = c-from, owed+from
	}
	lv.out.remaining = min(max(max(lv.out.remaining-c, 0)+left-owed, 0), r.Limit.Burst)
	if lv.out.ok {
		// The reset a client is told matches what it is told remains.
		lv.out.reset = refillTime(r.Limit, r.Limit.Burst-lv.out.remaining)
	}
}

// A lease with no tokens may take a credit: its burst's share among the
// members,
// spendable at once, so that a node's first calls for a key are not refused
// while it asks the owner (and its first after a pause of creditRenewal
// refills). Credit is not taken from the owner's bucket:
// what a node admits from it is owed, sent with its next request, and
// charged to the owner's bucket (which may go into debt), so over time the
// cluster still admits what one bucket allows; at any moment it may be
// ahead by at most the credits being spent, less than one burst. A lease
// entry lives at least as long as the bucket takes to refill, so a node
// gets a new credit for a key no more often than one full bucket's worth.

// credit returns the credit of a lease under l: the burst's share among
// the members. The credits of all other members together stay below one
// burst, the momentary excess the cluster's bound allows.
func (s *Store) credit(l *Limit) int64 {
	if l.Algo.IsWindow() {
		return 0 // a window's count starts afresh: debt cannot repay a credit
	}
	return s.share(l)
}

// share returns l's burst's share among the members, ⌈burst / N⌉: a
// lease's credit, and what a lease may keep of the tokens it held when
// its key's limit changed (relimitLease).
func (s *Store) share(l *Limit) int64 {
	n := int64(1)
	if o := s.owners.Load(); o != nil {
		n = int64(len(o.ids))
	}
	return max((l.Burst+n-1)/n, 1)
}

// relimitLease returns lease entry i of sh (locked), kept under another
// limit than l, as a call under l sees it, and unless dry makes l its
// limit. A lease holds tokens taken from the owner's bucket under the
// former limit, and perhaps credit of the former burst's share; the
// owner's bucket, re-scaled to l, keeps at most l's burst, as one bucket
// would, so the tokens held elsewhere must not outlive the change either:
// the lease keeps at most l's share (share), as much as a credit under l,
// and drops the rest, credit first. It does not give them back: the
// owner's bucket may have spent its new burst meanwhile, and refunded
// they would come on top of it. What the lease keeps, or takes in below,
// stands for its credit: it takes no new one for a while (creditEvery).
// Tokens granted
// under the former limit that arrive later (asked for before the change)
// are taken in only up to what the share leaves (prior, Grant). A lowered
// limit thus bites on a lease holder at its first call under the new
// limit, and the cluster admits after the change at most what one bucket
// of the new limit would, full at the change, plus (N − 1) shares: the
// bound of the credits (docs/cluster.md).
func (s *Store) relimitLease(sh *shard, i uint32, l *Limit, now int64, dry bool) state {
	e := sh.entry(i)
	st := e.st
	if now >= st.b && sh.limits[e.lim].lim.Algo.IsWindow() {
		st.a = 0 // tokens of an ended window
	}
	share := s.share(l)
	keep := min(max(st.a, 0), share)
	// What was asked for under the former limit is no demand under this
	// one: it would take the new burst from the owner's own callers.
	st.a, st.c = keep, 0
	if dry {
		return st
	}
	if c := sh.credit[i]; c > 0 {
		if c = min(c, keep); c > 0 {
			sh.credit[i] = c
		} else {
			delete(sh.credit, i)
		}
	}
	// Credit spent under the former limit and not yet reported is not
	// charged: taken from the owner's bucket before the change, it would
	// have been capped away with the rest (the bucket held more than the
	// new burst), and charged after it, it puts a bucket of the new limit
	// into debt for what it admitted under the old one.
	delete(sh.owed, i)
	delete(sh.sent, i)
	e.st = st
	sh.setLimit(e, l)
	sh.creditAt[i] = now
	sh.prior[i] = share - keep
	// A request for tokens queued under the former limit goes under
	// this one (the leaser merges the two).
	s.flagWant(sh, i)
	return st
}

// leaseView returns a lease as a call sees it (its shard locked): its
// tokens, or, when it has none, a credit (returned too), unless the lease
// has spent a credit or had tokens that have not yet expired (a refill is
// on its way), or its owner said when it expects tokens and that time has
// not come.
func (s *Store) leaseView(sh *shard, lv *level, r *Request, now int64, st state) (state, int64) {
	if lv.exists && st.a > 0 && (now < st.b || !r.Limit.Algo.IsWindow()) {
		// A rate limit's tokens stay good after their lease's time: it
		// only says when unused ones go back.
		st.b = max(st.b, now+1)
		return st, 0
	}
	if lv.exists && (now < st.b || sh.owed[lv.idx] > 0 || sh.credit[lv.idx] > 0) {
		return state{b: st.b, c: st.c}, 0
	}
	if at, ok := sh.creditAt[lv.idx]; lv.exists && ok && now-at < creditEvery(r.Limit) {
		return state{b: st.b, c: st.c}, 0
	}
	c := s.credit(r.Limit)
	if c == 0 {
		return state{b: st.b, c: st.c}, 0
	}
	lv.creditAt = now
	return state{a: c, b: now + LeaseTTL, c: st.c}, c
}

// creditRenewal is how many times the time its bucket takes to refill a
// lease waits before taking a new credit. A credit spent while the owner's
// bucket is empty is charged to it as debt, but debt charged late (the
// owner busy, the cluster loaded) can be forgiven by the refill of an
// idle pause: the cluster admitted a credit more than one bucket would
// have. Renewed at most once per creditRenewal refills, the credits of all
// other nodes add at most 1/creditRenewal of the rate: the +1 % of the
// bound (docs/accuracy.md).
const creditRenewal = 100

// creditEvery returns how long a lease under l waits between credits.
func creditEvery(l *Limit) int64 {
	if l.Rate <= 0 {
		return math.MaxInt64
	}
	return int64(min(float64(creditRenewal)*float64(l.Burst)*float64(l.Window)/float64(l.Rate), math.MaxInt64/2))
}

// spendCredit notes cost tokens spent from lease entry i (its shard
// locked): they come out of its credit first, and what does is owed.
func (s *Store) spendCredit(sh *shard, i uint32, lv *level, cost int64) {
	if lv.credit > 0 {
		sh.credit[i], sh.creditAt[i] = lv.credit, lv.creditAt
		lv.credit = 0
	}
	c := sh.credit[i]
	if c <= 0 {
		return
	}
	from := min(c, cost)
	if c -= from; c > 0 {
		sh.credit[i] = c
	} else {
		delete(sh.credit, i)
	}
	sh.owed[i] += from
}

// want notes the demand of a lease level (its shard locked) after a call
// of cost, creating the lease entry (with its credit) if needed, and flags
// it for a refill when what is left is at most what was asked for since
// the last grant, or when it owes credit to the owner.
func (s *Store) want(lv *level, r *Request, now int64, admitted bool) {
	sh := &s.shards[lv.h.shard]
	i, ok := sh.find(lv.h, r.Key)
	if !ok {
		if !s.makeRoom(sh, now, nil) {
			return // no room for the lease: it is asked for again on a later call
		}
		c := s.credit(r.Limit)
		i = s.add(sh, lv.h, r.Key, r.Limit, state{a: c, b: now + LeaseTTL})
		if c > 0 {
			sh.credit[i], sh.creditAt[i] = c, now
		}
	}
	e := sh.entry(i)
	if !admitted {
		e.st.c += max(r.Cost, 1)
	}
	bal := e.st.a
	if now >= e.st.b {
		bal = 0
	}
	if bal <= e.st.c || sh.owed[i] > 0 {
		s.flagWant(sh, i)
	}
}

// flagWant flags lease entry i of sh (locked) for Wants and wakes the
// caller of Wants.
func (s *Store) flagWant(sh *shard, i uint32) {
	sh.wants[i] = struct{}{}
	if s.wake != nil {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// SetWake sets a channel that receives a signal (without blocking) when a
// lease wants tokens.
func (s *Store) SetWake(ch chan struct{}) { s.wake = ch }

// Want is one lease's request for tokens.
type Want struct {
	Space   Space // the bucket's space (without the lease mark)
	Key     []byte
	Limit   Limit
	Tokens  int64 // how many to ask for
	Owed    int64 // credit spent, for the owner to charge
	Balance int64 // what the lease still holds
}

// Wants calls f with every lease that asked for tokens since the last
// call, and clears the requests. f runs with the shard locked; key is
// valid only during the call.
func (s *Store) Wants(now int64, f func(w *Want)) {
	var w Want
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for idx := range sh.wants {
			delete(sh.wants, idx)
			e := sh.entry(idx)
			lim := &sh.limits[e.lim].lim
			bal := e.st.a
			if now >= e.st.b {
				bal = 0
			}
			// Ask for what was spent or asked for since the last grant,
			// once what is left is no more than that (so the next grant
			// comes before this one runs dry); at most one burst. A
			// lease flagged only to send owed credit asks for nothing:
			// tokens idle in leases are tokens the owner's own callers
			// lack, which matters most for small limits.
			n := int64(0)
			if bal <= e.st.c {
				n = min(max(e.st.c, 1), lim.Burst)
			}
			w = Want{Space: e.space &^ leaseBit, Key: sh.key(e), Limit: *lim, Tokens: n, Balance: bal, Owed: sh.owed[idx]}
			if w.Owed > 0 {
				sh.sent[idx] += w.Owed // told until the owner's reply counts it
			}
			delete(sh.owed, idx)
			e.st.c = 0
			f(&w)
		}
		sh.mu.Unlock()
	}
}

// Grant adds n tokens to this node's lease of key, usable until expires,
// and notes left, the tokens the owner kept. With n = 0, expires is when
// the owner expects to have tokens: until then the lease takes no credit.
func (s *Store) Grant(now int64, space Space, key []byte, lim *Limit, n, expires, left int64) {
	sh, h, i, ok := s.lookup(space|leaseBit, key)
	defer sh.mu.Unlock()
	if !ok {
		if n <= 0 {
			return
		}
		// Tokens the owner took from its bucket for this node: kept even
		// past the bound, since dropping them would waste them.
		s.makeRoom(sh, now, nil)
		i = s.add(sh, h, key, lim, state{b: now})
	}
	e := sh.entry(i)
	delete(sh.sent, i) // left counts what the lease had sent it
	if cur := &sh.limits[e.lim].lim; !cur.same(lim) {
		// Asked for under a limit this lease no longer has: the tokens
		// come from before the change, and the lease takes in no more
		// of them than its share leaves (relimitLease).
		p := sh.prior[i]
		n = min(n, p)
		if p -= n; p > 0 {
			sh.prior[i] = p
		} else {
			delete(sh.prior, i)
		}
		sh.left[i] = min(left, cur.Burst)
		if n <= 0 {
			return
		}
		lim = cur
	} else {
		delete(sh.prior, i)
	}
	if now >= e.st.b && lim.Algo.IsWindow() {
		// Tokens of an ended window: the owner's window has ended too.
		e.st.a = 0
		delete(sh.credit, i)
	}
	// Tokens of a rate limit that expired before Expired gave them back
	// stay: they were taken from the owner's bucket and are as good now.
	e.st.a += n
	e.st.b = max(e.st.b, expires)
	sh.left[i] = left
	if e.st.a > 0 {
		sh.held[i] = struct{}{}
	}
}

// Take is the owner's side of a grant: it charges owed tokens (credit a
// node admitted) to the owner's bucket of r, into debt if need be, then
// takes up to r.Cost tokens (at least one, if any) from it as an admitted
// call would, and returns how many it took, until when they may be used,
// and, when none, in how many ns to ask again, and how many the bucket
// keeps.
func (s *Store) Take(now int64, r Request, owed int64) (got, expires, retry, left int64) {
	r.Space &^= leaseBit
	if owed > 0 {
		s.Consume(now, r.Space, r.Key, r.Limit, owed, maxCreditDebt*r.Limit.Burst)
	}
	want := r.Cost
	lv := level{h: s.hash(r.Space, r.Key)}
	sh := &s.shards[lv.h.shard]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if want <= 0 {
		// Only owed credit to settle: nothing is taken, but the node
		// still learns what the bucket keeps (what its clients are told
		// remains).
		r.Cost = 0
		s.eval(&lv, &r, now, 0, true)
		return 0, 0, 0, max(lv.out.remaining, 0)
	}
	s.eval(&lv, &r, now, 0, false)
	if !lv.out.ok {
		if lv.out.remaining <= 0 {
			return 0, 0, max(lv.out.retry, 1), 0
		}
		r.Cost = min(want, lv.out.remaining)
		s.eval(&lv, &r, now, 0, false)
		if !lv.out.ok {
			return 0, 0, max(lv.out.retry, 1), 0
		}
	}
	if lv.out.changed {
		if !lv.exists && !s.makeRoom(sh, now, nil) {
			s.refused.Add(1) // no room for the bucket: the peer's callers are refused as ours would be
			return 0, 0, max(sh.fullUntil-now, rescanAfter), 0
		}
		s.commit(&lv, &r)
	}
	return r.Cost, familyOf(r.Limit).leaseEnd(r.Limit, now), 0, lv.out.remaining
}

// maxCreditDebt bounds, in bursts, how far charged credit may take an
// owner's bucket below empty.
const maxCreditDebt = 64

// Expired calls f with every lease of tokens past its end that still holds
// some, and empties it; the caller gives them back to the owner (Return).
func (s *Store) Expired(now int64, f func(space Space, key []byte, lim *Limit, n int64)) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for i := range sh.held {
			e := sh.entry(i)
			if e.space&leaseBit == 0 || e.st.a <= 0 {
				delete(sh.held, i)
				continue
			}
			if now < e.st.b {
				continue
			}
			delete(sh.held, i)
			lim := &sh.limits[e.lim].lim
			backed := e.st.a - sh.credit[i] // credit never came from the owner
			delete(sh.credit, i)
			if backed > 0 && !lim.Algo.IsWindow() {
				f(e.space&^leaseBit, sh.key(e), lim, backed)
			}
			e.st.a = 0
		}
		sh.mu.Unlock()
	}
}

// Return gives n tokens of an expired lease back to the owner's bucket,
// if it is kept under lim. Tokens of a lease under another limit were
// taken before the limit changed (or before the holder learned of it):
// the change capped the owner's bucket at its new burst, as it would have
// capped one bucket holding them too, so they are not refunded on top of
// it. A missing bucket is full: nothing goes back.
func (s *Store) Return(now int64, space Space, key []byte, lim *Limit, n int64) {
	sh, _, i, ok := s.lookup(space&^leaseBit, key)
	defer sh.mu.Unlock()
	if ok && sh.limits[sh.entry(i).lim].lim.same(lim) {
		s.refundEntry(sh, i, now, lim, n, false)
	}
}

// refundLease gives n tokens back to this node's lease of a bucket another
// member owns (a refund made where the call was admitted), at most up to
// one burst.
func (s *Store) refundLease(now int64, space Space, key []byte, lim *Limit, n int64) Result {
	sh, _, i, ok := s.lookup(space|leaseBit, key)
	defer sh.mu.Unlock()
	bal := int64(0)
	if ok {
		if !sh.limits[sh.entry(i).lim].lim.same(lim) {
			s.relimitLease(sh, i, lim, now, false)
		}
		if e := sh.entry(i); now < e.st.b {
			e.st.a = min(e.st.a+n, lim.Burst)
			bal = e.st.a
			sh.held[i] = struct{}{}
		}
	}
	return Result{Allowed: true, Remaining: bal, Limit: lim.Burst, ResetAfter: refillTime(lim, lim.Burst-bal)}
}

// idleAt is when the entry holds nothing worth keeping: a bucket when it
// is full again, a lease when its tokens have expired (and gone back,
// Expired runs more often than eviction needs) and its demand is old.
func (e *entry) idleAt(l *Limit) int64 {
	if e.space&leaseBit == 0 {
		return idleAt(l, e.st)
	}
	return e.st.b + LeaseTTL + refillTime(l, l.Burst)
}

// Ranking appends to dst the members in the rendezvous order of key in
// space, the owner first, and returns it; nil with fewer than two
// members. Two members keep their relative order in every membership
// that holds both: a member that joins only inserts itself, one that
// leaves only drops out.
func (s *Store) Ranking(space Space, key []byte, dst []string) []string {
	o := s.owners.Load()
	if o == nil {
		return dst
	}
	h := fnv64(key, uint64(space))
	idx := make([]int, len(o.ids))
	for i := range idx {
		idx[i] = i
	}
	// Highest score first; on a tie the member first in id order, as of.
	sort.SliceStable(idx, func(a, b int) bool {
		return mix64(h^o.seeds[idx[a]]) > mix64(h^o.seeds[idx[b]])
	})
	for _, i := range idx {
		dst = append(dst, o.ids[i])
	}
	return dst
}

// View identifies the membership ownership is computed over: equal on
// two nodes when they rank keys alike (0 for a node alone).
func (s *Store) View() uint64 {
	o := s.owners.Load()
	if o == nil {
		return 0
	}
	return ViewOf(o.ids)
}

// ViewOf is the View of a node whose owners are members (in any order).
func ViewOf(members []string) uint64 {
	if len(members) < 2 {
		return 0
	}
	ids := append([]string(nil), members...)
	sort.Strings(ids)
	v := uint64(len(ids))
	for _, id := range ids {
		v = mix64(v ^ fnv64([]byte(id), 0))
	}
	return v
}

// Self returns this node's id among the owners, "" for a node alone.
func (s *Store) Self() string {
	o := s.owners.Load()
	if o == nil || o.self < 0 {
		return ""
	}
	return o.ids[o.self]
}

package engine

// Request is one bucket's share of an acquire: its key, its limit and the
// tokens to take from it.
type Request struct {
	Space Space
	Key   []byte
	Limit *Limit
	Cost  int64
	// For a Quota limit: the current period [PeriodStart, PeriodEnd), and
	// tokens of it counted elsewhere besides the store's quota source
	// (SetQuotaSource).
	PeriodStart, PeriodEnd, Base int64
}

// QuotaSource gives the cluster's committed count of a quota counter in
// the period [start, end). It must not keep key nor call back into the
// store.
type QuotaSource interface {
	QuotaUsed(key []byte, start, end int64) int64
}

// SetQuotaSource sets where quota requests read the cluster's committed
// counts. They read them with the counter's shard locked, so that a count
// leaving the local tally (SettleQuota, which takes the same lock after
// the committed count has grown) is never missed.
func (s *Store) SetQuotaSource(src QuotaSource) {
	if src == nil {
		s.quotaSrc.Store(nil)
		return
	}
	s.quotaSrc.Store(&src)
}

// quotaBase returns the tokens of r's period counted elsewhere (sh
// locked). The key goes to the source as a copy in the shard's buffer, so
// that the request, and the limit it points to, stay on the caller's stack.
func (s *Store) quotaBase(sh *shard, r *Request) int64 {
	src := s.quotaSrc.Load()
	if src == nil {
		return r.Base
	}
	sh.qkey = append(sh.qkey[:0], r.Key...)
	return r.Base + (*src).QuotaUsed(sh.qkey, r.PeriodStart, r.PeriodEnd)
}

// QuotaGate bounds what this node may admit against a quota counter: in a
// cluster, the units the cluster reserved for it (quota reservations).
type QuotaGate interface {
	// QuotaCap returns how far this node's pending count of key in the
	// period [start, end) may go (-1: no bound), given its pending count
	// now and the cost of the call being decided. It may note that more
	// should be reserved; it must not keep key nor call back into the
	// store.
	QuotaCap(key []byte, lim *Limit, start, end, pending, cost int64) int64
}

// SetQuotaGate sets the gate of quota requests (nil: none). Dry runs do
// not consult it: they describe the cluster's count.
func (s *Store) SetQuotaGate(g QuotaGate) {
	if g == nil {
		s.quotaGate.Store(nil)
		return
	}
	s.quotaGate.Store(&g)
}

// quotaCap returns the gate's bound on r's pending count (sh locked; the
// key goes as a copy in the shard's buffer, as in quotaBase).
func (s *Store) quotaCap(sh *shard, r *Request, st state, exists bool) int64 {
	g := s.quotaGate.Load()
	if g == nil {
		return -1
	}
	sh.qkey = append(sh.qkey[:0], r.Key...)
	return (*g).QuotaCap(sh.qkey, r.Limit, r.PeriodStart, r.PeriodEnd, quotaPending(st, exists, r.PeriodStart), r.Cost)
}

// Result is the answer to an acquire, described at its tightest level.
type Result struct {
	Allowed    bool
	Remaining  int64 // whole tokens left at the tightest level
	Limit      int64 // capacity of the tightest level
	RetryAfter int64 // ns until the same call would be admitted; 0 if allowed; -1 never
	ResetAfter int64 // ns until the tightest level is full again
	Wait       int64 // ns to hold the admitted reply: tokens reserved, not yet due
	Level      int   // index of the tightest (or denying) request
	// Reserve marks a refusal by a quota that has room in the cluster but
	// not in what this node holds reserved (QuotaGate): reserving more and
	// trying again may admit it.
	Reserve bool
	// Refused: denied because the call needed a new bucket and the store
	// is at its bound with no full bucket to forget (Options.MaxBuckets);
	// RetryAfter is then when one may be.
	Refused bool
}

// level is one request's progress through an acquire.
type level struct {
	h      hashed
	idx    uint32
	exists bool
	lease  bool  // decided from this node's lease (lease.go)
	credit int64 // a new lease's credit (lease.go), 0 if none
	// creditAt is when that credit was taken.
	creditAt int64
	out      outcome
}

// eval looks up r's bucket (its shard locked) and decides on it.
func (s *Store) eval(lv *level, r *Request, now, maxWait int64, dry bool) {
	sh := &s.shards[lv.h.shard]
	var st state
	// A level may be decided again after its shard was let go (lockShard):
	// what an earlier look found may be gone since.
	lv.idx, lv.exists = 0, false
	if ei, ok := sh.find(lv.h, r.Key); ok {
		e := sh.entry(ei)
		lv.idx, lv.exists, st = ei, true, e.st
		if old := &sh.limits[e.lim].lim; !old.same(r.Limit) && r.Limit.Algo != Quota {
			st = rescale(old, r.Limit, st, now)
		}
	}
	if lv.lease {
		st, lv.credit = s.leaseView(sh, lv, r, now, st)
		lv.out = leaseDecide(r.Limit, st, true, now, r.Cost)
		if left, heard := sh.left[lv.idx]; lv.exists && heard {
			// What a client is told remains: the tokens granted to this
			// node and what the owner kept at its last reply. Credit is
			// not counted: it is an advance on the owner's tokens.
			c := sh.credit[lv.idx] + lv.credit // held, or taken by this view
			if lv.out.ok {
				c = max(c-r.Cost, 0)
			}
			lv.out.remaining = min(max(lv.out.remaining-c, 0)+left, r.Limit.Burst)
		} else if !lv.exists && lv.out.ok {
			lv.out.remaining = r.Limit.Burst - r.Cost
		}
		if lv.out.ok {
			// The reset a client is told matches what it is told remains.
			lv.out.reset = refillTime(r.Limit, r.Limit.Burst-lv.out.remaining)
		}
		return
	}
	if r.Limit.Algo == Quota {
		base, cap := s.quotaBase(sh, r), int64(-1)
		if !dry && quotaFits(r.Limit, st, lv.exists, r.Cost, r.PeriodStart, base) {
			// Only a call the cluster's count has room for asks the
			// gate: one the quota refuses anyway reserves nothing.
			cap = s.quotaCap(sh, r, st, lv.exists)
		}
		lv.out = quotaDecide(r.Limit, st, lv.exists, now, r.Cost, r.PeriodStart, r.PeriodEnd, base, cap)
		return
	}
	lv.out = decide(r.Limit, st, lv.exists, now, r.Cost, maxWait)
}

// update stores an admitted level's new state in its existing bucket.
func (s *Store) update(lv *level, r *Request) {
	sh := &s.shards[lv.h.shard]
	e := sh.entry(lv.idx)
	if !sh.limits[e.lim].lim.same(r.Limit) {
		sh.dropLimit(e.lim)
		e.lim = sh.internLimit(r.Limit)
	}
	e.st = lv.out.next
	if lv.lease {
		s.spendCredit(sh, lv.idx, lv, r.Cost)
	} else {
		s.record(sh, lv.idx, r)
	}
}

// create stores an admitted level's new state in a new bucket; the caller
// has made room (makeRoom).
func (s *Store) create(lv *level, r *Request) {
	sh := &s.shards[lv.h.shard]
	i := sh.insert(lv.h, r.Key, sh.internLimit(r.Limit), lv.out.next)
	s.live.Add(1)
	if lv.lease {
		lv.idx, lv.exists = i, true
		s.spendCredit(sh, i, lv, r.Cost)
	} else {
		s.record(sh, i, r)
	}
}

// Acquire charges one bucket: AcquireAll for a single request, without the
// bookkeeping of several locks.
func (s *Store) Acquire(now int64, r Request, maxWait int64, dryRun bool) Result {
	var lv level
	lv.h, lv.lease = s.route(&r, maxWait)
	sh := &s.shards[lv.h.shard]
	sh.mu.Lock()
	s.eval(&lv, &r, now, maxWait, dryRun)
	o := &lv.out
	if o.ok && o.changed && !dryRun {
		if lv.exists {
			s.update(&lv, &r)
		} else if s.makeRoom(sh, now, nil, nil) {
			s.create(&lv, &r)
		} else {
			res := s.refusal(sh, now, &r)
			sh.mu.Unlock()
			return res
		}
	}
	if lv.lease && !dryRun {
		s.want(&lv, &r, now, o.ok)
	}
	sh.mu.Unlock()
	res := Result{Remaining: o.remaining, Limit: r.Limit.Burst, ResetAfter: o.reset, Allowed: o.ok, Wait: o.wait}
	if !o.ok {
		res.RetryAfter, res.Reserve = o.retry, o.reserve
	}
	return res
}

// AcquireAll charges every request's bucket at time now, or none of them:
// the call is admitted only if every level admits it. With maxWait > 0 a
// call that every level can take within maxWait ns is admitted as a
// reservation and Result.Wait says how long to hold the reply. With dryRun
// nothing is stored. The requests' keys must be distinct; at most MaxLevels.
//
// Every shard involved is locked before any is released, and each level is
// decided and committed under its shard's lock, so concurrent calls see no
// torn state between levels (two-phase locking). List the requests from the
// widest (the bucket most calls share, such as a hierarchy's root) to the
// narrowest: the shards are locked narrowest first, each level decided as
// soon as its shard is held, and released widest first once committed, so
// a bucket every call shares stays locked for its own work alone and not
// for the lookups of the colder levels. The order is only a matter of
// speed: a shard whose lock would be taken out of ascending order is only
// tried, and when it is busy the locks above it are let go and taken again
// in ascending order, so concurrent calls cannot deadlock.
func (s *Store) AcquireAll(now int64, reqs []Request, maxWait int64, dryRun bool) Result {
	n := len(reqs)
	if n == 0 || n > MaxLevels {
		panic("engine: AcquireAll needs 1 to MaxLevels requests")
	}
	var (
		lvs    [MaxLevels]level
		outs   [MaxLevels]outcome
		idx    [MaxLevels]uint32
		exists [MaxLevels]bool
		held   heldShards
	)
	for i := range reqs {
		lvs[i].h, lvs[i].lease = s.route(&reqs[i], maxWait)
	}
	for i := n - 1; i >= 0; i-- {
		si := lvs[i].h.shard
		if !held.has(si) {
			if from := s.lockShard(&held, si); from >= 0 {
				// Shards above si were let go and taken again: what their
				// levels decided may have changed.
				for j := n - 1; j > i; j-- {
					if lvs[j].h.shard > si {
						s.eval(&lvs[j], &reqs[j], now, maxWait, dryRun)
					}
				}
			}
		}
		s.eval(&lvs[i], &reqs[i], now, maxWait, dryRun)
	}
	for i := range reqs {
		outs[i], idx[i], exists[i] = lvs[i].out, lvs[i].idx, lvs[i].exists
	}
	res := combine(outs[:n], reqs)
	if res.Allowed && !dryRun {
		// Every new bucket needs room before anything is charged (every
		// shard is still held).
		for i := range reqs {
			if sh := &s.shards[lvs[i].h.shard]; outs[i].changed && !exists[i] && !s.makeRoom(sh, now, idx[:n], exists[:n]) {
				res = s.refusal(sh, now, &reqs[i])
				res.Level = i
				break
			}
		}
	}
	// Commit shard by shard, widest level first, and let each shard go as
	// soon as its levels are done.
	for i := range reqs {
		si := lvs[i].h.shard
		if !held.has(si) {
			continue // committed with an earlier level of the same shard
		}
		if res.Allowed && !dryRun {
			// Update existing buckets first, then create.
			for j := i; j < n; j++ {
				if lvs[j].h.shard == si && outs[j].changed && exists[j] {
					s.update(&lvs[j], &reqs[j])
				}
			}
			for j := i; j < n; j++ {
				if lvs[j].h.shard == si && outs[j].changed && !exists[j] {
					s.create(&lvs[j], &reqs[j])
				}
			}
		}
		if !dryRun && !res.Refused {
			// A refused call counts as demand only on the leases that
			// lacked tokens: the others would hold tokens they cannot spend.
			for j := i; j < n; j++ {
				if lvs[j].h.shard == si && lvs[j].lease && (res.Allowed || !outs[j].ok) {
					s.want(&lvs[j], &reqs[j], now, res.Allowed)
				}
			}
		}
		held.remove(si)
		s.shards[si].mu.Unlock()
	}
	return res
}

// heldShards is the set of shards one AcquireAll holds locked.
type heldShards struct {
	s [MaxLevels]uint32
	n int
}

func (h *heldShards) has(si uint32) bool {
	for _, v := range h.s[:h.n] {
		if v == si {
			return true
		}
	}
	return false
}

func (h *heldShards) add(si uint32) { h.s[h.n] = si; h.n++ }

func (h *heldShards) remove(si uint32) {
	for k, v := range h.s[:h.n] {
		if v == si {
			h.n--
			h.s[k] = h.s[h.n]
			return
		}
	}
}

// lockShard locks shard si and adds it to held. A caller blocks on a lock
// only while every lock it holds is below it, which rules out deadlock:
// when a held shard is above si, si is only tried, and if it is busy the
// held shards above it are unlocked, si is locked, and they are locked
// again in ascending order. It returns -1, or, when shards were let go
// and taken again, si.
func (s *Store) lockShard(held *heldShards, si uint32) int {
	above := false
	for _, v := range held.s[:held.n] {
		if v > si {
			above = true
			break
		}
	}
	if !above {
		s.shards[si].mu.Lock()
		held.add(si)
		return -1
	}
	if s.shards[si].mu.TryLock() {
		held.add(si)
		return -1
	}
	var again [MaxLevels]uint32
	na := 0
	for k := 0; k < held.n; {
		if v := held.s[k]; v > si {
			s.shards[v].mu.Unlock()
			na = insertSorted(again[:], na, v)
			held.n--
			held.s[k] = held.s[held.n]
			continue
		}
		k++
	}
	if relockHook != nil {
		relockHook()
	}
	s.shards[si].mu.Lock()
	held.add(si)
	for _, v := range again[:na] {
		s.shards[v].mu.Lock()
		held.add(v)
	}
	return int(si)
}

// relockHook, when set (by tests), runs in lockShard after the shards above
// a busy one are let go and before it waits for that one.
var relockHook func()

// insertSorted adds v to the sorted set a[:n] and returns the new length.
func insertSorted(a []uint32, n int, v uint32) int {
	i := n
	for i > 0 && a[i-1] > v {
		i--
	}
	if i > 0 && a[i-1] == v {
		return n
	}
	copy(a[i+1:n+1], a[i:n])
	a[i] = v
	return n + 1
}

// combine folds per-level outcomes into one reply. A call some level can
// never admit is refused with −1; otherwise a denied call reports the level
// that holds it back longest; an admitted one reports the level with the
// fewest tokens left (the deepest on a tie).
func combine(outs []outcome, reqs []Request) Result {
	describe := func(i int) Result {
		return Result{Remaining: outs[i].remaining, Limit: reqs[i].Limit.Burst, ResetAfter: outs[i].reset, Level: i}
	}
	for i := range outs {
		if outs[i].never {
			r := describe(i)
			r.RetryAfter = -1
			return r
		}
	}
	worst, due := -1, int64(0)
	var wait int64
	for i := range outs {
		o := &outs[i]
		if !o.ok && (worst < 0 || o.retry > due) {
			worst, due = i, o.retry
		}
		wait = max(wait, o.wait)
	}
	if worst >= 0 {
		r := describe(worst)
		r.RetryAfter, r.Reserve = max(due, wait), outs[worst].reserve
		return r
	}
	tight := 0
	for i := 1; i < len(outs); i++ {
		if outs[i].remaining <= outs[tight].remaining {
			tight = i
		}
	}
	r := describe(tight)
	r.Allowed, r.Wait = true, wait
	return r
}

// Limit returns the limit a stored bucket was last charged under.
func (s *Store) Limit(space Space, key []byte) (Limit, bool) {
	h := s.hash(space, key)
	sh := &s.shards[h.shard]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if i, ok := sh.find(h, key); ok {
		return sh.limits[sh.entry(i).lim].lim, true
	}
	return Limit{}, false
}

// Refund gives n tokens back to key's bucket (never beyond its capacity) and
// returns its state afterwards. lim nil means the bucket's own limit; then
// found is false if there is no bucket (a missing bucket is full).
func (s *Store) Refund(now int64, space Space, key []byte, lim *Limit, n int64) (res Result, found bool) {
	if o := s.owners.Load(); o != nil && lim != nil {
		if i := o.of(space, key); i != o.self && !o.down[i].Load() {
			return s.refundLease(now, space, key, lim, n), true
		}
	}
	return s.refund(now, space, key, lim, n)
}

// RefundWaited gives n tokens back to key's bucket for a call that
// waited (WAIT): such a call is decided on this node's own bucket, not a
// lease (route), and its tokens reached the peers' copies through the
// consumption sync, so the refund goes to this node's bucket and, while
// syncing, to the peers' copies the same way. A refund that reached
// only this node would leave the peers counting tokens nobody used.
func (s *Store) RefundWaited(now int64, space Space, key []byte, lim *Limit, n int64) (res Result, found bool) {
	return s.refundOwn(now, space, key, lim, n, s.syncing.Load())
}

func (s *Store) refund(now int64, space Space, key []byte, lim *Limit, n int64) (res Result, found bool) {
	return s.refundOwn(now, space, key, lim, n, false)
}

// refundOwn refunds n tokens to this node's own bucket of key, and with
// record notes them for peers (a negative delta; the entry stays, full or
// not, until the next Drain has sent it).
func (s *Store) refundOwn(now int64, space Space, key []byte, lim *Limit, n int64, record bool) (res Result, found bool) {
	h := s.hash(space, key)
	sh := &s.shards[h.shard]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ei, ok := sh.find(h, key)
	if !ok {
		if lim == nil {
			return Result{}, false
		}
		o := decide(lim, state{}, false, now, 0, 0)
		return Result{Allowed: true, Remaining: o.remaining, Limit: lim.Burst}, true
	}
	e := sh.entry(ei)
	old := &sh.limits[e.lim].lim
	l := old
	st := e.st
	if lim != nil && !lim.same(old) {
		st, l = rescale(old, lim, st, now), lim
	}
	st = refundState(l, st, now, min(n, l.Burst))
	if record {
		sh.pending[ei] -= min(n, l.Burst)
	}
	if idleAt(l, st) <= now && sh.pending[ei] == 0 {
		sh.removeAt(sh.slotOf(ei))
		s.live.Add(-1)
		return Result{Allowed: true, Remaining: l.Burst, Limit: l.Burst}, true
	}
	o := decide(l, st, true, now, 0, 0)
	if l != old {
		sh.dropLimit(e.lim)
		e.lim = sh.internLimit(l)
	}
	e.st = st
	return Result{Allowed: true, Remaining: o.remaining, Limit: l.Burst, ResetAfter: o.reset}, true
}

// Reset forgets key's bucket and reports whether there was one.
func (s *Store) Reset(space Space, key []byte) bool {
	h := s.hash(space, key)
	sh := &s.shards[h.shard]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i, ok := sh.find(h, key)
	if ok {
		sh.removeAt(sh.slotOf(i))
		s.live.Add(-1)
	}
	return ok
}

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
	lease  bool // decided from this node's lease (lease.go)
	// rescaled: the bucket was kept under another limit (look).
	rescaled bool
	credit   int64 // a new lease's credit (lease.go), 0 if none
	// creditAt is when that credit was taken.
	creditAt int64
	out      outcome
}

// eval looks up r's bucket (its shard locked) and decides on it in the
// level's mode: from this node's lease of a bucket another member owns
// (lease.go), against a calendar quota's count and gate (quota.go), or on
// the bucket itself.
func (s *Store) eval(lv *level, r *Request, now, maxWait int64, dry bool) {
	sh := &s.shards[lv.h.shard]
	st := s.look(sh, lv, r, now, dry)
	switch {
	case lv.lease:
		s.evalLease(sh, lv, r, now, st)
	case r.Limit.Algo == Quota:
		s.evalQuota(sh, lv, r, now, st, dry)
	default:
		lv.out = decide(r.Limit, st, lv.exists, now, r.Cost, maxWait)
		if lv.rescaled && !lv.out.ok && !dry && r.Cost > 0 && !r.Limit.Algo.IsWindow() {
			// A call refused under a new limit keeps the bucket under
			// it too: else it would go on refilling at its former rate
			// (lowered, faster) until a call is admitted, and tokens
			// given back under the former limit would count (Return).
			// A window does not refill: it stays under the limit it
			// had, so that its count survives a lowering whole (what
			// it stores is what is left, which a lower limit clips)
			// and a limit raised again finds it, as envoyproxy/
			// ratelimit's counters do.
			e := sh.entry(lv.idx)
			sh.setLimit(e, r.Limit)
			e.st = st
			lv.rescaled = false
		}
	}
}

// look finds lv's entry in sh (locked) and returns its state under r's
// limit: rescaled if it was stored under another (a quota counter keeps
// its count), empty if there is none. A lease kept under another limit
// is cut to the new limit's share, and unless dry kept so (relimitLease).
func (s *Store) look(sh *shard, lv *level, r *Request, now int64, dry bool) state {
	// A level may be decided again after its shard was let go (lockShard):
	// what an earlier look found may be gone since.
	lv.idx, lv.exists, lv.rescaled = 0, false, false
	ei, ok := sh.find(lv.h, r.Key)
	if !ok {
		return state{}
	}
	e := sh.entry(ei)
	lv.idx, lv.exists = ei, true
	if r.Limit.Algo == Quota {
		return e.st
	}
	if old := &sh.limits[e.lim].lim; !old.same(r.Limit) {
		if lv.lease {
			return s.relimitLease(sh, ei, r.Limit, now, dry)
		}
		lv.rescaled = true
		return rescale(old, r.Limit, e.st, now)
	}
	return e.st
}

// commit stores an admitted level's new state, in its bucket or, when it
// has none, in a new one (the caller has made room), and notes the tokens
// as the level's mode needs: spent from a lease's credit, or recorded for
// peers and the cluster.
func (s *Store) commit(lv *level, r *Request) {
	sh := &s.shards[lv.h.shard]
	if lv.exists {
		e := sh.entry(lv.idx)
		sh.setLimit(e, r.Limit)
		e.st = lv.out.next
	} else {
		lv.idx, lv.exists = s.add(sh, lv.h, r.Key, r.Limit, lv.out.next), true
	}
	if lv.lease {
		s.spendCredit(sh, lv.idx, lv, r.Cost)
	} else {
		s.record(sh, lv.idx, r)
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
		if !lv.exists && !s.makeRoom(sh, now, nil) {
			res := s.refusal(sh, now, &r)
			sh.mu.Unlock()
			return res
		}
		s.commit(&lv, &r)
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

// PeekAmong answers as RL.PEEK does (cost zero, nothing stored) for the
// requests of reqs whose bit is set in among, and says in Result.Level the
// index in reqs of the level it reports. ok is false when no bit is set.
// It describes an admitted call by the levels that count its cost, not
// those that count calls (a node's requests beside its tokens).
func (s *Store) PeekAmong(now int64, reqs []Request, among uint32) (r Result, ok bool) {
	var sub [MaxLevels]Request
	var from [MaxLevels]int
	k := 0
	for i := range reqs {
		if among&(1<<i) != 0 {
			sub[k], from[k] = reqs[i], i
			sub[k].Cost = 0
			k++
		}
	}
	if k == 0 {
		return Result{}, false
	}
	if k == 1 {
		r = s.Acquire(now, sub[0], 0, true)
	} else {
		r = s.AcquireAll(now, sub[:k], 0, true)
	}
	r.Level = from[r.Level]
	return r, true
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
	return s.acquireAll(now, reqs, maxWait, dryRun, nil)
}

// AcquireEach is AcquireAll that also says, in each[i] (each holds at
// least len(reqs)), what request i said within that one decision: its own
// Allowed at its cost, RetryAfter (−1 never) and Reserve when it refused,
// and its figures as the call left it — after its charge when the call was
// admitted and stored, else untouched (as a look of cost zero would find
// it: nothing was taken). Level is i. A caller that answers for several
// parts of one call describes each from its own requests, with no second
// look at the buckets.
func (s *Store) AcquireEach(now int64, reqs []Request, maxWait int64, dryRun bool, each []Result) Result {
	return s.acquireAll(now, reqs, maxWait, dryRun, each[:len(reqs)])
}

func (s *Store) acquireAll(now int64, reqs []Request, maxWait int64, dryRun bool, each []Result) Result {
	n := len(reqs)
	if n == 0 || n > MaxLevels {
		panic("engine: AcquireAll needs 1 to MaxLevels requests")
	}
	var (
		lvs  [MaxLevels]level
		held heldShards
	)
	for i := range reqs {
		lvs[i].h, lvs[i].lease = s.route(&reqs[i], maxWait)
	}
	s.lockAndEval(lvs[:n], reqs, &held, now, maxWait, dryRun)
	res := combine(lvs[:n], reqs)
	if res.Allowed && !dryRun {
		res = s.roomForNew(lvs[:n], reqs, now, res)
	}
	if each != nil {
		s.describeEach(lvs[:n], reqs, now, res.Allowed && !dryRun, each)
	}
	// Commit shard by shard, widest level first, and let each shard go as
	// soon as its levels are done.
	for i := range reqs {
		if si := lvs[i].h.shard; held.has(si) { // else committed with an earlier level
			if !dryRun {
				s.commitShard(lvs[i:n], reqs[i:], si, now, res)
			}
			held.remove(si)
			s.shards[si].mu.Unlock()
		}
	}
	return res
}

// lockAndEval locks the levels' shards, the narrowest level's first, and
// decides each level as soon as its shard is held. When shards were let
// go and taken again (lockShard), what their levels decided may have
// changed: they are decided again.
func (s *Store) lockAndEval(lvs []level, reqs []Request, held *heldShards, now, maxWait int64, dry bool) {
	n := len(lvs)
	for i := n - 1; i >= 0; i-- {
		si := lvs[i].h.shard
		if !held.has(si) && s.lockShard(held, si) >= 0 {
			for j := n - 1; j > i; j-- {
				if lvs[j].h.shard > si {
					s.eval(&lvs[j], &reqs[j], now, maxWait, dry)
				}
			}
		}
		s.eval(&lvs[i], &reqs[i], now, maxWait, dry)
	}
}

// describeEach fills each[i] with what level i said (its shard still
// held): charged says the call's new states are about to be stored, so an
// admitting level is described after its charge; otherwise an admitting
// level is looked at again with cost zero, as it stands.
func (s *Store) describeEach(lvs []level, reqs []Request, now int64, charged bool, each []Result) {
	for i := range lvs {
		o := &lvs[i].out
		r := Result{Allowed: o.ok, Remaining: o.remaining, Limit: reqs[i].Limit.Burst, ResetAfter: o.reset, Level: i}
		switch {
		case !o.ok:
			r.RetryAfter, r.Reserve = o.retry, o.reserve
			if o.never {
				r.RetryAfter = -1
			}
		case charged:
			r.Wait = o.wait
		default:
			// Nothing is taken: the level as a look of cost zero finds it,
			// on a copy (a dry evaluation changes nothing in the shard).
			look, peek := lvs[i], reqs[i]
			peek.Cost = 0
			s.eval(&look, &peek, now, 0, true)
			r.Remaining, r.ResetAfter = look.out.remaining, look.out.reset
		}
		each[i] = r
	}
}

// roomForNew makes room for every new bucket an admitted call needs,
// before anything is charged (every shard is still held), and returns
// res, or the refusal of the first level that finds none.
func (s *Store) roomForNew(lvs []level, reqs []Request, now int64, res Result) Result {
	for i := range lvs {
		if sh := &s.shards[lvs[i].h.shard]; lvs[i].out.changed && !lvs[i].exists && !s.makeRoom(sh, now, lvs) {
			res = s.refusal(sh, now, &reqs[i])
			res.Level = i
			return res
		}
	}
	return res
}

// commitShard commits the levels of shard si (locked) among lvs once the
// call is decided (res): an admitted call's new states, in existing
// buckets first, then in new ones; then, unless the call was refused for
// want of room, the demand of its leases.
func (s *Store) commitShard(lvs []level, reqs []Request, si uint32, now int64, res Result) {
	if res.Allowed {
		for _, existing := range [2]bool{true, false} {
			for j := range lvs {
				if lv := &lvs[j]; lv.h.shard == si && lv.out.changed && lv.exists == existing {
					s.commit(lv, &reqs[j])
				}
			}
		}
	}
	if res.Refused {
		return
	}
	// A refused call counts as demand only on the leases that lacked
	// tokens: the others would hold tokens they cannot spend.
	for j := range lvs {
		if lv := &lvs[j]; lv.h.shard == si && lv.lease && (res.Allowed || !lv.out.ok) {
			s.want(lv, &reqs[j], now, res.Allowed)
		}
	}
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
func combine(lvs []level, reqs []Request) Result {
	describe := func(i int) Result {
		o := &lvs[i].out
		return Result{Remaining: o.remaining, Limit: reqs[i].Limit.Burst, ResetAfter: o.reset, Level: i}
	}
	for i := range lvs {
		if lvs[i].out.never {
			r := describe(i)
			r.RetryAfter = -1
			return r
		}
	}
	worst, due := -1, int64(0)
	var wait int64
	for i := range lvs {
		o := &lvs[i].out
		if !o.ok && (worst < 0 || o.retry > due) {
			worst, due = i, o.retry
		}
		wait = max(wait, o.wait)
	}
	if worst >= 0 {
		r := describe(worst)
		r.RetryAfter, r.Reserve = max(due, wait), lvs[worst].out.reserve
		return r
	}
	tight := 0
	for i := 1; i < len(lvs); i++ {
		if lvs[i].out.remaining <= lvs[tight].out.remaining {
			tight = i
		}
	}
	r := describe(tight)
	r.Allowed, r.Wait = true, wait
	return r
}

// Limit returns the limit a stored bucket was last charged under.
func (s *Store) Limit(space Space, key []byte) (Limit, bool) {
	sh, _, i, ok := s.lookup(space, key)
	defer sh.mu.Unlock()
	if ok {
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
	sh, _, ei, ok := s.lookup(space, key)
	defer sh.mu.Unlock()
	if !ok {
		if lim == nil {
			return Result{}, false
		}
		o := decide(lim, state{}, false, now, 0, 0)
		return Result{Allowed: true, Remaining: o.remaining, Limit: lim.Burst}, true
	}
	return s.refundEntry(sh, ei, now, lim, n, record), true
}

// refundEntry is refundOwn of entry ei of sh (locked).
func (s *Store) refundEntry(sh *shard, ei uint32, now int64, lim *Limit, n int64, record bool) Result {
	e := sh.entry(ei)
	l := lim
	if l == nil {
		l = &sh.limits[e.lim].lim
	}
	st := refundState(l, sh.stateUnder(e, l, now), now, min(n, l.Burst))
	if record {
		sh.pending[ei] -= min(n, l.Burst)
	}
	if idleAt(l, st) <= now && sh.pending[ei] == 0 {
		sh.removeAt(sh.slotOf(ei))
		s.live.Add(-1)
		return Result{Allowed: true, Remaining: l.Burst, Limit: l.Burst}
	}
	o := decide(l, st, true, now, 0, 0)
	sh.setLimit(e, l)
	e.st = st
	return Result{Allowed: true, Remaining: o.remaining, Limit: l.Burst, ResetAfter: o.reset}
}

// Reset forgets key's bucket and reports whether there was one.
func (s *Store) Reset(space Space, key []byte) bool {
	sh, _, i, ok := s.lookup(space, key)
	defer sh.mu.Unlock()
	if ok {
		sh.removeAt(sh.slotOf(i))
		s.live.Add(-1)
	}
	return ok
}

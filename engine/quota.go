package engine

// The quota gate mode: a level whose limit is a calendar quota is decided
// against the cluster's committed count of the period (QuotaSource) plus
// this node's uncommitted one, within the units the cluster reserved for
// this node (QuotaGate). The counter's arithmetic is algo_quota.go's.

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

// evalQuota decides lv, a calendar quota's counter in st (sh locked),
// against the period's count. Only a call the cluster's count has room
// for asks the gate: one the quota refuses anyway reserves nothing; nor
// does a dry run, which describes the cluster's count.
func (s *Store) evalQuota(sh *shard, lv *level, r *Request, now int64, st state, dry bool) {
	base, cap := s.quotaBase(sh, r), int64(-1)
	if !dry && quotaFits(r.Limit, st, lv.exists, r.Cost, r.PeriodStart, base) {
		cap = s.quotaCap(sh, r, st, lv.exists)
	}
	lv.out = quotaDecide(r.Limit, st, lv.exists, now, r.Cost, r.PeriodStart, r.PeriodEnd, base, cap)
}

// Calendar quotas: a quota counter's state holds the tokens this node
// admitted (or, refunded, gave back) in the current period that the
// cluster has not yet committed. The caller reads them with PendingQuota,
// commits them through Raft, and once its own replica has applied them
// calls SettleQuota, so that a request never sees a count twice for longer
// than that apply takes, nor misses one.

// PendingQuota calls f with every quota counter whose count is not yet
// committed: its key, limit, period [start, end) and count (negative when
// refunds outweigh admissions). Nothing changes; f runs with the shard
// locked and must copy key.
func (s *Store) PendingQuota(f func(key []byte, lim *Limit, start, end, count int64)) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for idx := range sh.pending {
			e := sh.entry(idx)
			if e.space != SpaceQuota {
				continue
			}
			if e.st.b == 0 {
				delete(sh.pending, idx)
				continue
			}
			f(sh.key(e), &sh.limits[e.lim].lim, e.st.a, e.st.c, e.st.b)
		}
		sh.mu.Unlock()
	}
}

// SettleQuota takes n committed tokens off key's uncommitted count for the
// period starting at start. A counter that has moved on to a later period
// is left alone: its earlier count no longer matters.
func (s *Store) SettleQuota(key []byte, start, n int64) {
	sh, _, i, ok := s.lookup(SpaceQuota, key)
	defer sh.mu.Unlock()
	if !ok {
		return
	}
	if e := sh.entry(i); e.st.a == start {
		if e.st.b -= n; e.st.b == 0 {
			delete(sh.pending, i)
		}
	}
}

// RefundQuota gives back up to n tokens of r's quota counter (r.Key in the
// period of r), never more than the period has used, and returns the
// counter's state afterwards.
func (s *Store) RefundQuota(now int64, r *Request, n int64) Result {
	sh, h, i, ok := s.lookup(SpaceQuota, r.Key)
	defer sh.mu.Unlock()
	var st state
	if ok {
		st = sh.entry(i).st
	}
	base := s.quotaBase(sh, r)
	lim, start, end := r.Limit, r.PeriodStart, r.PeriodEnd
	o := quotaDecide(lim, st, ok, now, 0, start, end, base, -1)
	back := min(n, lim.Burst-o.remaining)
	if back > 0 {
		cnt := int64(0)
		if ok && st.a == start {
			cnt = st.b
		}
		next := state{a: start, b: cnt - back, c: end}
		if !s.putQuota(sh, h, i, ok, r, now, next, false) {
			return Result{Refused: true, Limit: lim.Burst, RetryAfter: max(sh.fullUntil-now, rescanAfter)}
		}
		o = quotaDecide(lim, next, true, now, 0, start, end, base, -1)
	}
	return Result{Allowed: true, Remaining: o.remaining, Limit: lim.Burst, ResetAfter: o.reset}
}

// QuotaUsed returns the tokens r's quota counter has used in r's period:
// the committed count and this store's uncommitted one.
func (s *Store) QuotaUsed(r *Request) int64 {
	sh, _, i, ok := s.lookup(SpaceQuota, r.Key)
	defer sh.mu.Unlock()
	n := s.quotaBase(sh, r)
	if ok {
		if e := sh.entry(i); e.st.a == r.PeriodStart {
			n += e.st.b
		}
	}
	return max(n, 0)
}

// HasQuota reports whether the store holds a counter for key.
func (s *Store) HasQuota(key []byte) bool {
	sh, _, _, ok := s.lookup(SpaceQuota, key)
	defer sh.mu.Unlock()
	return ok
}

// QuotaCount returns the count of key's quota not yet committed, in the
// period starting at start.
func (s *Store) QuotaCount(key []byte, start int64) int64 {
	sh, _, i, ok := s.lookup(SpaceQuota, key)
	defer sh.mu.Unlock()
	if ok {
		if e := sh.entry(i); e.st.a == start {
			return e.st.b
		}
	}
	return 0
}

// chargeQuota counts n more tokens of r's quota counter in r's period.
func (s *Store) chargeQuota(now int64, r *Request, n int64) {
	sh, h, i, ok := s.lookup(SpaceQuota, r.Key)
	defer sh.mu.Unlock()
	cnt := int64(0)
	if ok {
		switch st := sh.entry(i).st; {
		case st.a == r.PeriodStart:
			cnt = st.b
		case st.a > r.PeriodStart:
			// The counter has moved on to a later period: the one charged
			// is over and no longer limits anything.
			return
		}
	}
	s.putQuota(sh, h, i, ok, r, now, state{a: r.PeriodStart, b: cnt + n, c: r.PeriodEnd}, true)
}

// putQuota stores next as r's quota counter (entry i if found, else a new
// one; sh locked) and marks it for the cluster. A new counter needs room;
// with force it is created even without (a count that happened must not
// be dropped), else putQuota reports false and stores nothing.
func (s *Store) putQuota(sh *shard, h hashed, i uint32, found bool, r *Request, now int64, next state, force bool) bool {
	if found {
		e := sh.entry(i)
		sh.setLimit(e, r.Limit)
		e.st = next
	} else {
		if !s.makeRoom(sh, now, nil) && !force {
			return false
		}
		i = s.add(sh, h, r.Key, r.Limit, next)
	}
	sh.pending[i] += 0 // a count to commit
	return true
}

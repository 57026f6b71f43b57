package engine

// Forced charges: a reservation settled above its estimate charges the
// difference after the work is done, when refusing it would undo nothing.
// These are kept apart from the admission path (eval/update/create): they
// decide nothing, they only move a bucket's state.

// MaxDebt bounds how far beyond empty a forced charge may put a bucket, in
// tokens: later calls wait until the debt has refilled. A fixed or sliding
// window keeps its debt only until its window (two, sliding) has passed.
const MaxDebt = MaxCost

// Charge takes n tokens from r's bucket at now without asking whether they
// fit (r.Cost is ignored): the bucket may go into debt, up to MaxDebt
// tokens, so that later calls wait longer. For a quota counter (SpaceQuota)
// it counts n more in r's period [PeriodStart, PeriodEnd), past the quota if
// need be. A missing bucket is created, even at --max-buckets. The tokens
// are recorded for peers (and a quota's count for the cluster) as an
// admission's are. The charge is decided on this node's own bucket, as a
// call that waits is (route).
func (s *Store) Charge(now int64, r *Request, n int64) {
	if n <= 0 {
		return
	}
	if r.Space == SpaceQuota {
		s.chargeQuota(now, r, n)
		return
	}
	s.consume(now, r.Space, r.Key, r.Limit, n, MaxDebt, true)
}

// chargeQuota counts n more tokens of r's quota counter in r's period.
func (s *Store) chargeQuota(now int64, r *Request, n int64) {
	h := s.hash(SpaceQuota, r.Key)
	sh := &s.shards[h.shard]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i, ok := sh.find(h, r.Key)
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
		if !sh.limits[e.lim].lim.same(r.Limit) {
			sh.dropLimit(e.lim)
			e.lim = sh.internLimit(r.Limit)
		}
		e.st = next
	} else {
		if !s.makeRoom(sh, now, nil, nil) && !force {
			return false
		}
		i = sh.insert(h, r.Key, sh.internLimit(r.Limit), next)
		s.live.Add(1)
	}
	sh.pending[i] += 0 // a count to commit
	return true
}

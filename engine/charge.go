package engine

// Forced charges: a reservation settled above its estimate charges the
// difference after the work is done, when refusing it would undo nothing.
// These are kept apart from the admission path (eval and commit): they
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

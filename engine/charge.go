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
// fit (r.Cost is ignored): the bucket may go into debt, so that later
// calls wait longer. For a quota counter (SpaceQuota) it counts n more in
// r's period [PeriodStart, PeriodEnd), past the quota if need be. It is
// charged where an admission of r is decided (route):
//
//   - on this node's own bucket when this node owns it (or is alone, or
//     its owner is marked down): up to MaxDebt tokens of debt; a missing
//     bucket is created, even at --max-buckets; the tokens are recorded for
//     peers (a quota's count for the cluster) as an admission's are;
//   - on this node's lease when another member owns the bucket
//     (chargeLease): the owner's bucket is the one that counts, so the
//     tokens come out of the lease, as an admitted call's would, and what
//     the lease does not hold is owed to the owner, which charges it to its
//     bucket with the lease's next request (Take: into debt, up to
//     maxCreditDebt bursts).
func (s *Store) Charge(now int64, r *Request, n int64) {
	if n <= 0 {
		return
	}
	if r.Space == SpaceQuota {
		s.chargeQuota(now, r, n)
		return
	}
	if _, lease := s.route(r, 0); lease {
		s.chargeLease(now, r, n)
		return
	}
	s.consume(now, r.Space, r.Key, r.Limit, n, MaxDebt, true)
}

// ChargeWaited is Charge for a call that waited (WAIT, a queue): such a
// call was decided on this node's own bucket, not a lease (route), and
// its tokens reached the peers' copies (the owner's bucket among them)
// through the consumption sync, so its forced charge goes the same way,
// as RefundWaited's refund does.
func (s *Store) ChargeWaited(now int64, r *Request, n int64) {
	if n <= 0 {
		return
	}
	if r.Space == SpaceQuota {
		s.chargeQuota(now, r, n)
		return
	}
	s.consume(now, r.Space, r.Key, r.Limit, n, MaxDebt, true)
}

// chargeLease charges n tokens of a bucket another member owns to this
// node's lease of it: they come out of the lease's tokens as an admitted
// call's would (credit first, which is then owed), and the rest is owed
// outright; the lease is flagged, so the owed tokens go to the owner with
// its next request (Wants), and the owner's bucket counts them all. (Once,
// the charge went to this node's own copy of the bucket and reached the
// owner only through the consumption sync, if at all: the owner kept
// granting tokens it no longer had, and a client on this node was told the
// lease's count, which did not see the charge.) A lease kept under another
// limit is charged as it is: what it owes is charged under the limit the
// owner's bucket has now, as tokens.
func (s *Store) chargeLease(now int64, r *Request, n int64) {
	sh, h, i, ok := s.lookup(r.Space|leaseBit, r.Key)
	defer sh.mu.Unlock()
	if !ok {
		// Owed to the owner: kept even past the bound, as consumption is.
		s.makeRoom(sh, now, nil)
		i = s.add(sh, h, r.Key, r.Limit, state{b: now})
	}
	e := sh.entry(i)
	bal := e.st.a
	if now >= e.st.b && sh.limits[e.lim].lim.Algo.IsWindow() {
		bal = 0 // tokens of an ended window
	}
	take := min(max(bal, 0), n)
	if take > 0 {
		e.st.a -= take
		e.st.c += take // as an admitted call: spent, to be asked for again
		var lv level
		s.spendCredit(sh, i, &lv, take)
	}
	sh.owed[i] += n - take
	s.flagWant(sh, i)
}

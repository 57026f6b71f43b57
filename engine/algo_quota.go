package engine

import (
	"math"
	"time"
)

// --- Calendar quota ---------------------------------------------------------------
//
// State: a = period start (ns), b = count not yet handed to the cluster,
// c = period end.

// quotaFamily is a calendar quota's counter. A quota is decided by
// quotaDecide, with the period and the cluster's count its request
// carries (the gate mode, quota.go), and its count changes only through
// the quota operations there; so only idleAt is its own. The other paths
// are the continuous arithmetic's: no caller sends a quota through them
// (quota counters are neither rescaled, merged from peers nor leased),
// and were one to, it would be limited as RATE per WINDOW.
type quotaFamily struct{ gcraFamily }

func (quotaFamily) idleAt(_ *Limit, st state) int64 {
	if st.b != 0 {
		// Not yet committed: needed until its period is over (under
		// --max-buckets pressure it may go sooner, and its count with it).
		return st.c
	}
	return math.MinInt64
}

// wireLimit refuses a quota: quota counts reach the cluster through Raft,
// never in a sync record.
func (quotaFamily) wireLimit(a Algo, rate, window, burst int64) (Limit, error) {
	return Limit{}, ErrBadSync
}

// quotaDecide counts cost against a calendar quota: base tokens of the
// period [start, end) are already counted by the cluster, st.b more only
// here. A quota holds no reservation: a call it refuses waits for the next
// period. With cap >= 0 this node's pending count may not pass cap (the
// units the cluster reserved for it): a call that fits the quota but not
// the cap is refused with reserve set, to try again within ReserveRetry.
func quotaDecide(l *Limit, st state, exists bool, now, cost, start, end, base, cap int64) outcome {
	cnt := quotaPending(st, exists, start)
	used := max(base+cnt, 0)
	o := outcome{remaining: max(l.Burst-used, 0)}
	if used > 0 {
		o.reset = end - now
	}
	switch {
	case cost > l.Burst:
		o.never, o.retry = true, -1
	case used+cost > l.Burst:
		o.retry = end - now
	case cap >= 0 && cost > 0 && cnt+cost > cap:
		o.retry, o.reserve = min(end-now, ReserveRetry), true
	default:
		o.ok, o.changed = true, cost > 0
		o.next = state{a: start, b: cnt + cost, c: end}
		o.remaining = max(l.Burst-used-cost, 0)
		if used+cost > 0 {
			o.reset = end - now
		}
	}
	return o
}

// quotaPending returns the count not yet committed in the period starting
// at start (negative after refunds of committed tokens).
func quotaPending(st state, exists bool, start int64) int64 {
	if exists && st.a == start {
		return st.b
	}
	return 0
}

// quotaFits reports whether cost fits the quota's count (committed base
// and pending), before any bound on what this node may admit.
func quotaFits(l *Limit, st state, exists bool, cost, start, base int64) bool {
	return cost <= l.Burst && max(base+quotaPending(st, exists, start), 0)+cost <= l.Burst
}

// ReserveRetry is the retry time of a call refused for want of reserved
// quota units: about how long a reservation takes to commit, with room.
const ReserveRetry = int64(100 * time.Millisecond)

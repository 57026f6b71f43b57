package engine

import (
	"math"
	"math/bits"
	"time"
)

// state is one bucket's algorithm state. Its meaning depends on the limit's
// algorithm:
//
//	GCRA family  a = theoretical arrival time (ns), b = its remainder in 1/Rate ns
//	Cell         a = theoretical arrival time (ns)
//	FixedWindow  a = window index, b = count
//	SlidingWindow a = window index, b = previous window's count, c = current count
//	Quota        a = period start (ns), b = count not yet handed to the cluster, c = period end
type state struct{ a, b, c int64 }

// outcome is what one bucket says about one request, before anything is
// committed: a multi-level acquire commits every level's next state or none.
type outcome struct {
	ok        bool
	never     bool  // cost exceeds capacity: no wait will ever admit it
	wait      int64 // ns to hold an admitted reply (a reservation); ok only
	retry     int64 // ns until admissible; denied only; -1 with never
	remaining int64 // whole tokens left after the request (or now, if denied)
	reset     int64 // ns until the bucket is full again
	next      state // state to commit when ok
	changed   bool  // next differs from the stored state
	reserve   bool  // a quota refused for want of units reserved here
}

// decide evaluates a request of cost against a bucket at time now. exists
// says whether st holds stored state (a missing bucket is full). maxWait > 0
// allows a reservation of up to maxWait ns.
func decide(l *Limit, st state, exists bool, now, cost, maxWait int64) outcome {
	switch l.Algo {
	case FixedWindow:
		return fixedDecide(l, st, exists, now, cost, maxWait)
	case SlidingWindow:
		return slidingDecide(l, st, exists, now, cost, maxWait)
	case Cell:
		return cellDecide(l, st, exists, now, cost)
	default:
		return tatDecide(l, st, exists, now, cost, maxWait)
	}
}

// --- GCRA family: token_bucket, gcra, leaky_bucket ---------------------------

// tatOf returns the effective theoretical arrival time: the stored one, or
// now when the bucket is missing or has refilled.
func tatOf(st state, exists bool, now int64) (int64, uint64) {
	if exists && (st.a > now || (st.a == now && st.b > 0)) {
		return st.a, uint64(st.b)
	}
	return now, 0
}

// advance returns t + cost×T where T = Window/Rate, exactly. cost must be at
// most Burst, which NewLimit's bound on Burst×T keeps inside 64 bits.
func (l *Limit) advance(tn int64, tf uint64, cost int64) (int64, uint64) {
	hi, lo := bits.Mul64(uint64(cost), uint64(l.Window))
	lo, carry := bits.Add64(lo, tf, 0)
	hi += carry
	q, rem := bits.Div64(hi, lo, uint64(l.Rate))
	return tn + int64(q), rem
}

// excess returns ⌈x − Burst×T − now⌉ in ns: how long until a bucket whose
// arrival time would be x can take it. ≤ 0 means now.
func (l *Limit) excess(xn int64, xf uint64, now int64) int64 {
	d := xn - now - int64(l.dq)
	if xf > l.dr {
		d++
	}
	return d
}

// tokens returns the whole tokens available at now for arrival time t ≥ now.
func (l *Limit) tokens(tn int64, tf uint64, now int64) int64 {
	d := tn - now
	if d < 0 || (d == 0 && tf == 0) {
		return l.Burst
	}
	// debt in tokens = (d×Rate + tf)/Window, rounded up.
	hi, lo := bits.Mul64(uint64(d), uint64(l.Rate))
	lo, c1 := bits.Add64(lo, tf, 0)
	lo, c2 := bits.Add64(lo, uint64(l.Window)-1, 0)
	hi += c1 + c2
	if hi >= uint64(l.Window) {
		return 0
	}
	q, _ := bits.Div64(hi, lo, uint64(l.Window))
	if q >= uint64(l.Burst) {
		return 0
	}
	return l.Burst - int64(q)
}

// untilFull returns ⌈t − now⌉ in ns.
func untilFull(tn int64, tf uint64, now int64) int64 {
	d := tn - now
	if d < 0 {
		return 0
	}
	if tf > 0 {
		d++
	}
	return d
}

func tatDecide(l *Limit, st state, exists bool, now, cost, maxWait int64) outcome {
	tn, tf := tatOf(st, exists, now)
	if cost > l.Burst {
		return outcome{never: true, retry: -1, remaining: l.tokens(tn, tf, now), reset: untilFull(tn, tf, now)}
	}
	xn, xf := l.advance(tn, tf, cost)
	due := l.excess(xn, xf, now)
	if l.Algo == LeakyBucket && maxWait > 0 {
		// Shaping: a request leaves the queue when the water ahead of it
		// has drained, so admissions are spaced by T whatever the burst.
		if dep := untilFull(tn, tf, now); dep > due {
			due = dep
		}
	}
	if due > 0 && (maxWait <= 0 || due > maxWait) {
		return outcome{retry: due, remaining: l.tokens(tn, tf, now), reset: untilFull(tn, tf, now)}
	}
	o := outcome{ok: true, next: state{a: xn, b: int64(xf)}, changed: cost > 0,
		remaining: l.tokens(xn, xf, now), reset: untilFull(xn, xf, now)}
	if due > 0 {
		o.wait = due
	}
	return o
}

// --- Cell: redis-cell's GCRA, integer nanoseconds ---------------------------

func cellDecide(l *Limit, st state, exists bool, now, cost int64) outcome {
	tat := now
	if exists && st.a > now {
		tat = st.a
	}
	dvt := int64(l.dq)
	inc := l.ei * cost
	if cost != 0 && inc/cost != l.ei {
		inc = math.MaxInt64 / 2 // beyond any DVT: never admitted
	}
	newTat := clampAdd(tat, inc)
	var o outcome
	var ttl int64
	if diff := now - (newTat - dvt); diff < 0 {
		o.retry = -1
		if inc <= dvt {
			o.retry = -diff
		} else {
			o.never = true
		}
		ttl = tat - now
	} else {
		o.ok, o.next, o.changed = true, state{a: newTat}, cost > 0
		ttl = newTat - now
	}
	o.reset = ttl
	// redis-cell: remaining = trunc(next_µs / ei_µs) when next > −ei, where
	// both durations are first truncated to whole microseconds.
	if next := dvt - ttl; next > -l.ei {
		nu, eu := next/1000, l.ei/1000
		switch {
		case eu != 0:
			o.remaining = int64(float64(nu) / float64(eu))
		case nu > 0:
			o.remaining = math.MaxInt64
		}
	}
	return o
}

// --- Windows ------------------------------------------------------------------

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func fixedDecide(l *Limit, st state, exists bool, now, cost, maxWait int64) outcome {
	w, lim := l.Window, l.Burst
	k := floorDiv(now, w)
	var cnt int64
	if exists && st.a >= k {
		k, cnt = st.a, st.b // st.a > k is a reservation in a later window
	}
	describe := func(o *outcome, k, cnt int64) {
		o.remaining = max(lim-cnt, 0)
		if cnt > 0 {
			o.reset = (k+1)*w - now
		}
	}
	var o outcome
	if cost > lim {
		o.never, o.retry = true, -1
		describe(&o, k, cnt)
		return o
	}
	var due int64
	next := state{a: k, b: cnt + cost}
	if cnt+cost <= lim {
		due = k*w - now
	} else {
		due = (k+1)*w - now
		next = state{a: k + 1, b: cost}
	}
	if due > 0 && (maxWait <= 0 || due > maxWait) {
		o.retry = due
		describe(&o, k, cnt)
		return o
	}
	o.ok, o.next, o.changed = true, next, cost > 0
	o.wait = max(due, 0)
	describe(&o, next.a, next.b)
	return o
}

// slidingFits reports whether prev×(W−e)/W + cur + cost ≤ limit, exactly.
func slidingFits(w, lim, prev, cur, e, cost int64) bool {
	ah, al := bits.Mul64(uint64(prev), uint64(w-e))
	bh, bl := bits.Mul64(uint64(cur+cost), uint64(w))
	sl, c := bits.Add64(al, bl, 0)
	sh := ah + bh + c
	lh, ll := bits.Mul64(uint64(lim), uint64(w))
	return sh < lh || (sh == lh && sl <= ll)
}

// slidingEstimateCeil returns ⌈prev×(W−e)/W + cur⌉.
func slidingEstimateCeil(w, prev, cur, e int64) int64 {
	hi, lo := bits.Mul64(uint64(prev), uint64(w-e))
	lo, c := bits.Add64(lo, uint64(w-1), 0)
	hi += c
	q, _ := bits.Div64(hi, lo, uint64(w)) // < prev+1: fits
	return int64(q) + cur
}

// slidingEarliest returns the smallest offset e' in [0, W) into a window at
// which prev×(W−e')/W + need ≤ limit, or W if none: e' = W − ⌊(limit−need)×W/prev⌋.
func slidingEarliest(w, lim, prev, need int64) int64 {
	x := lim - need
	if x < 0 {
		return w
	}
	if prev <= x {
		return 0
	}
	hi, lo := bits.Mul64(uint64(x), uint64(w))
	f, _ := bits.Div64(hi, lo, uint64(prev)) // x < prev, so f < W
	return w - int64(f)
}

func slidingDecide(l *Limit, st state, exists bool, now, cost, maxWait int64) outcome {
	w, lim := l.Window, l.Burst
	k := floorDiv(now, w)
	e := now - k*w
	var prev, cur int64
	if exists {
		switch {
		case st.a == k:
			prev, cur = st.b, st.c
		case st.a == k-1:
			prev = st.c
		case st.a > k: // a reservation in a later window: evaluate at its start
			k, e, prev, cur = st.a, 0, st.b, st.c
		}
	}
	describe := func(o *outcome, k, prev, cur int64) {
		e := max(now-k*w, 0)
		o.remaining = max(lim-slidingEstimateCeil(w, prev, cur, e), 0)
		switch {
		case cur > 0:
			o.reset = (k+2)*w - now
		case prev > 0:
			o.reset = (k+1)*w - now
		}
	}
	var o outcome
	if cost > lim {
		o.never, o.retry = true, -1
		describe(&o, k, prev, cur)
		return o
	}
	var due int64
	var next state
	if slidingFits(w, lim, prev, cur, e, cost) {
		due, next = k*w+e-now, state{a: k, b: prev, c: cur + cost}
	} else if e2 := slidingEarliest(w, lim, prev, cur+cost); e2 < w {
		due, next = k*w+e2-now, state{a: k, b: prev, c: cur + cost}
	} else {
		due, next = (k+1)*w+slidingEarliest(w, lim, cur, cost)-now, state{a: k + 1, b: cur, c: cost}
	}
	if due > 0 && (maxWait <= 0 || due > maxWait) {
		o.retry = due
		describe(&o, k, prev, cur)
		return o
	}
	o.ok, o.next, o.changed = true, next, cost > 0
	o.wait = max(due, 0)
	describe(&o, next.a, next.b, next.c)
	return o
}

// --- State conversions --------------------------------------------------------

// fpShift is the resolution of token counts when a bucket changes limits:
// 2^-20 of a token, rounded towards the client (never a free token).
const fpShift = 20

// usedFP returns how many tokens of l's capacity are in use at now, in
// units of 2^-fpShift tokens, rounded up. It may exceed the capacity when
// reservations are outstanding.
func usedFP(l *Limit, st state, exists bool, now int64) uint64 {
	if !exists {
		return 0
	}
	switch l.Algo {
	case FixedWindow, SlidingWindow:
		o := decide(l, st, exists, now, 0, 0)
		return uint64(l.Burst-o.remaining) << fpShift
	case Cell:
		if st.a <= now {
			return 0
		}
		hi, lo := bits.Mul64(uint64(st.a-now), 1<<fpShift)
		lo, c := bits.Add64(lo, uint64(l.ei-1), 0)
		q, _ := bits.Div64(hi+c, lo, uint64(l.ei))
		return q
	}
	tn, tf := tatOf(st, exists, now)
	d := tn - now
	if d == 0 && tf == 0 {
		return 0
	}
	// ((d×Rate + tf) << fpShift) / Window, rounded up.
	hi, lo := bits.Mul64(uint64(d), uint64(l.Rate))
	lo, c := bits.Add64(lo, tf, 0)
	hi += c
	hi = hi<<fpShift | lo>>(64-fpShift)
	lo <<= fpShift
	lo, c = bits.Add64(lo, uint64(l.Window)-1, 0)
	hi += c
	if hi >= uint64(l.Window) {
		return math.MaxUint64 >> 1
	}
	q, _ := bits.Div64(hi, lo, uint64(l.Window))
	return q
}

// withUsed returns a state for l at now with used tokens (2^-fpShift units)
// of its capacity in use.
func withUsed(l *Limit, used uint64, now int64) state {
	if used == 0 {
		return state{a: math.MinInt64}
	}
	switch l.Algo {
	case FixedWindow:
		return state{a: floorDiv(now, l.Window), b: int64((used + 1<<fpShift - 1) >> fpShift)}
	case SlidingWindow:
		return state{a: floorDiv(now, l.Window), c: int64((used + 1<<fpShift - 1) >> fpShift)}
	case Cell:
		hi, lo := bits.Mul64(used, uint64(l.ei))
		lo, c := bits.Add64(lo, 1<<fpShift-1, 0)
		hi += c
		return state{a: clampAdd(now, int64(hi<<(64-fpShift)|lo>>fpShift))}
	}
	// now + used×Window/(Rate<<fpShift), remainder kept in 1/Rate ns.
	hi, lo := bits.Mul64(used, uint64(l.Window))
	div := uint64(l.Rate) << fpShift
	if hi >= div {
		return state{a: clampAdd(now, int64(MaxRefill))}
	}
	q, rem := bits.Div64(hi, lo, div)
	frac := (rem + 1<<fpShift - 1) >> fpShift
	tn := clampAdd(now, int64(q))
	if frac >= uint64(l.Rate) {
		tn, frac = tn+1, 0
	}
	return state{a: tn, b: int64(frac)}
}

// rescale converts st, kept under limit from, to an equivalent state under
// limit to: the tokens available carry over, capped at the new capacity. No
// refill is granted by the change and none is lost beyond the new capacity.
func rescale(from, to *Limit, st state, now int64) state {
	used := usedFP(from, st, true, now)
	capFrom, capTo := uint64(from.Burst)<<fpShift, uint64(to.Burst)<<fpShift
	// tokensTo = min(capFrom − used, capTo); usedTo = capTo − tokensTo.
	var usedTo uint64
	if sum := capTo + used; sum > capFrom {
		usedTo = sum - capFrom
	}
	return withUsed(to, usedTo, now)
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

// idleAt returns the time at which a bucket in st is full again under l:
// after it, forgetting the bucket loses nothing.
func idleAt(l *Limit, st state) int64 {
	switch l.Algo {
	case Quota:
		if st.b != 0 {
			// Not yet committed: needed until its period is over (under
			// --max-buckets pressure it may go sooner, and its count with it).
			return st.c
		}
		return math.MinInt64
	case FixedWindow:
		if st.b == 0 {
			return math.MinInt64
		}
		return (st.a + 1) * l.Window
	case SlidingWindow:
		switch {
		case st.c > 0:
			return (st.a + 2) * l.Window
		case st.b > 0:
			return (st.a + 1) * l.Window
		}
		return math.MinInt64
	}
	if st.b > 0 {
		return st.a + 1
	}
	return st.a
}

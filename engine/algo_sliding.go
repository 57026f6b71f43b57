package engine

import (
	"math"
	"math/bits"
	"time"
)

// --- Sliding window ---------------------------------------------------------------
//
// State: a = window index, b = previous window's count, c = current count.

// slidingFamily counts requests in the current window plus the previous
// window's count weighted by how much of it the sliding window still
// covers, exactly.
type slidingFamily struct{}

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

func (slidingFamily) decide(l *Limit, st state, exists bool, now, cost, maxWait int64) outcome {
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

func (f slidingFamily) used(l *Limit, st state, now int64) uint64 { return windowUsed(f, l, st, now) }

func (slidingFamily) withUsed(l *Limit, used uint64, now int64) state {
	return state{a: floorDiv(now, l.Window), c: wholeUsed(used)}
}

// slidingNow moves st on to the window holding now: the current window
// becomes the previous one once it has ended, and both are forgotten
// after two.
func slidingNow(st state, k int64) state {
	switch {
	case st.a == k-1:
		return state{a: k, b: st.c}
	case st.a < k-1:
		return state{a: k}
	}
	return st
}

func (slidingFamily) refund(l *Limit, st state, now, n int64) state {
	k := floorDiv(now, l.Window)
	if st.a < k-1 {
		return state{a: math.MinInt64}
	}
	st = slidingNow(st, k)
	if st.c -= n; st.c < 0 {
		st.b, st.c = max(st.b+st.c, 0), 0
	}
	return st
}

func (slidingFamily) consume(l *Limit, st state, exists bool, now, delta, maxDebt int64) state {
	k := floorDiv(now, l.Window)
	if !exists {
		st = state{a: k}
	}
	st = slidingNow(st, k)
	st.c = min(st.c+min(delta, l.Burst+maxDebt), l.Burst+maxDebt)
	return st
}

func (slidingFamily) idleAt(l *Limit, st state) int64 {
	switch {
	case st.c > 0:
		return (st.a + 2) * l.Window
	case st.b > 0:
		return (st.a + 1) * l.Window
	}
	return math.MinInt64
}

func (slidingFamily) windowed() bool { return true }

func (slidingFamily) leaseEnd(l *Limit, now int64) int64 { return windowEnd(l, now) }

func (slidingFamily) wireLimit(a Algo, rate, window, burst int64) (Limit, error) {
	return NewLimit(a, rate, time.Duration(window), burst)
}

package engine

import (
	"math"
	"time"
)

// --- Fixed window ---------------------------------------------------------------
//
// State: a = window index, b = count.

// fixedFamily counts requests in calendar-aligned windows of Window ns.
type fixedFamily struct{}

// floorDiv returns ⌊a/b⌋ for b > 0: the index of the window holding a.
func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// windowEnd returns the end of the window of l holding now.
func windowEnd(l *Limit, now int64) int64 { return (floorDiv(now, l.Window) + 1) * l.Window }

func (fixedFamily) decide(l *Limit, st state, exists bool, now, cost, maxWait int64) outcome {
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

func (f fixedFamily) used(l *Limit, st state, now int64) uint64 { return windowUsed(f, l, st, now) }

// windowUsed is used for a window family: the whole requests its window
// (or windows) count at now.
func windowUsed(f family, l *Limit, st state, now int64) uint64 {
	o := f.decide(l, st, true, now, 0, 0)
	return uint64(l.Burst-o.remaining) << fpShift
}

// wholeUsed rounds used (2^-fpShift units) up to whole requests.
func wholeUsed(used uint64) int64 { return int64((used + 1<<fpShift - 1) >> fpShift) }

func (fixedFamily) withUsed(l *Limit, used uint64, now int64) state {
	return state{a: floorDiv(now, l.Window), b: wholeUsed(used)}
}

func (fixedFamily) refund(l *Limit, st state, now, n int64) state {
	k := floorDiv(now, l.Window)
	switch {
	case st.a == k:
		st.b = max(st.b-n, 0)
	case st.a > k:
		// A reservation in a later window: the current window was
		// (treated as) full when it was made, and stays so.
		if st.b -= n; st.b <= 0 {
			st = state{a: k, b: l.Burst}
		}
	}
	return st
}

func (fixedFamily) consume(l *Limit, st state, exists bool, now, delta, maxDebt int64) state {
	k := floorDiv(now, l.Window)
	if !exists || st.a < k {
		st = state{a: k}
	}
	st.b = min(st.b+min(delta, l.Burst+maxDebt), l.Burst+maxDebt)
	return st
}

func (fixedFamily) idleAt(l *Limit, st state) int64 {
	if st.b == 0 {
		return math.MinInt64
	}
	return (st.a + 1) * l.Window
}

func (fixedFamily) windowed() bool { return true }

func (fixedFamily) leaseEnd(l *Limit, now int64) int64 { return windowEnd(l, now) }

func (fixedFamily) wireLimit(a Algo, rate, window, burst int64) (Limit, error) {
	return NewLimit(a, rate, time.Duration(window), burst)
}

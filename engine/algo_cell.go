package engine

import (
	"math"
	"math/bits"
	"time"
)

// --- Cell: redis-cell's GCRA, integer nanoseconds ---------------------------
//
// State: a = theoretical arrival time (ns).

// cellFamily is CL.THROTTLE's algorithm, with redis-cell's arithmetic so
// that its replies match redis-cell's to the byte.
type cellFamily struct{}

func (cellFamily) decide(l *Limit, st state, exists bool, now, cost, _ int64) outcome {
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

func (cellFamily) used(l *Limit, st state, now int64) uint64 {
	if st.a <= now {
		return 0
	}
	hi, lo := bits.Mul64(uint64(st.a-now), 1<<fpShift)
	lo, c := bits.Add64(lo, uint64(l.ei-1), 0)
	q, _ := bits.Div64(hi+c, lo, uint64(l.ei))
	return q
}

func (cellFamily) withUsed(l *Limit, used uint64, now int64) state {
	hi, lo := bits.Mul64(used, uint64(l.ei))
	lo, c := bits.Add64(lo, 1<<fpShift-1, 0)
	hi += c
	return state{a: clampAdd(now, int64(hi<<(64-fpShift)|lo>>fpShift))}
}

func (cellFamily) refund(l *Limit, st state, now, n int64) state {
	st.a = max(st.a-l.ei*n, now)
	return st
}

func (cellFamily) consume(l *Limit, st state, exists bool, now, delta, maxDebt int64) state {
	return consumeFP(l, st, exists, now, delta, maxDebt)
}

func (cellFamily) idleAt(l *Limit, st state) int64 { return tatIdleAt(st) }

func (cellFamily) windowed() bool { return false }

func (cellFamily) leaseEnd(l *Limit, now int64) int64 { return now + LeaseTTL }

// wireLimit rebuilds the limit of CL.THROTTLE key (burst-1) rate
// (window in whole seconds).
func (cellFamily) wireLimit(_ Algo, rate, window, burst int64) (Limit, error) {
	if window%int64(time.Second) != 0 {
		return Limit{}, ErrBadSync
	}
	return NewCellLimit(burst-1, rate, window/int64(time.Second))
}

package engine

import (
	"math"
	"math/bits"
	"time"
)

// --- GCRA family: token_bucket, gcra, leaky_bucket ---------------------------
//
// State: a = theoretical arrival time (ns), b = its remainder in 1/Rate ns.

// gcraFamily is the exact GCRA of token_bucket, gcra and leaky_bucket.
// With shape (leaky_bucket), a call that may wait leaves the queue only
// when the water ahead of it has drained.
type gcraFamily struct{ shape bool }

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

func (f gcraFamily) decide(l *Limit, st state, exists bool, now, cost, maxWait int64) outcome {
	tn, tf := tatOf(st, exists, now)
	if cost > l.Burst {
		return outcome{never: true, retry: -1, remaining: l.tokens(tn, tf, now), reset: untilFull(tn, tf, now)}
	}
	xn, xf := l.advance(tn, tf, cost)
	due := l.excess(xn, xf, now)
	if f.shape && maxWait > 0 {
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

func (gcraFamily) used(l *Limit, st state, now int64) uint64 {
	tn, tf := tatOf(st, true, now)
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

func (gcraFamily) withUsed(l *Limit, used uint64, now int64) state {
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

func (gcraFamily) refund(l *Limit, st state, now, n int64) state {
	tn, tf := tatOf(st, true, now)
	q, rem := l.advance(0, 0, n)
	tn -= q
	if tf < rem {
		tn--
		tf += uint64(l.Rate)
	}
	tf -= rem
	if tn < now || (tn == now && tf == 0) {
		return state{a: math.MinInt64}
	}
	return state{a: tn, b: int64(tf)}
}

func (gcraFamily) consume(l *Limit, st state, exists bool, now, delta, maxDebt int64) state {
	return consumeFP(l, st, exists, now, delta, maxDebt)
}

func (gcraFamily) idleAt(l *Limit, st state) int64 { return tatIdleAt(st) }

// tatIdleAt is idleAt of a state whose a is a theoretical arrival time
// (b its remainder, if any).
func tatIdleAt(st state) int64 {
	if st.b > 0 {
		return st.a + 1
	}
	return st.a
}

func (gcraFamily) windowed() bool { return false }

func (gcraFamily) leaseEnd(l *Limit, now int64) int64 { return now + LeaseTTL }

func (gcraFamily) wireLimit(a Algo, rate, window, burst int64) (Limit, error) {
	return NewLimit(a, rate, time.Duration(window), burst)
}

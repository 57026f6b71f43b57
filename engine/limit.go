package engine

import (
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/sluice-rl/sluice/bounds"
)

// Bounds on limit parameters, package bounds's (where every front takes
// them and their messages from). They keep every intermediate product
// inside 128 bits and every time inside int64 nanoseconds.
const (
	MaxRate   = bounds.MaxRate // tokens per window
	MaxBurst  = bounds.MaxBurst
	MaxCost   = bounds.MaxCost
	MinWindow = bounds.MinWindow
	MaxWindow = bounds.MaxWindow
	// MaxRefill bounds BURST×WINDOW/RATE, the time an empty bucket takes to
	// refill, so that reservation horizons stay far from int64 overflow.
	MaxRefill = 100 * 365 * 24 * time.Hour
)

// Limit is an algorithm with its sustained rate (Rate tokens per Window) and
// burst capacity. Construct it with NewLimit or NewCellLimit; the zero value
// is not usable. Limits are comparable values: two calls carrying the same
// limit address the same bucket state without conversion.
type Limit struct {
	Algo   Algo
	Rate   int64 // tokens per Window
	Window int64 // nanoseconds
	Burst  int64 // capacity; for Cell, max_burst+1

	// Derived, fixed by the four fields above.
	dq, dr uint64 // BURST×T = dq + dr/Rate ns (GCRA family); Cell: dq = DVT
	ei     int64  // Cell: emission interval in ns, as redis-cell computes it
}

// ArgError is a rejected argument. Its message names the argument and the
// accepted range, ready to follow "ERR " in a reply.
type ArgError struct {
	Arg string
	Msg string
}

func (e *ArgError) Error() string { return e.Arg + " " + e.Msg }

func argErr(arg, format string, a ...any) error {
	return &ArgError{Arg: arg, Msg: fmt.Sprintf(format, a...)}
}

// boundErr is the refusal of an argument outside its bound, in package
// bounds's words.
func boundErr(arg, text string) error { return &ArgError{Arg: arg, Msg: text} }

// NewLimit validates and builds a limit of rate tokens per window with the
// given burst capacity. Window algorithms count rate requests per window;
// they take burst only when it equals rate.
func NewLimit(algo Algo, rate int64, window time.Duration, burst int64) (Limit, error) {
	if !algo.nameable() {
		return Limit{}, boundErr("ALGO", bounds.OneOfText(AlgoNames()))
	}
	if !bounds.Rate.In(rate) {
		return Limit{}, boundErr("RATE", bounds.Rate.Text())
	}
	if !bounds.InWindow(window) {
		return Limit{}, boundErr("PER", bounds.WindowText())
	}
	if !bounds.Burst.In(burst) {
		return Limit{}, boundErr("BURST", bounds.Burst.Text())
	}
	l := Limit{Algo: algo, Rate: rate, Window: int64(window), Burst: burst}
	if algo.IsWindow() {
		if burst != rate {
			return Limit{}, argErr("BURST", "must equal RATE for %s (a window admits RATE requests)", algo)
		}
		return l, nil
	}
	hi, lo := bits.Mul64(uint64(burst), uint64(window))
	if hi >= uint64(rate) {
		return Limit{}, argErr("BURST", "is too large for this rate: an empty bucket would take over 100 years to refill")
	}
	l.dq, l.dr = bits.Div64(hi, lo, uint64(rate))
	if l.dq > uint64(MaxRefill) {
		return Limit{}, argErr("BURST", "is too large for this rate: an empty bucket would take over 100 years to refill")
	}
	return l, nil
}

// NewCellLimit builds the limit of CL.THROTTLE key maxBurst count period,
// with redis-cell's arithmetic: the emission interval is period/count
// truncated to whole nanoseconds, and the capacity is maxBurst+1.
func NewCellLimit(maxBurst, count, periodSeconds int64) (Limit, error) {
	if count == 0 || periodSeconds == 0 {
		return Limit{}, errZeroRate
	}
	if mb := (bounds.Int{Lo: 0, Hi: MaxBurst - 1}); !mb.In(maxBurst) {
		return Limit{}, boundErr("max_burst", mb.Text())
	}
	if count < 0 || count > MaxRate { // 0 is redis-cell's errZeroRate, above
		return Limit{}, boundErr("count", bounds.Rate.Text())
	}
	if p := (bounds.Int{Lo: 1, Hi: int64(MaxWindow / time.Second)}); periodSeconds < 0 || periodSeconds > p.Hi {
		return Limit{}, boundErr("period", p.Text()+" (seconds)")
	}
	ns := periodSeconds * int64(time.Second)
	ei := int64(float64(ns) / float64(count))
	if ei <= 0 {
		return Limit{}, argErr("count", "must be at most one per nanosecond of period")
	}
	hi, dvt := bits.Mul64(uint64(ei), uint64(maxBurst+1))
	if hi != 0 || dvt > uint64(MaxRefill) {
		return Limit{}, argErr("max_burst", "is too large for this rate: the bucket would take over 100 years to refill")
	}
	return Limit{Algo: Cell, Rate: count, Window: ns, Burst: maxBurst + 1, dq: dvt, ei: ei}, nil
}

// NewQuotaLimit returns the limit of a calendar quota of n tokens a period.
// The engine takes each period's bounds from the request; period is the
// caller's positive code for the kind of period, kept in Window so that
// quota counters of different periods are different limits, and handed
// back with the counts (DrainQuota).
func NewQuotaLimit(n, period int64) (Limit, error) {
	if !bounds.Quota.In(n) {
		return Limit{}, boundErr("QUOTA", bounds.Quota.Text())
	}
	if period < 1 {
		return Limit{}, argErr("QUOTA", "needs a period")
	}
	return Limit{Algo: Quota, Rate: n, Window: period, Burst: n}, nil
}

// errZeroRate is redis-cell's own text for a zero count or period.
var errZeroRate = &ArgError{Arg: "Zero", Msg: "rates are not supported"}

// IsZeroRate reports whether err is CL.THROTTLE's zero-rate refusal.
func IsZeroRate(err error) bool { return err == errZeroRate }

// same reports whether two limits describe the same bucket parameters.
func (l *Limit) same(o *Limit) bool {
	return l.Algo == o.Algo && l.Rate == o.Rate && l.Window == o.Window && l.Burst == o.Burst
}

// PerSecond returns the sustained rate in tokens per second, for comparing
// limits of different windows.
func (l Limit) PerSecond() float64 {
	return float64(l.Rate) / (float64(l.Window) / float64(time.Second))
}

// Tighter reports whether l admits less than o: a lower sustained rate, or
// the same rate with a smaller burst.
func (l Limit) Tighter(o Limit) bool {
	// Compare l.Rate/l.Window with o.Rate/o.Window exactly.
	ah, al := bits.Mul64(uint64(l.Rate), uint64(o.Window))
	bh, bl := bits.Mul64(uint64(o.Rate), uint64(l.Window))
	if ah != bh || al != bl {
		return ah < bh || (ah == bh && al < bl)
	}
	return l.Burst < o.Burst
}

// ceilMs converts a non-negative duration in ns to whole milliseconds,
// rounding up, so that a client waiting that long is never early.
func ceilMs(ns int64) int64 {
	if ns <= 0 {
		return 0
	}
	return (ns + int64(time.Millisecond) - 1) / int64(time.Millisecond)
}

// CeilMs is ceilMs for callers outside the package; negative stays -1.
func CeilMs(ns int64) int64 {
	if ns < 0 {
		return -1
	}
	return ceilMs(ns)
}

func clampAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

package engine

import (
	"fmt"
	"math"
	"strings"
)

// Algo names a limiting algorithm.
type Algo uint8

// The algorithms. TokenBucket, GCRA and LeakyBucket share one exact
// arithmetic (they admit the same requests, see docs/algorithms.md); they
// differ in what WAIT does. Cell is redis-cell's GCRA, kept separate so that
// CL.THROTTLE replies match redis-cell to the byte.
const (
	TokenBucket Algo = iota
	GCRA
	SlidingWindow
	FixedWindow
	LeakyBucket
	Cell
	// Quota counts tokens in calendar periods whose bounds the caller
	// gives with each request (Request.PeriodStart/End), on top of a base
	// the caller knows was already used (the cluster's committed count).
	Quota
	numAlgos
)

// algorithms is the registry: every algorithm's name, whether ALGO
// accepts that name, and the family that does its arithmetic. Nothing
// else in the package switches on an algorithm; DESIGN.md says how to add
// one.
var algorithms = [numAlgos]algorithm{
	TokenBucket:   {name: "token_bucket", nameable: true, family: gcraFamily{}},
	GCRA:          {name: "gcra", nameable: true, family: gcraFamily{}},
	SlidingWindow: {name: "sliding_window", nameable: true, family: slidingFamily{}},
	FixedWindow:   {name: "fixed_window", nameable: true, family: fixedFamily{}},
	LeakyBucket:   {name: "leaky_bucket", nameable: true, family: gcraFamily{shape: true}},
	Cell:          {name: "cell", family: cellFamily{}},
	Quota:         {name: "quota", family: quotaFamily{}},
}

// algorithm is one entry of the registry.
type algorithm struct {
	name string
	// nameable: ALGO (and the budget and HTTP fronts) accept the name.
	// Cell is reached only through CL.THROTTLE, Quota through QUOTA.
	nameable bool
	family   family
}

// family is the arithmetic of one family of algorithms on a bucket's
// state: how a request is decided, how state carries over to another
// limit and takes a peer's consumption or a refund, when a bucket may be
// forgotten, and how its tokens are leased. Each family lives in a file
// of its own (algo_*.go).
type family interface {
	// decide evaluates a request of cost against a bucket at now. exists
	// says whether st holds stored state (a missing bucket is full).
	// maxWait > 0 allows a reservation of up to maxWait ns.
	decide(l *Limit, st state, exists bool, now, cost, maxWait int64) outcome
	// used returns how many tokens of l's capacity a stored st has in use
	// at now, in units of 2^-fpShift tokens, rounded up (usedFP).
	used(l *Limit, st state, now int64) uint64
	// withUsed returns a state for l at now with used tokens (2^-fpShift
	// units) of its capacity in use; used > 0.
	withUsed(l *Limit, used uint64, now int64) state
	// refund gives n tokens (at most Burst) back to a stored st at now.
	refund(l *Limit, st state, now, n int64) state
	// consume adds delta tokens of a peer's (or a forced) consumption to
	// st at now, capped at maxDebt tokens beyond an empty bucket.
	consume(l *Limit, st state, exists bool, now, delta, maxDebt int64) state
	// idleAt returns the time at which a bucket in st is full again:
	// after it, forgetting the bucket loses nothing.
	idleAt(l *Limit, st state) int64
	// windowed reports whether the family counts in calendar-aligned
	// windows: a window's count starts afresh, so leased tokens die with
	// their window, none go back to the owner, and a lease takes no
	// credit (lease.go).
	windowed() bool
	// leaseEnd returns when tokens leased at now stop being usable.
	leaseEnd(l *Limit, now int64) int64
	// wireLimit rebuilds a limit of algorithm a from the fields of a sync
	// record (AppendDelta), validating them as the limit's constructor.
	wireLimit(a Algo, rate, window, burst int64) (Limit, error)
}

// state is one bucket's algorithm state. Its meaning is its family's
// (each algo_*.go says); a lease's is lease.go's.
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

// familyOf returns the family of l's algorithm.
func familyOf(l *Limit) family { return algorithms[l.Algo].family }

// String returns the algorithm's name as ALGO accepts it.
func (a Algo) String() string {
	if a < numAlgos {
		return algorithms[a].name
	}
	return fmt.Sprintf("algo(%d)", uint8(a))
}

// ParseAlgo returns the algorithm named s (case-insensitive) among those
// AlgoNames lists.
func ParseAlgo(s string) (Algo, bool) {
	for i := range algorithms {
		if a := &algorithms[i]; a.nameable && strings.EqualFold(s, a.name) {
			return Algo(i), true
		}
	}
	return 0, false
}

// AlgoNames returns the names ALGO accepts, in the documented order: the
// one list every front's error message quotes.
func AlgoNames() []string {
	var names []string
	for i := range algorithms {
		if algorithms[i].nameable {
			names = append(names, algorithms[i].name)
		}
	}
	return names
}

// nameable reports whether a is named by ALGO (NewLimit builds it).
func (a Algo) nameable() bool { return a < numAlgos && algorithms[a].nameable }

// IsWindow reports whether a counts requests in calendar-aligned windows
// rather than refilling continuously.
func (a Algo) IsWindow() bool { return a < numAlgos && algorithms[a].family.windowed() }

// decide evaluates a request of cost against a bucket at time now (see
// family.decide).
func decide(l *Limit, st state, exists bool, now, cost, maxWait int64) outcome {
	return familyOf(l).decide(l, st, exists, now, cost, maxWait)
}

// idleAt returns the time at which a bucket in st is full again under l.
func idleAt(l *Limit, st state) int64 { return familyOf(l).idleAt(l, st) }

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
	return familyOf(l).used(l, st, now)
}

// withUsed returns a state for l at now with used tokens (2^-fpShift units)
// of its capacity in use.
func withUsed(l *Limit, used uint64, now int64) state {
	if used == 0 {
		return state{a: math.MinInt64}
	}
	return familyOf(l).withUsed(l, used, now)
}

// rescale converts st, kept under limit from, to an equivalent state under
// limit to: the tokens available carry over, capped at the new capacity. No
// refill is granted by the change and none is lost beyond the new capacity.
// Between two windows of one algorithm and length (fixed or sliding) the window's
// count carries over instead, as a counter of requests does when its limit
// is raised or lowered: 3 of 3 used, raised to 5, leaves 2.
func rescale(from, to *Limit, st state, now int64) state {
	used := usedFP(from, st, true, now)
	capFrom, capTo := uint64(from.Burst)<<fpShift, uint64(to.Burst)<<fpShift
	if from.Algo.IsWindow() && to.Algo == from.Algo && from.Window == to.Window {
		return withUsed(to, min(used, capTo), now)
	}
	// tokensTo = min(capFrom − used, capTo); usedTo = capTo − tokensTo.
	var usedTo uint64
	if sum := capTo + used; sum > capFrom {
		usedTo = sum - capFrom
	}
	return withUsed(to, usedTo, now)
}

// refundState gives n tokens back to a stored st under l at now.
func refundState(l *Limit, st state, now, n int64) state {
	return familyOf(l).refund(l, st, now, n)
}

// consumeState adds delta tokens of consumption to st at now, capped at
// maxDebt tokens beyond an empty bucket.
func consumeState(l *Limit, st state, exists bool, now, delta, maxDebt int64) state {
	return familyOf(l).consume(l, st, exists, now, delta, maxDebt)
}

// consumeFP is consume for the continuous families: the tokens in use,
// in 2^-fpShift units, grow by delta, up to maxDebt beyond the capacity.
func consumeFP(l *Limit, st state, exists bool, now, delta, maxDebt int64) state {
	most := min(delta, l.Burst+maxDebt)
	used := usedFP(l, st, exists, now)
	add := uint64(most) << fpShift
	limit := uint64(l.Burst+maxDebt) << fpShift
	if used > math.MaxUint64-add || used+add > limit {
		used = max(used, limit)
	} else {
		used += add
	}
	return withUsed(l, used, now)
}

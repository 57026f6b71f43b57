package usage

import (
	"hash/maphash"
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// NodeCapacity is how many budget nodes Counts follows at once.
const NodeCapacity = countShards * countSlots

const (
	countShards = 16
	countSlots  = 256
	// countSteps is one minute of Step-long steps.
	countSteps = 6
	// countStripes is how many cache lines a node's counts spread over:
	// each connection adds to its own (Local; the stripes are taken in
	// turn, a call without a memo picks one at random), so calls to one
	// busy node from many cores do not all write one line.
	countStripes = 8
)

// Counts counts each budget node's admitted and refused calls over the
// last minute, in Step-long steps, for up to NodeCapacity nodes at once.
// A node idle for a minute gives its place to the next one that needs it;
// when every place is busy, calls to further nodes are counted only in
// Untracked.
//
// A call finds its node's counts in its shard's table without a lock (the
// table is replaced whole, under the shard's lock, when a node is placed
// or gives its place up) and adds to one stripe with a compare-and-swap
// of a word that holds the step and the count together, so a new step
// starts its count at once and a late call never adds to a newer step.
// A call that races with its idle node giving up its place may be lost:
// the node had no other call for a minute.
type Counts struct {
	seed      maphash.Seed
	shards    [countShards]countShard
	untracked atomic.Int64
	turn      atomic.Uint32 // the stripe the next caller's memo takes
}

type countShard struct {
	mu    sync.Mutex // placing and giving up places
	table atomic.Pointer[map[string]*countSlot]
	// fullUntil is the step until which the shard was found full.
	fullUntil atomic.Int64
	_         [64]byte
}

// countSlot is one node's counts: per stripe and step, a word of the
// step's tick (high 32 bits, wrapping) and its count (low 32 bits). gone
// is set once the node has given its place up, so that a caller's memo
// (Local) of it is dropped.
type countSlot struct {
	gone    atomic.Bool
	_       [63]byte // calls read gone; keep it off the counts' lines
	stripes [countStripes]struct {
		ok, no [countSteps]atomic.Uint64
		_      [64 - 2*countSteps*8%64]byte
	}
}

const countMask = 1<<32 - 1

// add counts one call at tick in the words of one stripe and step.
func add(w *atomic.Uint64, tick int64) {
	t := uint64(tick) & countMask
	for {
		old := w.Load()
		switch ot := old >> 32; {
		case ot == t:
			if w.CompareAndSwap(old, old+1) {
				return
			}
		case int32(uint32(t)-uint32(ot)) > 0: // an older step: start this one
			if w.CompareAndSwap(old, t<<32|1) {
				return
			}
		default: // a newer step took the word: this call is late
			return
		}
	}
}

// read returns the count of w, and whether w holds a step within the
// minute at tick.
func read(w *atomic.Uint64, tick int64) (int64, bool) {
	v := w.Load()
	d := int32(uint32(tick) - uint32(v>>32))
	if v == 0 || d < 0 || d >= countSteps {
		return 0, false
	}
	return int64(v & countMask), true
}

// NewCounts returns empty counts.
func NewCounts() *Counts {
	c := &Counts{seed: maphash.MakeSeed()}
	for i := range c.shards {
		m := map[string]*countSlot{}
		c.shards[i].table.Store(&m)
	}
	return c
}

// Local is one caller's memo (a connection's): the node it counted last,
// and the stripe it counts in, so that a caller calling one node again
// finds its counts without a hash or a table, and up to countStripes
// callers on as many cores write as many cache lines. Its zero value is
// ready; it is not safe for concurrent use.
type Local struct {
	path   string
	slot   *countSlot
	stripe uint32 // the stripe + 1; 0 until chosen
}

// Record counts one call to the node at path (admitted or not) at now;
// l, if not nil, is the caller's memo.
func (c *Counts) Record(now int64, path string, admitted bool, l *Local) {
	tick := now / Step
	var sl *countSlot
	if l != nil && l.slot != nil && l.path == path && !l.slot.gone.Load() {
		sl = l.slot
	} else {
		h := maphash.String(c.seed, path)
		sh := &c.shards[h>>60] // countShards = 16
		if sl = (*sh.table.Load())[path]; sl == nil {
			if sl = sh.place(path, tick); sl == nil {
				c.untracked.Add(1)
				return
			}
		}
		if l != nil {
			l.path, l.slot = path, sl
		}
	}
	var stripe uint32
	switch {
	case l == nil:
		stripe = rand.Uint32() % countStripes
	case l.stripe == 0:
		// Callers take the stripes in turn: two connections never share
		// one, where a random choice had them collide one time in eight.
		l.stripe = c.turn.Add(1)%countStripes + 1
		fallthrough
	default:
		stripe = l.stripe - 1
	}
	st := &sl.stripes[stripe]
	i := tick % countSteps
	if admitted {
		add(&st.ok[i], tick)
	} else {
		add(&st.no[i], tick)
	}
}

// Get returns the calls to the node at path admitted and refused over the
// last minute at now, and false if the node is not followed.
func (c *Counts) Get(now int64, path string) (admitted, refused int64, ok bool) {
	h := maphash.String(c.seed, path)
	sl := (*c.shards[h>>60].table.Load())[path]
	if sl == nil {
		return 0, 0, false
	}
	tick := now / Step
	for s := range sl.stripes {
		st := &sl.stripes[s]
		for i := range st.ok {
			if n, in := read(&st.ok[i], tick); in {
				admitted += n
			}
			if n, in := read(&st.no[i], tick); in {
				refused += n
			}
		}
	}
	return admitted, refused, true
}

// Untracked returns how many calls were not counted for want of a place.
func (c *Counts) Untracked() int64 { return c.untracked.Load() }

// idle reports whether sl counted nothing in the minute before tick.
func (sl *countSlot) idle(tick int64) bool {
	for s := range sl.stripes {
		st := &sl.stripes[s]
		for i := range st.ok {
			if _, in := read(&st.ok[i], tick); in {
				return false
			}
			if _, in := read(&st.no[i], tick); in {
				return false
			}
		}
	}
	return true
}

// place gives path a place in the shard: a free one, or the place of a
// node idle for a minute; nil if every place is busy. The table is
// replaced whole, so that calls read it without the lock.
func (sh *countShard) place(path string, tick int64) *countSlot {
	if tick < sh.fullUntil.Load() {
		return nil // found full this step: calls to untracked nodes cost a load
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	old := *sh.table.Load()
	if sl := old[path]; sl != nil {
		return sl // placed by another call meanwhile
	}
	idle := ""
	if len(old) >= countSlots {
		// Look at a few places (the map's order is random): as the old
		// clock hand did, so that a full shard costs a call little.
		seen := 0
		for p, sl := range old {
			if sl.idle(tick) {
				idle = p
				break
			}
			if seen++; seen == 16 {
				break
			}
		}
		if idle == "" {
			sh.fullUntil.Store(tick + 1)
			return nil
		}
	}
	next := make(map[string]*countSlot, len(old)+1)
	for p, sl := range old {
		if p != idle {
			next[p] = sl
		}
	}
	if idle != "" {
		old[idle].gone.Store(true)
	}
	sl := new(countSlot)
	next[path] = sl
	sh.table.Store(&next)
	return sl
}

// Recorder is what a node keeps of its calls: the keys admitted and
// refused most, and each budget node's counts.
type Recorder struct {
	Admitted, Refused *Top
	Nodes             *Counts
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder {
	return &Recorder{Admitted: NewTop(), Refused: NewTop(), Nodes: NewCounts()}
}

// Record counts one decided call to the key path#sub (sub nil: path) at
// now, and to the budget node at node ("" for an inline call); l, if not
// nil, is the caller's memo.
func (r *Recorder) Record(now int64, path, sub []byte, node string, admitted bool, l *Local) {
	if admitted {
		r.Admitted.Record(now, path, sub)
	} else {
		r.Refused.Record(now, path, sub)
	}
	if node != "" {
		r.Nodes.Record(now, node, admitted, l)
	}
}

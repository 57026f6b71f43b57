package usage

import (
	"hash/maphash"
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
)

// Counts counts each budget node's admitted and refused calls over the
// last minute, in Step-long steps, for up to NodeCapacity nodes at once.
// A node idle for a minute gives its place to the next one that needs it;
// when every place is busy, calls to further nodes are counted only in
// Untracked.
type Counts struct {
	seed      maphash.Seed
	shards    [countShards]countShard
	untracked atomic.Int64
}

type countShard struct {
	mu    sync.Mutex
	used  int32
	hand  int32 // where the search for an idle place resumes
	slots [countSlots]countSlot
	index [2 * countSlots]int32
	_     [64]byte
}

type countSlot struct {
	path   string // a budget node's path: the tree's own string, not a copy
	hash   uint64
	last   int64 // the last step it counted in
	at     [countSteps]int64
	ok, no [countSteps]int64
}

// NewCounts returns empty counts; their memory is all taken here.
func NewCounts() *Counts { return &Counts{seed: maphash.MakeSeed()} }

// Record counts one call to the node at path (admitted or not) at now.
func (c *Counts) Record(now int64, path string, admitted bool) {
	h := maphash.String(c.seed, path)
	sh := &c.shards[h>>60] // countShards = 16
	tick := now / Step
	sh.mu.Lock()
	sl := sh.find(h, path)
	if sl == nil {
		if sl = sh.place(h, path, tick); sl == nil {
			sh.mu.Unlock()
			c.untracked.Add(1)
			return
		}
	}
	i := tick % countSteps
	if sl.at[i] != tick {
		sl.at[i], sl.ok[i], sl.no[i] = tick, 0, 0
	}
	if admitted {
		sl.ok[i]++
	} else {
		sl.no[i]++
	}
	sl.last = tick
	sh.mu.Unlock()
}

// Get returns the calls to the node at path admitted and refused over the
// last minute at now, and false if the node is not followed.
func (c *Counts) Get(now int64, path string) (admitted, refused int64, ok bool) {
	h := maphash.String(c.seed, path)
	sh := &c.shards[h>>60]
	tick := now / Step
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sl := sh.find(h, path)
	if sl == nil {
		return 0, 0, false
	}
	for i := range sl.at {
		if sl.at[i] > tick-countSteps && sl.at[i] <= tick {
			admitted += sl.ok[i]
			refused += sl.no[i]
		}
	}
	return admitted, refused, true
}

// Untracked returns how many calls were not counted for want of a place.
func (c *Counts) Untracked() int64 { return c.untracked.Load() }

func (sh *countShard) find(h uint64, path string) *countSlot {
	mask := uint64(len(sh.index) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		v := sh.index[i]
		if v == 0 {
			return nil
		}
		if sl := &sh.slots[v-1]; sl.hash == h && sl.path == path {
			return sl
		}
	}
}

// place gives path a slot: a free one, or one idle for a minute among the
// next few after the hand; nil if none.
func (sh *countShard) place(h uint64, path string, tick int64) *countSlot {
	var i int32 = -1
	if sh.used < countSlots {
		i = sh.used
		sh.used++
	} else {
		for k := 0; k < 16; k++ {
			j := sh.hand
			sh.hand = (sh.hand + 1) % countSlots
			if sh.slots[j].last <= tick-countSteps {
				i = j
				break
			}
		}
		if i < 0 {
			return nil
		}
		sh.unindex(sh.slots[i].hash, i)
	}
	sl := &sh.slots[i]
	*sl = countSlot{path: path, hash: h, last: tick}
	for j := range sl.at {
		sl.at[j] = -1
	}
	mask := uint64(len(sh.index) - 1)
	for j := h & mask; ; j = (j + 1) & mask {
		if sh.index[j] == 0 {
			sh.index[j] = i + 1
			return sl
		}
	}
}

// unindex removes slot i, whose hash is h, from the index.
func (sh *countShard) unindex(h uint64, i int32) {
	unindexSlot(sh.index[:], h, i, func(v int32) uint64 { return sh.slots[v-1].hash })
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
// now, and to the budget node at node ("" for an inline call).
func (r *Recorder) Record(now int64, path, sub []byte, node string, admitted bool) {
	if admitted {
		r.Admitted.Record(now, path, sub)
	} else {
		r.Refused.Record(now, path, sub)
	}
	if node != "" {
		r.Nodes.Record(now, node, admitted)
	}
}

// Package usage keeps what one node has seen recently, in memory fixed at
// start: the keys it admitted and refused most over the last minutes (a
// Space-Saving heavy-hitters sketch per minute), each budget node's
// admitted and refused calls over the last minute, and the node's
// admissions and refusals per 10 seconds. Recording allocates nothing and
// takes one short lock of a shard; past ExactPerSecond calls a second the
// keys are sampled. docs/commands.md (RL.TOP) states the error bounds.
package usage

import (
	"hash/maphash"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// Counters is the number of counters of one sketch (k): each shard of
	// each minute's sketch keeps this many keys.
	Counters = 256
	// Shards is how many sketches a minute's keys are split into, by
	// hash: calls of different keys rarely wait for each other, and a
	// key's count is bounded by its own shard's calls.
	Shards = 8
	// Windows is how many one-minute sketches are kept: the current
	// minute and the ones before it.
	Windows = 5
	// Window is a sketch's span.
	Window = int64(time.Minute)
	// MaxKeyBytes is how much of a key a counter keeps; longer keys are
	// listed cut, ending in "…" (a counter still tells them apart by
	// their 64-bit hash).
	MaxKeyBytes = 96
	// Step and Steps are the resolution and length of the node's
	// admitted/refused history: 30 steps of 10 s.
	Step  = int64(10 * time.Second)
	Steps = 30
)

// Sampling. In each second a Top records the first ExactPerSecond calls
// exactly; past them it records each further call with probability
// 2^-level and weight 2^level. The level starts each second where the
// last one ended (one lower if that second sampled little), jumps when
// the exact calls run out to where the rest of the second would sample
// ExactPerSecond/4 at the rate so far, and rises by one for every
// ExactPerSecond/4 sampled calls, so that a node records
// a bounded number of calls a second whatever its load: a call not
// recorded costs two atomic loads and a random number, not the sketches'
// lock, hash and heap step. Below ExactPerSecond calls a second every
// count is exact (Space-Saving's bound holds as stated); above, counts
// are unbiased estimates (docs/commands.md, RL.TOP).
const (
	ExactPerSecond = 25_000
	// maxLevel bounds the sampling: one call in 2^maxLevel.
	maxLevel = 20
)

// sampler chooses which calls a Top records.
type sampler struct {
	sec     atomic.Int64 // the second (Unix) counted now
	exact   atomic.Int64 // calls recorded exactly in it
	sampled atomic.Int64 // calls recorded by sampling in it
	level   atomic.Int32
}

// take reports whether the call at now (Unix ns) is recorded, and the
// calls it stands for.
func (s *sampler) take(now int64) (weight int64, ok bool) {
	if sec := now / int64(time.Second); sec != s.sec.Load() {
		s.roll(sec)
	}
	if s.exact.Load() < ExactPerSecond {
		switch n := s.exact.Add(1); {
		case n < ExactPerSecond:
			return 1, true
		case n == ExactPerSecond:
			s.jump(now)
			return 1, true
		}
	}
	lv := s.level.Load()
	if lv > 0 && rand.Uint64()&(1<<lv-1) != 0 {
		return 0, false
	}
	if n := s.sampled.Add(1); n%(ExactPerSecond/4) == 0 && lv < maxLevel {
		s.level.CompareAndSwap(lv, lv+1)
	}
	return int64(1) << lv, true
}

// jump raises the level, when the last exact call of a second is taken
// at now, to where the rest of the second, at the rate of its calls so
// far, samples at most ExactPerSecond/4 calls: a load that starts at once
// is sampled from its first second as it will be later, rather than
// recording ExactPerSecond/4 calls at each level on the way up.
func (s *sampler) jump(now int64) {
	sec := int64(time.Second)
	into := max(now-s.sec.Load()*sec, 1) // into the second
	expected := float64(ExactPerSecond) * float64(sec-into) / float64(into)
	lv := int32(0)
	for lv < maxLevel && expected > float64(int64(ExactPerSecond/4)<<lv) {
		lv++
	}
	if cur := s.level.Load(); lv > cur {
		s.level.CompareAndSwap(cur, lv)
	}
}

// roll starts the count of second sec; one caller does it. A late clock
// (a second already past) leaves the current second alone.
func (s *sampler) roll(sec int64) {
	cur := s.sec.Load()
	if sec < cur || !s.sec.CompareAndSwap(cur, sec) {
		return
	}
	sampled, lv := s.sampled.Swap(0), s.level.Load()
	switch {
	case sec != cur+1:
		lv = 0 // a second or more without calls
	case sampled < ExactPerSecond/8:
		lv = max(lv-1, 0)
	}
	s.level.Store(lv)
	s.exact.Store(0)
}

// Level is the sampling level now: 0 while every call is recorded.
func (t *Top) Level() int { return int(t.level.Load()) }

// Top counts the keys of one kind of call (admitted, or refused).
type Top struct {
	seed maphash.Seed
	sampler
	shards [Shards]topShard
}

type topShard struct {
	mu  sync.Mutex
	win [Windows]sketch
	// steps counts every call by 10-second step (the history).
	steps [Steps]step
	_     [64]byte // keeps the next shard's lock off this one's cache line
}

type step struct{ at, n int64 }

// NewTop returns an empty Top; its memory is all taken here.
func NewTop() *Top {
	t := &Top{seed: maphash.MakeSeed()}
	for i := range t.shards {
		for j := range t.shards[i].win {
			t.shards[i].win[j].epoch = -1
		}
		for j := range t.shards[i].steps {
			t.shards[i].steps[j].at = -1
		}
	}
	return t
}

// hash is the hash of the key path#sub (sub nil: path).
func (t *Top) hash(path, sub []byte) uint64 {
	h := maphash.Bytes(t.seed, path)
	if sub != nil {
		h = (h ^ maphash.Bytes(t.seed, sub)) * 0x9e3779b97f4a7c15
		h ^= h >> 29
	}
	return h
}

// Record counts one call of the key path#sub (sub nil: path) at now
// (Unix ns); past ExactPerSecond calls a second, a sample of them.
func (t *Top) Record(now int64, path, sub []byte) {
	if w, ok := t.take(now); ok {
		t.record(now, path, sub, w)
	}
}

// record counts w calls of the key path#sub at now.
func (t *Top) record(now int64, path, sub []byte, weight int64) {
	h := t.hash(path, sub)
	sh := &t.shards[h>>61] // Shards = 8: the top three bits
	minute := now / Window
	tick := now / Step
	sh.mu.Lock()
	w := &sh.win[minute%Windows]
	if w.epoch != minute {
		w.reset(minute)
	}
	w.record(h, path, sub, weight)
	st := &sh.steps[tick%Steps]
	if st.at != tick {
		st.at, st.n = tick, 0
	}
	st.n += weight
	sh.mu.Unlock()
}

// Entry is one key of a summary: its count is at least the key's true
// count and at most Err more.
type Entry struct {
	Key   string `json:"key"`
	Count int64  `json:"count"`
	Err   int64  `json:"error"`
}

// Summary is what a node (or a cluster, merged) counted over the last
// Windows minutes: N calls in all; the keys with a counter; and Floor, a
// bound on the true count of any key not listed. Floor ≤ N/Counters.
type Summary struct {
	N       int64   `json:"n"`
	Floor   int64   `json:"floor"`
	Entries []Entry `json:"keys"`
}

// Summary returns the keys counted in the windows of the last Windows
// minutes at now, most counted first. Within a shard a key without a
// counter in some window may have been counted up to that window's
// smallest count there, which is added to its count and its error.
func (t *Top) Summary(now int64) Summary {
	minute := now / Window
	var out Summary
	type acc struct {
		Entry
		seen uint8 // windows where the key has a counter
	}
	for i := range t.shards {
		sh := &t.shards[i]
		keys := map[string]*acc{}
		var mins [Windows]int64
		sh.mu.Lock()
		for j := range sh.win {
			w := &sh.win[j]
			if w.epoch < 0 || w.epoch <= minute-Windows || w.epoch > minute {
				continue
			}
			out.N += w.n
			mins[j] = w.min()
			for k := int32(0); k < w.used; k++ {
				sl := &w.slots[k]
				name := sl.name()
				a := keys[name]
				if a == nil {
					a = &acc{Entry: Entry{Key: name}}
					keys[name] = a
				}
				a.Count += w.count(k)
				a.Err += sl.err
				a.seen |= 1 << j
			}
		}
		sh.mu.Unlock()
		floor := int64(0)
		for _, m := range mins {
			floor += m
		}
		out.Floor = max(out.Floor, floor)
		for _, a := range keys {
			for j, m := range mins {
				if a.seen&(1<<j) == 0 {
					a.Count += m
					a.Err += m
				}
			}
			out.Entries = append(out.Entries, a.Entry)
		}
	}
	sortEntries(out.Entries)
	return out
}

// History returns the calls counted per Step over the last Steps steps
// at now, oldest first, the current (partial) step last.
func (t *Top) History(now int64) [Steps]int64 {
	var out [Steps]int64
	tick := now / Step
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for _, st := range sh.steps {
			if st.at >= 0 && st.at > tick-Steps && st.at <= tick {
				out[Steps-1-(tick-st.at)] += st.n
			}
		}
		sh.mu.Unlock()
	}
	return out
}

// Tracked returns how many counters hold a key now (at most
// Counters × Shards × Windows).
func (t *Top) Tracked() int {
	n := 0
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for j := range sh.win {
			if sh.win[j].epoch >= 0 {
				n += int(sh.win[j].used)
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// MaxTracked is the most counters a Top holds.
const MaxTracked = Counters * Shards * Windows

// Merge adds summaries of disjoint sets of calls (those of the nodes of
// a cluster): a key missing from one summary may have been counted up to
// that summary's Floor there, which is added to its count and its error.
func Merge(sums ...Summary) Summary {
	var out Summary
	type acc struct {
		Entry
		seen []bool
	}
	keys := map[string]*acc{}
	for i, s := range sums {
		out.N += s.N
		out.Floor += s.Floor
		for _, e := range s.Entries {
			a := keys[e.Key]
			if a == nil {
				a = &acc{Entry: Entry{Key: e.Key}, seen: make([]bool, len(sums))}
				keys[e.Key] = a
			}
			a.Count += e.Count
			a.Err += e.Err
			a.seen[i] = true
		}
	}
	for _, a := range keys {
		for i, s := range sums {
			if !a.seen[i] {
				a.Count += s.Floor
				a.Err += s.Floor
			}
		}
		out.Entries = append(out.Entries, a.Entry)
	}
	sortEntries(out.Entries)
	return out
}

// sortEntries orders entries by count (most first), then by error (least
// first), then by key.
func sortEntries(es []Entry) {
	sort.Slice(es, func(i, j int) bool {
		a, b := &es[i], &es[j]
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		if a.Err != b.Err {
			return a.Err < b.Err
		}
		return a.Key < b.Key
	})
}

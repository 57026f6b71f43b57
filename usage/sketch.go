package usage

// sketch is one Space-Saving summary (Metwally, Agrawal, El Abbadi, 2005)
// of the keys recorded in one minute, in fixed arrays: Counters slots, a
// min-heap of the slots by count, and an open-addressing index from a
// key's hash to its slot. Recording a key never allocates.
//
// A key that has a slot counts there; a new key takes a free slot, or,
// once all are taken, the slot with the smallest count c: the new key
// starts at c+1 and remembers c as its error (it may have been counted up
// to c times before it took the slot). So every count is at least the
// key's true count and at most error more, error ≤ n/Counters, and every
// key recorded more than n/Counters times has a slot.
type sketch struct {
	epoch int64 // the minute (Unix time / 60 s) it counts; -1 for none
	n     int64 // keys recorded
	used  int32 // slots taken
	// What every call reads or moves lies together, apart from the keys
	// (which only a match or a new key touches): the heap with the counts
	// in it, each slot's place in the heap, each slot's hash and the
	// index, 9 KiB, so that sifting a count and probing the index stay in
	// the nearest cache.
	heap   [Counters]hent      // a min-heap by count
	pos    [Counters]int32     // slot number → place in the heap
	hashes [Counters]uint64    // slot number → its key's hash
	index  [2 * Counters]int32 // slot number + 1, 0 for an empty place
	slots  [Counters]slot
}

// hent is a heap entry: a slot's count and the slot.
type hent struct {
	count int64
	slot  int32
}

// slot is one counted key: its first MaxKeyBytes bytes, and the count it
// may have had before it took the slot.
type slot struct {
	err  int64
	klen uint8
	key  [MaxKeyBytes]byte
	long bool // the key was longer than MaxKeyBytes
}

// count is slot i's count.
func (s *sketch) count(i int32) int64 { return s.heap[s.pos[i]].count }

func (s *sketch) reset(epoch int64) {
	s.epoch, s.n, s.used = epoch, 0, 0
	clear(s.index[:])
}

// full reports whether every slot is taken: a key without one may then
// have been counted up to min() times.
func (s *sketch) full() bool { return s.used == Counters }

// min is the smallest count when full, else 0.
func (s *sketch) min() int64 {
	if !s.full() {
		return 0
	}
	return s.heap[0].count
}

// matches reports whether sl holds the key path#sub (sub nil: path); the
// caller has compared the hashes.
func (sl *slot) matches(path, sub []byte) bool {
	k := sl.key[:sl.klen]
	n := copy1(k, path, 0)
	if n < 0 {
		return false
	}
	if sub != nil {
		if n == len(k) {
			return sl.long
		}
		if k[n] != '#' {
			return false
		}
		if n = copy1(k, sub, n+1); n < 0 {
			return false
		}
	}
	return n == len(k)
}

// copy1 compares b with k from offset off, as far as k goes; it returns
// the offset after b (or len(k) if k ends first), or -1 on a difference.
func copy1(k, b []byte, off int) int {
	if off > len(k) {
		return -1
	}
	m := min(len(b), len(k)-off)
	if string(k[off:off+m]) != string(b[:m]) {
		return -1
	}
	return off + m
}

// set stores the key path#sub (cut to MaxKeyBytes) in sl.
func (sl *slot) set(path, sub []byte) {
	n := copy(sl.key[:], path)
	long := len(path) > n
	if sub != nil && !long {
		if n < MaxKeyBytes {
			sl.key[n] = '#'
			n++
			m := copy(sl.key[n:], sub)
			long = len(sub) > m
			n += m
		} else {
			long = true
		}
	}
	sl.klen, sl.long = uint8(n), long
}

// name is the key as listed: cut keys end in "…".
func (sl *slot) name() string {
	if sl.long {
		return string(sl.key[:sl.klen]) + "…"
	}
	return string(sl.key[:sl.klen])
}

// record counts w calls of the key path#sub, whose hash is h (a sampled
// call stands for w: Space-Saving with weights keeps its bound, n/k, with
// n the weights' sum).
func (s *sketch) record(h uint64, path, sub []byte, w int64) {
	s.n += w
	mask := uint64(len(s.index) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		v := s.index[i]
		if v == 0 {
			break
		}
		if s.hashes[v-1] == h && s.slots[v-1].matches(path, sub) {
			p := s.pos[v-1]
			s.heap[p].count += w
			s.down(p)
			return
		}
	}
	var i int32
	if s.used < Counters {
		i = s.used
		s.used++
		s.slots[i].err = 0
		s.heap[i] = hent{count: w, slot: i}
		s.pos[i] = i
		s.up(i)
	} else {
		i = s.heap[0].slot
		s.unindex(s.hashes[i], i)
		s.slots[i].err = s.heap[0].count
		s.heap[0].count += w
		s.down(0)
	}
	s.hashes[i] = h
	s.slots[i].set(path, sub)
	for j := h & mask; ; j = (j + 1) & mask {
		if s.index[j] == 0 {
			s.index[j] = i + 1
			return
		}
	}
}

// unindex removes slot i, whose hash is h, from the index.
func (s *sketch) unindex(h uint64, i int32) {
	unindexSlot(s.index[:], h, i, func(v int32) uint64 { return s.hashes[v-1] })
}

// unindexSlot removes slot i, whose hash is h, from an open-addressing
// index with linear probing (index holds slot numbers + 1, 0 for an empty
// place; its length a power of two), moving later entries of the run back
// so that a lookup still finds them. hashOf gives an entry's hash.
func unindexSlot(index []int32, h uint64, i int32, hashOf func(v int32) uint64) {
	mask := uint64(len(index) - 1)
	p := h & mask
	for index[p] != i+1 {
		p = (p + 1) & mask
	}
	for {
		index[p] = 0
		q := p
		for {
			q = (q + 1) & mask
			v := index[q]
			if v == 0 {
				return
			}
			home := hashOf(v) & mask
			// v may move to p if p lies cyclically in [home, q).
			if (q > p && (home <= p || home > q)) || (q < p && home <= p && home > q) {
				index[p] = v
				p = q
				break
			}
		}
	}
}

func (s *sketch) less(a, b int32) bool { return s.heap[a].count < s.heap[b].count }

func (s *sketch) swap(a, b int32) {
	s.heap[a], s.heap[b] = s.heap[b], s.heap[a]
	s.pos[s.heap[a].slot], s.pos[s.heap[b].slot] = a, b
}

func (s *sketch) up(i int32) {
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *sketch) down(i int32) {
	n := s.used
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && s.less(r, l) {
			m = r
		}
		if !s.less(m, i) {
			return
		}
		s.swap(i, m)
		i = m
	}
}

package reserve

import "container/heap"

// Open starts a reservation at now that expires ttl ns later, taking a
// slot of the concurrency key (limit n; an empty key or n 0: no slot).
// When every slot is taken it returns nil with retry, the ns until the
// earliest held slot expires, and wake, closed when any slot of the key
// frees. At the node's maximum it returns ErrFull. The caller charges the
// engine, then calls Commit, or Abort if the charge was refused.
func (s *Store) Open(now, ttl int64, key []byte, n int64) (h *Hold, retry int64, wake <-chan struct{}, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open1(now, ttl, key, n)
}

// OpenAt is Open for a node that decides key's slots for the cluster: the
// copies it keeps of other nodes' holds of key count as held, and it
// returns ErrMoved, taking nothing, when gen is no longer the store's
// (Gen): another member asked for key's holds since the caller chose to
// decide here, and the caller must choose again.
func (s *Store) OpenAt(now, ttl int64, key []byte, n int64, gen uint64) (h *Hold, retry int64, wake <-chan struct{}, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.gen {
		return nil, 0, nil, ErrMoved
	}
	return s.open1(now, ttl, key, n)
}

// open1 is Open (s.mu held).
func (s *Store) open1(now, ttl int64, key []byte, n int64) (h *Hold, retry int64, wake <-chan struct{}, err error) {
	if s.open >= s.max {
		return nil, 0, nil, ErrFull
	}
	s.expireCopies(now)
	var g *group
	if n > 0 && len(key) > 0 {
		g = s.groups[string(key)]
		if g == nil {
			g = &group{key: string(key)}
			s.groups[g.key] = g
		}
		g.limit = n // the latest call's limit governs
		cs := s.copies[g.key]
		if int64(len(g.held)+len(cs)) >= n {
			if g.wake == nil {
				g.wake = make(chan struct{})
			}
			return nil, g.retry(now, cs), g.wake, nil
		}
	}
	h = &Hold{Expires: now + ttl, group: g, hi: -1}
	// The id is the hold's from the start, so that a member asking for
	// the key's holds meanwhile (Holds) learns of it before its charge.
	s.next++
	h.id = s.next
	if s.tags != nil {
		h.tag = s.tags()
	}
	if g != nil {
		h.gi = len(g.held)
		h.key = g.key
		g.held = append(g.held, h)
	}
	s.open++
	return h, 0, nil, nil
}

// retry returns the ns until the earliest of g's held slots, and of the
// copies cs of its key, expires (at least 1).
func (g *group) retry(now int64, cs map[string]*copyEntry) int64 {
	first := int64(-1)
	for _, h := range g.held {
		if first < 0 || h.Expires < first {
			first = h.Expires
		}
	}
	for _, c := range cs {
		if first < 0 || c.expires < first {
			first = c.expires
		}
	}
	return max(first-now, 1)
}

// Commit makes an opened hold settleable and returns its id.
func (s *Store) Commit(h *Hold) string {
	h.fixLevels()
	s.mu.Lock()
	s.byID[h.id] = h
	heap.Push(&s.exp, h)
	s.mu.Unlock()
	return s.Format(h)
}

// Abort gives back an opened hold that was never committed.
func (s *Store) Abort(h *Hold) {
	s.mu.Lock()
	s.free(h)
	s.mu.Unlock()
}

// free drops h's slot and its place in the count (s.mu held), waking the
// waiters of its key.
func (s *Store) free(h *Hold) {
	s.open--
	g := h.group
	if g == nil {
		return
	}
	last := len(g.held) - 1
	g.held[h.gi] = g.held[last]
	g.held[h.gi].gi = h.gi
	g.held[last] = nil
	g.held = g.held[:last]
	h.group = nil
	if g.wake != nil {
		close(g.wake)
		g.wake = nil
	}
	if len(g.held) == 0 {
		delete(s.groups, g.key)
	}
}

// Take removes the open reservation id (to settle or release it) and
// returns it, or nil if there is none; the caller then settles its
// levels. An id another node issued is an error that says where it lives.
func (s *Store) Take(id string) (*Hold, error) {
	n, tag, ok, err := s.local(id)
	if !ok {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.find(n, tag)
	if h != nil {
		s.remove(h)
	}
	return h, nil
}

// remove forgets a committed hold (s.mu held).
func (s *Store) remove(h *Hold) {
	delete(s.byID, h.id)
	heap.Remove(&s.exp, h.hi)
	s.free(h)
}

// Renew makes id expire ttl ns after now, and reports whether it was
// open; an id another node issued is an error.
func (s *Store) Renew(id string, now, ttl int64) (bool, error) {
	n, tag, ok, err := s.local(id)
	if !ok {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.find(n, tag)
	if h == nil {
		return false, nil
	}
	h.Expires = now + ttl
	heap.Fix(&s.exp, h.hi)
	return true, nil
}

// Expire removes every reservation whose time is up at now and calls f
// with each (after the store's lock is let go), oldest first. It costs
// O(log n) per expired reservation and O(1) when none is due.
func (s *Store) Expire(now int64, f func(*Hold)) int {
	var due []*Hold
	s.mu.Lock()
	s.expireCopies(now)
	for len(s.exp) > 0 && s.exp[0].Expires <= now {
		h := s.exp[0]
		s.remove(h)
		due = append(due, h)
	}
	s.mu.Unlock()
	if f != nil {
		for _, h := range due {
			f(h)
		}
	}
	return len(due)
}

// NextExpiry returns when the earliest open reservation expires, and
// false if none is open.
func (s *Store) NextExpiry() (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.exp) == 0 {
		return 0, false
	}
	return s.exp[0].Expires, true
}

// InFlight returns how many slots of key this node's own reservations
// take.
func (s *Store) InFlight(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.groups[key]; g != nil {
		return len(g.held)
	}
	return 0
}

// Counted returns how many slots of key count as taken here: this node's
// own reservations and the copies it keeps of others' (AddCopy).
func (s *Store) Counted(key string, now int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireCopies(now)
	n := len(s.copies[key])
	if g := s.groups[key]; g != nil {
		n += len(g.held)
	}
	return n
}

// expiry is a min-heap of committed holds by Expires.
type expiry = expiryHeap[*Hold]

func (h *Hold) expiresAt() int64 { return h.Expires }
func (h *Hold) setIndex(i int)   { h.hi = i }

// expiryHeap is a container/heap of items by their expiry, each item
// knowing its index in the heap (for heap.Fix and heap.Remove).
type expiryHeap[T interface {
	expiresAt() int64
	setIndex(int)
}] []T

func (e expiryHeap[T]) Len() int           { return len(e) }
func (e expiryHeap[T]) Less(i, j int) bool { return e[i].expiresAt() < e[j].expiresAt() }
func (e expiryHeap[T]) Swap(i, j int) {
	e[i], e[j] = e[j], e[i]
	e[i].setIndex(i)
	e[j].setIndex(j)
}
func (e *expiryHeap[T]) Push(x any) {
	t := x.(T)
	t.setIndex(len(*e))
	*e = append(*e, t)
}
func (e *expiryHeap[T]) Pop() any {
	old := *e
	var zero T
	t := old[len(old)-1]
	old[len(old)-1] = zero
	*e = old[:len(old)-1]
	t.setIndex(-1)
	return t
}

// Waiters reports whether anyone waits for a slot of key (1) or not (0).
func (s *Store) Waiters(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.groups[key]; g != nil && g.wake != nil {
		return 1
	}
	return 0
}

// InFlightByLevel calls f once for every level name of every open
// reservation (a budget node's path, path#subject, quota:level, or an
// inline key), so that a caller can count the reservations in flight
// through each budget node. The names are the store's: f must not keep
// them.
func (s *Store) InFlightByLevel(f func(name []byte)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.exp {
		for i := range h.Levels {
			f(h.Levels[i].Name)
		}
	}
}

package reserve

import "container/heap"

// Copies: in a cluster, the node that decides a key's concurrency slots
// (its owner) registers each hold it grants at a second node, and hands
// the key's holds to the member that decides after it when ownership
// moves. A node keeps what it is told as copies — the id, the key and
// when the hold expires — and counts them as held whenever it decides the
// key itself (OpenAt). A copy goes when its issuer says the hold ended
// (DropCopies) or at its expiry, so a copy whose end never arrives (its
// issuer died) counts until the hold's TTL: never fewer slots held than
// there are.

// Copy is a hold as another node learns of it.
type Copy struct {
	ID      string
	Expires int64 // Unix ns, on this node's clock
}

type copyEntry struct {
	id, key string
	expires int64
	hi      int // index in the expiry heap
}

// SlotKey returns the concurrency key h holds a slot of, "" for none.
func (h *Hold) SlotKey() string { return h.key }

// AddCopy keeps (or renews) a copy of hold id of key, issued by another
// node, until expires. A node keeps at most as many copies as it may hold
// reservations (ErrFull). A copy of one of this node's own open holds is
// ignored: that one is counted already.
func (s *Store) AddCopy(key, id string, expires int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, tag, node, ok := splitID(id); ok && node == s.node && s.find(n, tag) != nil {
		return nil
	}
	if s.ended.has(id) {
		return nil // its end came first: the copy was sent before it
	}
	if c := s.copyByID[id]; c != nil {
		if expires > c.expires {
			c.expires = expires
			heap.Fix(&s.cexp, c.hi)
		}
		return nil
	}
	if len(s.copyByID) >= s.max {
		return ErrFull
	}
	c := &copyEntry{id: id, key: key, expires: expires}
	cs := s.copies[key]
	if cs == nil {
		cs = map[string]*copyEntry{}
		s.copies[key] = cs
	}
	cs[id] = c
	s.copyByID[id] = c
	heap.Push(&s.cexp, c)
	return nil
}

// RenewCopy makes the copy of id, if this node keeps one, expire at
// expires.
func (s *Store) RenewCopy(id string, expires int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.copyByID[id]; c != nil {
		c.expires = expires
		heap.Fix(&s.cexp, c.hi)
	}
}

// DropCopies forgets the copies of ids (holds that ended), freeing their
// slots here, and remembers the ids a while: a copy of one that arrives
// after its end (sent from an older list of holds, or answered by a member
// the end had not reached yet) is not kept. The issuer calls it for its own
// holds as they end.
func (s *Store) DropCopies(ids []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		s.ended.add(id)
		if c := s.copyByID[id]; c != nil {
			heap.Remove(&s.cexp, c.hi)
			s.dropCopy(c)
		}
	}
}

// Copies returns how many copies this node keeps.
func (s *Store) Copies() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.copyByID)
}

// dropCopy forgets c, already out of the heap (s.mu held).
func (s *Store) dropCopy(c *copyEntry) {
	delete(s.copyByID, c.id)
	cs := s.copies[c.key]
	delete(cs, c.id)
	if len(cs) == 0 {
		delete(s.copies, c.key)
	}
	if g := s.groups[c.key]; g != nil {
		if g.wake != nil {
			close(g.wake)
			g.wake = nil
		}
		if len(g.held) == 0 {
			delete(s.groups, g.key)
		}
	}
}

// expireCopies forgets the copies due at now (s.mu held): O(1) when none
// is.
func (s *Store) expireCopies(now int64) {
	for len(s.cexp) > 0 && s.cexp[0].expires <= now {
		s.dropCopy(heap.Pop(&s.cexp).(*copyEntry))
	}
}

// Holds returns every hold of key this node knows at now — its own open
// ones (committed or still being charged) and the copies it keeps — for a
// member that is to decide key after it. It also ends every decision
// chosen here before (Gen): from now on this node leaves key to that
// member.
func (s *Store) Holds(key string, now int64) []Copy {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	s.expireCopies(now)
	var out []Copy
	if g := s.groups[key]; g != nil {
		for _, h := range g.held {
			out = append(out, Copy{ID: s.Format(h), Expires: h.Expires})
		}
	}
	for _, c := range s.copies[key] {
		out = append(out, Copy{ID: c.id, Expires: c.expires})
	}
	return out
}

// Gen returns the store's generation, for OpenAt.
func (s *Store) Gen() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

// copyExpiry is a min-heap of copies by expiry.
type copyExpiry = expiryHeap[*copyEntry]

func (c *copyEntry) expiresAt() int64 { return c.expires }
func (c *copyEntry) setIndex(i int)   { c.hi = i }

// Slotted is one of this node's open holds that takes a slot.
type Slotted struct {
	Key, ID string
	Expires int64
}

// Slotted returns every open hold of this node that takes a slot, for
// registering copies anew where they now belong; with copies, the copies
// it keeps too.
func (s *Store) Slotted(copies bool) []Slotted {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Slotted
	for _, g := range s.groups {
		for _, h := range g.held {
			out = append(out, Slotted{Key: g.key, ID: s.Format(h), Expires: h.Expires})
		}
	}
	if copies {
		for _, c := range s.copyByID {
			out = append(out, Slotted{Key: c.key, ID: c.id, Expires: c.expires})
		}
	}
	return out
}

// KeyHolds returns this node's open holds of key and the copies it keeps
// of others'.
func (s *Store) KeyHolds(key string) []Slotted {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Slotted
	if g := s.groups[key]; g != nil {
		for _, h := range g.held {
			out = append(out, Slotted{Key: key, ID: s.Format(h), Expires: h.Expires})
		}
	}
	for _, c := range s.copies[key] {
		out = append(out, Slotted{Key: key, ID: c.id, Expires: c.expires})
	}
	return out
}

// HasCopy reports whether this node keeps a copy of hold id.
func (s *Store) HasCopy(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.copyByID[id] != nil
}

// Slot returns the concurrency key open hold id takes a slot of ("" for
// none, or no such hold of this node's).
func (s *Store) Slot(id string) string {
	n, tag, ok, _ := s.local(id)
	if !ok {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.find(n, tag); h != nil {
		return h.key
	}
	return ""
}

// endedKept is how many ended holds' ids a node remembers: their ends and
// late copies cross within seconds, and past this many the oldest is
// forgotten (a copy of it arriving later counts until its TTL, as a copy
// whose end never arrives).
const endedKept = 1 << 16

// endedIDs is the ids of the endedKept holds that ended last, in a ring.
type endedIDs struct {
	ring []string
	next int
	set  map[string]struct{}
}

func (e *endedIDs) has(id string) bool {
	_, ok := e.set[id]
	return ok
}

func (e *endedIDs) add(id string) {
	if e.set == nil {
		e.set = map[string]struct{}{}
	}
	if e.has(id) {
		return
	}
	if len(e.ring) < endedKept {
		e.ring = append(e.ring, id)
	} else {
		delete(e.set, e.ring[e.next])
		e.ring[e.next] = id
		e.next = (e.next + 1) % endedKept
	}
	e.set[id] = struct{}{}
}

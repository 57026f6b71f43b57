package budget

import (
	"hash/maphash"
	"math/bits"
)

// This file holds the two persistent structures a Tree is made of (see
// DESIGN.md): a hash array mapped trie from path to entry, for lookups, and
// a treap of strings, for everything that needs order. Both are
// copy-on-write: a change copies the nodes on one root-to-leaf path and
// shares the rest with the version it was made from, so a published Tree is
// never written again. Within one change (an edit) nodes the edit has
// already copied are changed in place: a node whose owner is the edit's
// token is private to it. That keeps a bulk build (Import, FromVersioned) at
// about one allocation per structure node instead of one per level per key.

// token marks the nodes one edit has created; it has a size so that every
// new(token) is a distinct pointer.
type token struct{ _ byte }

var hashSeed = maphash.MakeSeed()

func hashString(s string) uint64 { return maphash.String(hashSeed, s) }

// --- hash array mapped trie: path → entry ------------------------------------

// hnode is one node of the trie, in the CHAMP layout: 32 slots addressed by
// five bits of the key's hash, each holding an entry inline (data bit) or a
// child node (sub bit). Below the last level of hash bits a node is a plain
// list of the keys whose hashes are equal (collisions).
type hnode struct {
	data, sub uint32
	ents      []hent
	kids      []*hnode
	owner     *token
}

// hent is one key with its hash and its value, side by side for the
// lookup's sake; the hash is kept for when the entry moves down a level.
type hent struct {
	key  string
	hash uint64
	val  entry
}

const (
	hbits     = 5
	hmask     = 1<<hbits - 1
	hmaxShift = 60 // the last level with hash bits; deeper nodes are collision lists
)

func slot(h uint64, shift uint) uint32 { return uint32(1) << ((h >> shift) & hmask) }

func index(bitmap, bit uint32) int { return bits.OnesCount32(bitmap & (bit - 1)) }

// find returns the entry for key, or nil. It does not allocate. (Past the
// last level the shifted hash is 0 and a collision list has neither bit
// set: it is the one node with entries and empty bitmaps.)
func find[K string | []byte](n *hnode, h uint64, key K) *entry {
	for shift := uint(0); n != nil; shift += hbits {
		bit := slot(h, shift)
		if n.sub&bit != 0 {
			n = n.kids[index(n.sub, bit)]
			continue
		}
		if n.data&bit != 0 {
			if e := &n.ents[index(n.data, bit)]; e.key == string(key) {
				return &e.val
			}
			return nil
		}
		if n.data|n.sub == 0 {
			for i := range n.ents {
				if n.ents[i].key == string(key) {
					return &n.ents[i].val
				}
			}
		}
		return nil
	}
	return nil
}

// own returns n itself if the edit created it, else a private copy.
func (n *hnode) own(tok *token) *hnode {
	if n.owner == tok {
		return n
	}
	return &hnode{data: n.data, sub: n.sub, owner: tok,
		ents: append([]hent(nil), n.ents...),
		kids: append([]*hnode(nil), n.kids...)}
}

func insertAt[T any](s []T, i int, v T) []T {
	s = append(s, v)
	copy(s[i+1:], s[i:])
	s[i] = v
	return s
}

func removeAt[T any](s []T, i int) []T {
	copy(s[i:], s[i+1:])
	var zero T
	s[len(s)-1] = zero
	return s[:len(s)-1]
}

// hset returns the trie with key set to v, and whether key is new.
func hset(tok *token, n *hnode, shift uint, h uint64, key string, v entry) (*hnode, bool) {
	if n == nil {
		n = &hnode{owner: tok}
	} else {
		n = n.own(tok)
	}
	if shift > hmaxShift {
		for i := range n.ents {
			if n.ents[i].key == key {
				n.ents[i].val = v
				return n, false
			}
		}
		n.ents = append(n.ents, hent{key, h, v})
		return n, true
	}
	bit := slot(h, shift)
	switch {
	case n.data&bit != 0:
		i := index(n.data, bit)
		if n.ents[i].key == key {
			n.ents[i].val = v
			return n, false
		}
		// Two keys in one slot: both move down a level.
		was := n.ents[i]
		sub, _ := hset(tok, nil, shift+hbits, was.hash, was.key, was.val)
		sub, _ = hset(tok, sub, shift+hbits, h, key, v)
		n.ents = removeAt(n.ents, i)
		n.data &^= bit
		n.sub |= bit
		n.kids = insertAt(n.kids, index(n.sub, bit), sub)
		return n, true
	case n.sub&bit != 0:
		j := index(n.sub, bit)
		var added bool
		n.kids[j], added = hset(tok, n.kids[j], shift+hbits, h, key, v)
		return n, added
	}
	n.data |= bit
	n.ents = insertAt(n.ents, index(n.data, bit), hent{key, h, v})
	return n, true
}

// single reports whether n holds exactly one entry and no child nodes: it
// then belongs inline in its parent (the canonical CHAMP form).
func (n *hnode) single() bool { return n.sub == 0 && len(n.ents) == 1 }

// hdel returns the trie without key, and whether it was there. The result
// is nil when the trie is empty.
func hdel(tok *token, n *hnode, shift uint, h uint64, key string) (*hnode, bool) {
	if n == nil {
		return nil, false
	}
	if shift > hmaxShift {
		for i := range n.ents {
			if n.ents[i].key == key {
				if len(n.ents) == 1 {
					return nil, true
				}
				n = n.own(tok)
				n.ents = removeAt(n.ents, i)
				return n, true
			}
		}
		return n, false
	}
	bit := slot(h, shift)
	switch {
	case n.data&bit != 0:
		i := index(n.data, bit)
		if n.ents[i].key != key {
			return n, false
		}
		if n.single() {
			return nil, true
		}
		n = n.own(tok)
		n.ents = removeAt(n.ents, i)
		n.data &^= bit
		return n, true
	case n.sub&bit != 0:
		j := index(n.sub, bit)
		kid, removed := hdel(tok, n.kids[j], shift+hbits, h, key)
		if !removed {
			return n, false
		}
		n = n.own(tok)
		switch {
		case kid == nil: // cannot happen: a child holds two entries or more
			n.kids = removeAt(n.kids, j)
			n.sub &^= bit
		case kid.single():
			// Pull the last entry of the child up into this node.
			n.kids = removeAt(n.kids, j)
			n.sub &^= bit
			n.data |= bit
			n.ents = insertAt(n.ents, index(n.data, bit), kid.ents[0])
		default:
			n.kids[j] = kid
		}
		if n.sub == 0 && len(n.ents) == 0 {
			return nil, true
		}
		return n, true
	}
	return n, false
}

// each calls f for every entry, in no particular order.
func (n *hnode) each(f func(*entry)) {
	if n == nil {
		return
	}
	for i := range n.ents {
		f(&n.ents[i].val)
	}
	for _, k := range n.kids {
		k.each(f)
	}
}

// --- treap: an ordered set of strings, each with a count ----------------------

// tnode is one node of a treap ordered by key, heap-ordered by prio, a hash
// of the key: the shape depends only on the set of keys (not on the order
// they came in) and is balanced in expectation, and the random seed keeps
// crafted paths from unbalancing it.
type tnode struct {
	key         string
	prio        uint64
	n           int // a count kept with the key (labels), else 0
	left, right *tnode
	owner       *token
}

func (t *tnode) own(tok *token) *tnode {
	if t.owner == tok {
		return t
	}
	c := *t
	c.owner = tok
	return &c
}

// tget returns the node holding key, or nil.
func tget(t *tnode, key string) *tnode {
	for t != nil {
		switch {
		case key < t.key:
			t = t.left
		case key > t.key:
			t = t.right
		default:
			return t
		}
	}
	return nil
}

// tset returns the treap with key present and counting n.
func tset(tok *token, t *tnode, key string, prio uint64, n int) *tnode {
	if t == nil {
		return &tnode{key: key, prio: prio, n: n, owner: tok}
	}
	if key == t.key {
		if t.n == n {
			return t
		}
		t = t.own(tok)
		t.n = n
		return t
	}
	t = t.own(tok)
	if key < t.key {
		t.left = tset(tok, t.left, key, prio, n)
		if l := t.left; l.prio > t.prio { // l is owned: tset returned it new or owned
			t.left, l.right = l.right, t
			return l
		}
	} else {
		t.right = tset(tok, t.right, key, prio, n)
		if r := t.right; r.prio > t.prio {
			t.right, r.left = r.left, t
			return r
		}
	}
	return t
}

// tdel returns the treap without key.
func tdel(tok *token, t *tnode, key string) *tnode {
	if t == nil {
		return nil
	}
	if key == t.key {
		return tmerge(tok, t.left, t.right)
	}
	if key < t.key {
		l := tdel(tok, t.left, key)
		if l == t.left {
			return t
		}
		t = t.own(tok)
		t.left = l
	} else {
		r := tdel(tok, t.right, key)
		if r == t.right {
			return t
		}
		t = t.own(tok)
		t.right = r
	}
	return t
}

// tmerge joins two treaps whose keys are all of a before all of b.
func tmerge(tok *token, a, b *tnode) *tnode {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case a.prio > b.prio:
		a = a.own(tok)
		a.right = tmerge(tok, a.right, b)
		return a
	}
	b = b.own(tok)
	b.left = tmerge(tok, a, b.left)
	return b
}

// ascend calls f for every key ≥ from, in order, until f returns false; it
// reports whether f never did.
func (t *tnode) ascend(from string, f func(*tnode) bool) bool {
	for t != nil {
		if t.key < from {
			t = t.right
			continue
		}
		if !t.left.ascend(from, f) || !f(t) {
			return false
		}
		// Everything right of t is > t.key ≥ from.
		from = ""
		t = t.right
	}
	return true
}

// ceil returns the first key ≥ from, or false.
func (t *tnode) ceil(from string) (string, bool) {
	var best *tnode
	for t != nil {
		if t.key < from {
			t = t.right
		} else {
			best, t = t, t.left
		}
	}
	if best == nil {
		return "", false
	}
	return best.key, true
}

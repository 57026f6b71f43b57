// Package keyspace keeps the Redis values that existing rate-limit
// libraries store (strings and integer counters, hashes) with Redis's
// expiry, and runs the commands they send on them with Redis's replies
// and errors. Time is an argument: every command takes the instant it
// runs at. The store is sharded; a command or script locks the shards of
// the keys it names, in order, so it is atomic with respect to them.
package keyspace

import (
	"hash/maphash"
	"math/bits"
	"sync"
	"sync/atomic"
)

// nShards is the number of shards; a Tx's locked shards fit one word.
const nShards = 64

// Type is a value's Redis type.
type Type uint8

const (
	TypeString Type = iota + 1
	TypeHash
	TypeList
)

// TypeOf is the type TYPE names name ("string", "hash"), or 0.
func TypeOf(name string) Type {
	for t := TypeString; t <= TypeList; t++ {
		if t.Name() == name {
			return t
		}
	}
	return 0
}

// Name is TYPE's answer for the type.
func (t Type) Name() string {
	switch t {
	case TypeString:
		return "string"
	case TypeHash:
		return "hash"
	case TypeList:
		return "list"
	}
	return "none"
}

type value struct {
	typ  Type
	str  []byte
	hash map[string][]byte
	// order is the hash's fields in the order they were added, the order
	// Redis lists a small hash in.
	order []string
	list  [][]byte // a list's elements, head first
	// exp is when the key expires, in Unix ms; 0: never.
	exp  int64
	size int64 // bytes charged against the memory bound
}

// Per-key and per-field overheads charged against the memory bound, about
// what the maps and headers cost.
const (
	keyOverhead   = 64
	fieldOverhead = 32
)

type shard struct {
	mu sync.Mutex
	m  map[string]*value
	_  [40]byte
}

// Options bound a store.
type Options struct {
	// MaxKeys bounds the live keys (0: none).
	MaxKeys int
	// MaxBytes bounds keys and values together, with their overheads
	// (0: none).
	MaxBytes int64
}

// Store is the keyspace.
type Store struct {
	seed   maphash.Seed
	shards [nShards]shard
	opts   Options
	keys   atomic.Int64
	bytes  atomic.Int64
	sweep  atomic.Uint32 // the next shard an active expiry pass samples
}

// New returns an empty store.
func New(o Options) *Store {
	s := &Store{seed: maphash.MakeSeed(), opts: o}
	for i := range s.shards {
		s.shards[i].m = map[string]*value{}
	}
	return s
}

// Len returns the number of keys, expired ones not yet removed included.
func (s *Store) Len() int { return int(s.keys.Load()) }

// Bytes returns the bytes charged against the memory bound.
func (s *Store) Bytes() int64 { return s.bytes.Load() }

// Apart reports whether commands on keys a and b can run at the same
// time (their shards differ): a script holding a does not hold up b.
func (s *Store) Apart(a, b []byte) bool { return s.shardOf(a) != s.shardOf(b) }

func (s *Store) shardOf(key []byte) int { return int(maphash.Bytes(s.seed, key) % nShards) }

// Tx is a run of commands on the locked shards of the keys they name, at
// one instant.
type Tx struct {
	s      *Store
	locked uint64 // bit i: shard i is held
	nowMs  int64
	// only, when set (Only), are the keys the transaction may touch.
	only    [][]byte
	limited bool
}

// Only limits the transaction to keys (a script's declared KEYS; none:
// no key at all), whatever else its shards hold.
func (tx *Tx) Only(keys [][]byte) { tx.only, tx.limited = keys, true }

// Lock locks the shards of keys (all shards when all is true) in order
// and returns the transaction that runs commands on them at now (Unix ns).
// Unlock ends it.
func (s *Store) Lock(now int64, all bool, keys ...[]byte) *Tx {
	var set uint64
	if all {
		set = ^uint64(0)
	}
	for _, k := range keys {
		set |= 1 << s.shardOf(k)
	}
	for m := set; m != 0; m &= m - 1 {
		s.shards[bits.TrailingZeros64(m)].mu.Lock()
	}
	return &Tx{s: s, locked: set, nowMs: now / 1e6}
}

// Unlock releases the transaction's shards.
func (tx *Tx) Unlock() {
	for m := tx.locked; m != 0; m &= m - 1 {
		tx.s.shards[bits.TrailingZeros64(m)].mu.Unlock()
	}
	tx.locked = 0
}

// Holds reports whether the transaction may touch key: its shard is
// held and, after Only, it is one of the keys named there.
func (tx *Tx) Holds(key []byte) bool {
	if tx.locked&(1<<tx.s.shardOf(key)) == 0 {
		return false
	}
	if !tx.limited {
		return true
	}
	for _, k := range tx.only {
		if string(k) == string(key) {
			return true
		}
	}
	return false
}

// get returns key's live value, removing it if it has expired.
func (tx *Tx) get(key []byte) *value {
	sh := &tx.s.shards[tx.s.shardOf(key)]
	v := sh.m[string(key)]
	if v != nil && v.exp != 0 && v.exp <= tx.nowMs {
		tx.remove(sh, key, v)
		return nil
	}
	return v
}

func (tx *Tx) remove(sh *shard, key []byte, v *value) { tx.s.drop(sh, string(key), v) }

// drop removes key's value v from sh (held) and its counts.
func (s *Store) drop(sh *shard, key string, v *value) {
	delete(sh.m, key)
	s.keys.Add(-1)
	s.bytes.Add(-v.size)
}

// del removes key and reports whether it was there.
func (tx *Tx) del(key []byte) bool {
	v := tx.get(key)
	if v == nil {
		return false
	}
	tx.remove(&tx.s.shards[tx.s.shardOf(key)], key, v)
	return true
}

// room reports whether a key (new: one more key) may grow by n bytes.
func (tx *Tx) room(new bool, n int64) bool {
	o := tx.s.opts
	if new && o.MaxKeys > 0 && tx.s.keys.Load() >= int64(o.MaxKeys) {
		return false
	}
	return n <= 0 || o.MaxBytes <= 0 || tx.s.bytes.Load()+n <= o.MaxBytes
}

// put stores v under key (replacing what is there) if the bounds allow,
// and reports whether it did.
func (tx *Tx) put(key []byte, v *value) bool {
	sh := &tx.s.shards[tx.s.shardOf(key)]
	old := sh.m[string(key)]
	v.size = v.footprint(len(key))
	delta := v.size
	if old != nil {
		delta -= old.size
	}
	if !tx.room(old == nil, delta) {
		return false
	}
	sh.m[string(key)] = v
	if old == nil {
		tx.s.keys.Add(1)
	}
	tx.s.bytes.Add(delta)
	return true
}

// resize recharges v (already stored under key) after it changed, if the
// bounds allow; else it reports false and the caller undoes the change.
func (tx *Tx) resize(key []byte, v *value) bool {
	n := v.footprint(len(key))
	if !tx.room(false, n-v.size) {
		return false
	}
	tx.s.bytes.Add(n - v.size)
	v.size = n
	return true
}

func (v *value) footprint(keyLen int) int64 {
	n := int64(keyLen + keyOverhead + len(v.str))
	for f, x := range v.hash {
		n += int64(len(f) + len(x) + fieldOverhead)
	}
	for _, x := range v.list {
		n += int64(len(x) + fieldOverhead)
	}
	return n
}

// Sweep removes keys that have expired at now (Unix ns), sampling at
// most n keys, an even part from each shard in turn (each map's walk
// starts at random), as Redis's active expiry does; it returns how many
// it removed. A shard is held for its part only.
func (s *Store) Sweep(now int64, n int) int {
	removed := 0
	nowMs := now / 1e6
	per := max(n/nShards, 16)
	for range nShards {
		sh := &s.shards[s.sweep.Add(1)%nShards]
		sh.mu.Lock()
		left := per
		for k, v := range sh.m {
			if left == 0 {
				break
			}
			left--
			if v.exp != 0 && v.exp <= nowMs {
				s.drop(sh, k, v)
				removed++
			}
		}
		sh.mu.Unlock()
	}
	return removed
}

// DropIf removes every key for which drop is true (keys this node no
// longer keeps), a shard at a time, and returns how many it removed.
func (s *Store) DropIf(drop func(key []byte) bool) int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, v := range sh.m {
			if drop([]byte(k)) {
				s.drop(sh, k, v)
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// KeyInfo is what the keyspace commands (TYPE, TTL, SCAN) see of a key.
type KeyInfo struct {
	Type Type
	// TTLMs is the ms left before it expires; -1: never.
	TTLMs int64
}

// Info returns key's type and TTL at now, or false if it does not exist.
func (s *Store) Info(now int64, key []byte) (KeyInfo, bool) {
	tx := s.Lock(now, false, key)
	defer tx.Unlock()
	v := tx.get(key)
	if v == nil {
		return KeyInfo{}, false
	}
	ttl := int64(-1)
	if v.exp != 0 {
		ttl = v.exp - tx.nowMs
	}
	return KeyInfo{Type: v.typ, TTLMs: ttl}, true
}

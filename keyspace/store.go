// Package keyspace keeps the Redis values that existing rate-limit
// libraries store (strings and integer counters, hashes, lists, sorted
// sets) with Redis's expiry, and runs the commands they send on them with
// Redis's replies and errors. Time is an argument: every command takes
// the instant it runs at. The store is sharded; a command or script locks
// the shards of the keys it names, in order, so it is atomic with respect
// to them.
package keyspace

import (
	"hash/maphash"
	"math/bits"
	"strconv"
	"sync"
	"sync/atomic"
)

// nShards is the number of shards; a Tx's locked shards fit one word.
const nShards = 64

// A key's place is the top bits of its 64-bit hash: the top 6 name its
// shard, the next 6 its part within the shard. SCAN walks the parts in
// order (Scan), so its cursor is a place in the hash space, whatever the
// number of shards and however the maps grow.
const (
	partsPerShard = 64
	// Parts is the number of parts SCAN walks the keyspace in.
	Parts = nShards * partsPerShard
)

// Type is a value's Redis type.
type Type uint8

const (
	TypeString Type = iota + 1
	TypeHash
	TypeList
	TypeZSet
)

// TypeOf is the type TYPE names name ("string", "hash", "list", "zset"),
// or 0.
func TypeOf(name string) Type {
	for t := TypeString; t <= TypeZSet; t++ {
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
	case TypeZSet:
		return "zset"
	}
	return "none"
}

type value struct {
	typ Type
	str []byte
	// num is a string's value while it is an integer a counter command
	// wrote (isNum), as Redis keeps such a string encoded as an integer:
	// str is then nil and written out when read (text), and INCR reads
	// no bytes of its own.
	num   int64
	isNum bool
	hash  map[string][]byte
	// order is the hash's fields in the order they were added, the order
	// Redis lists a small hash in.
	order []string
	list  [][]byte // a list's elements, head first: lbuf[lhead:lhead+len(list)]
	// lbuf is the array list lives in, with room before it (lhead slots)
	// and after it, so that a push at either end and a trim cost what
	// they add or remove, not the list's length (list.go).
	lbuf      [][]byte
	lhead     int
	listBytes int64 // the list's elements with their overheads, as charged
	zs        *zset // a sorted set's members (zset.go)
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
	// parts are the shard's keys by their part (place); a part's map is
	// made when its first key comes.
	parts [partsPerShard]map[string]*value
	// sweep is the part an active expiry pass samples first.
	sweep uint8
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
	return &Store{seed: maphash.MakeSeed(), opts: o}
}

// Len returns the number of keys, expired ones not yet removed included.
func (s *Store) Len() int { return int(s.keys.Load()) }

// Bytes returns the bytes charged against the memory bound.
func (s *Store) Bytes() int64 { return s.bytes.Load() }

// Apart reports whether commands on keys a and b can run at the same
// time (their shards differ): a script holding a does not hold up b.
func (s *Store) Apart(a, b []byte) bool { return s.shardOf(a) != s.shardOf(b) }

func (s *Store) shardOf(key []byte) int { return s.place(key) / partsPerShard }

// place is key's part of the keyspace, 0 to Parts-1: the top bits of its
// hash, its shard's number followed by its part's within the shard.
func (s *Store) place(key []byte) int { return int(maphash.Bytes(s.seed, key) >> (64 - 12)) }

// partOf returns the map of key's part, nil while it has no key.
func (s *Store) partOf(key []byte) (*shard, map[string]*value) {
	p := s.place(key)
	sh := &s.shards[p/partsPerShard]
	return sh, sh.parts[p%partsPerShard]
}

// Tx is a run of commands on the locked shards of the keys they name, at
// one instant.
type Tx struct {
	s      *Store
	locked uint64 // bit i: shard i is held
	nowMs  int64
	// only, when set (Only), are the keys the transaction may touch.
	only    [][]byte
	limited bool
	// calls counts the commands run (Exec); wide: the transaction holds
	// every shard since a KEYS (widen), and reads and deletes keys it did
	// not declare.
	calls int
	wide  bool
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

// widen makes the transaction hold every shard, as a script's KEYS
// needs: at once when it holds them already or has run no command yet
// (it lets its shards go and takes all of them in order, which is as if
// it had taken them all from the start); false when it has run commands
// on the shards it holds, which it cannot let go, and taking the others
// while holding them could wait forever on a command that waits on it.
func (tx *Tx) widen() bool {
	switch {
	case tx.locked == ^uint64(0):
	case tx.calls > 0:
		return false
	default:
		tx.Unlock()
		for i := range tx.s.shards {
			tx.s.shards[i].mu.Lock()
		}
		tx.locked = ^uint64(0)
	}
	tx.wide = true
	return true
}

// get returns key's live value, removing it if it has expired.
func (tx *Tx) get(key []byte) *value {
	_, m := tx.s.partOf(key)
	v := m[string(key)]
	if v != nil && v.exp != 0 && v.exp <= tx.nowMs {
		tx.s.drop(m, string(key), v)
		return nil
	}
	return v
}

// drop removes key's value v from its part's map m (its shard held) and
// its counts.
func (s *Store) drop(m map[string]*value, key string, v *value) {
	delete(m, key)
	s.keys.Add(-1)
	s.bytes.Add(-v.size)
}

// del removes key and reports whether it was there.
func (tx *Tx) del(key []byte) bool {
	v := tx.get(key)
	if v == nil {
		return false
	}
	_, m := tx.s.partOf(key)
	tx.s.drop(m, string(key), v)
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
	sh, m := tx.s.partOf(key)
	old := m[string(key)]
	v.size = v.footprint(len(key))
	delta := v.size
	if old != nil {
		delta -= old.size
	}
	if !tx.room(old == nil, delta) {
		return false
	}
	if m == nil {
		m = map[string]*value{}
		sh.parts[tx.s.place(key)%partsPerShard] = m
	}
	m[string(key)] = v
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

// recharge recharges v (already stored under key) after a change the
// caller made room for first (room) or that made it smaller.
func (tx *Tx) recharge(key []byte, v *value) {
	n := v.footprint(len(key))
	tx.s.bytes.Add(n - v.size)
	v.size = n
}

func (v *value) footprint(keyLen int) int64 {
	n := int64(keyLen + keyOverhead + v.strLen())
	for f, x := range v.hash {
		n += int64(len(f) + len(x) + fieldOverhead)
	}
	n += v.listBytes
	if v.zs != nil {
		n += v.zs.bytes // kept as members come and go: no walk
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
		// The parts in turn, from a different one each pass.
		sh.sweep++
		for i := range partsPerShard {
			if left == 0 {
				break
			}
			m := sh.parts[(int(sh.sweep)+i)%partsPerShard]
			for k, v := range m {
				if left == 0 {
					break
				}
				left--
				if v.exp != 0 && v.exp <= nowMs {
					s.drop(m, k, v)
					removed++
				}
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
		for _, m := range sh.parts {
			for k, v := range m {
				if drop([]byte(k)) {
					s.drop(m, k, v)
					n++
				}
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

// Scan visits the live keys from part from on (see Parts), whole parts at
// a time, until it has visited at least count keys or every part, and
// returns the part to go on from: Parts when none is left. f gets each
// key and its type, under its shard's lock; expired keys are removed,
// not visited.
//
// As a part is a range of the keys' hash space, a key that lives
// throughout a walk from part 0 to Parts is visited exactly once,
// whatever other keys come and go meanwhile (a part's map may grow or
// shrink between calls: the next call starts at the next part); one
// created or removed meanwhile may or may not be.
func (s *Store) Scan(now int64, from, count int, f func(key string, t Type)) int {
	nowMs := now / 1e6
	p := max(from, 0)
	for p < Parts && count > 0 {
		i := p / partsPerShard
		sh := &s.shards[i]
		sh.mu.Lock()
		for ; p < (i+1)*partsPerShard && count > 0; p++ {
			count -= s.visit(sh.parts[p%partsPerShard], nowMs, f)
		}
		sh.mu.Unlock()
	}
	return min(p, Parts)
}

// visit calls f with each live key of part m (its shard held), removing
// the expired ones, and returns how many it visited.
func (s *Store) visit(m map[string]*value, nowMs int64, f func(key string, t Type)) int {
	n := 0
	for k, v := range m {
		if v.exp != 0 && v.exp <= nowMs {
			s.drop(m, k, v)
			continue
		}
		f(k, v.typ)
		n++
	}
	return n
}

// text is a string's bytes.
func (v *value) text() []byte {
	if v.isNum {
		return strconv.AppendInt(nil, v.num, 10)
	}
	return v.str
}

// strLen is len(v.text()), without writing an integer out.
func (v *value) strLen() int {
	if !v.isNum {
		return len(v.str)
	}
	n, x := 1, v.num
	if x < 0 {
		n++ // the sign; -x may not fit an int64, so count digits of x itself
	}
	for x <= -10 || x >= 10 {
		x /= 10
		n++
	}
	return n
}

// reply is GET's answer for a string.
func (v *value) reply() Reply {
	if v.isNum {
		return BulkString(strconv.FormatInt(v.num, 10))
	}
	return BulkReply(v.str)
}

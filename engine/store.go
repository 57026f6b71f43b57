package engine

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"math"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
)

// MaxKeyLen is the longest key the store accepts. The server enforces a
// lower, configurable bound before a key reaches the store.
const MaxKeyLen = 16 << 10

// MaxLevels bounds how many buckets one AcquireAll may charge.
const MaxLevels = 18

// Store is the sharded bucket store. Each shard is an open-addressing hash
// table under its own mutex; there is no global lock. A bucket costs one
// 40-byte entry, one 4-byte index slot (at 37–75% load) and its key bytes in
// a per-shard arena, and holds no Go pointers, so a million buckets add
// nothing to the garbage collector's work.
type Store struct {
	seed      maphash.Seed
	shards    []shard
	shardBits uint
	perShard  int // entries one shard may hold; 0 for the structural maximum

	live        atomic.Int64
	syncing     atomic.Bool // record consumption for peers (sync.go)
	quotaSrc    atomic.Pointer[QuotaSource]
	quotaGate   atomic.Pointer[QuotaGate]
	evictedFull atomic.Uint64
	refused     atomic.Uint64
	sweepShard  atomic.Uint64
	owners      atomic.Pointer[owners] // nil: this node owns every bucket
	wake        chan struct{}
}

// Options configures a Store.
type Options struct {
	// Shards is rounded up to a power of two; 0 sizes it to the machine.
	Shards int
	// MaxBuckets bounds live buckets; 0 means only the structural bound of
	// 16M per shard. At the bound, a new bucket takes the place of a full
	// one (nothing is lost); if none is full, the new bucket is refused:
	// a bucket that holds consumption is never forgotten to make room, so
	// that a flood of new keys cannot undo other keys' limits.
	MaxBuckets int
}

// DefaultShards returns the shard count used for Options.Shards == 0: 128
// per core, between 64 and 4096, so that lock contention stays negligible
// and a shard's rehash touches little memory.
func DefaultShards() int {
	return min(max(runtime.GOMAXPROCS(0)*128, 64), 4096)
}

// New returns an empty store.
func New(o Options) *Store {
	n := o.Shards
	if n <= 0 {
		n = DefaultShards()
	}
	b := uint(bits.Len(uint(n - 1)))
	if b > 12 {
		b = 12
	}
	s := &Store{seed: maphash.MakeSeed(), shardBits: b, shards: make([]shard, 1<<b)}
	if o.MaxBuckets > 0 {
		s.perShard = (o.MaxBuckets + len(s.shards) - 1) >> b
	}
	for i := range s.shards {
		s.shards[i].init()
	}
	return s
}

// Len returns the number of live buckets.
func (s *Store) Len() int { return int(s.live.Load()) }

// QuotaLen returns the number of live quota counters among Len's buckets:
// counts this node has not yet committed, or has just committed.
func (s *Store) QuotaLen() int {
	n := 0
	for i := range s.shards {
		n += int(s.shards[i].quotas.Load())
	}
	return n
}

// Evictions returns how many full buckets were dropped to make room for
// new ones (nothing is lost by that).
func (s *Store) Evictions() uint64 { return s.evictedFull.Load() }

// Refusals returns how many calls were refused because they needed a new
// bucket while the store was at its bound and no bucket was full.
func (s *Store) Refusals() uint64 { return s.refused.Load() }

// MaxBuckets returns the configured bound on live buckets, 0 if none.
func (s *Store) MaxBuckets() int { return s.perShard << s.shardBits }

// Space separates key namespaces that share the store: a key in one space
// never meets the same bytes in another.
type Space uint8

// The key spaces: inline limits (RL.ACQUIRE key RATE …, CL.THROTTLE) and
// buckets of the budget tree.
const (
	SpaceInline Space = iota
	SpaceBudget
	// SpaceQuota holds calendar quota counters, keyed like the buckets
	// they go with.
	SpaceQuota
	// SpaceData holds no bucket: it places the keys of the data commands
	// (package keyspace) among the members (Owner), apart from buckets
	// of the same name.
	SpaceData
)

type hashed struct {
	shard uint32
	hlo   uint32
	tag   uint8
	space Space
}

func (s *Store) hash(space Space, key []byte) hashed {
	h := maphash.Bytes(s.seed, key) ^ uint64(space)*0x9e3779b97f4a7c15
	return hashed{shard: uint32(h >> (64 - s.shardBits)), hlo: uint32(h), tag: uint8(h >> 32), space: space}
}

// --- shard: open addressing with linear probing and backward-shift delete ----

const (
	pageBits  = 8
	pageSize  = 1 << pageBits
	maxEntry  = 1<<24 - 2 // entry index must fit the slot's low 24 bits
	chunkBits = 16
	chunkSize = 1 << chunkBits
	minIndex  = 16
)

type entry struct {
	klen  uint16
	tag   uint8
	space Space
	lim   uint32 // index into shard.limits
	hlo   uint32 // low hash bits: home slot, and rehash without the key
	// kb holds a key of at most inlineKey bytes itself; a longer key
	// lies in the shard's arena and kb's first four bytes say where
	// (chunk<<16 | offset). A short key costs no second cache miss.
	kb [inlineKey]byte
	st state
}

// inlineKey is the longest key an entry holds itself: what makes the
// entry one 64-byte cache line (TestEntryIsOneCacheLine).
const inlineKey = 28

func (e *entry) koff() uint32 { return binary.LittleEndian.Uint32(e.kb[:4]) }

func (e *entry) setKoff(o uint32) { binary.LittleEndian.PutUint32(e.kb[:4], o) }

type page [pageSize]entry

type limitSlot struct {
	lim  Limit
	refs int
}

type shard struct {
	mu      sync.Mutex
	index   []uint32 // 0 empty; else tag<<24 | entry+1
	pages   []*page
	free    uint32 // head of the free-entry list (entry+1), chained through st.a
	used    uint32 // entries ever handed out
	count   int
	chunks  [][]byte
	live    int // key bytes in use
	dead    int // key bytes of deleted entries
	limits  []limitSlot
	limIx   map[Limit]uint32
	limFree []uint32
	lastLim uint32 // the index internLimit last returned
	sweep   int
	// pending is the consumption of each entry since the last Drain, kept
	// only while the store syncs with peers. A map that is cleared keeps
	// its memory, so recording allocates nothing once it has grown.
	pending map[uint32]int64
	// Leases (lease.go): wants are the leases asking for tokens, held
	// the leases holding tokens.
	wants  map[uint32]struct{}
	held   map[uint32]struct{}
	credit map[uint32]int64 // a lease's unspent credit
	owed   map[uint32]int64 // a lease's spent credit not yet sent
	// sent is what a lease owed and sent to the owner, until a grant
	// (whose count of the owner's tokens includes it) comes back.
	sent map[uint32]int64
	// creditAt is when a lease last took a credit (creditEvery).
	creditAt map[uint32]int64
	left     map[uint32]int64 // the owner's tokens at a lease's last grant
	// prior is, for a lease whose limit changed (relimitLease), how many
	// tokens granted under its former limit it may still take in.
	prior map[uint32]int64

	qkey []byte // a quota key handed to the quota source
	// quotas is the number of live entries in SpaceQuota, read without
	// the lock by QuotaLen.
	quotas atomic.Int32
	// fullUntil is, for a shard at its bound with no full bucket, the
	// earliest time one of them may be full: new buckets are refused
	// before it without scanning.
	fullUntil int64
	_         [32]byte // keep neighbouring shards' locks off this cache line
}

func (sh *shard) init() {
	sh.index = make([]uint32, minIndex)
	sh.limIx = make(map[Limit]uint32)
	sh.pending = make(map[uint32]int64)
	sh.wants = make(map[uint32]struct{})
	sh.held = make(map[uint32]struct{})
	sh.credit = make(map[uint32]int64)
	sh.owed = make(map[uint32]int64)
	sh.sent = make(map[uint32]int64)
	sh.creditAt = make(map[uint32]int64)
	sh.left = make(map[uint32]int64)
	sh.prior = make(map[uint32]int64)
}

func (sh *shard) entry(i uint32) *entry { return &sh.pages[i>>pageBits][i&(pageSize-1)] }

// key returns e's key. The slice is valid only while sh stays locked and
// e in place: a short key lies in the entry itself, which a removal or a
// reuse of the entry overwrites; callbacks that get it copy what they keep.
func (sh *shard) key(e *entry) []byte {
	if e.klen <= inlineKey {
		return e.kb[:e.klen]
	}
	return arenaKey(sh.chunks, e)
}

// arenaKey returns the bytes of e's key (longer than inlineKey) in chunks.
func arenaKey(chunks [][]byte, e *entry) []byte {
	koff := e.koff()
	c := chunks[koff>>chunkBits]
	o := koff & (chunkSize - 1)
	return c[o : o+uint32(e.klen)]
}

// find returns the entry index of key, or ok=false.
func (sh *shard) find(h hashed, key []byte) (uint32, bool) {
	mask := uint32(len(sh.index) - 1)
	for pos := h.hlo & mask; ; pos = (pos + 1) & mask {
		v := sh.index[pos]
		if v == 0 {
			return 0, false
		}
		if uint8(v>>24) != h.tag {
			continue
		}
		i := v&0xffffff - 1
		e := sh.entry(i)
		if e.hlo == h.hlo && e.space == h.space && int(e.klen) == len(key) && bytes.Equal(sh.key(e), key) {
			return i, true
		}
	}
}

func (sh *shard) addKey(key []byte) uint32 {
	n := len(sh.chunks)
	if n == 0 || len(sh.chunks[n-1])+len(key) > chunkSize {
		sh.chunks = append(sh.chunks, make([]byte, 0, chunkSize))
		n++
	}
	c := sh.chunks[n-1]
	off := uint32(len(c))
	sh.chunks[n-1] = append(c, key...)
	sh.live += len(key)
	return uint32(n-1)<<chunkBits | off
}

// insert adds a new entry for key (known absent) and returns its index.
// The caller has made room.
func (sh *shard) insert(h hashed, key []byte, lim uint32, st state) uint32 {
	var i uint32
	if sh.free != 0 {
		i = sh.free - 1
		sh.free = uint32(sh.entry(i).st.a)
	} else {
		i = sh.used
		sh.used++
		if int(i>>pageBits) == len(sh.pages) {
			sh.pages = append(sh.pages, new(page))
		}
	}
	e := sh.entry(i)
	*e = entry{klen: uint16(len(key)), tag: h.tag, space: h.space, lim: lim, hlo: h.hlo, st: st}
	if len(key) <= inlineKey {
		copy(e.kb[:], key)
	} else {
		e.setKoff(sh.addKey(key))
	}
	sh.count++
	if h.space == SpaceQuota {
		sh.quotas.Add(1)
	}
	if sh.count*4 > len(sh.index)*3 {
		sh.resize(len(sh.index) * 2)
	}
	sh.place(i)
	return i
}

func (sh *shard) place(i uint32) {
	e := sh.entry(i)
	mask := uint32(len(sh.index) - 1)
	pos := e.hlo & mask
	for sh.index[pos] != 0 {
		pos = (pos + 1) & mask
	}
	sh.index[pos] = uint32(e.tag)<<24 | (i + 1)
}

func (sh *shard) resize(n int) {
	old := sh.index
	sh.index = make([]uint32, n)
	for _, v := range old {
		if v != 0 {
			sh.place(v&0xffffff - 1)
		}
	}
}

// removeAt deletes the entry in index slot pos, shifting later members of
// its probe run back so that no tombstones are needed, then shrinks the
// index if it has become sparse.
func (sh *shard) removeAt(pos uint32) {
	sh.unlink(pos)
	sh.shrink()
}

func (sh *shard) shrink() {
	if len(sh.index) > minIndex && sh.count*8 < len(sh.index) {
		sh.resize(max(len(sh.index)/2, minIndex))
	}
	if sh.dead > chunkSize*4 && sh.dead > sh.live {
		sh.compactKeys()
	}
}

// unlink is removeAt without shrinking: slots keep their positions apart
// from the backward shift into pos, so a scan may continue in place.
func (sh *shard) unlink(pos uint32) {
	mask := uint32(len(sh.index) - 1)
	i := sh.index[pos]&0xffffff - 1
	e := sh.entry(i)
	delete(sh.pending, i) // the entry's number may go to another key
	delete(sh.wants, i)
	delete(sh.held, i)
	delete(sh.credit, i)
	delete(sh.creditAt, i)
	delete(sh.owed, i)
	delete(sh.sent, i)
	delete(sh.left, i)
	delete(sh.prior, i)
	sh.dropLimit(e.lim)
	if e.space == SpaceQuota {
		sh.quotas.Add(-1)
	}
	if e.klen > inlineKey {
		sh.live -= int(e.klen)
		sh.dead += int(e.klen)
	}
	*e = entry{st: state{a: int64(sh.free)}}
	sh.free = i + 1
	sh.count--
	hole := pos
	for j := (pos + 1) & mask; sh.index[j] != 0; j = (j + 1) & mask {
		home := sh.entry(sh.index[j]&0xffffff-1).hlo & mask
		// Move j into the hole unless its home lies cyclically in (hole, j].
		if (j > hole && (home <= hole || home > j)) || (j < hole && home <= hole && home > j) {
			sh.index[hole] = sh.index[j]
			hole = j
		}
	}
	sh.index[hole] = 0
}

// slotOf returns the index slot holding entry i.
func (sh *shard) slotOf(i uint32) uint32 {
	mask := uint32(len(sh.index) - 1)
	for pos := sh.entry(i).hlo & mask; ; pos = (pos + 1) & mask {
		if sh.index[pos]&0xffffff == i+1 {
			return pos
		}
	}
}

func (sh *shard) compactKeys() {
	old := sh.chunks
	sh.chunks, sh.live, sh.dead = nil, 0, 0
	for _, v := range sh.index {
		if v == 0 {
			continue
		}
		e := sh.entry(v&0xffffff - 1)
		if e.klen > inlineKey {
			e.setKoff(sh.addKey(arenaKey(old, e)))
		}
	}
}

// lookup hashes key in space, locks its shard and finds its entry: the
// start of every operation on one bucket. The caller unlocks sh.
func (s *Store) lookup(space Space, key []byte) (sh *shard, h hashed, i uint32, ok bool) {
	h = s.hash(space, key)
	sh = &s.shards[h.shard]
	sh.mu.Lock()
	i, ok = sh.find(h, key)
	return sh, h, i, ok
}

// add inserts a new entry for key (known absent) under l in sh (locked)
// and counts it live. The caller has made room, or keeps the entry past
// the bound on purpose.
func (s *Store) add(sh *shard, h hashed, key []byte, l *Limit, st state) uint32 {
	i := sh.insert(h, key, sh.internLimit(l), st)
	s.live.Add(1)
	return i
}

// stateUnder returns entry e's state under limit l: rescaled if e is
// kept under another. A lease is never rescaled: it holds tokens the owner
// granted, until when, and demand (lease.go), not a bucket's state, and
// the tokens stay as good under a changed limit as they were.
func (sh *shard) stateUnder(e *entry, l *Limit, now int64) state {
	if old := &sh.limits[e.lim].lim; !old.same(l) && e.space&leaseBit == 0 {
		return rescale(old, l, e.st, now)
	}
	return e.st
}

// setLimit makes l the limit entry e is kept under, if it is not already.
func (sh *shard) setLimit(e *entry, l *Limit) {
	if !sh.limits[e.lim].lim.same(l) {
		sh.dropLimit(e.lim)
		e.lim = sh.internLimit(l)
	}
}

// internLimit returns the shard-local index of l, taking a reference.
func (sh *shard) internLimit(l *Limit) uint32 {
	// Most buckets of a shard share a few limits: the last one interned
	// is checked before the map, whose hash of a Limit costs more.
	if i := sh.lastLim; int(i) < len(sh.limits) && sh.limits[i].refs > 0 && sh.limits[i].lim == *l {
		sh.limits[i].refs++
		return i
	}
	if i, ok := sh.limIx[*l]; ok {
		sh.lastLim = i
		sh.limits[i].refs++
		return i
	}
	var i uint32
	if n := len(sh.limFree); n > 0 {
		i = sh.limFree[n-1]
		sh.limFree = sh.limFree[:n-1]
		sh.limits[i] = limitSlot{lim: *l, refs: 1}
	} else {
		i = uint32(len(sh.limits))
		sh.limits = append(sh.limits, limitSlot{lim: *l, refs: 1})
	}
	sh.limIx[*l] = i
	sh.lastLim = i
	return i
}

func (sh *shard) dropLimit(i uint32) {
	ls := &sh.limits[i]
	if ls.refs--; ls.refs == 0 {
		delete(sh.limIx, ls.lim)
		sh.limFree = append(sh.limFree, i)
	}
}

// rescanAfter bounds how long a shard at its bound refuses new buckets
// on the strength of a partial scan before it looks at more entries.
const rescanAfter = int64(1e6) // 1 ms

// makeRoom reports whether the shard has room for a new entry, freeing
// some if it is at its bound: it forgets every full bucket among up to
// 1024 entries from the sweep cursor (nothing is lost by that). It never
// forgets a bucket that is not full: a key's consumption is what limits
// it, and forgetting it would let that key exceed its limit. When nothing
// scanned is full it returns false and notes when a scanned bucket will
// be (at most rescanAfter ahead if the scan did not cover the shard), so
// that until then new buckets are refused at once. The entry of a level
// in keep, one the caller is charging, is never freed; if everything
// scanned is such an entry, the call may exceed the bound.
func (s *Store) makeRoom(sh *shard, now int64, keep []level) bool {
	limit := s.perShard
	if limit <= 0 || limit > maxEntry {
		limit = maxEntry
	}
	if sh.count < limit {
		return true
	}
	if now < sh.fullUntil {
		return false
	}
	mask := len(sh.index) - 1
	best, bestAt, freed, scanned := -1, int64(math.MaxInt64), 0, 0
	for k := 0; scanned < min(1024, sh.count) && k < len(sh.index); k++ {
		pos := (sh.sweep + k) & mask
		v := sh.index[pos]
		if v == 0 {
			continue
		}
		scanned++
		if isKept(v&0xffffff-1, keep) {
			continue
		}
		e := sh.entry(v&0xffffff - 1)
		at := e.idleAt(&sh.limits[e.lim].lim)
		if at <= now {
			sh.unlink(uint32(pos))
			freed++
			k-- // a later entry may have shifted into pos
			continue
		}
		if at < bestAt {
			best, bestAt = pos, at
		}
	}
	sh.sweep += 1024
	if freed > 0 {
		s.evictedFull.Add(uint64(freed))
		s.live.Add(int64(-freed))
		sh.shrink()
		return true
	}
	if best < 0 {
		return true // everything scanned is in use by this call: exceed the bound by one
	}
	sh.fullUntil = bestAt
	if scanned < sh.count {
		sh.fullUntil = min(bestAt, now+rescanAfter)
	}
	return false
}

// refusal is the result of a call refused for want of room for a new
// bucket: denied, to be retried when a bucket of the shard may be full.
func (s *Store) refusal(sh *shard, now int64, r *Request) Result {
	s.refused.Add(1)
	return Result{Refused: true, Limit: r.Limit.Burst, RetryAfter: max(sh.fullUntil-now, rescanAfter)}
}

func isKept(i uint32, keep []level) bool {
	for j := range keep {
		if keep[j].exists && keep[j].idx == i {
			return true
		}
	}
	return false
}

// Sweep forgets buckets that are full at now, visiting at most budget index
// slots across the shards, and returns how many it removed. Call it
// periodically; each shard is locked only for its share of the budget.
func (s *Store) Sweep(now int64, budget int) int {
	removed := 0
	per := max(budget/len(s.shards), 64)
	for visited := 0; visited < budget; {
		sh := &s.shards[s.sweepShard.Add(1)&uint64(len(s.shards)-1)]
		sh.mu.Lock()
		n := min(per, len(sh.index))
		for k := 0; k < n; k++ {
			pos := uint32(sh.sweep & (len(sh.index) - 1))
			v := sh.index[pos]
			if v != 0 {
				e := sh.entry(v&0xffffff - 1)
				if e.idleAt(&sh.limits[e.lim].lim) <= now {
					sh.unlink(pos)
					s.live.Add(-1)
					removed++
					continue // a later entry may have shifted into pos
				}
			}
			sh.sweep++
		}
		sh.shrink()
		sh.mu.Unlock()
		visited += n
	}
	return removed
}

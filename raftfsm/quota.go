package raftfsm

import (
	"hash/maphash"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/quota"
)

// QuotaItem is one quota counter's count in one period (quota.Item).
type QuotaItem = quota.Item

// QuotaKey is a quota counter's key (quota.Key).
type QuotaKey = quota.Key

// maxQuotaUsed caps a committed count, far above any quota, so that sums
// of increments cannot overflow.
const maxQuotaUsed = 1 << 60

// quotaTable holds the committed quota counters. Apply (one goroutine)
// changes it in place; acquires read it concurrently, so it is split into
// shards under read-write locks rather than copied on every change.
type quotaTable struct {
	seed   maphash.Seed
	shards [64]quotaShard
	purge  int // the shard the next apply purges of ended periods
	count  atomic.Int64

	// seqs is the last batch applied from each proposing node: a batch is
	// retried until its proposer sees it applied, and counted once.
	seqMu sync.Mutex
	seqs  map[string]uint64
}

type quotaShard struct {
	mu sync.RWMutex
	m  map[string]QuotaItem
}

func newQuotaTable() *quotaTable {
	q := &quotaTable{seed: maphash.MakeSeed(), seqs: map[string]uint64{}}
	for i := range q.shards {
		q.shards[i].m = map[string]QuotaItem{}
	}
	return q
}

func (q *quotaTable) shardIndex(key []byte) uint64 {
	return maphash.Bytes(q.seed, key) % uint64(len(q.shards))
}

func (q *quotaTable) shard(key []byte) *quotaShard { return &q.shards[q.shardIndex(key)] }

// Used returns the committed count of key in the period [start, end).
// It does not allocate.
func (q *quotaTable) Used(key []byte, start, end int64) int64 {
	sh := q.shard(key)
	sh.mu.RLock()
	it, ok := sh.m[string(key)]
	sh.mu.RUnlock()
	if ok && it.Start == start && it.End == end {
		return it.Used
	}
	return 0
}

// Get returns key's counter.
func (q *quotaTable) Get(key string) (QuotaItem, bool) {
	sh := q.shard([]byte(key))
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	it, ok := sh.m[key]
	return it, ok
}

// add counts an increment. A counter whose kind of period changed starts
// over; within one kind, an increment for an earlier period than the one
// held is dropped (that period is over) and a later one starts its period.
func (q *quotaTable) add(in QuotaItem) {
	sh := q.shard([]byte(in.Key))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	it, ok := sh.m[string(in.Key)]
	if !ok {
		q.count.Add(1)
	}
	switch {
	case !ok || in.Period != it.Period || in.Start > it.Start:
		it = QuotaItem{Key: in.Key, Start: in.Start, End: in.End, Period: in.Period}
	case in.Start < it.Start:
		return
	}
	it.Used = min(max(it.Used+in.Used, 0), maxQuotaUsed)
	if in.Limit > 0 {
		it.Limit = in.Limit
	}
	sh.m[string(in.Key)] = it
}

// maxGrantOrigins bounds the node lives one counter records grants of
// (QuotaItem.Grants): members, and lives whose grants a restart has not
// yet returned. A life past it is granted nothing.
const maxGrantOrigins = 64

// reserve grants up to in.Used units of in's counter to origin (or takes
// back -in.Used units it releases) and returns how many. A grant is at
// most the units neither reserved nor used, shared among twice the
// members ((limit - max(used, reserved)) / 2N, at least one while any is
// left), so that chunks are large far from the limit and shrink to one
// unit near it, and the sum of grants never passes the limit; a node that
// needs more for one call (in.Need) gets that much while the pool has it.
// What each origin holds is recorded (QuotaItem.Grants); a release takes
// back at most what its origin holds, so a release of a life whose grants
// were returned already (returnGrants) takes back nothing.
func (q *quotaTable) reserve(origin string, in QuotaItem, members int) int64 {
	sh := q.shard([]byte(in.Key))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	it, ok := sh.m[string(in.Key)]
	switch {
	case in.Used < 0 && (!ok || in.Period != it.Period || in.Start != it.Start):
		return 0 // units of a counter reset or of a period over: gone already
	case !ok || in.Period != it.Period || in.Start > it.Start:
		if !ok {
			q.count.Add(1)
		}
		it = QuotaItem{Key: in.Key, Start: in.Start, End: in.End, Period: in.Period}
	case in.Start < it.Start:
		return 0 // that period is over
	}
	it.Limit = in.Limit
	held, known := it.Grants[origin]
	var g int64
	switch {
	case in.Used > 0:
		if avail := it.Limit - max(it.Used, it.Reserved); avail > 0 && (known || len(it.Grants) < maxGrantOrigins) {
			chunk := min(in.Used, max(1, avail/int64(2*members)))
			g = min(max(chunk, in.Need), avail)
		}
	default:
		g = max(in.Used, -held, -it.Reserved)
	}
	if g != 0 {
		it.Reserved += g
		grants := make(map[string]int64, len(it.Grants)+1)
		for o, n := range it.Grants {
			grants[o] = n
		}
		if n := held + g; n > 0 {
			grants[origin] = n
		} else {
			delete(grants, origin)
		}
		it.Grants = grants
	}
	sh.m[string(in.Key)] = it
	return g
}

// returnGrants gives back to the pool what origin, a node life that is
// over, holds of each item's counter beyond the item's Used (what that
// life may have spent: its durable spend mark), and forgets its grants
// there; with all, also every other grant of origin, whole (it spent
// none of those: it admits nothing past a mark it has written). It
// returns the units given back. Repeating it gives back nothing more.
func (q *quotaTable) returnGrants(origin string, items []QuotaItem, all bool) int64 {
	var back int64
	drop := func(sh *quotaShard, key string, spent int64, start int64, anyStart bool) {
		it, ok := sh.m[key]
		n, held := it.Grants[origin]
		if !ok || !held || !anyStart && it.Start != start {
			return
		}
		r := min(max(n-spent, 0), it.Reserved)
		it.Reserved -= r
		back += r
		grants := make(map[string]int64, len(it.Grants))
		for o, g := range it.Grants {
			if o != origin {
				grants[o] = g
			}
		}
		if len(grants) == 0 {
			grants = nil
		}
		it.Grants = grants
		sh.m[key] = it
	}
	for _, in := range items {
		sh := q.shard([]byte(in.Key))
		sh.mu.Lock()
		drop(sh, string(in.Key), in.Used, in.Start, false)
		sh.mu.Unlock()
	}
	if all {
		for i := range q.shards {
			sh := &q.shards[i]
			sh.mu.Lock()
			for k, it := range sh.m {
				if _, held := it.Grants[origin]; held {
					drop(sh, k, 0, 0, true)
				}
			}
			sh.mu.Unlock()
		}
	}
	return back
}

// setSeq records batch seq as the last applied from origin.
func (q *quotaTable) setSeq(origin string, seq uint64) {
	q.seqMu.Lock()
	q.seqs[origin] = seq
	q.seqMu.Unlock()
}

// LastSeq returns the last batch applied from origin.
func (q *quotaTable) LastSeq(origin string) uint64 {
	q.seqMu.Lock()
	defer q.seqMu.Unlock()
	return q.seqs[origin]
}

func (q *quotaTable) seqsCopy() map[string]uint64 {
	q.seqMu.Lock()
	defer q.seqMu.Unlock()
	m := make(map[string]uint64, len(q.seqs))
	for k, v := range q.seqs {
		m[k] = v
	}
	return m
}

// reset forgets key's counter and reports whether there was one.
func (q *quotaTable) reset(key string) bool {
	sh := q.shard([]byte(key))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	_, ok := sh.m[key]
	if ok {
		delete(sh.m, key)
		q.count.Add(-1)
	}
	return ok
}

// purgeGrace is how long after its period a counter is kept, so that a
// proposer whose clock runs ahead does not end the period for everyone.
const purgeGrace = int64(time.Minute)

// purgeSome drops, from one shard in turn, counters whose period ended a
// while before now (the time the entry was proposed, so every replica
// purges alike): their keys no longer cost memory.
func (q *quotaTable) purgeSome(now int64) {
	sh := &q.shards[q.purge]
	q.purge = (q.purge + 1) % len(q.shards)
	sh.mu.Lock()
	for k, it := range sh.m {
		if it.End <= now-purgeGrace {
			delete(sh.m, k)
			q.count.Add(-1)
		}
	}
	sh.mu.Unlock()
}

// items returns every counter, sorted by key (snapshots).
func (q *quotaTable) items() []QuotaItem {
	var out []QuotaItem
	for i := range q.shards {
		sh := &q.shards[i]
		sh.mu.RLock()
		for _, it := range sh.m {
			out = append(out, it)
		}
		sh.mu.RUnlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// replace sets the table to items and batch numbers (restore). Each
// shard's new map is built first and swapped in whole, so a reader never
// sees a shard emptied while it is refilled.
func (q *quotaTable) replace(items []QuotaItem, seqs map[string]uint64) {
	var next [len(q.shards)]map[string]QuotaItem
	for i := range next {
		next[i] = map[string]QuotaItem{}
	}
	n := 0
	for _, it := range items {
		m := next[q.shardIndex([]byte(it.Key))]
		if _, dup := m[string(it.Key)]; !dup {
			n++
		}
		m[string(it.Key)] = it
	}
	for i := range q.shards {
		sh := &q.shards[i]
		sh.mu.Lock()
		sh.m = next[i]
		sh.mu.Unlock()
	}
	q.count.Store(int64(n))
	q.seqMu.Lock()
	q.seqs = map[string]uint64{}
	for k, v := range seqs {
		q.seqs[k] = v
	}
	q.seqMu.Unlock()
}

// Len returns the number of counters.
func (q *quotaTable) Len() int { return int(q.count.Load()) }

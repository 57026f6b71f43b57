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

// reserve grants up to in.Used units of in's counter to a node (or takes
// back -in.Used units it releases) and returns how many. A grant is at
// most the units neither reserved nor used, shared among twice the
// members ((limit - max(used, reserved)) / 2N, at least one while any is
// left), so that chunks are large far from the limit and shrink to one
// unit near it, and the sum of grants never passes the limit.
func (q *quotaTable) reserve(in QuotaItem, members int) int64 {
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
	var g int64
	if in.Used > 0 {
		if avail := it.Limit - max(it.Used, it.Reserved); avail > 0 {
			g = min(in.Used, max(1, avail/int64(2*members)), avail)
		}
		it.Reserved += g
	} else {
		g = max(in.Used, -it.Reserved)
		it.Reserved += g
	}
	sh.m[string(in.Key)] = it
	return g
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

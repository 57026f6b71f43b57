package engine

import (
	"encoding/binary"
	"errors"
	"math"
)

// Consumption sync: every node limits from its own buckets, and tells its
// peers what it consumed. While syncing is on, each admitted request adds
// its cost to its bucket's pending delta; Drain hands the deltas over and
// clears them; a peer applies them with Consume.

// SetSyncing turns the recording of consumption for peers on or off. Off,
// the hot path records nothing (a single node has no peers).
func (s *Store) SetSyncing(on bool) {
	s.syncing.Store(on)
	if !on {
		s.Drain(func(Space, []byte, *Limit, int64) {}) // forget what peers would have got
	}
}

// record notes r's cost consumed from entry i (its shard locked): for
// peers while syncing, and always for a quota, whose count the cluster
// must learn (PendingQuota).
func (s *Store) record(sh *shard, i uint32, r *Request) {
	if r.Cost > 0 && (r.Space == SpaceQuota || s.syncing.Load()) {
		sh.pending[i] += r.Cost
	}
}

// Drain calls f with every bucket's consumption since the last Drain and
// clears it. f runs with the bucket's shard locked: it must copy key (which
// is only valid during the call) and not call back into the store.
func (s *Store) Drain(f func(space Space, key []byte, lim *Limit, delta int64)) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for idx, delta := range sh.pending {
			e := sh.entry(idx)
			if e.space == SpaceQuota {
				continue // quotas go to the cluster through DrainQuota
			}
			f(e.space, sh.key(e), &sh.limits[e.lim].lim, delta)
			delete(sh.pending, idx)
		}
		sh.mu.Unlock()
	}
}

// Calendar quotas: a quota counter's state holds the tokens this node
// admitted (or, refunded, gave back) in the current period that the
// cluster has not yet committed. The caller reads them with PendingQuota,
// commits them through Raft, and once its own replica has applied them
// calls SettleQuota, so that a request never sees a count twice for longer
// than that apply takes, nor misses one.

// PendingQuota calls f with every quota counter whose count is not yet
// committed: its key, limit, period [start, end) and count (negative when
// refunds outweigh admissions). Nothing changes; f runs with the shard
// locked and must copy key.
func (s *Store) PendingQuota(f func(key []byte, lim *Limit, start, end, count int64)) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for idx := range sh.pending {
			e := sh.entry(idx)
			if e.space != SpaceQuota {
				continue
			}
			if e.st.b == 0 {
				delete(sh.pending, idx)
				continue
			}
			f(sh.key(e), &sh.limits[e.lim].lim, e.st.a, e.st.c, e.st.b)
		}
		sh.mu.Unlock()
	}
}

// SettleQuota takes n committed tokens off key's uncommitted count for the
// period starting at start. A counter that has moved on to a later period
// is left alone: its earlier count no longer matters.
func (s *Store) SettleQuota(key []byte, start, n int64) {
	h := s.hash(SpaceQuota, key)
	sh := &s.shards[h.shard]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i, ok := sh.find(h, key)
	if !ok {
		return
	}
	if e := sh.entry(i); e.st.a == start {
		if e.st.b -= n; e.st.b == 0 {
			delete(sh.pending, i)
		}
	}
}

// RefundQuota gives back up to n tokens of r's quota counter (r.Key in the
// period of r), never more than the period has used, and returns the
// counter's state afterwards.
func (s *Store) RefundQuota(now int64, r *Request, n int64) Result {
	h := s.hash(SpaceQuota, r.Key)
	sh := &s.shards[h.shard]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i, ok := sh.find(h, r.Key)
	var st state
	if ok {
		st = sh.entry(i).st
	}
	base := s.quotaBase(sh, r)
	lim, start, end := r.Limit, r.PeriodStart, r.PeriodEnd
	o := quotaDecide(lim, st, ok, now, 0, start, end, base, -1)
	back := min(n, lim.Burst-o.remaining)
	if back > 0 {
		cnt := int64(0)
		if ok && st.a == start {
			cnt = st.b
		}
		next := state{a: start, b: cnt - back, c: end}
		if !s.putQuota(sh, h, i, ok, r, now, next, false) {
			return Result{Refused: true, Limit: lim.Burst, RetryAfter: max(sh.fullUntil-now, rescanAfter)}
		}
		o = quotaDecide(lim, next, true, now, 0, start, end, base, -1)
	}
	return Result{Allowed: true, Remaining: o.remaining, Limit: lim.Burst, ResetAfter: o.reset}
}

// QuotaUsed returns the tokens r's quota counter has used in r's period:
// the committed count and this store's uncommitted one.
func (s *Store) QuotaUsed(r *Request) int64 {
	h := s.hash(SpaceQuota, r.Key)
	sh := &s.shards[h.shard]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n := s.quotaBase(sh, r)
	if i, ok := sh.find(h, r.Key); ok {
		if e := sh.entry(i); e.st.a == r.PeriodStart {
			n += e.st.b
		}
	}
	return max(n, 0)
}

// HasQuota reports whether the store holds a counter for key.
func (s *Store) HasQuota(key []byte) bool {
	h := s.hash(SpaceQuota, key)
	sh := &s.shards[h.shard]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	_, ok := sh.find(h, key)
	return ok
}

// QuotaCount returns the count of key's quota not yet committed, in the
// period starting at start.
func (s *Store) QuotaCount(key []byte, start int64) int64 {
	h := s.hash(SpaceQuota, key)
	sh := &s.shards[h.shard]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if i, ok := sh.find(h, key); ok {
		if e := sh.entry(i); e.st.a == start {
			return e.st.b
		}
	}
	return 0
}

// Consume charges delta tokens that a peer admitted to key's bucket under
// lim, without asking whether they fit: the bucket may go into debt, up to
// maxDebt tokens beyond empty, so that the cluster as a whole converges on
// the limit. A missing bucket is created. A negative delta is tokens the
// peer gave back (RefundWaited): they go back to this node's copy, if it
// has one. Nothing is recorded for peers.
func (s *Store) Consume(now int64, space Space, key []byte, lim *Limit, delta, maxDebt int64) {
	if delta < 0 {
		s.refundOwn(now, space, key, lim, -delta, false)
		return
	}
	s.consume(now, space, key, lim, delta, maxDebt, false)
}

// consume is Consume, and with record set notes the tokens for peers as an
// admission here would (Charge).
func (s *Store) consume(now int64, space Space, key []byte, lim *Limit, delta, maxDebt int64, record bool) {
	if delta <= 0 {
		return
	}
	h := s.hash(space, key)
	sh := &s.shards[h.shard]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var st state
	i, exists := sh.find(h, key)
	if exists {
		e := sh.entry(i)
		st = e.st
		if old := &sh.limits[e.lim].lim; !old.same(lim) {
			st = rescale(old, lim, st, now)
			sh.dropLimit(e.lim)
			e.lim = sh.internLimit(lim)
		}
	}
	st = consumeState(lim, st, exists, now, delta, maxDebt)
	if exists {
		sh.entry(i).st = st
	} else {
		// Consumption that happened (on another node, or as a settled
		// reservation's real cost) is recorded even past the bound:
		// dropping it would let the key exceed its limit.
		s.makeRoom(sh, now, nil, nil)
		i = sh.insert(h, key, sh.internLimit(lim), st)
		s.live.Add(1)
	}
	if record && s.syncing.Load() {
		sh.pending[i] += delta
	}
}

// SyncFormat is the first byte of every sync message: a node refuses a
// message of a format it does not know rather than misread it.
const SyncFormat = 1

// AppendDelta appends one bucket's consumption to a sync message (which
// starts with the byte SyncFormat): space,
// algorithm, the limit's rate, window and burst, the delta and the key,
// integers as varints.
func AppendDelta(b []byte, space Space, key []byte, lim *Limit, delta int64) []byte {
	return appendRecord(b, space, key, lim, delta)
}

// AppendWant appends one lease's request to an RL.LEASE message (which
// starts with the byte SyncFormat): a delta record of the tokens wanted,
// then the credit tokens this node admitted that the owner must charge.
func AppendWant(b []byte, space Space, key []byte, lim *Limit, tokens, owed int64) []byte {
	b = appendRecord(b, space, key, lim, tokens)
	return binary.AppendUvarint(b, uint64(owed))
}

// refundBit marks a delta record of tokens given back (a negative delta):
// nodes that predate it reject the record, so the sync sends refunds in
// messages of their own, after the consumption.
const refundBit Space = 0x40

func appendRecord(b []byte, space Space, key []byte, lim *Limit, n int64) []byte {
	if n < 0 {
		space, n = space|refundBit, -n
	}
	b = append(b, byte(space), byte(lim.Algo))
	b = binary.AppendUvarint(b, uint64(lim.Rate))
	b = binary.AppendUvarint(b, uint64(lim.Window))
	b = binary.AppendUvarint(b, uint64(lim.Burst))
	b = binary.AppendUvarint(b, uint64(n))
	b = binary.AppendUvarint(b, uint64(len(key)))
	return append(b, key...)
}

// ErrBadSync is returned for a sync message that does not decode.
var ErrBadSync = errors.New("engine: malformed sync message")

// DecodeDeltas calls f for every record of a sync message written by
// AppendDelta. It validates every field (the limit as NewLimit would) and
// stops at the first malformed record with ErrBadSync; records before it
// have been delivered.
func DecodeDeltas(b []byte, f func(space Space, key []byte, lim *Limit, delta int64)) error {
	return decodeRecords(b, false, func(space Space, key []byte, lim *Limit, delta, _ int64) { f(space, key, lim, delta) })
}

// DecodeWants is DecodeDeltas for a message written by AppendWant.
func DecodeWants(b []byte, f func(space Space, key []byte, lim *Limit, tokens, owed int64)) error {
	return decodeRecords(b, true, f)
}

func decodeRecords(b []byte, owed bool, f func(space Space, key []byte, lim *Limit, n, owed int64)) error {
	if len(b) == 0 || b[0] != SyncFormat {
		return ErrBadSync
	}
	b = b[1:]
	for len(b) > 0 {
		if len(b) < 2 {
			return ErrBadSync
		}
		space, algo := Space(b[0]), Algo(b[1])
		refund := space&refundBit != 0 && !owed
		if refund {
			space &^= refundBit
		}
		b = b[2:]
		var v [5]uint64
		for i := range v {
			x, n := binary.Uvarint(b)
			if n <= 0 || x > math.MaxInt64 {
				return ErrBadSync
			}
			v[i], b = x, b[n:]
		}
		rate, window, burst, delta, klen := int64(v[0]), int64(v[1]), int64(v[2]), int64(v[3]), v[4]
		if space > SpaceBudget || klen == 0 || klen > MaxKeyLen || klen > uint64(len(b)) || delta == 0 && !owed || delta > MaxCost {
			return ErrBadSync
		}
		if algo >= numAlgos {
			return ErrBadSync
		}
		lim, err := algorithms[algo].family.wireLimit(algo, rate, window, burst)
		if err != nil {
			return ErrBadSync
		}
		key := b[:klen]
		b = b[klen:]
		var o uint64
		if owed {
			var n int
			if o, n = binary.Uvarint(b); n <= 0 || o > MaxCost {
				return ErrBadSync
			}
			b = b[n:]
		}
		if refund {
			delta = -delta
		}
		f(space, key, &lim, delta, int64(o))
	}
	return nil
}

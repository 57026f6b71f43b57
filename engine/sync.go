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
	sh, h, i, exists := s.lookup(space, key)
	defer sh.mu.Unlock()
	if exists {
		e := sh.entry(i)
		e.st = consumeState(lim, sh.stateUnder(e, lim, now), true, now, delta, maxDebt)
		sh.setLimit(e, lim)
	} else {
		// Consumption that happened (on another node, or as a settled
		// reservation's real cost) is recorded even past the bound:
		// dropping it would let the key exceed its limit.
		s.makeRoom(sh, now, nil)
		i = s.add(sh, h, key, lim, consumeState(lim, state{}, false, now, delta, maxDebt))
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

package quota

import (
	"log/slog"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// Batch is one node's pending quota counts on their way through Raft,
// numbered so that a retried batch is counted once.
type Batch struct {
	Seq    uint64 `json:"seq"`
	Now    int64  `json:"now"`
	Quotas []Item `json:"quotas"`
}

// One batch commits at most maxBatch counters, and its estimated payload
// stays under Syncer.MaxBytes; up to maxBatchesPerRound full batches go
// out in one interval.
const (
	maxBatch           = 10000
	MaxBatchBytes      = 16 << 20
	maxBatchesPerRound = 16
	itemOverhead       = 128 // JSON of an item besides its key
)

// Counter is a metric that counts up (a prometheus.Counter).
type Counter interface{ Inc() }

// Syncer commits a node's pending quota counts through Raft every
// interval, one numbered batch at a time. The counts stay in the store,
// where acquires see them, until this node's own replica applies the batch
// (QuotaAdded settles them), so no count is missed or seen twice while a
// batch is on its way. A batch whose outcome is unknown (no leader, a
// timeout) is sent again as it is; the state machine counts a batch number
// once.
type Syncer struct {
	Store *engine.Store
	Self  string // this node's id
	// Commit proposes a batch from Self; LastSeq is the last batch number
	// this replica applied from Self; Ready reports whether the replica has
	// caught up with the log.
	Commit  func(b *Batch) error
	LastSeq func() uint64
	Ready   func() bool
	Clock   func() int64
	// MaxBytes bounds the estimated payload of one batch.
	MaxBytes          int
	Log               *slog.Logger
	Committed, Failed Counter
	// Reserver, if set, holds this node's quota reservations: it hears of
	// settled counts, grants and resets.
	Reserver *Reserver

	// started is when this process began counting: a reset made before
	// it is one replayed from the log, older than every count the store
	// holds.
	started int64

	mu       sync.Mutex
	inflight *inflight
}

type inflight struct {
	Batch
	full    bool          // counts were left for the next batch
	done    chan struct{} // closed when settled
	settled bool
	sentOK  int // rounds since it was last accepted by the leader
}

// Start records when counting began; call it before the first acquire.
func (q *Syncer) Start() { q.started = q.Clock() }

// Run commits every interval until stop is closed.
func (q *Syncer) Run(interval time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		// A full batch committed at once leaves room for more this round.
		for i := 0; i < maxBatchesPerRound && q.round(interval/2, stop); i++ {
		}
	}
}

// round sends the batch in flight again if it needs to be, or else the
// counts gathered since. It reports whether a full batch was committed
// and settled, so that another may follow at once; it waits up to wait
// for this replica to apply it.
func (q *Syncer) round(wait time.Duration, stop <-chan struct{}) bool {
	q.mu.Lock()
	b := q.inflight
	q.settleApplied(q.LastSeq())
	switch {
	case b != nil && b.settled:
		b, q.inflight = nil, nil
	case b != nil && b.sentOK > 0 && b.sentOK < 20:
		// Accepted by the leader; this replica has yet to apply it.
		b.sentOK++
		q.mu.Unlock()
		return false
	}
	q.mu.Unlock()
	if b == nil {
		if !q.Ready() {
			// Until the replica has caught up, the last batch number it
			// knows from this node may be stale: a new number could look
			// like an old batch and be skipped. The counts wait here.
			return false
		}
		// Gathering scans every pending counter: without q.mu, which the
		// Raft apply goroutine takes. Only this goroutine sets inflight.
		if b = q.gather(); b == nil {
			return false
		}
		q.mu.Lock()
		q.inflight = b
		q.mu.Unlock()
	}
	if err := q.Commit(&b.Batch); err != nil {
		q.Failed.Inc()
		q.Log.Debug("quota counts not committed; will retry", "err", err)
		return false
	}
	q.Committed.Inc()
	q.mu.Lock()
	if !b.settled {
		b.sentOK = 1
	}
	q.mu.Unlock()
	if !b.full {
		return false
	}
	select {
	case <-b.done:
		return true
	case <-time.After(wait):
		return false
	case <-stop:
		return false
	}
}

// gather builds the next batch from the store's pending counts.
func (q *Syncer) gather() *inflight {
	var items []Item
	size, full := 0, false
	q.Store.PendingQuota(func(key []byte, lim *engine.Limit, start, end, count int64) {
		// Base64 takes 4 bytes for 3 of the key.
		est := (len(key)+2)/3*4 + itemOverhead
		if len(items) >= maxBatch || len(items) > 0 && size+est > q.MaxBytes {
			full = true
			return
		}
		p, ok := PeriodOfCode(lim.Window)
		if !ok {
			return
		}
		per, _ := p.MarshalText()
		size += est
		items = append(items, Item{Key: Key(key), Start: start, End: end, Used: count, Limit: lim.Burst, Period: string(per)})
	})
	if len(items) == 0 {
		return nil
	}
	// Batch numbers grow across restarts: from the clock, and past any
	// this node's replica has seen.
	seq := max(uint64(time.Now().UnixNano()), q.LastSeq()+1)
	return &inflight{Batch: Batch{Seq: seq, Now: q.Clock(), Quotas: items}, full: full, done: make(chan struct{})}
}

// QuotaAdded settles this node's batch when its own replica applies it.
func (q *Syncer) QuotaAdded(origin string, seq uint64, items []Item) {
	if origin != q.Self {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	b := q.inflight
	if b == nil || b.Seq != seq || b.settled {
		return // an older process's batch, replayed
	}
	q.settle(b)
}

// settleApplied settles the batch in flight if this replica has applied
// it (lastSeq is the last batch number it applied from this node) without
// the observer hearing of it: in a snapshot it installed. q.mu held.
func (q *Syncer) settleApplied(lastSeq uint64) {
	if b := q.inflight; b != nil && !b.settled && lastSeq >= b.Seq {
		q.settle(b)
	}
}

// settle takes a committed batch's counts off the store's pending counts
// (q.mu held).
func (q *Syncer) settle(b *inflight) {
	for _, it := range b.Quotas {
		if q.Reserver != nil {
			// First: until the pending count drops, the call sees the
			// counts twice (less room), never fewer.
			q.Reserver.Settled([]byte(it.Key), it.Start, it.Used)
		}
		q.Store.SettleQuota([]byte(it.Key), it.Start, it.Used)
	}
	b.settled = true
	close(b.done)
}

// QuotaReset drops this node's pending counts of reset counters, unless
// the reset was made before this process started: then it is replayed
// from the log, and the counts the store holds came after it.
func (q *Syncer) QuotaReset(keys []Key, at int64) {
	if at < q.started {
		return
	}
	for _, k := range keys {
		q.Store.Reset(engine.SpaceQuota, []byte(k))
	}
	if q.Reserver != nil {
		q.Reserver.Forget(keys)
	}
}

// QuotaReserved hands a reservation this replica applied to the Reserver.
func (q *Syncer) QuotaReserved(origin string, items []Item, grants []int64) {
	if q.Reserver != nil {
		q.Reserver.Granted(origin, items, grants)
	}
}

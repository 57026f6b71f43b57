package server

import (
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/budget"
	"github.com/sluice-rl/sluice/commands"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/raftfsm"
)

// One batch commits at most maxQuotaBatch counters, and its payload stays
// under half of --max-bulk-len (the leader's limit on the argument that
// carries it) and under 16 MiB; up to maxQuotaBatchesPerRound full batches
// go out in one --sync-interval.
const (
	maxQuotaBatch           = 10000
	maxQuotaBatchBytes      = 16 << 20
	maxQuotaBatchesPerRound = 16
	quotaItemOverhead       = 128 // JSON of an item besides its key
)

// quotaSyncer commits this node's calendar quota counts through Raft every
// --sync-interval, one numbered batch at a time. The counts stay in the
// store, where acquires see them, until this node's own replica applies
// the batch (QuotaAdded settles them), so no count is missed or seen twice
// while a batch is on its way. A batch whose outcome is unknown (no leader,
// a timeout) is sent again as it is; the state machine counts a batch
// number once.
type quotaSyncer struct {
	n        *Node
	store    *engine.Store
	self     string
	maxBytes int // estimated payload bytes of one batch
	// started is when this process began counting: a reset made before
	// it is one replayed from the log, older than every count the store
	// holds.
	started int64

	mu       sync.Mutex
	inflight *quotaBatch

	committed prometheus.Counter
	failed    prometheus.Counter
}

type quotaBatch struct {
	commands.QuotaBatch
	full    bool          // counts were left for the next batch
	done    chan struct{} // closed when settled
	settled bool
	sentOK  int // rounds since it was last accepted by the leader
}

func newQuotaSyncer(n *Node, maxBulkLen int) *quotaSyncer {
	q := &quotaSyncer{n: n, store: n.Server.env.Store, self: n.Raft.ID(), maxBytes: min(maxBulkLen/2, maxQuotaBatchBytes),
		committed: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_quota_batches_committed_total",
			Help: "Batches of this node's calendar quota counts committed through Raft."}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_quota_batches_failed_total",
			Help: "Attempts to commit a batch of quota counts that failed (no leader, timeout); the batch is retried."}),
	}
	n.Server.env.Metrics.Registry.MustRegister(q.committed, q.failed)
	q.started = n.Server.env.Clock()
	n.Raft.FSM().SetQuotaObserver(q)
	return q
}

func (q *quotaSyncer) run(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-q.n.stop:
			return
		case <-t.C:
		}
		// A full batch committed at once leaves room for more this round.
		for i := 0; i < maxQuotaBatchesPerRound && q.round(interval/2); i++ {
		}
	}
}

// round sends the batch in flight again if it needs to be, or else the
// counts gathered since. It reports whether a full batch was committed
// and settled, so that another may follow at once; it waits up to wait
// for this replica to apply it.
func (q *quotaSyncer) round(wait time.Duration) bool {
	q.mu.Lock()
	b := q.inflight
	q.settleApplied(q.n.Raft.FSM().QuotaSeq(q.self))
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
		if !q.n.Raft.Ready() {
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
	payload, _ := json.Marshal(&b.QuotaBatch)
	reply := q.n.Server.env.Run("RL.QUOTASYNC", q.self, string(payload))
	if len(reply) == 0 || reply[0] != ':' {
		q.failed.Inc()
		q.n.log.Debug("quota counts not committed; will retry", "reply", strings.TrimSpace(string(reply)))
		return false
	}
	q.committed.Inc()
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
	case <-q.n.stop:
		return false
	}
}

// gather builds the next batch from the store's uncommitted counts.
func (q *quotaSyncer) gather() *quotaBatch {
	var items []raftfsm.QuotaItem
	size, full := 0, false
	q.store.PendingQuota(func(key []byte, lim *engine.Limit, start, end, count int64) {
		// Base64 takes 4 bytes for 3 of the key.
		est := (len(key)+2)/3*4 + quotaItemOverhead
		if len(items) >= maxQuotaBatch || len(items) > 0 && size+est > q.maxBytes {
			full = true
			return
		}
		p, ok := budget.PeriodOfCode(lim.Window)
		if !ok {
			return
		}
		size += est
		items = append(items, raftfsm.QuotaItem{Key: raftfsm.QuotaKey(key), Start: start, End: end, Used: count,
			Limit: lim.Burst, Period: p.String() + " " + p.Zone()})
	})
	if len(items) == 0 {
		return nil
	}
	// Batch numbers grow across restarts: from the clock, and past any
	// this node's replica has seen.
	seq := max(uint64(time.Now().UnixNano()), q.n.Raft.FSM().QuotaSeq(q.self)+1)
	return &quotaBatch{QuotaBatch: commands.QuotaBatch{Seq: seq, Now: q.n.Server.env.Clock(), Quotas: items},
		full: full, done: make(chan struct{})}
}

// QuotaAdded settles this node's batch when its own replica applies it.
func (q *quotaSyncer) QuotaAdded(origin string, seq uint64, items []raftfsm.QuotaItem) {
	if origin != q.self {
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
func (q *quotaSyncer) settleApplied(lastSeq uint64) {
	if b := q.inflight; b != nil && !b.settled && lastSeq >= b.Seq {
		q.settle(b)
	}
}

// settle takes a committed batch's counts off the store's uncommitted
// counts (q.mu held).
func (q *quotaSyncer) settle(b *quotaBatch) {
	for _, it := range b.Quotas {
		q.store.SettleQuota([]byte(it.Key), it.Start, it.Used)
	}
	b.settled = true
	close(b.done)
}

// QuotaReset drops this node's uncommitted counts of reset counters,
// unless the reset was made before this process started: then it is
// replayed from the log, and the counts the store holds came after it.
func (q *quotaSyncer) QuotaReset(keys []raftfsm.QuotaKey, at int64) {
	if at < q.started {
		return
	}
	for _, k := range keys {
		q.store.Reset(engine.SpaceQuota, []byte(k))
	}
}

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

// maxQuotaBatch bounds the counters one batch commits; the rest wait for
// the next round.
const maxQuotaBatch = 10000

// quotaSyncer commits this node's calendar quota counts through Raft every
// --sync-interval, one numbered batch at a time. The counts stay in the
// store, where acquires see them, until this node's own replica applies
// the batch (QuotaAdded settles them), so no count is missed or seen twice
// while a batch is on its way. A batch whose outcome is unknown (no leader,
// a timeout) is sent again as it is; the state machine counts a batch
// number once.
type quotaSyncer struct {
	n     *Node
	store *engine.Store
	self  string

	mu       sync.Mutex
	inflight *quotaBatch

	committed prometheus.Counter
	failed    prometheus.Counter
}

type quotaBatch struct {
	commands.QuotaBatch
	settled bool
	sentOK  int // rounds since it was last accepted by the leader
}

func newQuotaSyncer(n *Node) *quotaSyncer {
	q := &quotaSyncer{n: n, store: n.Server.env.Store, self: n.Raft.ID(),
		committed: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_quota_batches_committed_total",
			Help: "Batches of this node's calendar quota counts committed through Raft."}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_quota_batches_failed_total",
			Help: "Attempts to commit a batch of quota counts that failed (no leader, timeout); the batch is retried."}),
	}
	n.Server.env.Metrics.Registry.MustRegister(q.committed, q.failed)
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
		q.round()
	}
}

// round sends the batch in flight again if it needs to be, or else the
// counts gathered since.
func (q *quotaSyncer) round() {
	q.mu.Lock()
	b := q.inflight
	if b != nil && !b.settled && q.n.Raft.FSM().QuotaSeq(q.self) >= b.Seq {
		// Applied without the observer hearing of it: in a snapshot this
		// replica installed.
		q.settle(b)
	}
	switch {
	case b != nil && b.settled:
		b, q.inflight = nil, nil
	case b != nil && b.sentOK > 0 && b.sentOK < 20:
		// Accepted by the leader; this replica has yet to apply it.
		b.sentOK++
		q.mu.Unlock()
		return
	}
	if b == nil {
		if b = q.gather(); b == nil {
			q.mu.Unlock()
			return
		}
		q.inflight = b
	}
	payload, _ := json.Marshal(&b.QuotaBatch)
	seq := b.Seq
	q.mu.Unlock()

	reply := q.n.Server.env.Run("RL.QUOTASYNC", q.self, string(payload))
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(reply) > 0 && reply[0] == ':' {
		if q.inflight != nil && q.inflight.Seq == seq && !q.inflight.settled {
			q.inflight.sentOK = 1
		}
		q.committed.Inc()
		return
	}
	q.failed.Inc()
	q.n.log.Debug("quota counts not committed; will retry", "reply", strings.TrimSpace(string(reply)))
}

// gather builds the next batch from the store's uncommitted counts (q.mu
// held).
func (q *quotaSyncer) gather() *quotaBatch {
	var items []raftfsm.QuotaItem
	q.store.PendingQuota(func(key []byte, lim *engine.Limit, start, end, count int64) {
		if len(items) >= maxQuotaBatch {
			return
		}
		p, ok := budget.PeriodOfCode(lim.Window)
		if !ok {
			return
		}
		items = append(items, raftfsm.QuotaItem{Key: raftfsm.QuotaKey(key), Start: start, End: end, Used: count,
			Limit: lim.Burst, Period: p.String() + " " + p.Zone()})
	})
	if len(items) == 0 {
		return nil
	}
	// Batch numbers grow across restarts: from the clock, and past any
	// this node's replica has seen.
	seq := max(uint64(time.Now().UnixNano()), q.n.Raft.FSM().QuotaSeq(q.self)+1)
	return &quotaBatch{QuotaBatch: commands.QuotaBatch{Seq: seq, Now: q.n.Server.env.Clock(), Quotas: items}}
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

// settle takes a committed batch's counts off the store's uncommitted
// counts (q.mu held).
func (q *quotaSyncer) settle(b *quotaBatch) {
	for _, it := range b.Quotas {
		q.store.SettleQuota([]byte(it.Key), it.Start, it.Used)
	}
	b.settled = true
}

// QuotaReset drops this node's uncommitted counts of reset counters.
func (q *quotaSyncer) QuotaReset(keys []raftfsm.QuotaKey) {
	for _, k := range keys {
		q.store.Reset(engine.SpaceQuota, []byte(k))
	}
}

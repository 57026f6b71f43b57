package peer

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/engine"
)

// maxSyncMessage bounds one RL.SYNC payload; more consumption goes out as
// several messages in the same round.
const maxSyncMessage = 1 << 20

// syncer sends this node's consumption to every peer each --sync-interval
// (an empty message too: it tells the peer this node is alive, which is
// what the sync lag measures). Each peer has a worker with a short queue;
// a peer that cannot keep up loses messages rather than hold the others.
type syncer struct {
	n       *Node
	client  *Client
	store   *engine.Store          // the node's buckets, whose consumption it sends
	workers map[string]chan []byte // peer id → its queue
	sent    prometheus.Counter
	dropped prometheus.Counter
	failed  prometheus.Counter
}

func newSyncer(n *Node, client *Client) *syncer {
	y := &syncer{n: n, client: client, store: n.Service.Store, workers: map[string]chan []byte{},
		sent:    prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_sync_messages_sent_total", Help: "RL.SYNC messages delivered to peers."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_sync_messages_dropped_total", Help: "RL.SYNC messages dropped because a peer's queue was full."}),
		failed:  prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_sync_messages_failed_total", Help: "RL.SYNC messages a peer did not accept (unreachable, refused)."}),
	}
	n.Registry.MustRegister(y.sent, y.dropped, y.failed)
	return y
}

func (y *syncer) run(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	store := y.store
	self := y.n.Raft.ID()
	on := false
	var consumed, back syncBatch
	for {
		select {
		case <-y.n.Stop:
			for _, q := range y.workers {
				close(q)
			}
			y.client.Close()
			return
		case <-t.C:
		}
		members := y.n.Raft.State().Members
		peers := 0
		for id, m := range members {
			if id == self {
				continue
			}
			peers++
			if y.workers[id] == nil {
				q := make(chan []byte, 8)
				y.workers[id] = q
				go y.work(id, m.RespAddr, q)
			}
		}
		for id, q := range y.workers {
			if _, ok := members[id]; !ok {
				close(q)
				delete(y.workers, id)
			}
		}
		if want := peers > 0; want != on {
			store.SetSyncing(want)
			on = want
		}
		if !on {
			continue
		}
		// Consumption first, then tokens given back, in messages of their
		// own (a node from before refunds were sent rejects those only).
		consumed.reset()
		back.reset()
		store.Drain(func(space engine.Space, key []byte, lim *engine.Limit, delta int64) {
			if delta < 0 {
				back.add(space, key, lim, delta)
			} else {
				consumed.add(space, key, lim, delta)
			}
		})
		msgs := append(consumed.done(true), back.done(false)...)
		for _, q := range y.workers {
			for _, m := range msgs {
				select {
				case q <- append([]byte(nil), m...):
				default:
					y.dropped.Inc()
				}
			}
		}
	}
}

// syncBatch cuts a run of delta records into messages of about
// maxSyncMessage bytes at most, each starting with engine.SyncFormat.
type syncBatch struct {
	buf   []byte
	start int // where the message being filled starts in buf
	msgs  [][]byte
}

func (b *syncBatch) reset() {
	b.buf, b.start, b.msgs = append(b.buf[:0], engine.SyncFormat), 0, b.msgs[:0]
}

func (b *syncBatch) add(space engine.Space, key []byte, lim *engine.Limit, delta int64) {
	b.buf = engine.AppendDelta(b.buf, space, key, lim, delta)
	if len(b.buf)-b.start > maxSyncMessage {
		b.msgs = append(b.msgs, b.buf[b.start:])
		b.start = len(b.buf)
		b.buf = append(b.buf, engine.SyncFormat)
	}
}

// done returns the messages; with empty, a message of no records too
// when there is nothing else (it tells the peers this node is alive).
func (b *syncBatch) done(empty bool) [][]byte {
	if len(b.buf)-b.start > 1 || empty && len(b.msgs) == 0 {
		b.msgs = append(b.msgs, b.buf[b.start:])
	}
	return b.msgs
}

// work delivers messages to one peer, in order.
func (y *syncer) work(id, addr string, q <-chan []byte) {
	self := []byte(y.n.Raft.ID())
	for m := range q {
		if addr == "" {
			if mem, ok := y.n.Raft.State().Members[id]; ok {
				addr = mem.RespAddr
			}
		}
		raw, err := y.client.Do(addr, [][]byte{[]byte("RL.SYNC"), self, m})
		if err == nil {
			err = replyError(raw)
		}
		if err != nil {
			y.failed.Inc()
			y.n.Log.Debug("sync", "peer", id, "addr", addr, "err", err)
			continue
		}
		y.sent.Inc()
	}
}

// syncLagCollector exports sluice_sync_lag_seconds.
type syncLagCollector struct {
	n       *Node
	started time.Time
}

var syncLagDesc = prometheus.NewDesc("sluice_sync_lag_seconds",
	"Longest time since a peer's consumption arrived (peers send every --sync-interval); -1 on a node with no peers.", nil, nil)

func (c syncLagCollector) Describe(ch chan<- *prometheus.Desc) { ch <- syncLagDesc }

func (c syncLagCollector) Collect(ch chan<- prometheus.Metric) {
	v := float64(c.n.Service.SyncLag(c.n.Raft.ID(), c.started))
	if v > 0 {
		v /= 1e9
	}
	ch <- prometheus.MustNewConstMetric(syncLagDesc, prometheus.GaugeValue, v)
}

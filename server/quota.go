package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/quota"
)

// startQuotaSync commits this node's calendar quota counts through Raft
// every --sync-interval (quota.Syncer), straight through the service, and
// keeps its quota reservations (quota.Reserver).
func (n *Node) startQuotaSync(cfg *Config) {
	env, svc := n.Server.env, n.Server.svc
	fsm := n.Raft.FSM()
	self := n.Raft.ID()
	q := &quota.Syncer{
		Store: svc.Store, Self: self, Clock: svc.Clock, Log: n.log,
		MaxBytes: min(cfg.MaxBulkLen/2, quota.MaxBatchBytes),
		Commit: func(b *quota.Batch) error {
			_, err := svc.CommitQuotas(self, b)
			return err
		},
		LastSeq: func() uint64 { return fsm.QuotaSeq(self) },
		Ready:   n.Raft.Ready,
		Committed: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_quota_batches_committed_total",
			Help: "Batches of this node's calendar quota counts committed through Raft."}),
		Failed: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_quota_batches_failed_total",
			Help: "Attempts to commit a batch of quota counts that failed (no leader, timeout); the batch is retried."}),
	}
	env.Metrics.Registry.MustRegister(q.Committed.(prometheus.Counter), q.Failed.(prometheus.Counter))
	// In a cluster, quotas admit only from units reserved through Raft.
	r := &quota.Reserver{Self: self + "@" + quota.Incarnation(), Ready: n.Raft.CaughtUp, Store: svc.Store, Clock: svc.Clock, Log: n.log,
		Members: func() int { return len(n.Raft.State().Members) },

		Committed: fsm.Quota,
		Reserved: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_quota_reservations_total",
			Help: "Quota reservation entries (units asked for or given back) this node committed through Raft."}),
		Failed: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_quota_reservations_failed_total",
			Help: "Quota reservations that failed (no leader, the leader unreachable or refusing); calls needing the units are refused meanwhile."}),
	}
	env.Metrics.Registry.MustRegister(r.Reserved.(prometheus.Counter), r.Failed.(prometheus.Counter))
	r.Propose = func(items []quota.Item) error { return svc.ReserveQuotas(r.Self, items) }
	r.Init()
	// Spend marks on disk: a restart gives back what the lives before
	// this one held and did not spend.
	if marks, lives, err := quota.OpenMarks(cfg.DataDir); marks == nil {
		n.log.Warn("quota spend marks unavailable: units this node holds come back only at the end of their period after a crash", "err", err)
	} else {
		if err != nil {
			n.log.Warn("quota spend marks of previous lives unreadable: their units come back only at the end of their period", "err", err)
		}
		if err := marks.Begin(r.Self); err != nil {
			n.log.Warn("quota spend marks unavailable: units this node holds come back only at the end of their period after a crash", "err", err)
			marks.Close()
		} else {
			r.Marks = marks
			r.SetPrior(lives)
			go r.RunMarks(n.stop)
			go r.ReturnPrior(svc.ReturnQuotas, n.stop)
		}
	}
	q.Reserver = r
	n.reserver = r
	svc.Store.SetQuotaGate(r)
	svc.Reserve = r.Reserve
	go r.Run(n.stop)
	q.Start()
	fsm.SetQuotaObserver(q)
	go q.Run(cfg.SyncInterval, n.stop)
}

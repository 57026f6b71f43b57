package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/budget"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/usage"
)

// maxQuotaSeries bounds the budgets sluice_quota_used and
// sluice_quota_limit describe: first-level nodes with a quota, in path
// order, at most this many.
const maxQuotaSeries = 1000

// usageMetrics exports what the node's usage recorder holds, with bounded
// labels: the counters its top-keys sketches hold (by admitted/denied),
// calls the per-node counts could not follow, and the quota of each
// first-level budget node (label budget, as sluice_acquire_total's).
type usageMetrics struct {
	svc                       *limiter.Service
	topKeys, untracked        *prometheus.Desc
	quotaUsed, quotaLimit     *prometheus.Desc
	quotaResetsAt, topKeysMax *prometheus.Desc
}

func newUsageMetrics(svc *limiter.Service) *usageMetrics {
	return &usageMetrics{svc: svc,
		topKeys: prometheus.NewDesc("sluice_top_keys", "Keys the heavy-hitters sketches of RL.TOP hold now, by kind of call (admitted, denied); at most sluice_top_keys_max each.",
			[]string{"by"}, nil),
		topKeysMax: prometheus.NewDesc("sluice_top_keys_max", "The most keys one kind's heavy-hitters sketches hold (counters x shards x minutes).", nil, nil),
		untracked:  prometheus.NewDesc("sluice_usage_untracked_total", "Calls RL.USAGE could not count by budget node because 4,096 nodes were busy at once.", nil, nil),
		quotaUsed: prometheus.NewDesc("sluice_quota_used", "Quota used in the current period by first-level budget node (committed and this node's pending counts).",
			[]string{"budget"}, nil),
		quotaLimit: prometheus.NewDesc("sluice_quota_limit", "Quota of first-level budget nodes, per period.", []string{"budget"}, nil),
		quotaResetsAt: prometheus.NewDesc("sluice_quota_resets_at_seconds", "When the current quota period of first-level budget nodes ends, Unix seconds.",
			[]string{"budget"}, nil),
	}
}

func (m *usageMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.topKeys, m.topKeysMax, m.untracked, m.quotaUsed, m.quotaLimit, m.quotaResetsAt} {
		ch <- d
	}
}

func (m *usageMetrics) Collect(ch chan<- prometheus.Metric) {
	r := m.svc.Recorder
	if r == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(m.topKeys, prometheus.GaugeValue, float64(r.Admitted.Tracked()), limiter.TopAdmitted)
	ch <- prometheus.MustNewConstMetric(m.topKeys, prometheus.GaugeValue, float64(r.Refused.Tracked()), limiter.TopRefused)
	ch <- prometheus.MustNewConstMetric(m.topKeysMax, prometheus.GaugeValue, usage.MaxTracked)
	ch <- prometheus.MustNewConstMetric(m.untracked, prometheus.CounterValue, float64(r.Nodes.Untracked()))
	if m.svc.Cluster == nil {
		return
	}
	tree := m.svc.Cluster.State().Tree
	var sc limiter.Scratch
	n := 0
	for _, label := range tree.Labels() {
		node := tree.Get(label)
		if node == nil || node.Config.Quota == nil || node.Config.Scope != budget.Tenant && node.Config.Scope != budget.Global {
			continue
		}
		if n++; n > maxQuotaSeries {
			return
		}
		st, err := m.svc.Quota(&limiter.Call{Path: []byte(label)}, &sc)
		if err != nil || string(st.Level) != label {
			continue
		}
		ch <- prometheus.MustNewConstMetric(m.quotaUsed, prometheus.GaugeValue, float64(st.Used), label)
		ch <- prometheus.MustNewConstMetric(m.quotaLimit, prometheus.GaugeValue, float64(st.Limit), label)
		ch <- prometheus.MustNewConstMetric(m.quotaResetsAt, prometheus.GaugeValue, float64(st.End/1e9), label)
	}
}

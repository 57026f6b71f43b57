package commands

import (
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// stripes is how many cache lines a striped counter spreads over.
const stripes = 16

// striped is a counter that the decision path adds to without sharing a
// cache line with every other core: each add picks a stripe at random
// (from the runtime's per-thread generator), and a scrape sums them.
type striped struct {
	s [stripes]struct {
		v atomic.Uint64
		_ [56]byte
	}
}

func (c *striped) add(n uint64) { c.s[rand.Uint32()%stripes].v.Add(n) }

func (c *striped) load() uint64 {
	var n uint64
	for i := range c.s {
		n += c.s[i].v.Load()
	}
	return n
}

// acquireCounters are one budget label's counts: sluice_acquire_total by
// result and sluice_tokens_consumed_total.
type acquireCounters struct {
	allowed, denied, degraded, tokens *striped
}

func (a acquireCounters) count(allowed int, cost int64) {
	switch allowed {
	case 1:
		a.allowed.add(1)
		if cost > 0 {
			a.tokens.add(uint64(cost))
		}
	case 2:
		a.degraded.add(1) // let through, nothing consumed
	default:
		a.denied.add(1)
	}
}

// acquireStats holds every budget label's counters ever made (a bounded
// set: the first segments of the budget trees' paths, and inline) and
// exports them.
type acquireStats struct {
	mu       sync.Mutex
	byLabel  map[string]acquireCounters
	acquire  *prometheus.Desc
	consumed *prometheus.Desc
}

func newAcquireStats() *acquireStats {
	return &acquireStats{byLabel: map[string]acquireCounters{},
		acquire: prometheus.NewDesc("sluice_acquire_total",
			"RL.ACQUIRE and CL.THROTTLE calls by budget (first path segment, or inline) and result.", []string{"budget", "result"}, nil),
		consumed: prometheus.NewDesc("sluice_tokens_consumed_total", "Tokens consumed by admitted calls, by budget.", []string{"budget"}, nil),
	}
}

// label returns the counters of label, made at 0 on first use.
func (a *acquireStats) label(l string) acquireCounters {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.byLabel[l]
	if !ok {
		c = acquireCounters{allowed: new(striped), denied: new(striped), degraded: new(striped), tokens: new(striped)}
		a.byLabel[l] = c
	}
	return c
}

// each calls f with every label's counters, in label order.
func (a *acquireStats) each(f func(label string, c acquireCounters)) {
	a.mu.Lock()
	labels := make([]string, 0, len(a.byLabel))
	for l := range a.byLabel {
		labels = append(labels, l)
	}
	cs := make([]acquireCounters, len(labels))
	sort.Strings(labels)
	for i, l := range labels {
		cs[i] = a.byLabel[l]
	}
	a.mu.Unlock()
	for i, l := range labels {
		f(l, cs[i])
	}
}

func (a *acquireStats) Describe(ch chan<- *prometheus.Desc) {
	ch <- a.acquire
	ch <- a.consumed
}

func (a *acquireStats) Collect(ch chan<- prometheus.Metric) {
	a.each(func(l string, c acquireCounters) {
		ch <- prometheus.MustNewConstMetric(a.acquire, prometheus.CounterValue, float64(c.allowed.load()), l, "allowed")
		ch <- prometheus.MustNewConstMetric(a.acquire, prometheus.CounterValue, float64(c.denied.load()), l, "denied")
		ch <- prometheus.MustNewConstMetric(a.acquire, prometheus.CounterValue, float64(c.degraded.load()), l, "degraded")
		ch <- prometheus.MustNewConstMetric(a.consumed, prometheus.CounterValue, float64(c.tokens.load()), l)
	})
}

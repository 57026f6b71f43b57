package commands

import (
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Per-command counts and latencies (sluice_commands_total,
// sluice_command_duration_seconds) are kept per connection and folded when
// /metrics is scraped: a command adds to its own connection's counters, on
// a cache line no other core writes, instead of to one counter every
// connection shares (on 8 cores that sharing cost about 9 % of the CPU).
// A closing connection's counts move into the retired totals under the
// same lock as a scrape reads, so a scrape sees each count once and the
// sums never go down.

// durBuckets are the histogram's upper bounds: 1 µs × 4^i, i = 0 … 10
// (1 µs to about 1 s), as prometheus.ExponentialBuckets(1e-6, 4, 11).
const durBuckets = 11

// bucketOf returns the bucket of a duration of ns nanoseconds: the first
// i with ns ≤ 1000 × 4^i, or durBuckets for +Inf.
func bucketOf(ns int64) int {
	if ns <= 1000 {
		return 0
	}
	return min((bits.Len64(uint64(ns-1)/1000)+1)/2, durBuckets)
}

// cmdStat is one command's count by latency bucket and latency sum.
type cmdStat struct {
	buckets [durBuckets + 1]atomic.Uint64 // the last: above every bound
	sumNs   atomic.Uint64
}

func (c *cmdStat) add(ns int64) {
	c.buckets[bucketOf(ns)].Add(1)
	c.sumNs.Add(uint64(max(ns, 0)))
}

// fold adds c's counts to t.
func (c *cmdStat) fold(t *cmdTotal) {
	for i := range c.buckets {
		t.buckets[i] += c.buckets[i].Load()
	}
	t.sumNs += c.sumNs.Load()
}

// cmdTotal is a cmdStat read out.
type cmdTotal struct {
	buckets [durBuckets + 1]uint64
	sumNs   uint64
}

func (t *cmdTotal) count() uint64 {
	var n uint64
	for _, b := range t.buckets {
		n += b
	}
	return n
}

// ConnStats are one connection's command counts: only its own goroutine
// adds to them; a scrape reads them.
type ConnStats struct {
	cmds []atomic.Pointer[cmdStat] // by command id, made on first use
}

// stat returns the counts of command id, made on first use.
func (cs *ConnStats) stat(id int) *cmdStat {
	if st := cs.cmds[id].Load(); st != nil {
		return st
	}
	st := new(cmdStat)
	cs.cmds[id].Store(st)
	return st
}

// cmdStats holds the live connections' counts, the retired totals and the
// counts of calls without a connection (Env.Run, tests).
type cmdStats struct {
	mu      sync.Mutex
	live    map[*ConnStats]struct{}
	retired []cmdTotal
	shared  []cmdStat
	unknown atomic.Uint64
	names   []string // by command id, lower case
	cmd     *prometheus.Desc
	dur     *prometheus.Desc
	bounds  [durBuckets]float64
}

func newCmdStats(reg *Registry) *cmdStats {
	s := &cmdStats{live: map[*ConnStats]struct{}{},
		cmd: prometheus.NewDesc("sluice_commands_total", "Commands processed, by command.", []string{"cmd"}, nil),
		dur: prometheus.NewDesc("sluice_command_duration_seconds",
			"Time to execute a command, from parsed to reply buffered (WAIT time included).", []string{"cmd"}, nil),
	}
	for _, c := range reg.Commands() {
		s.names = append(s.names, lower(c.Name))
	}
	s.retired = make([]cmdTotal, len(s.names))
	s.shared = make([]cmdStat, len(s.names))
	copy(s.bounds[:], prometheus.ExponentialBuckets(1e-6, 4, durBuckets))
	return s
}

// Connect returns the counts of a new connection, counted from now on.
func (m *Metrics) Connect() *ConnStats {
	s := m.cmds
	cs := &ConnStats{cmds: make([]atomic.Pointer[cmdStat], len(s.names))}
	s.mu.Lock()
	s.live[cs] = struct{}{}
	s.mu.Unlock()
	return cs
}

// Disconnect moves a closed connection's counts into the retired totals.
func (m *Metrics) Disconnect(cs *ConnStats) {
	if cs == nil {
		return
	}
	s := m.cmds
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.live[cs]; !ok {
		return
	}
	delete(s.live, cs)
	cs.fold(s.retired)
}

// fold adds the connection's counts to t, by command id.
func (cs *ConnStats) fold(t []cmdTotal) {
	for id := range cs.cmds {
		if st := cs.cmds[id].Load(); st != nil {
			st.fold(&t[id])
		}
	}
}

// totals returns every command's counts now.
func (s *cmdStats) totals() []cmdTotal {
	out := make([]cmdTotal, len(s.names))
	s.mu.Lock()
	copy(out, s.retired)
	for cs := range s.live {
		cs.fold(out)
	}
	s.mu.Unlock()
	for id := range s.shared {
		s.shared[id].fold(&out[id])
	}
	return out
}

func (s *cmdStats) Describe(ch chan<- *prometheus.Desc) {
	ch <- s.cmd
	ch <- s.dur
}

// Collect writes every command's series, at 0 for a command not yet run
// (an alert on increase() sees the first one), and unknown commands'.
func (s *cmdStats) Collect(ch chan<- prometheus.Metric) {
	for id, t := range s.totals() {
		n := t.count()
		ch <- prometheus.MustNewConstMetric(s.cmd, prometheus.CounterValue, float64(n), s.names[id])
		cum := make(map[float64]uint64, durBuckets)
		var c uint64
		for i, b := range s.bounds {
			c += t.buckets[i]
			cum[b] = c
		}
		ch <- prometheus.MustNewConstHistogram(s.dur, n, float64(t.sumNs)/1e9, cum, s.names[id])
	}
	ch <- prometheus.MustNewConstMetric(s.cmd, prometheus.CounterValue, float64(s.unknown.Load()), "unknown")
}

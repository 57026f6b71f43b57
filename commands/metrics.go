package commands

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Metrics are the Prometheus figures (docs/operations.md, "Metrics") that the command path moves.
// Every child a request touches is resolved ahead of time, so counting costs
// an atomic add and no allocation.
type Metrics struct {
	Registry *prometheus.Registry

	cmds *cmdStats // sluice_commands_total and _duration_seconds (cmdstats.go)

	acquire *acquireStats // sluice_acquire_total, sluice_tokens_consumed_total (striped.go)
	inline  acquireCounters

	waiting prometheus.Gauge

	// labels caches each budget label's counters for one tree; labelMu
	// serialises rebuilding it when the tree changes.
	labels  atomic.Pointer[budgetLabels]
	labelMu sync.Mutex

	ConnectionsReceived prometheus.Counter
	ConnectionsRejected *prometheus.CounterVec
	// ConnectionsClosed counts connections the server closed by reason:
	// idle (--timeout) or auth_timeout (--auth-timeout).
	ConnectionsClosed *prometheus.CounterVec
	ProtocolErrors    prometheus.Counter
}

// RejectReasons are the reason labels of sluice_connections_rejected_total:
// the server refuses connections for these and no others.
var RejectReasons = []string{"shutdown", "protected_mode", "maxclients"}

// NewMetrics creates the command metrics for reg's commands on a fresh
// Prometheus registry.
func NewMetrics(reg *Registry) *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry()}
	m.cmds = newCmdStats(reg)
	m.acquire = newAcquireStats()
	m.ConnectionsReceived = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_connections_received_total", Help: "Client connections accepted.",
	})
	m.ConnectionsRejected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_connections_rejected_total", Help: "Client connections refused, by reason.",
	}, []string{"reason"})
	m.ConnectionsClosed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_connections_closed_total", Help: "Client connections the server closed: idle (--timeout) or not authenticated in time (--auth-timeout).",
	}, []string{"reason"})
	// Every reason is present at 0 from the start: increase() over a
	// series that appears at its first event sees no increase, so an alert
	// on it would miss the first incident.
	for _, r := range []string{"idle", "auth_timeout"} {
		m.ConnectionsClosed.WithLabelValues(r)
	}
	for _, r := range RejectReasons {
		m.ConnectionsRejected.WithLabelValues(r)
	}
	m.waiting = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sluice_waiting_clients", Help: "Connections holding an admitted reply until its reserved tokens are due (WAIT).",
	})
	m.ProtocolErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_protocol_errors_total", Help: "Connections closed for a RESP protocol violation or size limit.",
	})
	m.inline = m.Budget("inline")
	m.Registry.MustRegister(m.cmds, m.acquire, m.ConnectionsReceived, m.ConnectionsRejected, m.ConnectionsClosed, m.ProtocolErrors, m.waiting)
	return m
}

// Budget returns the acquire counters of one budget label. Call it once per
// label and keep the result; the label set must stay bounded.
func (m *Metrics) Budget(label string) acquireCounters { return m.acquire.label(label) }

// Command counts one execution of c taking ns nanoseconds, on the
// connection's counts cs (nil: a call without a connection).
func (m *Metrics) Command(c *Command, cs *ConnStats, ns int64) {
	if cs == nil {
		m.cmds.shared[c.id].add(ns)
		return
	}
	cs.stat(c.id).add(ns)
}

// Waiting returns how many connections are held by WAIT right now.
func (m *Metrics) Waiting() int {
	var d dto.Metric
	if m.waiting.Write(&d) != nil {
		return 0
	}
	return int(d.Gauge.GetValue())
}

// AddWaiting adds d to the calls held until their tokens are due: the
// service's Waiting hook.
func (m *Metrics) AddWaiting(d int) { m.waiting.Add(float64(d)) }

// Unknown counts a command sluice does not know.
func (m *Metrics) Unknown() { m.cmds.unknown.Add(1) }

// TotalCommands returns the number of commands processed, for INFO.
func (m *Metrics) TotalCommands() int64 {
	n := m.cmds.unknown.Load()
	for _, t := range m.cmds.totals() {
		n += t.count()
	}
	return int64(n)
}

// AcquireTotals returns admitted and denied acquires, for INFO: degraded
// calls (let through, nothing consumed) count as admitted.
func (m *Metrics) AcquireTotals() (allowed, denied int64) {
	m.acquire.each(func(_ string, c acquireCounters) {
		allowed += int64(c.allowed.load() + c.degraded.load())
		denied += int64(c.denied.load())
	})
	return allowed, denied
}

func value(c prometheus.Counter) float64 {
	var d dto.Metric
	if c.Write(&d) != nil {
		return 0
	}
	return d.Counter.GetValue()
}
